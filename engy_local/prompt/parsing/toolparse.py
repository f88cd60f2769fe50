"""Incremental parsers of a model's raw output into neutral events.

A parser is fed the generated text piece by piece (`feed(text) -> events`)
and closed with `finish() -> events`. It turns reasoning into `ThinkingDelta`,
answer text into `TextDelta`, and tool calls into `ToolCallStart`, then
`ToolCallDelta` pieces of the arguments' JSON text as they are generated, then
`ToolCallEnd`. How the pieces are split never changes what comes out: text is
held back only while it may still be the start of a marker.

One parser class per tool-call family, all built the same way
(`Parser(tools=..., thinking=..., new_id=...)`); the families package lists
them and picks one from the chat template's text. The two here:

    hermes  Hermes / Qwen: <tool_call>{"name": ..., "arguments": {...}}</tool_call>
    none    no tool-call syntax: all text is text (reasoning is still parsed)

Reasoning (every family here)
- With `thinking=True` the prompt already opened a `<think>` block, so the
  output starts inside it; independently, a `<think>` ... `</think>` block at
  the very start of the output (after optional whitespace) is reasoning.
  An unclosed block is reasoning to the end. Inside it nothing else is parsed.
- Whitespace just inside the tags and right after `</think>` is dropped:
  Qwen3 writes `<think>\\n` ... `\\n</think>\\n\\n` and its template strips those
  newlines again when it reads a turn back.

Text and calls (hermes)
- Text is delivered verbatim, except that whitespace touching a tool call
  (before it, between calls, after the last one) is dropped.
- `<tool_call>` JSON `</tool_call>`, whitespace anywhere JSON allows it. The
  object holds "name" and "arguments" (or "parameters"), in any order; the
  call starts when the name string is complete, and the arguments stream out
  as they are generated (checked character by character as JSON, so every
  delta sent is part of a valid object). Arguments given as a JSON string
  that holds an object are decoded and sent as one delta when the string ends.
- Several calls are numbered 0, 1, ...; text after them is still text.

Bad output (never an exception, nothing silently lost before a call starts)
1. A call naming a tool not in `tools`, with no name or a name that is not a
   string, or whose JSON breaks before the name is complete: the whole block,
   with the whitespace before it and both tags, is delivered as text.
2. JSON that breaks after the call started, or an unclosed `<tool_call>` at
   finish: the arguments are cut back to the last point where closing the open
   string, arrays and objects gives a valid object, and closed; the closing
   text is sent as a final delta. What follows in the block is dropped.
3. Arguments missing, or not an object (null, a number, an array): `{}`.
   String arguments that do not hold an object are repaired as in 2, or `{}`.
4. A raw control character inside a JSON string (a literal newline in code) is
   sent escaped (`\\n`) instead of breaking the call.
5. Text after the call's JSON object and before `</tool_call>` (a stray `}`)
   is dropped; a `<tool_call>` there ends this call and starts the next.
6. Output that ends inside a possible marker (`<tool_ca`): flushed as text.
7. Output that ends inside a `<tool_call>` block before the name is complete
   (a forced call cut by the token limit): when the JSON so far is valid and
   the name read so far starts an offered tool's name (the first offered one
   that it starts; an empty name starts every name), it is a call to that
   tool with its arguments repaired as in 2, not text. A complete name that
   is not offered is still case 1.
Whatever the case, the deltas of a call joined equal its `ToolCallEnd`
arguments, and they are a JSON object.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any, Protocol, TypeVar

from ...chat import Event, TextDelta, ThinkingDelta, ToolCallDelta, ToolCallEnd, ToolCallStart
from .jsonscan import WHITESPACE, JsonScanner, decode_string, repair_object

__all__ = [
    "CallBlock",
    "ForcedCallParser",
    "HermesParser",
    "ParserFactory",
    "PlainParser",
    "StepParser",
    "ToolParser",
    "held",
    "merged",
]

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
CALL_OPEN = "<tool_call>"
CALL_CLOSE = "</tool_call>"


class ToolParser(Protocol):
    def feed(self, text: str) -> list[Event]: ...

    def finish(self) -> list[Event]: ...


class ParserFactory(Protocol):
    def __call__(
        self, *, tools: Collection[str], thinking: bool, new_id: Callable[[], str]
    ) -> ToolParser: ...


# ---- one <tool_call> block --------------------------------------------------


class CallBlock:
    """The JSON of one call block, read a character at a time. Tracks the
    keys of the top-level object, the name, and the arguments' text as kept
    (see `JsonScanner.feed`): `args` holds the pieces up to the last point
    where the arguments can be closed, `pending` what came after it."""

    def __init__(self, lead: str) -> None:
        self.raw = [lead, CALL_OPEN]  # everything read, for the text fallback
        self.scanner = JsonScanner()
        self.in_json = True  # False once the object is complete or broken
        self.tail = ""  # after the JSON: held while it may be a marker
        self.capture: list[str] | None = None  # a top-level key or the name
        self.capturing = ""  # "key" or "name"
        self.key: str | None = None  # the last key of the top-level object
        self.name: str | None = None
        self.bad_name = False  # the name is not a string
        self.args_kind = ""  # "{", '"' or "other" once the arguments begin
        self.args: list[str] = []
        self.pending = ""
        self.closer = ""  # what closes the arguments after `args`
        self.args_done = False
        self.sent = 0  # how many pieces of `args` went out as deltas
        self.index = -1  # >= 0 once started

    def feed_json(self, text: str) -> int:
        """Reads JSON from `text`; returns how many characters it used."""
        scanner, used = self.scanner, len(text)
        for i, c in enumerate(text):
            depth, before = len(scanner.stack), scanner.state
            piece = scanner.feed(c)
            if piece is None:
                used, self.in_json = i, False
                break
            if depth == 1 and not (before == "value" and c in WHITESPACE):
                self._top_level(before, c)
            if self.capture is not None:
                self.capture.append(piece)
                if depth == 1 and before == "string" and scanner.state != "string":
                    self._captured("".join(self.capture))
            if self.args_kind in ("{", '"') and not self.args_done:
                self.pending += piece
                end = scanner.closer(1)
                if end is not None:
                    self.args.append(self.pending)
                    self.pending, self.closer, self.args_done = "", end, end == ""
            if scanner.done:
                used, self.in_json = i + 1, False
                break
        if self.index < 0:
            self.raw.append(text[:used])
        return used

    def _top_level(self, before: str, c: str) -> None:
        """A character of the call object itself (not nested in a value)."""
        if before in ("key", "key_or_close") and c == '"':
            self.capture, self.capturing = [], "key"
        elif before != "value":
            return
        elif self.key == "name" and self.name is None and not self.bad_name:
            if c == '"':
                self.capture, self.capturing = [], "name"
            else:
                self.bad_name = True
        elif self.key in ("arguments", "parameters") and not self.args_kind:
            self.args_kind = c if c in '{"' else "other"

    def _captured(self, literal: str) -> None:
        self.capture = None
        if self.capturing == "key":
            self.key = decode_string(literal)
        else:
            self.name = decode_string(literal)
            self.bad_name = self.name is None

    def feed_tail(self, text: str) -> tuple[str, str] | None:
        """After the JSON: looks for `</tool_call>` (or a next `<tool_call>`).
        Returns (the marker found, the text after it), or None for more."""
        tail = self.tail + text
        close, reopen = tail.find(CALL_CLOSE), tail.find(CALL_OPEN)
        if close >= 0 and (reopen < 0 or close < reopen):
            self.raw.append(tail[: close + len(CALL_CLOSE)])
            self.tail = ""
            return CALL_CLOSE, tail[close + len(CALL_CLOSE) :]
        if reopen >= 0:
            self.raw.append(tail[:reopen])
            self.tail = ""
            return CALL_OPEN, tail[reopen + len(CALL_OPEN) :]
        keep = held(tail, (CALL_CLOSE, CALL_OPEN), whitespace=False)
        self.raw.append(tail[: len(tail) - keep])
        self.tail = tail[len(tail) - keep :]
        return None

    def unsent(self) -> str:
        """Arguments text ready to stream (object arguments of a started call)."""
        if self.index < 0 or self.args_kind != "{":
            return ""
        piece = "".join(self.args[self.sent :])
        self.sent = len(self.args)
        return piece

    def partial_name(self) -> str | None:
        """The name read so far by a call cut short before its name was
        complete: "" when no name has begun, None when the block is broken
        or its name was complete (and so not offered) or not a string."""
        if not self.in_json or self.bad_name or self.name is not None:
            return None
        if self.capture is None or self.capturing != "name":
            return ""
        text = "".join(self.capture)
        for cut in range(min(6, len(text))):  # an escape may be cut in half
            name = decode_string(text[: len(text) - cut] + '"')
            if name is not None:
                return name
        return None

    def final_arguments(self) -> tuple[str, str]:
        """(the whole arguments text, the last delta that completes it)."""
        end = "" if self.args_done else self.closer
        if self.args_kind == "{":
            return "".join(self.args) + end, "".join(self.args[self.sent :]) + end
        if self.args_kind == '"':
            whole = repair_object(decode_string("".join(self.args) + end) or "")
            return whole, whole
        return "{}", "{}"


def held(buf: str, markers: tuple[str, ...], *, whitespace: bool) -> int:
    """How many characters at the end of `buf` to hold back: the longest
    start of a marker there, and the whitespace before it if asked."""
    n = 0
    for marker in markers:
        for k in range(min(len(marker) - 1, len(buf)), n, -1):
            if buf.endswith(marker[:k]):
                n = k
                break
    if whitespace:
        head = buf[: len(buf) - n]
        n += len(head) - len(head.rstrip())
    return n


_Item = TypeVar("_Item")


def merged(events: list[_Item]) -> list[_Item]:
    """Joins neighbouring deltas of the same kind (and call); anything else
    (other events, and what else a stream carries) stays as it is."""
    out: list[Any] = []
    for ev in events:
        last = out[-1] if out else None
        if isinstance(ev, TextDelta) and isinstance(last, TextDelta):
            out[-1] = TextDelta(last.text + ev.text)
        elif isinstance(ev, ThinkingDelta) and isinstance(last, ThinkingDelta):
            out[-1] = ThinkingDelta(last.text + ev.text)
        elif (
            isinstance(ev, ToolCallDelta)
            and isinstance(last, ToolCallDelta)
            and last.index == ev.index
        ):
            out[-1] = ToolCallDelta(ev.index, last.arguments + ev.arguments)
        else:
            out.append(ev)
    return out


# ---- the parsers ------------------------------------------------------------


class StepParser:
    """The driver every parser shares: text is buffered in `_buf` and handed
    to the step for the current `_mode` until a step returns False. Each step
    handles `_buf` in one mode and returns True when it changed mode and the
    next one should go on."""

    _mode: str
    _buf: str
    _steps: dict[str, Callable[[list[Event], bool], bool]]

    def feed(self, text: str) -> list[Event]:
        if self._mode == "finished" or not text:
            return []
        self._buf += text
        return self._run(final=False)

    def finish(self) -> list[Event]:
        if self._mode == "finished":
            return []
        events = self._run(final=True)
        self._mode, self._buf = "finished", ""
        return events

    def _run(self, *, final: bool) -> list[Event]:
        out: list[Event] = []
        while self._steps[self._mode](out, final):
            pass
        return merged(out)


class PlainParser(StepParser):
    """Reasoning and text; no tool-call syntax (family "none"). The base of
    the families that add one."""

    parses_calls = False
    # The reasoning block's tags (Mistral writes [THINK] ... [/THINK]).
    think_open = THINK_OPEN
    think_close = THINK_CLOSE

    def __init__(
        self, *, tools: Collection[str], thinking: bool, new_id: Callable[[], str]
    ) -> None:
        # configuration
        self._tools = frozenset(tools)
        self._offered = tuple(tools)  # in the order offered (a forced grammar's order)
        self._thinking = thinking
        self._new_id = new_id
        # state
        self._mode = "start"  # start, think, gap, text, call, finished
        self._buf = ""  # text received and not yet handled
        self._lead = True  # nothing but whitespace seen inside <think> yet
        self._call: CallBlock | None = None
        self._calls = 0
        self._steps: dict[str, Callable[[list[Event], bool], bool]] = {
            "start": self._start,
            "think": self._think,
            "gap": self._gap,
            "text": self._text,
            "call": self._in_call,
        }

    def _start(self, out: list[Event], final: bool) -> bool:
        rest, opener = self._buf.lstrip(), self.think_open
        if rest.startswith(opener):
            self._buf, self._mode = rest[len(opener) :], "think"
            return True
        if opener.startswith(rest) and not final:
            return False
        self._mode = "think" if self._thinking else "text"
        return True

    def _think(self, out: list[Event], final: bool) -> bool:
        buf, closer = self._buf, self.think_close
        end = buf.find(closer)
        if end >= 0:
            self._reason(out, buf[:end].rstrip())
            self._buf, self._mode = buf[end + len(closer) :], "gap"
            return True
        if final:
            self._reason(out, buf.rstrip())
            self._buf = ""
            return False
        keep = held(buf, (closer,), whitespace=True)
        self._reason(out, buf[: len(buf) - keep])
        self._buf = buf[len(buf) - keep :]
        return False

    def _reason(self, out: list[Event], text: str) -> None:
        if self._lead:
            text = text.lstrip()
        if text:
            self._lead = False
            out.append(ThinkingDelta(text))

    def _gap(self, out: list[Event], final: bool) -> bool:
        self._buf = self._buf.lstrip()
        if not self._buf:
            return False
        self._mode = "text"
        return True

    def _text(self, out: list[Event], final: bool) -> bool:
        buf = self._buf
        if not self.parses_calls:
            keep = 0
        else:
            at = buf.find(CALL_OPEN)
            if at >= 0:
                before = buf[:at]
                text = before.rstrip()
                if text:
                    out.append(TextDelta(text))
                self._call = CallBlock(before[len(text) :])
                self._buf, self._mode = buf[at + len(CALL_OPEN) :], "call"
                return True
            keep = 0 if final else held(buf, (CALL_OPEN,), whitespace=True)
        if len(buf) > keep:
            out.append(TextDelta(buf[: len(buf) - keep]))
        self._buf = buf[len(buf) - keep :]
        return False

    def _in_call(self, out: list[Event], final: bool) -> bool:
        call = self._call
        assert call is not None
        buf, self._buf = self._buf, ""
        if call.in_json:
            buf = buf[call.feed_json(buf) :]
            self._stream(call, out)
        if not call.in_json:
            found = call.feed_tail(buf)
            if found is not None:
                marker, self._buf = found
                self._end_call(call, out)
                if marker == CALL_OPEN:
                    self._call, self._mode = CallBlock(""), "call"
                return True
        if final:
            call.raw.append(call.tail)
            self._start_cut_call(call, out)
            self._end_call(call, out)
        return False

    def _start_cut_call(self, call: CallBlock, out: list[Event]) -> None:
        """Rule 7: a call cut before its name was complete."""
        partial = call.partial_name() if call.index < 0 else None
        if partial is None:
            return
        name = next((t for t in self._offered if t.startswith(partial)), None)
        if name is not None:
            call.index, self._calls = self._calls, self._calls + 1
            out.append(ToolCallStart(call.index, self._new_id(), name))

    def _stream(self, call: CallBlock, out: list[Event]) -> None:
        if call.index < 0 and call.name is not None and call.name in self._tools:
            call.index, self._calls = self._calls, self._calls + 1
            out.append(ToolCallStart(call.index, self._new_id(), call.name))
        piece = call.unsent()
        if piece:
            out.append(ToolCallDelta(call.index, piece))

    def _end_call(self, call: CallBlock, out: list[Event]) -> None:
        self._call = None
        if call.index < 0:
            out.append(TextDelta("".join(call.raw)))
            self._mode = "text"
            return
        whole, last = call.final_arguments()
        if last:
            out.append(ToolCallDelta(call.index, last))
        out.append(ToolCallEnd(call.index, whole))
        self._mode = "gap"


class HermesParser(PlainParser):
    """Hermes / Qwen `<tool_call>` JSON calls (family "hermes")."""

    parses_calls = True


class ForcedCallParser:
    """Wraps a family's parser when a grammar forces one call (tool_choice
    any / tool). Under that grammar everything the model writes is call
    syntax, so text can only be the call's markup that the token limit cut
    short (`<t`, `<function=rea`): it is held back, and at finish, when no
    call came out, a call is made of it, to the offered tool whose name the
    text ends in the longest start of (the first one when none), with `{}`
    arguments. Never markup in a text block."""

    def __init__(self, inner: ToolParser, tools: Sequence[str], new_id: Callable[[], str]) -> None:
        # configuration
        self._inner = inner
        self._tools = tuple(tools)
        self._new_id = new_id
        # state
        self._text = ""  # markup the parser gave as text
        self._called = False

    def feed(self, text: str) -> list[Event]:
        return self.held(self._inner.feed(text))

    def finish(self) -> list[Event]:
        events = self.held(self._inner.finish())
        if self._called or not self._tools:
            return events
        name = max(self._tools, key=self._started)  # max keeps the first of equals
        return [
            *events,
            ToolCallStart(0, self._new_id(), name),
            ToolCallDelta(0, "{}"),
            ToolCallEnd(0, "{}"),
        ]

    def held(self, events: list[Event]) -> list[Event]:
        out: list[Event] = []
        for event in events:
            if isinstance(event, TextDelta):
                self._text += event.text
                continue
            if isinstance(event, ToolCallStart):
                self._called = True
            out.append(event)
        return out

    def _started(self, name: str) -> int:
        """How much of `name` the held text ends in."""
        return next(
            (
                k
                for k in range(min(len(name), len(self._text)), 0, -1)
                if self._text.endswith(name[:k])
            ),
            0,
        )
