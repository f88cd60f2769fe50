"""Neutral events -> OpenAI Responses stream events (wire-protocols.md B6).

`ResponseStream` is an explicit state machine: each method returns the events
to send, as dicts carrying `type` and `sequence_number` (0, 1, ... per
stream); the transport writes `event: <type>` and `data: <json>`.

    start()         response.created, response.in_progress
    process(event)  for each chat.Event
    keepalive()     a repeated response.in_progress (clients ignore it)
    fail(err)       error, then response.failed; terminal

Items: text opens a message item (output_item.added, content_part.added,
output_text.delta ...) that closes (output_text.done, content_part.done,
output_item.done) when a call starts or the answer ends; each call is a
function_call or custom_tool_call item with its argument or input deltas,
done when the next event shows whether max_tokens cut it (then incomplete).
output_index counts items in order. Text that is only whitespace is held
back and dropped if a call comes next, as `render_response` drops it.
Thinking produces no items: it is counted in usage.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..chat import (
    Event,
    Finished,
    PromptProgress,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from ..errors import EngyError
from .responses_render import (
    call_item,
    call_prefix,
    custom_input,
    envelope,
    item_id,
    message_item,
    origin_of,
    stream_error,
    text_part,
)
from .responses_request import ResponsesRequest, ToolOrigin

# ---- the "input" string of a custom tool's arguments, decoded as it streams --

_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_SPECIAL = re.compile(r'["\\]')
_REPLACEMENT = "\ufffd"  # for a lone surrogate


class InputDecoder:
    """Feeds on JSON object text in pieces split anywhere; returns the newly
    decoded characters of the top-level `"input"` string value."""

    def __init__(self) -> None:
        # structure, before the value
        self._depth = 0
        self._in_string = False
        self._escaped = False
        self._expect_key = False
        self._key: list[str] | None = None  # a key being read at depth 1
        self._last_key = ""
        self._want_value = False
        # the value
        self._state = "scan"  # scan -> value -> done
        self._raw = ""  # undecoded text of the value

    def feed(self, text: str) -> str:
        if self._state == "scan":
            text = self._scan(text)
        if self._state != "value":
            return ""
        self._raw += text
        return self._decode()

    def _scan(self, text: str) -> str:
        """Walk the structure; return what follows the value's opening quote."""
        for i, c in enumerate(text):
            if self._in_string:
                if self._escaped:
                    self._escaped = False
                elif c == "\\":
                    self._escaped = True
                elif c == '"':
                    self._in_string = False
                    if self._key is not None:
                        self._last_key, self._key = "".join(self._key), None
                        continue
                if self._key is not None:
                    self._key.append(c)
                continue
            if self._want_value:
                if c.isspace():
                    continue
                self._want_value = False
                if c == '"':
                    self._state = "value"
                    return text[i + 1 :]
            if c == '"':
                self._in_string = True
                if self._depth == 1 and self._expect_key:
                    self._key, self._expect_key = [], False
            elif c in "{[":
                self._depth += 1
                self._expect_key = self._depth == 1 and c == "{"
            elif c in "}]":
                self._depth -= 1
            elif c == "," and self._depth == 1:
                self._expect_key = True
            elif c == ":" and self._depth == 1 and self._last_key == "input":
                self._want_value = True
        return ""

    def _decode(self) -> str:
        s, i, out = self._raw, 0, []
        while i < len(s):
            m = _SPECIAL.search(s, i)
            if m is None:
                out.append(s[i:])
                i = len(s)
                break
            out.append(s[i : m.start()])
            i = m.start()
            if s[i] == '"':
                self._state = "done"
                break
            char, used = _escape(s, i)
            if not used:
                break  # the escape is not complete yet
            out.append(char)
            i += used
        self._raw = s[i:] if self._state == "value" else ""
        return "".join(out)


def _escape(s: str, i: int) -> tuple[str, int]:
    """Decode the escape at s[i] (a backslash): (text, length), or ("", 0)
    when more text is needed to know."""
    if i + 1 >= len(s):
        return "", 0
    if s[i + 1] != "u":
        return _ESCAPES.get(s[i + 1], s[i + 1]), 2
    code = _hex4(s, i + 2)
    if code is None:
        return ("", 0) if len(s) < i + 6 else (s[i : i + 6], 6)
    if not 0xD800 <= code < 0xDC00:
        return (_REPLACEMENT if 0xDC00 <= code < 0xE000 else chr(code)), 6
    # a high surrogate: wait for a low one, or decide it is alone
    tail = s[i + 6 : i + 8]
    if not "\\u".startswith(tail):
        return _REPLACEMENT, 6
    if len(s) < i + 12:
        return "", 0
    low = _hex4(s, i + 8)
    if low is None or not 0xDC00 <= low < 0xE000:
        return _REPLACEMENT, 6
    return chr(0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)), 12


