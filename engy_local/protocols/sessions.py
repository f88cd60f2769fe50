"""Who sent a request and which agent session it belongs to, read from its
headers and body; and its prompt part by part, in the wire's own names, so
two turns can be compared ("system[1] changed"). Pure: no I/O.

How clients say who they are (see shared/reference/clients.md):

    Claude Code   User-Agent `claude-cli/VERSION`; `metadata.user_id` a JSON string
                  holding `session_id` (older versions: `user_..._session_UUID`), and
                  the same id in `X-Claude-Code-Session-Id`
    Codex         User-Agent `codex_exec/VERSION` (or `codex_cli_rs`), `originator`;
                  `prompt_cache_key` and `session-id` name the session, `thread-id` and
                  `x-codex-turn-metadata` {"thread_id", "request_kind"} the thread
    Chat Completions  `prompt_cache_key` (OpenAI's, on this API too) or `session-id`,
                  when a client names a session at all
    the SDKs      User-Agent `Anthropic/Python 0.40.0`, `OpenAI/Python 1.60.0`
    engy's page   `x-engy-client: page`

A request that names no session is grouped by its prompt's opening instead
(see `opening`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ..chat import ChatRequest, Text
from .anthropic import ATTRIBUTION

# /v1/messages, /v1/responses, /v1/chat/completions
Api = Literal["anthropic", "openai", "chat"]
# (wire name, digest of what it holds): `system[1]`, `tools[3]`, `messages[5]` ...
Parts = tuple[tuple[str, bytes], ...]
# Chat Completions carries its system prompt among the messages: such a
# message is named with its role, `messages[0] (system)`, and is not a turn
# of the conversation.
_SYSTEM_ROLES = ("system", "developer")

_CLAUDE_CODE = re.compile(r"claude-cli/([\w.+-]+)")
_CODEX = re.compile(r"codex_[a-z_]+/([\w.+-]+)")
_SDK = re.compile(r"^(Anthropic|OpenAI)/(\w+) ([\w.+-]+)")
_OLD_USER_ID = re.compile(r"_session_([0-9a-fA-F-]{8,})$")
# Keys that change from turn to turn without changing the prompt: Claude
# Code moves its cache breakpoints to the newest messages every turn.
_NOT_PROMPT = frozenset({"cache_control"})


@dataclass(frozen=True)
class Provenance:
    client: str  # "Claude Code 2.1.332", "Codex 0.171.0", "Anthropic SDK (Python 0.40.0)" ...
    session: str = ""  # the session id the client sent; "" when none
    source: str = ""  # where it came from: "metadata.user_id", "prompt_cache_key", a header
    thread: str = ""  # a thread within the session (Codex), when the client names one
    kind: str = ""  # what the client says the request is ("turn", "compact" ...), if it does


def client_name(headers: Mapping[str, str]) -> str:
    """The client, from its headers (lower-case names)."""
    if headers.get("x-engy-client") == "page":
        return "engy page"
    agent = headers.get("user-agent", "")
    if m := _CLAUDE_CODE.search(agent):
        return f"Claude Code {m.group(1)}"
    if m := _CODEX.search(agent):
        return f"Codex {m.group(1)}"
    if headers.get("originator", "").startswith("codex"):
        return "Codex"
    if m := _SDK.match(agent):
        return f"{m.group(1)} SDK ({m.group(2)} {m.group(3)})"
    product = agent.split(" ", 1)[0]
    if product.startswith("python-httpx/"):
        return "httpx"
    return product.split("/", 1)[0][:40] or "unknown"


def _json_object(text: Any) -> dict[str, Any]:
    if not isinstance(text, str) or not text.startswith("{"):
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _text(value: Any) -> str:
    return value[:200] if isinstance(value, str) else ""


def provenance(api: Api, headers: Mapping[str, str], body: Any) -> Provenance:
    """Who sent `body` and in which session (headers with lower-case names)."""
    client = client_name(headers)
    d = body if isinstance(body, dict) else {}
    if api == "anthropic":
        metadata = d.get("metadata")
        user_id = metadata.get("user_id") if isinstance(metadata, dict) else None
        session = _text(_json_object(user_id).get("session_id"))
        if not session and isinstance(user_id, str) and (m := _OLD_USER_ID.search(user_id)):
            session = m.group(1)
        if session:
            return Provenance(client, session, "metadata.user_id")
        if session := _text(headers.get("x-claude-code-session-id")):
            return Provenance(client, session, "x-claude-code-session-id")
        return Provenance(client)
    turn = _json_object(headers.get("x-codex-turn-metadata"))
    thread = _text(turn.get("thread_id")) or _text(headers.get("thread-id"))
    kind = _text(turn.get("request_kind"))
    for source, value in (
        ("prompt_cache_key", d.get("prompt_cache_key")),
        ("session-id", headers.get("session-id") or headers.get("session_id")),
    ):
        if session := _text(value):
            return Provenance(client, session, source, thread, kind)
    return Provenance(client, thread=thread, kind=kind)


def _canonical(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items() if k not in _NOT_PROMPT}
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    return value


def _digest(value: Any) -> bytes:
    text = json.dumps(_canonical(value), sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.blake2b(text.encode(), digest_size=12).digest()


def _listed(name: str, value: Any) -> list[tuple[str, Any]]:
    if isinstance(value, list):
        return [(f"{name}[{i}]", v) for i, v in enumerate(value)]
    return [] if value is None else [(name, value)]


def prompt_parts(api: Api, body: Any) -> Parts:
    """What becomes the prompt, in the order templates render it (system,
    tools, then the conversation), each part named as on the wire and
    digested. Fields that do not reach the prompt are left out."""
    d = body if isinstance(body, dict) else {}
    parts: list[tuple[str, Any]] = []
    if api == "anthropic":
        system = d.get("system")
        for name, block in _listed("system", system):
            text = block.get("text") if isinstance(block, dict) else None
            if not (isinstance(text, str) and text.startswith(ATTRIBUTION)):
                parts.append((name, block))
        parts += _listed("tools", d.get("tools"))
        if d.get("thinking") is not None:
            parts.append(("thinking", d.get("thinking")))
        parts += _listed("messages", d.get("messages"))
    elif api == "chat":
        prompts: list[tuple[str, Any]] = []  # system and developer messages
        conversation: list[tuple[str, Any]] = []
        for name, message in _listed("messages", d.get("messages")):
            role = message.get("role") if isinstance(message, dict) else None
            if role in _SYSTEM_ROLES:
                prompts.append((f"{name} ({role})", message))
            else:
                conversation.append((name, message))
        parts += prompts + _listed("tools", d.get("tools"))
        for key in ("reasoning_effort", "chat_template_kwargs"):
            if d.get(key) is not None:
                parts.append((key, d.get(key)))
        parts += conversation
    else:
        if d.get("instructions") is not None:
            parts.append(("instructions", d.get("instructions")))
        parts += _listed("tools", d.get("tools"))
        if d.get("reasoning") is not None:
            parts.append(("reasoning", d.get("reasoning")))
        parts += _listed("input", d.get("input"))
    return tuple((name, _digest(value)) for name, value in parts)


def _conversation(name: str) -> bool:
    if name.endswith(tuple(f" ({role})" for role in _SYSTEM_ROLES)):
        return False
    return name.startswith(("messages[", "input[")) or name == "input"


def diverged(before: Parts, after: Parts) -> str:
    """Where `after` stops repeating `before`, as the first part that
    differs: "system[1] changed", "tools[12] added", "messages[3] removed";
    "" when `after` repeats all of `before` (and perhaps goes on)."""
    old = dict(before)
    for name, digest in after:
        if name in old:
            if old[name] != digest:
                return f"{name} changed"
        elif not _conversation(name):
            return f"{name} added"
    new = {name for name, _ in after}
    for name, _ in before:
        if name not in new:
            return f"{name} removed"
    return ""


def opening(parts: Parts) -> bytes:
    """A digest of the prompt's opening: everything before the first turn
    of the conversation and that turn. Requests without a session id that
    share it are taken for one session."""
    head: list[bytes] = []
    for name, digest in parts:
        head.append(digest)
        if _conversation(name):
            break
    return hashlib.blake2b(b"".join(head), digest_size=12).digest()


def first_turn(parts: Parts) -> bytes:
    """The digest of the conversation's first turn: a conversation keeps
    it however its system prompt or tools change."""
    return next((d for name, d in parts if _conversation(name)), b"")


def side_kind(chat: ChatRequest) -> str:
    """What a request with no tools is for, when a client's side request
    says so: "title" (Claude Code names its session), "summary"; else ""."""
    if chat.tools:
        return ""
    system = " ".join(m.text() for m in chat.messages if m.role == "system").lower()
    if "title" in system:
        return "title"
    last = next((m for m in reversed(chat.messages) if m.role == "user"), None)
    text = "".join(p.text for p in last.parts if isinstance(p, Text)).lower() if last else ""
    if "summar" in system or "summar" in text[-2000:]:
        return "summary"
    return ""


def title_text(answer: str) -> str:
    """A title side request's answer as a title: its JSON `title`, else its
    first line."""
    answer = answer.strip()
    value = _json_object(answer).get("title")
    if not isinstance(value, str):
        value = answer.splitlines()[0] if answer else ""
    return value.strip()[:120]
