"""Anthropic Messages (`POST /v1/messages`): JSON <-> neutral types.

Pure translation, no I/O. Every body field of the contract is mapped here or
ignored on purpose (see `_IGNORED`); unknown fields are tolerated.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from ..chat import (
    Answer,
    ChatRequest,
    Image,
    Message,
    Part,
    Role,
    Sampling,
    StopReason,
    Text,
    Thinking,
    ToolCall,
    ToolChoice,
    ToolResult,
    ToolSpec,
    Usage,
)
from ..errors import EngyError, InvalidRequest
from . import fields as f
from .formats import messages_format
from .images import ImageLimits, check_count, parse_image

# Accepted and deliberately without effect locally: cache_control (the KV
# cache is reused automatically), metadata, context_management,
# output_config.effort (reasoning is the model's own; output_config.format
# is read, see formats.py), service_tier, container, mcp_servers and the
# rest of the SDK's optional fields; redacted_thinking, document and
# server-tool blocks.
_IGNORED = ("metadata", "context_management", "service_tier")

# Claude Code's first system block is an attribution line that may change
# between requests; it means nothing to a local model and would spoil the
# prompt prefix the KV cache reuses, so it is dropped.
ATTRIBUTION = "x-anthropic-billing-header:"


@dataclass(frozen=True)
class Parsed:
    chat: ChatRequest
    stream: bool


def parse_request(
    body: Any, *, counting: bool = False, images: ImageLimits | None = None
) -> Parsed:
    """`counting`: the body of count_tokens (no max_tokens, no stream).
    `images`: the server's image limits (413 over them)."""
    limits = images or ImageLimits()
    d = f.obj(body, "body")
    model = f.string(d, "model", "model")
    messages: list[Message] = []
    system = d.get("system")
    if system is not None:
        text = _system_text(system, "system")
        if text:
            messages.append(Message("system", (Text(text),)))
    for i, raw in enumerate(f.array(d, "messages", "messages")):
        messages.extend(_message(raw, f"messages[{i}]", limits))
    check_count(messages, limits)

    tools = tuple(
        t
        for i, raw in enumerate(f.array(d, "tools", "tools", []))
        if (t := _tool(raw, f"tools[{i}]")) is not None
    )
    thinking = _thinking(d.get("thinking"))
    sampling = Sampling(
        max_tokens=None if counting else f.integer(d, "max_tokens", "max_tokens", None, minimum=1),
        temperature=f.number(d, "temperature", "temperature", None, 0.0, 2.0),
        top_p=f.number(d, "top_p", "top_p", None, 0.0, 1.0),
        top_k=f.integer(d, "top_k", "top_k", None, minimum=0),
        stop=f.strings(d, "stop_sequences", "stop_sequences") or (),
    )
    chat = ChatRequest(
        model=model,
        messages=tuple(messages),
        tools=tools,
        tool_choice=_tool_choice(d.get("tool_choice")),
        sampling=sampling,
        thinking=thinking,
        overflow="shrink",  # the contract: max_tokens is reduced to fit
        provider=f.provider(d.get("provider")),
        json_output=messages_format(d),
    )
    stream = False if counting else f.boolean(d, "stream", "stream", False)
    return Parsed(chat, stream)


def _system_text(value: Any, path: str) -> str:
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise f.fail(path, "a string or an array of text blocks", value)
    texts = []
    for i, block in enumerate(value):
        b = f.obj(block, f"{path}[{i}]")
        if b.get("type", "text") != "text":
            continue
        text = f.string(b, "text", f"{path}[{i}].text")
        if not text.startswith(ATTRIBUTION):
            texts.append(text)
    return "\n\n".join(texts)


def _message(raw: Any, path: str, limits: ImageLimits) -> list[Message]:
    m = f.obj(raw, path)
    role = f.string(m, "role", f"{path}.role")
    if role not in ("user", "assistant", "system"):
        raise InvalidRequest(
            f"{path}.role: expected user, assistant or system, got {role!r}", f"{path}.role"
        )
    content = f.required(m, "content", f"{path}.content")
    if role == "system":  # Claude Code sends these mid-conversation
        text = _system_text(content, f"{path}.content")
        return [Message("system", (Text(text),))] if text else []
    if isinstance(content, str):
        return [Message(role, (Text(content),))]
    if not isinstance(content, list):
        raise f.fail(f"{path}.content", "a string or an array of content blocks", content)
    parts = [
        p
        for j, block in enumerate(content)
        if (p := _block(block, role, f"{path}.content[{j}]", limits)) is not None
    ]
    if role == "assistant":
        return [Message("assistant", tuple(parts))]
    # A user turn carries tool results and text; the neutral form keeps the
    # results in their own tool message, ahead of the text as sent.
    out: list[Message] = []
    for part in parts:
        role_here: Role = "tool" if isinstance(part, ToolResult) else "user"
        if out and out[-1].role == role_here:
            out[-1] = Message(role_here, (*out[-1].parts, part))
        else:
            out.append(Message(role_here, (part,)))
    return out


