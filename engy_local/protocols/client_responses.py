"""The client side of OpenAI Responses: a neutral `ChatRequest` -> request
JSON, and the server's stream events -> neutral events.

The mirror image of `responses_request.py` and `responses_stream.py`, for
`engy chat --url ... --api responses`. Pure, no I/O: the transport reads SSE
and hands each event's JSON to `ResponseDecoder.feed`.
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
from ..errors import ServerError
from .client_anthropic import error_from

# ---- request ----------------------------------------------------------------

_CHOICES = {"auto": "auto", "none": "none", "any": "required"}


def request_json(chat: ChatRequest, *, stream: bool = True) -> dict[str, Any]:
    """The /v1/responses body for `chat`.

    Leading system messages become `instructions`, later ones `developer`
    messages. Not expressible in this API and left out on purpose: top_k,
    stop sequences and the thinking switch (the model's default applies).
    `overflow` follows from `max_output_tokens`: "reject" is what the
    contract does when it is given.
    """
    body: dict[str, Any] = {"model": chat.model, "store": False}
    messages = list(chat.messages)
    system: list[str] = []
    while messages and messages[0].role == "system":
        system.append(messages.pop(0).text())
    if system:
        body["instructions"] = "\n\n".join(system)
    body["input"] = [item for m in messages for item in _items(m)]
    s = chat.sampling
    if s.max_tokens is not None:
        body["max_output_tokens"] = s.max_tokens
    if s.temperature is not None:
        body["temperature"] = s.temperature
    if s.top_p is not None:
        body["top_p"] = s.top_p
    if chat.tools:
        body["tools"] = [
            {
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": t.parameters,
            }
            for t in chat.tools
        ]
    choice = chat.tool_choice
    if choice.mode == "tool":
        body["tool_choice"] = {"type": "function", "name": choice.name}
    elif chat.tools or choice.mode != "auto":
        body["tool_choice"] = _CHOICES[choice.mode]
    if not choice.parallel:
        body["parallel_tool_calls"] = False
    if stream:
        body["stream"] = True
    return body


def _items(message: Message) -> list[dict[str, Any]]:
    role = message.role
    if role == "system":
        return [_message("developer", "input_text", message.text())]
    items: list[dict[str, Any]] = []
    kind = "output_text" if role == "assistant" else "input_text"
    for part in message.parts:
        if isinstance(part, Text):
            if items and items[-1].get("type") == "message":
                items[-1]["content"].append({"type": kind, "text": part.text})
            else:
                items.append(_message(role, kind, part.text))
        elif isinstance(part, Image):
            url = f"data:{part.media_type};base64,{part.data}"
            items.append(
                {
                    "type": "message",
                    "role": role,
                    "content": [{"type": "input_image", "image_url": url}],
                }
            )
        elif isinstance(part, ToolCall):
            items.append(
                {
                    "type": "function_call",
                    "call_id": part.id,
                    "name": part.name,
                    "arguments": part.arguments,
                }
            )
        elif isinstance(part, ToolResult):
            items.append(
                {"type": "function_call_output", "call_id": part.call_id, "output": part.content}
            )
        elif isinstance(part, Thinking):
            pass  # a reasoning item needs the server's own encrypted content
    return items


def _message(role: str, kind: str, text: str) -> dict[str, Any]:
    return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}


# ---- stream -------------------------------------------------------------------


class ResponseDecoder:
    """Responses stream events (the JSON of each SSE `data:`) -> neutral
    events. Raises `error` and `response.failed` as a `RemoteError`."""

    def __init__(self) -> None:
        # state
        self._calls: dict[int, int] = {}  # output_index -> call index
        self._arguments: dict[int, str] = {}  # call index -> arguments so far
        self._custom: set[int] = set()  # call indexes of custom tools
        self.finished = False

    def feed(self, data: dict[str, Any]) -> list[Event]:
        kind = str(data.get("type", ""))
        handler = _HANDLERS.get(kind)
        if handler is not None:
            return handler(self, data)
        if kind.startswith("response.reasoning") and kind.endswith("text.delta"):
            # reasoning_text.delta and reasoning_summary_text.delta
            return [ThinkingDelta(str(data.get("delta", "")))]
        return []  # unknown events are tolerated

    def _progress(self, data: dict[str, Any]) -> list[Event]:
        if data.get("type") == "response.created":
            return []
        return [Heartbeat()]  # engy repeats in_progress as a keepalive

    def _text(self, data: dict[str, Any]) -> list[Event]:
        return [TextDelta(str(data.get("delta", "")))]

    def _item_added(self, data: dict[str, Any]) -> list[Event]:
        item = data.get("item") or {}
        if item.get("type") not in ("function_call", "custom_tool_call"):
            return []
        index = len(self._calls)
        self._calls[int(data.get("output_index", 0))] = index
        self._arguments[index] = ""
        if item.get("type") == "custom_tool_call":
            self._custom.add(index)
        name = str(item.get("name", ""))
        if item.get("namespace"):
            name = f"{item['namespace']}__{name}"
        return [ToolCallStart(index, str(item.get("call_id", "")), name)]

    def _call_delta(self, data: dict[str, Any]) -> list[Event]:
        index = self._calls.get(int(data.get("output_index", 0)))
        if index is None:
            return []
        piece = str(data.get("delta", ""))
        self._arguments[index] += piece
        # A custom tool's input streams as plain text, not JSON: it is
        # wrapped as {"input": ...} once whole.
        return [] if index in self._custom else [ToolCallDelta(index, piece)]

    def _item_done(self, data: dict[str, Any]) -> list[Event]:
        index = self._calls.get(int(data.get("output_index", 0)))
        if index is None:
            return []
        item = data.get("item") or {}
        if index in self._custom:
            text = item.get("input", self._arguments[index])
            arguments = json.dumps({"input": text}, ensure_ascii=False)
        else:
            arguments = str(item.get("arguments") or self._arguments[index] or "{}")
        return [ToolCallEnd(index, arguments)]

    def _finished(self, data: dict[str, Any]) -> list[Event]:
        response = data.get("response") or {}
        self.finished = True
        reason: StopReason
        if response.get("status") == "incomplete":
            reason = "length"
        else:
            reason = "tool_call" if self._calls else "end"
        return [Finished(reason, _usage(response.get("usage")))]

    def _failed(self, data: dict[str, Any]) -> list[Event]:
        if data.get("type") == "response.failed":
            response = data.get("response") or {}
            raise error_from(500, {"error": response.get("error")})
        raise error_from(500, {"error": data})  # `error`: code and message at the top

    def close(self) -> None:
        """The stream ended; raises if it ended before the response did."""
        if not self.finished:
            raise ServerError("the server's stream ended before the answer did")


_HANDLERS = {
    "response.created": ResponseDecoder._progress,
    "response.in_progress": ResponseDecoder._progress,
    "response.output_text.delta": ResponseDecoder._text,
    "response.output_item.added": ResponseDecoder._item_added,
    "response.function_call_arguments.delta": ResponseDecoder._call_delta,
    "response.custom_tool_call_input.delta": ResponseDecoder._call_delta,
    "response.output_item.done": ResponseDecoder._item_done,
    "response.completed": ResponseDecoder._finished,
    "response.incomplete": ResponseDecoder._finished,
    "response.failed": ResponseDecoder._failed,
    "error": ResponseDecoder._failed,
}


def _usage(raw: Any) -> Usage:
    if not isinstance(raw, dict):
        return Usage()

    def count(d: Any, key: str) -> int:
        value = d.get(key) if isinstance(d, dict) else None
        return value if isinstance(value, int) else 0

    return Usage(
        prompt_tokens=count(raw, "input_tokens"),
        cached_tokens=count(raw.get("input_tokens_details"), "cached_tokens"),
        output_tokens=count(raw, "output_tokens"),
        reasoning_tokens=count(raw.get("output_tokens_details"), "reasoning_tokens"),
    )
