"""gpt-oss: OpenAI's harmony format, messages on named channels.

The prompt ends with `<|start|>assistant`; the model goes on with a header
naming a channel, `<|message|>`, the body, and an end marker, then perhaps
`<|start|>assistant` and another message:

    <|channel|>analysis<|message|>REASONING<|end|>
    <|start|>assistant<|channel|>final<|message|>ANSWER<|return|>

    <|channel|>analysis<|message|>REASONING<|end|>
    <|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json
    <|message|>{ARGS}<|call|>          (one line; broken here to fit)

The recipient `to=functions.NAME` may also stand in the role part of the
header (`<|start|>assistant to=functions.NAME<|channel|>commentary json`, the
form the template writes earlier calls in), and the content type may come
with or without `<|constrain|>`. The end markers `<|return|>` and `<|call|>`
end generation (llama.cpp treats them as end-of-generation tokens, so the
parser rarely sees them); `<|end|>` separates messages.

Messages
- Channel `analysis`: thinking. Channels `final` and `commentary` (a
  preamble before calls), and any other channel: text. Bodies are delivered
  verbatim; headers and markers are not.
- A recipient `functions.NAME` naming an offered tool makes the message a
  call, on any channel. Its body is the arguments' JSON object, streamed as
  generated (checked character by character, as for hermes). Recipient
  `assistant` is no recipient. Several calls are numbered 0, 1, ...
- A body ends at `<|end|>`, `<|return|>` or `<|call|>` (dropped), or where a
  new header begins at `<|start|>` or `<|channel|>` (models sometimes leave
  out `<|end|>`). Whitespace between messages is dropped.

Thinking: Messages `thinking` enabled maps to the template's
`reasoning_effort` "high", disabled to "low" (gpt-oss always reasons; effort
is its only switch); left out, the template's default ("medium"). A forced
call is constrained from the first token, so it comes without analysis, at
effort "low".

Bad output (never an exception, nothing silently lost before a call starts)
1. Output that does not begin with a header (`<|channel|>`, ` to=` or
   `<|start|>`) is text, up to an end marker; so is a message after an end
   marker that does not.
2. A header that is malformed or never completed by `<|message|>` (an end
   marker or `<|start|>` comes first, it runs past 256 characters, or the
   output ends) is delivered as text, markers included, and so is the rest
   of that message. A lone `<|start|>ROLE` at the end of the output says
   nothing and is dropped.
3. A recipient that is not an offered tool (`functions.other`, a built-in
   such as `python` or `browser.search`): the whole message, header and body,
   is delivered as text.
4. Call arguments that do not begin with `{` (after whitespace): the whole
   message is delivered as text. An empty body: `{}`.
5. JSON that breaks, or a body that ends (at an end marker, even one inside
   a JSON string, or at the end of the output) before the object is closed:
   the arguments are cut back to the last point where closing the open
   string, arrays and objects gives a valid object, and closed. What follows
   in the message is dropped. A raw control character in a string is sent
   escaped.
6. Output that ends inside a possible marker (`<|en`): flushed as text (or
   thinking, or argument text, as the message is).
Whatever the case, the deltas of a call joined equal its `ToolCallEnd`
arguments, and they are a JSON object.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from typing import Any

from ...chat import Event, TextDelta, ThinkingDelta, ToolCallDelta, ToolCallEnd, ToolCallStart
from ...grammar.gbnf import literal
from ..parsing.jsonscan import JsonScanner
from ..parsing.toolparse import StepParser, held
from .base import Family

START = "<|start|>"
CHANNEL = "<|channel|>"
MESSAGE = "<|message|>"
ENDS = ("<|end|>", "<|return|>", "<|call|>")
# What ends a body: an end marker, or the start of the next header.
BODY_STOPS = (*ENDS, START, CHANNEL)
# What may begin a header where a message begins (` to=` only right after
# the prompt's own `<|start|>assistant`).
OPENERS = (CHANNEL, " to=", START)
HEADER_MAX = 256
# A whole header, after `<|start|>` (or after the prompt's): a role, then
# channel, recipient and content-type fields in any order.
_HEADER = re.compile(
    r"(?P<role>[\w.-]*)"
    r"(?P<fields>(?:<\|channel\|>[\w.-]+| ?to=[^\s<]+| ?<\|constrain\|> ?[\w.-]+| [\w.-]+)*)"
)
_CHANNEL = re.compile(r"<\|channel\|>([\w.-]+)")
_RECIPIENT = re.compile(r"to=([^\s<]+)")


def _first(buf: str, markers: tuple[str, ...]) -> tuple[int, str]:
    """The earliest of `markers` in `buf` as (position, marker), or (-1, "")."""
    found = [(at, m) for m in markers if (at := buf.find(m)) >= 0]
    return min(found) if found else (-1, "")


class _Arguments:
    """One call's arguments, read a character at a time: `args` holds the
    pieces up to the last point where the object can be closed, `pending`
    what came after it, `closer` what closes it after `args`."""

    def __init__(self) -> None:
        self.scanner = JsonScanner()
        self.args: list[str] = []
        self.pending = ""
        self.closer = ""
        self.sent = 0
        self.open = True  # False once the object is complete or broken

    def feed(self, text: str) -> None:
        for c in text:
            piece = self.scanner.feed(c)
            if piece is None:
                self.open = False
                return
            self.pending += piece
            end = self.scanner.closer()
            if end is not None:
                self.args.append(self.pending)
                self.pending, self.closer = "", end
            if self.scanner.done:
                self.open = False
                return

    def unsent(self) -> str:
        piece = "".join(self.args[self.sent :])
        self.sent = len(self.args)
        return piece


class HarmonyParser(StepParser):
    """Harmony channels (family "gpt-oss"). See the module docstring."""

    def __init__(
        self, *, tools: Collection[str], thinking: bool, new_id: Callable[[], str]
    ) -> None:
        # configuration (`thinking` is not needed: the header names the channel)
        self._tools = frozenset(tools)
        self._new_id = new_id
        # state
        self._mode = "start"  # start, between, header, think, text, call, skip, finished
        self._buf = ""  # text received and not yet handled
        self._raw = ""  # the current header as written, for the text fallback
        self._lead = ""  # whitespace before the arguments of a call
        self._name = ""  # the tool the current call goes to
        self._args: _Arguments | None = None
        self._index = -1  # of the current call once started
        self._calls = 0
        self._steps: dict[str, Callable[[list[Event], bool], bool]] = {
            "start": self._start,
            "between": self._between,
            "header": self._header,
            "think": self._body,
            "text": self._body,
            "call": self._call,
            "skip": self._skip,
        }

    def _start(self, out: list[Event], final: bool) -> bool:
        return self._open(self._buf, final)

    def _between(self, out: list[Event], final: bool) -> bool:
        rest = self._buf.lstrip()
        if not rest:
            self._buf = ""
            return False
        return self._open(rest, final)

    def _open(self, buf: str, final: bool) -> bool:
        """At a message's start: a header, or (rule 1) text."""
        if buf.startswith(START):
            self._buf, self._raw, self._mode = buf[len(START) :], START, "header"
            return True
        if buf.startswith(OPENERS):
            self._buf, self._raw, self._mode = buf, "", "header"
            return True
        if not final and any(o.startswith(buf) for o in OPENERS):
            self._buf = buf
            return False
        self._buf, self._mode = buf, "text"
        return True

    def _header(self, out: list[Event], final: bool) -> bool:
        buf = self._buf
        room = HEADER_MAX - len(self._raw)  # how much of `buf` the header may take
        at = buf.find(MESSAGE)
        stop, _ = _first(buf, (*ENDS, START))
        if 0 <= at <= room and (stop < 0 or at < stop):
            head = self._raw[len(START) :] if self._raw.startswith(START) else self._raw
            self._raw += buf[: at + len(MESSAGE)]
            self._buf = buf[at + len(MESSAGE) :]
            self._begin(head + buf[:at], out)
            return True
        if 0 <= stop <= room:
            cut = stop
        elif at > room or stop > room or len(buf) - self._held_header(buf) > room:
            cut = room
        elif final:
            role_only = self._raw == START and re.fullmatch(r"[\w.-]*", buf)
            if not role_only:
                self._text(out, self._raw + buf)
            self._buf = ""
            return False
        else:
            return False
        # Rule 2: the header as text, and the rest of its message.
        self._text(out, self._raw + buf[:cut])
        self._buf, self._mode = buf[cut:], "text"
        return True

    @staticmethod
    def _held_header(buf: str) -> int:
        return held(buf, (MESSAGE, *ENDS, START), whitespace=False)

    def _begin(self, head: str, out: list[Event]) -> None:
        """A complete header: what its message is."""
        match = _HEADER.fullmatch(head)
        if match is None:  # rule 2
            self._text(out, self._raw)
            self._mode = "text"
            return
        fields = match["fields"]
        channels = _CHANNEL.findall(fields)
        recipient = _RECIPIENT.search(fields)
        to = recipient[1] if recipient else "assistant"
        if to == "assistant":
            self._mode = "think" if channels and channels[-1] == "analysis" else "text"
        elif to.startswith("functions.") and to[len("functions.") :] in self._tools:
            self._name, self._lead, self._args, self._mode = (
                to[len("functions.") :],
                "",
                None,
                "call",
            )
        else:  # rule 3
            self._text(out, self._raw)
            self._mode = "text"

    def _body(self, out: list[Event], final: bool) -> bool:
        buf = self._buf
        at, marker = _first(buf, BODY_STOPS)
        if at >= 0:
            self._emit(out, buf[:at])
            self._next(buf[at:], marker)
            return True
        keep = 0 if final else held(buf, BODY_STOPS, whitespace=False)
        self._emit(out, buf[: len(buf) - keep])
        self._buf = buf[len(buf) - keep :]
        return False

    def _call(self, out: list[Event], final: bool) -> bool:
        buf = self._buf
        at, marker = _first(buf, BODY_STOPS)
        keep = 0 if final or at >= 0 else held(buf, BODY_STOPS, whitespace=False)
        body = buf[:at] if at >= 0 else buf[: len(buf) - keep]
        self._buf = buf[len(body) :]
        if self._args is None:
            stripped = body.lstrip()
            self._lead += body[: len(body) - len(stripped)]
            if stripped and not stripped.startswith("{"):  # rule 4
                self._text(out, self._raw + self._lead)
                self._buf, self._mode = stripped + self._buf, "text"
                return True
            if stripped:
                self._start_call(out)
                body = stripped
        args = self._args
        if args is not None and body:
            args.feed(body)
            piece = args.unsent()
            if piece:
                out.append(ToolCallDelta(self._index, piece))
        if args is not None and not args.open:
            self._end_call(out)
            self._mode = "skip"
            return True
        if at >= 0 or final:
            if args is None:
                self._start_call(out)
            self._end_call(out)
            if at >= 0:
                self._next(self._buf, marker)
                return True
        return False

    def _skip(self, out: list[Event], final: bool) -> bool:
        buf = self._buf
        at, marker = _first(buf, BODY_STOPS)
        if at >= 0:
            self._next(buf[at:], marker)
            return True
        keep = 0 if final else held(buf, BODY_STOPS, whitespace=False)
        self._buf = buf[len(buf) - keep :]
        return False

    # ---- helpers

    def _next(self, buf: str, marker: str) -> None:
        """After a body: `buf` starts with `marker`."""
        if marker in ENDS:
            self._buf, self._mode = buf[len(marker) :], "between"
        elif marker == START:
            self._buf, self._raw, self._mode = buf[len(START) :], START, "header"
        else:
            self._buf, self._raw, self._mode = buf, "", "header"

    def _emit(self, out: list[Event], text: str) -> None:
        if text:
            out.append(ThinkingDelta(text) if self._mode == "think" else TextDelta(text))

    def _text(self, out: list[Event], text: str) -> None:
        if text:
            out.append(TextDelta(text))

    def _start_call(self, out: list[Event]) -> None:
        self._index, self._calls = self._calls, self._calls + 1
        self._args = _Arguments()
        out.append(ToolCallStart(self._index, self._new_id(), self._name))

    def _end_call(self, out: list[Event]) -> None:
        args = self._args
        assert args is not None
        if not args.args:  # an empty body
            args.args, args.closer = ["{"], "}"
        whole = "".join(args.args) + args.closer
        last = args.unsent() + args.closer
        if last:
            out.append(ToolCallDelta(self._index, last))
        out.append(ToolCallEnd(self._index, whole))
        self._args = None


def call_rules(names: list[str], roots: list[str], rules: dict[str, str]) -> None:
    """<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>ARGS
    (no `<|call|>`: it ends generation, which the grammar's end allows)."""
    for i, (name, root) in enumerate(zip(names, roots, strict=True)):
        rules[f"call-{i}"] = literal(name + " <|constrain|>json" + MESSAGE) + " " + root
    alternatives = " | ".join(f"call-{i}" for i in range(len(names)))
    rules["call"] = f"{literal(CHANNEL + 'commentary to=functions.')} ({alternatives})"


def thinking(enabled: bool) -> dict[str, Any]:
    return {"reasoning_effort": "high" if enabled else "low"}


FAMILY = Family(
    name="gpt-oss",
    markers=(CHANNEL, MESSAGE),
    parser=HarmonyParser,
    call_rules=call_rules,
    thinking=thinking,
    reasoning_end="<|end|>",
    answer_spans_turns=True,
)
