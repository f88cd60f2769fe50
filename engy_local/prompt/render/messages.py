"""Neutral messages and tools -> the dicts Hugging Face chat templates read.

Templates consume OpenAI chat style messages. Beyond a field mapping, this
module reshapes a conversation into one that strict templates accept, without
reordering what a client sent, so that the rendered prompt of turn N is a
prefix of turn N+1 and the KV cache is reused:

- Leading system messages become one first `system` message.
- A later system message becomes user text at its position: it joins the user
  message before it, else the user message after it, else stands as a user
  turn of its own. A call's tool results are never split: system text that
  arrives among them is placed after them.
- Consecutive user messages merge into one (templates that demand strict
  user/assistant alternation raise otherwise).
- What one template cannot take at all is described by `Quirks` (probed by
  `ChatTemplate.quirks`) and reshaped here the same way, in place.

Text blocks, folded system text and merged user turns are all joined with a
blank line, so folding gives the same text as one more text block would.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ...chat import Image, Message, Text, Thinking, ToolCall, ToolResult, ToolSpec
from ..parsing.jsonscan import repair_object

PARAGRAPH = "\n\n"

_ALPHANUMERIC = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
# Mistral templates: `tool_call.id|length != 9` -> "...strings with length 9!".
_SHORT_ID_DEMAND = re.compile(r"length\s*!=\s*9|with length 9")


@dataclass(frozen=True)
class Quirks:
    """What a template cannot take, and so what to reshape for it."""

    # The system role raises or is dropped (Gemma 2; Mistral Nemo renders it
    # only inside a final user turn): system text opens the first user turn.
    no_system_role: bool = False
    # No tool role (Gemma 2, Phi 3.5): tool results become user text.
    no_tool_role: bool = False
    # A user turn right after tool results breaks the template's alternation
    # check (Mistral): its text is appended to the last tool result instead.
    no_user_after_tool: bool = False
    # Tool-call arguments must be JSON text, not a mapping (Functionary v3.2).
    text_arguments: bool = False
    # Tool-call ids must be 9 alphanumerics (Mistral): ids go through
    # `mistral_call_id` unless the caller passes its own `call_ids`.
    short_call_ids: bool = False
    # The key an assistant turn's reasoning goes under: gpt-oss and LFM2.5
    # read `thinking` and ignore `reasoning_content`.
    reasoning_key: str = "reasoning_content"
    # Text and reasoning beside tool calls raise together (gpt-oss, which
    # renders either one as the calls' analysis): the text joins the reasoning.
    call_text_in_reasoning: bool = False
    # Only an assistant turn's first call is rendered (gpt-oss): a turn with
    # several becomes one turn per call, each followed by its own result.
    one_call_per_turn: bool = False
    # Calls render only in a turn without text (DeepSeek R1's templates):
    # a turn's text goes in an assistant turn of its own before its calls.
    calls_apart: bool = False
    # ... and only when that turn's content is null (R1 / V3's own templates
    # test `content is none`).
    null_call_content: bool = False
    # Reasoning renders only as a `thinking` chunk of a list content
    # (Ministral 3, Magistral): a turn with reasoning gets content
    # [thinking, text] chunks, in the order the model wrote them.
    reasoning_chunks: bool = False


NO_QUIRKS = Quirks()


@dataclass(frozen=True)
class ImageSlots:
    """Where images go (by default they are dropped). Images are numbered
    0, 1, ... in conversation order; image k becomes the text `text(k)` where
    it stands in a user turn or a tool result, joined like a text block.
    With `parts`, a user turn with images gets list content instead, text
    and `{"type": "image", "index": k}` parts in order, so that the template
    writes its own image placeholder where it puts images."""

    text: Callable[[int], str]
    parts: bool = False


def to_template_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": t.shown_parameters(),
            },
        }
        for t in tools
    ]


def to_template_messages(
    messages: Sequence[Message],
    *,
    call_ids: Callable[[str], str] | None = None,
    quirks: Quirks = NO_QUIRKS,
    images: ImageSlots | None = None,
) -> list[dict[str, Any]]:
    """Convert and fold a conversation. `call_ids` rewrites tool-call ids
    (on the call and on its result alike) for templates that demand a shape."""
    rename = call_ids or (mistral_call_id if quirks.short_call_ids else _same)
    place = _Placer(images)
    names = {p.id: p.name for m in messages for p in m.parts if isinstance(p, ToolCall)}

    lead = 0
    while lead < len(messages) and messages[lead].role == "system":
        lead += 1
    out: list[dict[str, Any]] = []
    if lead:
        out.append({"role": "system", "content": _join(_text(m) for m in messages[:lead])})

    later_system: list[dict[str, Any]] = []  # placed before the next user/assistant
    for message in messages[lead:]:
        if message.role == "system":
            if _text(message):
                later_system.append({"role": "user", "content": _text(message)})
        elif message.role == "tool":
            out.extend(_tool_results(message, names, rename, place))
        else:
            out.extend(later_system)
            later_system = []
            if message.role == "user":
                out.append({"role": "user", "content": place.user(message)})
            else:
                out.extend(_assistant(message, rename, quirks))
    out.extend(later_system)
    return _reshape(out, quirks, place)


def needs_short_call_ids(template_source: str) -> bool:
    """Whether the template rejects tool-call ids that are not 9 characters."""
    return _SHORT_ID_DEMAND.search(template_source) is not None


def mistral_call_id(call_id: str) -> str:
    """A deterministic 9-character alphanumeric id for `call_id`. An id that
    already has that shape (one the model produced) is kept as it is."""
    if len(call_id) == 9 and call_id.isascii() and call_id.isalnum():
        return call_id
    number = int.from_bytes(hashlib.sha256(call_id.encode()).digest()[:8], "big")
    chars = []
    for _ in range(9):
        number, digit = divmod(number, len(_ALPHANUMERIC))
        chars.append(_ALPHANUMERIC[digit])
    return "".join(chars)


def _reshape(
    out: list[dict[str, Any]], quirks: Quirks, place: _Placer | None = None
) -> list[dict[str, Any]]:
    """Apply the quirks' changes, then merge what must not stand apart."""
    out = [_reasoning(m, quirks) if m["role"] == "assistant" else m for m in out]
    if quirks.one_call_per_turn:
        out = _one_call_per_turn(out)
    if quirks.no_tool_role:
        out = [{"role": "user", "content": m["content"]} if m["role"] == "tool" else m for m in out]
    if quirks.no_system_role and out and out[0]["role"] == "system":
        out = [{"role": "user", "content": out[0]["content"]}, *out[1:]]
    merged: list[dict[str, Any]] = []
    for message in out:
        before = merged[-1]["role"] if merged else None
        if message["role"] == "user" and (
            before == "user" or (before == "tool" and quirks.no_user_after_tool)
        ):
            last = merged[-1]
            content = message["content"]
            if last["role"] == "tool" and place is not None:
                content = place.flat(content)  # a tool result's content stays text
            last["content"] = _merge(last["content"], content)
        else:
            merged.append(message)
    return merged


