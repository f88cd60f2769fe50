"""The client side of Anthropic Messages: a neutral `ChatRequest` -> request
JSON, and the server's stream events -> neutral events.

The mirror image of `anthropic.py` and `anthropic_stream.py`, for `engy chat
--url`: the REPL builds the same `ChatRequest` and consumes the same events
whether the model runs in-process or behind `POST /v1/messages`. Pure, no I/O:
the transport reads SSE and hands each event's JSON to `MessageDecoder.feed`.
"""

from __future__ import annotations

import json
from typing import Any

from ..chat import (
    ChatRequest,
    Event,
    Finished,
    Heartbeat,
    Image,
    Message,
    Started,
    StopReason,
    Text,
    TextDelta,
    Thinking,
    ThinkingDelta,
    ToolCall,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolResult,
    Usage,
)
from ..errors import RemoteError, ServerError
from .anthropic import signature

# max_tokens is required by the contract; a request that leaves it open asks
# for this much (engy lowers it to what fits the window).
DEFAULT_MAX_TOKENS = 8192

# ---- request ----------------------------------------------------------------


def request_json(chat: ChatRequest, *, stream: bool = True) -> dict[str, Any]:
    """The /v1/messages body for `chat`.

    Leading system messages become `system`; a later one is sent as a
    `system` role message, as Claude Code does and engy accepts. `overflow`
    is not sent: the Messages contract is always "shrink".
    """
    max_tokens = chat.sampling.max_tokens or DEFAULT_MAX_TOKENS
    body: dict[str, Any] = {"model": chat.model, "max_tokens": max_tokens}
    messages = list(chat.messages)
    system: list[str] = []
    while messages and messages[0].role == "system":
        system.append(messages.pop(0).text())
    if system:
        body["system"] = "\n\n".join(system)
    body["messages"] = _messages(messages)
    if chat.tools:
        body["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": t.parameters}
            for t in chat.tools
        ]
    choice = chat.tool_choice
    if chat.tools or choice.mode != "auto":
        wire: dict[str, Any] = {"type": choice.mode}
        if choice.mode == "tool":
            wire["name"] = choice.name
        if not choice.parallel:
            wire["disable_parallel_tool_use"] = True
        body["tool_choice"] = wire
    if chat.thinking is True:
        # The contract asks for a budget; engy lets the model decide.
        body["thinking"] = {"type": "enabled", "budget_tokens": max(1024, max_tokens // 2)}
    elif chat.thinking is False:
        body["thinking"] = {"type": "disabled"}
    s = chat.sampling
    for key, value in (("temperature", s.temperature), ("top_p", s.top_p), ("top_k", s.top_k)):
        if value is not None:
            body[key] = value
    if s.stop:
        body["stop_sequences"] = list(s.stop)
    if chat.provider is not None:
        p = chat.provider
        body["provider"] = {
            k: list(v) if isinstance(v, tuple) else v
            for k, v in (
                ("only", p.only),
                ("ignore", p.ignore),
                ("quantizations", p.quantizations),
                ("min_context", p.min_context),
                ("gpu", p.gpu),
            )
            if v is not None and v != ()
        }
    if stream:
        body["stream"] = True
    return body


def _messages(messages: list[Message]) -> list[dict[str, Any]]:
    """Tool results travel in user turns, and consecutive turns of one role
    are merged, as the contract's alternation asks."""
    out: list[dict[str, Any]] = []
    for message in messages:
        role = {"tool": "user"}.get(message.role, message.role)
        if role == "system":
            out.append({"role": "system", "content": message.text()})
            continue
        blocks = [_block(p) for p in message.parts]
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return out


def _block(part: Any) -> dict[str, Any]:
    if isinstance(part, Text):
        return {"type": "text", "text": part.text}
    if isinstance(part, Image):
        source = {"type": "base64", "media_type": part.media_type, "data": part.data}
        return {"type": "image", "source": source}
    if isinstance(part, Thinking):
        return {"type": "thinking", "thinking": part.text, "signature": signature(part.text)}
    if isinstance(part, ToolCall):
        return {"type": "tool_use", "id": part.id, "name": part.name, "input": _input(part)}
    if isinstance(part, ToolResult):
        block: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": part.call_id,
            "content": part.content,
        }
        if part.is_error:
            block["is_error"] = True
        return block
    raise TypeError(f"not a message part: {part!r}")  # pragma: no cover


def _input(call: ToolCall) -> Any:
    try:
        value = json.loads(call.arguments) if call.arguments else {}
    except ValueError:
        value = {}
    return value if isinstance(value, dict) else {}


# ---- stream -------------------------------------------------------------------

_STOP: dict[str, StopReason] = {
    "end_turn": "end",
    "max_tokens": "length",
    "tool_use": "tool_call",
    "stop_sequence": "stop",
    # refusal, pause_turn and whatever comes next: the turn ended.
}


def error_from(status: int, body: Any) -> RemoteError:
    """The error of a non-200 answer, from its JSON body (or none). Both
    protocols put `{"error": {"message": ..., "type": ...}}` there."""
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        kind = error.get("code") or error.get("type") or ""
        return RemoteError(status, str(kind), error["message"])
    return RemoteError(status, "", f"the server answered HTTP {status}")


class MessageDecoder:
    """Anthropic stream events (the JSON of each SSE `data:`) -> neutral
    events. Raises the stream's `error` event as a `RemoteError`."""

    def __init__(self) -> None:
        # state
        self._calls: dict[int, int] = {}  # content block index -> call index
        self._arguments: dict[int, str] = {}  # call index -> JSON text so far
        self._stop: StopReason = "end"
        self._usage: dict[str, Any] = {}
        self.finished = False

    def feed(self, data: dict[str, Any]) -> list[Event]:
        kind = data.get("type")
        if kind == "message_start":
            message = data.get("message") or {}
            self._usage = dict(message.get("usage") or {})
            usage = self._neutral_usage()
            return [Started(usage.prompt_tokens, usage.cached_tokens)]
        if kind == "content_block_start":
            block = data.get("content_block") or {}
            if block.get("type") != "tool_use":
                return []
            index = len(self._calls)
            self._calls[int(data.get("index", 0))] = index
            self._arguments[index] = ""
            return [ToolCallStart(index, str(block.get("id", "")), str(block.get("name", "")))]
        if kind == "content_block_delta":
            return self._delta(int(data.get("index", 0)), data.get("delta") or {})
        if kind == "content_block_stop":
            call = self._calls.get(int(data.get("index", 0)))
            if call is None:
                return []
            return [ToolCallEnd(call, self._arguments[call] or "{}")]
        if kind == "message_delta":
            reason = (data.get("delta") or {}).get("stop_reason")
            self._stop = _STOP.get(str(reason), "end")
            self._usage.update(data.get("usage") or {})
            return []
        if kind == "message_stop":
            self.finished = True
            return [Finished(self._stop, self._neutral_usage())]
        if kind == "ping":
            return [Heartbeat()]
        if kind == "error":
            raise error_from(500, data)
        return []  # unknown events are tolerated

    def _delta(self, block: int, delta: dict[str, Any]) -> list[Event]:
        kind = delta.get("type")
        if kind == "text_delta":
            return [TextDelta(str(delta.get("text", "")))]
        if kind == "thinking_delta":
            return [ThinkingDelta(str(delta.get("thinking", "")))]
        if kind == "input_json_delta" and block in self._calls:
            index = self._calls[block]
            piece = str(delta.get("partial_json", ""))
            self._arguments[index] += piece
            return [ToolCallDelta(index, piece)]
        return []  # signature_delta, citations: nothing to show

    def _neutral_usage(self) -> Usage:
        def count(key: str) -> int:
            value = self._usage.get(key)
            return value if isinstance(value, int) else 0

        cached = count("cache_read_input_tokens")
        prompt = count("input_tokens") + cached + count("cache_creation_input_tokens")
        return Usage(
            prompt_tokens=prompt, cached_tokens=cached, output_tokens=count("output_tokens")
        )

    def close(self) -> None:
        """The stream ended; raises if it ended before `message_stop`."""
        if not self.finished:
            raise ServerError("the server's stream ended before the answer did")