def _block(raw: Any, role: str, path: str, limits: ImageLimits) -> Part | None:
    b = f.obj(raw, path)
    kind = f.string(b, "type", f"{path}.type")
    if kind == "text":
        return Text(f.string(b, "text", f"{path}.text"))
    if kind == "image" and role == "user":
        return parse_image(b, path, limits)
    if kind == "tool_use" and role == "assistant":
        tool_input = b.get("input", {})
        if not isinstance(tool_input, dict):
            raise f.fail(f"{path}.input", "an object", tool_input)
        return ToolCall(
            f.string(b, "id", f"{path}.id"),
            f.string(b, "name", f"{path}.name"),
            json.dumps(tool_input, ensure_ascii=False),
        )
    if kind == "tool_result" and role == "user":
        parts = _result_parts(b.get("content"), f"{path}.content", limits)
        return ToolResult(
            f.string(b, "tool_use_id", f"{path}.tool_use_id"),
            "\n".join(p.text for p in parts if isinstance(p, Text)),
            is_error=f.boolean(b, "is_error", f"{path}.is_error", False),
            parts=parts if any(isinstance(p, Image) for p in parts) else (),
        )
    if kind == "thinking" and role == "assistant":
        return Thinking(f.string(b, "thinking", f"{path}.thinking", ""))
    return None  # documents, redacted thinking, server tool blocks: ignored


def _result_parts(value: Any, path: str, limits: ImageLimits) -> tuple[Text | Image, ...]:
    """A tool result's text and image blocks, in order (documents ignored)."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (Text(value),)
    if not isinstance(value, list):
        raise f.fail(path, "a string or an array of blocks", value)
    parts: list[Text | Image] = []
    for i, block in enumerate(value):
        b = f.obj(block, f"{path}[{i}]")
        if b.get("type") == "text":
            parts.append(Text(f.string(b, "text", f"{path}[{i}].text")))
        elif b.get("type") == "image":
            parts.append(parse_image(b, f"{path}[{i}]", limits))
    return tuple(parts)


def _tool(raw: Any, path: str) -> ToolSpec | None:
    t = f.obj(raw, path)
    kind = t.get("type")
    if kind not in (None, "custom"):
        return None  # server tools (web_search_..., bash_...): nothing here runs them
    if t.get("defer_loading") is True:
        return None  # loaded on demand through tool search; not offered up front
    schema = t.get("input_schema", {"type": "object", "properties": {}})
    if not isinstance(schema, dict):
        raise f.fail(f"{path}.input_schema", "an object", schema)
    return ToolSpec(
        f.string(t, "name", f"{path}.name"),
        f.string(t, "description", f"{path}.description", ""),
        schema,
    )


def _tool_choice(value: Any) -> ToolChoice:
    if value is None:
        return ToolChoice()
    c = f.obj(value, "tool_choice")
    mode = f.string(c, "type", "tool_choice.type")
    if mode not in ("auto", "any", "none", "tool"):
        raise InvalidRequest(
            f"tool_choice.type: expected auto, any, none or tool, got {mode!r}", "tool_choice.type"
        )
    name = f.string(c, "name", "tool_choice.name") if mode == "tool" else None
    single = f.boolean(
        c, "disable_parallel_tool_use", "tool_choice.disable_parallel_tool_use", False
    )
    return ToolChoice(mode, name, parallel=not single)


def _thinking(value: Any) -> bool | None:
    if value is None:
        return None
    t = f.obj(value, "thinking")
    kind = f.string(t, "type", "thinking.type")
    if kind == "enabled":
        return True
    if kind == "disabled":
        return False
    if kind == "adaptive":  # Claude Code: the model decides, i.e. its default
        return None
    raise InvalidRequest(
        f"thinking.type: expected enabled, disabled or adaptive, got {kind!r}", "thinking.type"
    )


# ---- responses ------------------------------------------------------------


# The contract knows end_turn, max_tokens, tool_use and refusal, and its
# stop_sequence is always null: a stop sequence ends the turn.
_STOP_REASONS: dict[StopReason, str] = {
    "end": "end_turn",
    "tool_call": "tool_use",
    "length": "max_tokens",
    "stop": "end_turn",
}


def stop_reason_json(reason: StopReason) -> str:
    return _STOP_REASONS[reason]


def usage_json(usage: Usage) -> dict[str, int]:
    return {
        "input_tokens": usage.prompt_tokens - usage.cached_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": usage.cached_tokens,
        "output_tokens": usage.output_tokens,
    }


def _tool_input(arguments: str) -> Any:
    try:
        value = json.loads(arguments) if arguments else {}
    except ValueError:
        value = {}
    return value if isinstance(value, dict) else {}


def render_message(parsed: Parsed, answer: Answer, message_id: str) -> dict[str, Any]:
    """A whole (non-streaming) message. It never carries thinking blocks."""
    content: list[dict[str, Any]] = []
    if answer.text or not answer.calls:
        content.append({"type": "text", "text": answer.text})
    for call in answer.calls:
        content.append(
            {
                "type": "tool_use",
                "id": call.id,
                "name": call.name,
                "input": _tool_input(call.arguments),
            }
        )
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": parsed.chat.model,
        "content": content,
        "stop_reason": stop_reason_json(answer.stop_reason),
        "stop_sequence": None,
        "usage": usage_json(answer.usage),
    }


def signature(thinking: str) -> str:
    """An opaque signature for a thinking block. Clients echo it back; the
    thinking text itself is what is replayed, so nothing checks it."""
    return "engy-" + hashlib.sha256(thinking.encode("utf-8")).hexdigest()[:32]


# ---- errors ---------------------------------------------------------------

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    504: "api_error",
}


def error_json(err: EngyError) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {"type": _ERROR_TYPES.get(err.status, "api_error"), "message": err.message},
    }


def error_body(err: EngyError) -> tuple[int, dict[str, Any], dict[str, str]]:
    """Status, JSON body and extra headers of an HTTP error."""
    headers = {}
    retry_after = getattr(err, "retry_after", None)
    if retry_after is not None:
        headers["retry-after"] = str(retry_after)
    return err.status, error_json(err), headers