def _reasoning(message: dict[str, Any], quirks: Quirks) -> dict[str, Any]:
    reasoning = message.pop("reasoning_content", "")
    text = message["content"]
    if quirks.call_text_in_reasoning and reasoning and text and message.get("tool_calls"):
        reasoning, message["content"] = _join([reasoning, text]), ""
    if reasoning and quirks.reasoning_chunks:
        chunks = [{"type": "thinking", "thinking": reasoning}]
        if message["content"]:
            chunks.append({"type": "text", "text": message["content"]})
        message["content"] = chunks
    elif reasoning:
        message[quirks.reasoning_key] = reasoning
    return message


def _one_call_per_turn(out: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each call of a turn as a turn of its own, followed by its results;
    results that answer none of the turn's calls keep their place after it."""
    reshaped: list[dict[str, Any]] = []
    i = 0
    while i < len(out):
        message, i = out[i], i + 1
        calls = message.get("tool_calls", []) if message["role"] == "assistant" else []
        if len(calls) < 2:
            reshaped.append(message)
            continue
        results = []
        while i < len(out) and out[i]["role"] == "tool":
            results.append(out[i])
            i += 1
        for k, call in enumerate(calls):
            # Later turns: no text, written as the first turn's empty content is.
            empty = None if message["content"] is None else ""
            turn = {"role": "assistant", "content": empty} if k else dict(message)
            reshaped.append({**turn, "tool_calls": [call]})
            reshaped.extend(r for r in results if r["tool_call_id"] == call["id"])
        ids = {call["id"] for call in calls}
        reshaped.extend(r for r in results if r["tool_call_id"] not in ids)
    return reshaped


# ---- one message each ------------------------------------------------------


def _same(call_id: str) -> str:
    return call_id


def _join(texts: Iterable[str]) -> str:
    return PARAGRAPH.join(t for t in texts if t)


def _text(message: Message) -> str:
    # Only text parts: images are placed by `_Placer` when the caller asks
    # (`images=`), else dropped; tool results arrive as `tool` messages.
    return _join(p.text for p in message.parts if isinstance(p, Text))


def _assistant(
    message: Message, rename: Callable[[str], str], quirks: Quirks
) -> list[dict[str, Any]]:
    text_arguments = quirks.text_arguments
    out: dict[str, Any] = {"role": "assistant", "content": _text(message)}
    calls = [
        {
            "id": rename(p.id),
            "type": "function",
            "function": {
                "name": p.name,
                "arguments": (p.arguments or "{}") if text_arguments else _arguments(p.arguments),
            },
        }
        for p in message.parts
        if isinstance(p, ToolCall)
    ]
    turns = [out]
    if calls:
        out["tool_calls"] = calls
        if quirks.calls_apart and out["content"]:
            turns.insert(0, {"role": "assistant", "content": out["content"]})
            out["content"] = ""
        if quirks.null_call_content and not out["content"]:
            out["content"] = None
    thinking = _join(p.text for p in message.parts if isinstance(p, Thinking))
    if thinking:
        out["reasoning_content"] = thinking
    return turns


def _arguments(text: str) -> dict[str, Any] | str:
    """Templates walk arguments as a mapping (most re-serialize it with
    `tojson`, keeping the key order). Broken JSON (a call cut short, or
    written by hand) is repaired to the object it started, so that the
    history renders again; JSON that is not an object is passed through."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        repaired: dict[str, Any] = json.loads(repair_object(text))
        return repaired
    return value if isinstance(value, dict) else text


def _tool_results(
    message: Message,
    names: dict[str, str],
    rename: Callable[[str], str],
    place: _Placer | None = None,
) -> list[dict[str, Any]]:
    # `is_error` is ignored on purpose: no template has a place for it, and
    # the content already says what failed.
    return [
        {
            "role": "tool",
            "tool_call_id": rename(p.call_id),
            "name": p.name if p.name is not None else names.get(p.call_id, ""),
            "content": place.result(p) if place is not None else p.content,
        }
        for p in message.parts
        if isinstance(p, ToolResult)
    ]


# ---- images ------------------------------------------------------------------


class _Placer:
    """Numbers images in conversation order and writes each where it stands."""

    def __init__(self, slots: ImageSlots | None) -> None:
        self.slots = slots
        self.count = 0

    def _next(self) -> int:
        self.count += 1
        return self.count - 1

    def user(self, message: Message) -> str | list[dict[str, Any]]:
        slots = self.slots
        if slots is None or not any(isinstance(p, Image) for p in message.parts):
            return _text(message)
        if not slots.parts:
            return _join(
                p.text if isinstance(p, Text) else slots.text(self._next())
                for p in message.parts
                if isinstance(p, (Text, Image))
            )
        content: list[dict[str, Any]] = []
        texts: list[str] = []
        for p in message.parts:
            if isinstance(p, Text):
                texts.append(p.text)
            elif isinstance(p, Image):
                if _join(texts):
                    content.append({"type": "text", "text": _join(texts)})
                texts = []
                content.append({"type": "image", "index": self._next()})
        if _join(texts):
            content.append({"type": "text", "text": _join(texts)})
        return content

    def result(self, result: ToolResult) -> str:
        slots = self.slots
        if slots is None or not any(isinstance(p, Image) for p in result.parts):
            return result.content
        # Blocks of a tool result are joined by a newline (as its text is).
        return "\n".join(
            p.text if isinstance(p, Text) else slots.text(self._next()) for p in result.parts
        )

    def flat(self, content: str | list[dict[str, Any]]) -> str:
        """List content as text, an image part as its image's text."""
        if isinstance(content, str) or self.slots is None:
            return content if isinstance(content, str) else ""
        text = self.slots.text
        return _join(c["text"] if c["type"] == "text" else text(c["index"]) for c in content)


def _merge(a: str | list[dict[str, Any]], b: str | list[dict[str, Any]]) -> Any:
    """Two contents as one: text joined with a blank line, else as parts."""
    if isinstance(a, str) and isinstance(b, str):
        return _join([a, b])

    def parts(c: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
        if isinstance(c, list):
            return c
        return [{"type": "text", "text": c}] if c else []

    return parts(a) + parts(b)


__all__ = [
    "NO_QUIRKS",
    "PARAGRAPH",
    "ImageSlots",
    "Quirks",
    "mistral_call_id",
    "needs_short_call_ids",
    "to_template_messages",
    "to_template_tools",
]