def _hex4(s: str, start: int) -> int | None:
    digits = s[start : start + 4]
    if len(digits) < 4:
        return None
    try:
        return int(digits, 16)
    except ValueError:
        return None


# ---- the stream -------------------------------------------------------------


@dataclass
class _Message:
    output_index: int
    item_id: str
    text: str = ""


@dataclass
class _Call:
    output_index: int
    item_id: str
    call_id: str
    origin: ToolOrigin
    arguments: str = ""
    input: str = ""  # decoded so far (custom tools)
    decoder: InputDecoder = field(default_factory=InputDecoder)


class ResponseStream:
    def __init__(self, parsed: ResponsesRequest, *, response_id: str, created_at: int) -> None:
        # configuration
        self.parsed = parsed
        self.response_id = response_id
        self.created_at = created_at
        # state
        self._sequence = 0
        self._started = False
        self._finished = False
        self._next_index = 0
        self._done: dict[int, dict[str, Any]] = {}  # output_index -> finished item
        self._message: _Message | None = None
        self._pending = ""  # whitespace not yet shown
        self._calls: dict[int, _Call] = {}  # engine call index -> open call
        # Calls the engine ended, not yet done: engine call index -> arguments.
        # A call's output_item.done waits for the next event, since a cut
        # (max_tokens) right after it makes it the incomplete last item, as in
        # `render_response`; the engine closes a cut call's arguments itself.
        self._ended: dict[int, str] = {}

    # ---- public ----

    def start(self) -> list[dict[str, Any]]:
        if self._started:
            return []
        self._started = True
        snapshot = self._response("in_progress")
        return [
            self._event("response.created", response=snapshot),
            self._event("response.in_progress", response=snapshot),
        ]

    def keepalive(self) -> list[dict[str, Any]]:
        if not self._started:
            return self.start()
        if self._finished:
            return []
        return [self._event("response.in_progress", response=self._response("in_progress"))]

    def process(self, event: Event) -> list[dict[str, Any]]:
        events = self.start()
        if self._finished:
            return events
        if not isinstance(event, Finished):
            events += self._close_ended("completed")
        if isinstance(event, TextDelta):
            events += self._text(event.text)
        elif isinstance(event, ToolCallStart):
            events += self._call_start(event)
        elif isinstance(event, ToolCallDelta):
            call = self._calls.get(event.index)
            events += self._call_delta(call, event.arguments) if call else []
        elif isinstance(event, ToolCallEnd):
            events += self._call_end(event)
        elif isinstance(event, Finished):
            events += self._finish(event)
        elif isinstance(event, PromptProgress):
            events += self.keepalive()
        # Started and ThinkingDelta make no events (thinking is counted in usage).
        return events

    def fail(self, err: EngyError) -> list[dict[str, Any]]:
        events = self.start()
        if self._finished:
            return events
        events += self._close_ended("completed")
        self._finished = True
        error = stream_error(err)
        events.append(self._event("error", **error))
        failed = self._response("failed", error={"code": error["code"], "message": err.message})
        events.append(self._event("response.failed", response=failed))
        return events

    # ---- helpers ----

    def _event(self, kind: str, **data: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self._sequence, **data}
        self._sequence += 1
        return event

    def _response(self, status: str, **extra: Any) -> dict[str, Any]:
        output = [self._done[i] for i in sorted(self._done)]
        return envelope(self.parsed, self.response_id, self.created_at, status, output, **extra)

    def _index(self) -> int:
        self._next_index += 1
        return self._next_index - 1

    def _text(self, text: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if self._message is None:
            self._pending += text
            if not self._pending.strip():
                return []
            text, self._pending = self._pending, ""
            events += self._open_message()
        assert self._message is not None
        self._message.text += text
        events.append(
            self._event("response.output_text.delta", **self._where(), delta=text, logprobs=[])
        )
        return events

    def _where(self) -> dict[str, Any]:
        assert self._message is not None
        return {
            "item_id": self._message.item_id,
            "output_index": self._message.output_index,
            "content_index": 0,
        }

    def _open_message(self) -> list[dict[str, Any]]:
        index = self._index()
        self._message = _Message(index, item_id(self.response_id, "msg", index))
        added = message_item(self._message.item_id, "in_progress", None)
        return [
            self._event("response.output_item.added", output_index=index, item=added),
            self._event("response.content_part.added", **self._where(), part=text_part("")),
        ]

    def _close_message(self, status: str) -> list[dict[str, Any]]:
        message, where = self._message, self._where()
        assert message is not None
        item = message_item(message.item_id, status, message.text)
        self._done[message.output_index] = item
        self._message = None
        return [
            self._event("response.output_text.done", **where, text=message.text, logprobs=[]),
            self._event("response.content_part.done", **where, part=text_part(message.text)),
            self._event("response.output_item.done", output_index=message.output_index, item=item),
        ]

    def _call_start(self, event: ToolCallStart) -> list[dict[str, Any]]:
        events = self._close_message("completed") if self._message else []
        self._pending = ""  # whitespace before a call is not worth a message
        if event.index in self._calls:  # started twice: end the first as it is
            events += self._close_call(
                event.index, self._calls[event.index].arguments, "incomplete"
            )
        origin = origin_of(self.parsed, event.name)
        index = self._index()
        call = _Call(index, item_id(self.response_id, call_prefix(origin), index), event.id, origin)
        self._calls[event.index] = call
        item = call_item(origin, call.item_id, call.call_id, "in_progress", "")
        events.append(self._event("response.output_item.added", output_index=index, item=item))
        return events

    def _call_delta(self, call: _Call, piece: str) -> list[dict[str, Any]]:
        if not piece:
            return []
        call.arguments += piece
        where = {"item_id": call.item_id, "output_index": call.output_index}
        if call.origin.kind == "function":
            return [self._event("response.function_call_arguments.delta", **where, delta=piece)]
        decoded = call.decoder.feed(piece)
        if not decoded:
            return []
        call.input += decoded
        return [self._event("response.custom_tool_call_input.delta", **where, delta=decoded)]

    def _call_end(self, event: ToolCallEnd) -> list[dict[str, Any]]:
        call = self._calls.get(event.index)
        if call is None:
            return []
        events: list[dict[str, Any]] = []
        if event.arguments.startswith(call.arguments) and event.arguments != call.arguments:
            events += self._call_delta(call, event.arguments[len(call.arguments) :])
        self._ended[event.index] = event.arguments
        return events

    def _close_ended(self, status: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        for index, arguments in self._ended.items():
            events += self._close_call(index, arguments, status, whole=True)
        self._ended.clear()
        return events

    def _close_call(
        self, index: int, arguments: str, status: str, whole: bool = False
    ) -> list[dict[str, Any]]:
        """`whole`: the engine ended the call, so `arguments` are complete."""
        call = self._calls.pop(index)
        where = {"item_id": call.item_id, "output_index": call.output_index}
        if call.origin.kind == "custom":
            payload = custom_input(arguments) if whole else call.input
            done = self._event("response.custom_tool_call_input.done", **where, input=payload)
        else:
            payload = arguments
            done = self._event(
                "response.function_call_arguments.done",
                **where,
                name=call.origin.name,
                arguments=payload,
            )
        item = call_item(call.origin, call.item_id, call.call_id, status, payload)
        self._done[call.output_index] = item
        return [
            done,
            self._event("response.output_item.done", output_index=call.output_index, item=item),
        ]

    def _finish(self, event: Finished) -> list[dict[str, Any]]:
        cut = event.stop_reason == "length"
        events: list[dict[str, Any]] = []
        if self._message is None and not self._done and not self._calls:
            # No item at all: the answer is the (maybe empty) held-back text.
            text, self._pending = self._pending, ""
            events += self._open_message()
            if text:
                events += self._text(text)
        if self._message is not None:
            events += self._close_message("incomplete" if cut else "completed")
        # An ended call is the last item: a cut stopped the answer right there.
        events += self._close_ended("incomplete" if cut else "completed")
        for index in sorted(self._calls, key=lambda i: self._calls[i].output_index):
            # A call the engine never ended (cut short): what came so far.
            events += self._close_call(index, self._calls[index].arguments, "incomplete")
        self._finished = True
        status = "incomplete" if cut else "completed"
        response = self._response(status, usage=event.usage)
        events.append(self._event("response.completed", response=response))
        return events
