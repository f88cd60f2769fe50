"""Gemma 4: `<|tool_call>call:NAME{key:value,...}<tool_call|>` calls and
`<|channel>thought` ... `<channel|>` reasoning.

The template renders a call's arguments in Gemma's own notation, not JSON:
keys bare (`path:`), strings between `<|"|>` quotes with nothing escaped
inside, numbers, `true` / `false`, nested `{...}` and `[...]` alike, no
spaces. The parser reads that notation and sends the arguments out as JSON
text while they are generated. Leniently, it also reads keys and strings
quoted the JSON way (`"path":"a\\nb"`), keys in `<|"|>` quotes, `None` /
`True` / `False`, and whitespace between items.

Thinking is the template's `enable_thinking` (it puts `<|think|>` in the
system turn); with it off the prompt already holds an empty thought block,
so the model starts with its answer. After its calls the model writes
`<|tool_response>`, an end-of-generation token.

Reasoning and text
- A `<|channel>` ... `<channel|>` block is reasoning, wherever it stands
  (the template strips such blocks anywhere in an answer); the channel name
  `thought` and whitespace just inside the tags are dropped. An unclosed
  block is reasoning to the end; inside it nothing else is parsed.
- Text is delivered verbatim, except that whitespace touching a call or a
  reasoning block is dropped. Several calls are numbered 0, 1, ...

Bad output (never an exception; the toolparse rules, for this notation)
1. A block whose head is not `call:NAME{` with NAME an offered tool, or that
   ends before its `{`: the whole block, with the whitespace before it and
   both tags, is delivered as text.
2. Arguments that break the notation after the call started (a value where a
   key belongs, an unknown `]`), an unclosed call at the end of the output,
   or `<tool_call|>` / `<|tool_call>` before the arguments close: the JSON
   sent so far is cut back to the last point where closing the open string,
   arrays and objects gives a valid object, and closed. What follows in the
   block is dropped.
3. A bare value that is not a number, `true`, `false` or `null` (`None`,
   `True`, `False`) is taken as a string, up to the next `,` `}` or `]`; one
   cut off by the end of the output is taken as it stands.
4. Text after the arguments and before `<tool_call|>` is dropped; a
   `<|tool_call>` there ends this call and starts the next.
5. Output that ends inside a possible marker (`<|tool_ca`): flushed as text.
Whatever the case, the deltas of a call joined equal its `ToolCallEnd`
arguments, and they are a JSON object.

Forced calls write true Gemma notation: the JSON grammar of each tool's
schema, rewritten (bare keys, `<|"|>` strings, no spaces). A string there
may not contain `<|` nor end with `<`.

Longer than about 500 lines: Gemma's notation is a JSON of its own, read
here a character at a time beside the parser's states; apart, neither reads.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Collection
from typing import Any

from ...chat import Event, TextDelta, ThinkingDelta, ToolCallDelta, ToolCallEnd, ToolCallStart
from ...grammar.gbnf import literal
from ...grammar.schema import Notation
from ..parsing.jsonscan import WHITESPACE, JsonOut
from ..parsing.toolparse import StepParser, held
from .base import Family

CALL_OPEN = "<|tool_call>"
CALL_CLOSE = "<tool_call|>"
THOUGHT_OPEN = "<|channel>"
THOUGHT_CLOSE = "<channel|>"
CHANNEL = "thought"
QUOTE = '<|"|>'
HEAD = "call:"

_JSON_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_LOOSE_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_LITERALS = {"true": "true", "false": "false", "null": "null"}
_LITERALS.update({"True": "true", "False": "false", "None": "null"})
_BARE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.$-]*")
_ARGS_MARKERS = (QUOTE, CALL_CLOSE, CALL_OPEN)


def _first(buf: str, markers: tuple[str, ...]) -> tuple[int, str]:
    """The earliest of `markers` in `buf`: (where, which), or (-1, "")."""
    found = [(at, m) for m in markers if (at := buf.find(m)) >= 0]
    return min(found) if found else (-1, "")


def _bare(token: str) -> str | None:
    """A bare value as JSON text (see rule 3); None if it is empty."""
    token = token.strip()
    if not token:
        return None
    if token in _LITERALS:
        return _LITERALS[token]
    if _JSON_NUMBER.fullmatch(token):
        return token
    if _LOOSE_NUMBER.fullmatch(token):
        number = float(token)
        if math.isfinite(number):
            return str(int(number)) if number.is_integer() and "." not in token else repr(number)
    return json.dumps(token, ensure_ascii=False)


class _Args(JsonOut):
    """One call's arguments in Gemma notation, read a character at a time
    and written out as JSON (see JsonOut; toolparse's `CallBlock` keeps the
    same for JSON calls).

    States: open (before the `{`), key, bare_key, colon, value, item (after
    `[`: a value or `]`), bare_value, after (a value ended), gemma_string,
    json_string. `role` says whether an open string is a key or a value."""

    def __init__(self) -> None:
        super().__init__()
        self.state = "open"
        self.stack: list[str] = []
        self.token = ""  # a bare key or value being read
        self.role = ""  # "key" or "value"
        self.escape = False  # in a JSON string, right after a backslash

    def feed(self, buf: str, final: bool) -> int:
        """Reads from `buf`; returns how many characters it used. It stops
        before `<tool_call|>` or `<|tool_call>` outside a string, before what
        may still become a marker (unless `final`), and once the object is
        complete or broken."""
        i = 0
        while i < len(buf) and not self.done and not self.broken:
            if buf.startswith(QUOTE, i):
                self._quote()
                i += len(QUOTE)
                continue
            if buf[i] == "<":
                in_string = self.state == "gemma_string"
                markers = (QUOTE,) if in_string else _ARGS_MARKERS
                if not in_string and buf.startswith((CALL_CLOSE, CALL_OPEN), i):
                    return i
                rest = buf[i:]
                if not final and any(m.startswith(rest) and m != rest for m in markers):
                    return i
            self._char(buf[i])
            i += 1
        return i

    def close(self) -> None:
        """The output ended: a bare value cut off is taken as it stands."""
        if self.state == "bare_value" and not self.broken:
            value = _bare(self.token)
            if value is not None:
                self._emit(value)

    # ---- the notation --------------------------------------------------

    def _quote(self) -> None:
        state = self.state
        if state == "gemma_string":
            self._emit('"')
            self.state = "colon" if self.role == "key" else "after"
        elif state in ("key", "value", "item"):
            self.role = "key" if state == "key" else "value"
            self._emit('"')
            self.state = "gemma_string"
        else:
            self.broken = True

    def _char(self, c: str) -> None:
        state = self.state
        if state == "gemma_string":
            self._emit("\\" + c if c in '"\\' else c)
        elif state == "json_string":
            self._emit(c)
            if self.escape:
                self.escape = False
            elif c == "\\":
                self.escape = True
            elif c == '"':
                self.state = "colon" if self.role == "key" else "after"
        elif state == "bare_key":
            self._bare_key(c)
        elif state == "bare_value":
            self._bare_value(c)
        elif c in WHITESPACE:
            pass
        elif state == "open" and c == "{":
            self._open(c)
        elif state == "key":
            self._key(c)
        elif state == "colon" and c == ":":
            self._emit(c)
            self.state = "value"
        elif state in ("open", "colon"):
            self._break()
        elif state in ("value", "item"):
            self._value(c)
        else:  # after
            self._after(c)

    def _key(self, c: str) -> None:
        if c == "}":
            self._close(c)
        elif c == '"':
            self.role, self.state = "key", "json_string"
            self._emit(c)
        elif c in ",:{}[]":
            self._break()
        else:
            self.token, self.state = c, "bare_key"

    def _bare_key(self, c: str) -> None:
        if c == ":":
            key = self.token.strip()
            if not key:
                self._break()
                return
            self._emit(json.dumps(key, ensure_ascii=False) + ":")
            self.state = "value"
        elif c in ',{}[]"':
            self._break()
        else:
            self.token += c

    def _value(self, c: str) -> None:
        if c in "{[":
            self._open(c)
        elif c == "]" and self.state == "item":
            self._close(c)
        elif c == '"':
            self.role, self.state = "value", "json_string"
            self._emit(c)
        elif c in ",:}]":
            self._break()
        else:
            self.token, self.state = c, "bare_value"

    def _bare_value(self, c: str) -> None:
        if c not in ",}]":
            self.token += c
            return
        value = _bare(self.token)
        if value is None:
            self._break()
            return
        self._emit(value)
        self.state = "after"
        self._after(c)

    def _after(self, c: str) -> None:
        if c == ",":
            self._emit(c)
            self.state = "key" if self.stack[-1] == "{" else "value"
        elif c in "}]":
            self._close(c)
        else:
            self._break()

    def _open(self, c: str) -> None:
        self.stack.append(c)
        self._emit(c)
        self.state = "key" if c == "{" else "item"

    def _close(self, c: str) -> None:
        if not self.stack or c != ("}" if self.stack[-1] == "{" else "]"):
            self._break()
            return
        self.stack.pop()
        self._emit(c)
        self.state = "after"

    def _break(self) -> None:
        self.broken = True


class Gemma4Parser(StepParser):
    """Gemma 4 calls and thought channels (family "gemma4")."""

    def __init__(
        self, *, tools: Collection[str], thinking: bool, new_id: Callable[[], str]
    ) -> None:
        # configuration
        self._tools = frozenset(tools)
        self._new_id = new_id
        # state
        self._mode = "think" if thinking else "text"
        self._buf = ""
        self._lead = True  # nothing but whitespace seen in this reasoning block yet
        self._raw: list[str] = []  # a block not started as a call, for the text fallback
        self._args: _Args | None = None
        self._index = -1  # the open call's index
        self._calls = 0
        self._steps: dict[str, Callable[[list[Event], bool], bool]] = {
            "text": self._text,
            "channel": self._channel,
            "think": self._think,
            "gap": self._gap,
            "head": self._head,
            "skip": self._skip,
            "args": self._arguments,
            "tail": self._tail,
        }

    def _text(self, out: list[Event], final: bool) -> bool:
        buf = self._buf
        at, marker = _first(buf, (CALL_OPEN, THOUGHT_OPEN))
        if at >= 0:
            before = buf[:at]
            text = before.rstrip()
            if text:
                out.append(TextDelta(text))
            self._buf = buf[at + len(marker) :]
            if marker == CALL_OPEN:
                self._raw, self._mode = [before[len(text) :], CALL_OPEN], "head"
            else:
                self._lead, self._mode = True, "channel"
            return True
        keep = 0 if final else held(buf, (CALL_OPEN, THOUGHT_OPEN), whitespace=True)
        if len(buf) > keep:
            out.append(TextDelta(buf[: len(buf) - keep]))
        self._buf = buf[len(buf) - keep :]
        return False

    def _channel(self, out: list[Event], final: bool) -> bool:
        buf = self._buf
        if buf.startswith(CHANNEL):
            self._buf = buf[len(CHANNEL) :]
        elif CHANNEL.startswith(buf) and not final:
            return False
        self._mode = "think"
        return True

    def _think(self, out: list[Event], final: bool) -> bool:
        buf = self._buf
        end = buf.find(THOUGHT_CLOSE)
        if end >= 0:
            self._reason(out, buf[:end].rstrip())
            self._buf, self._mode = buf[end + len(THOUGHT_CLOSE) :], "gap"
            return True
        keep = 0 if final else held(buf, (THOUGHT_CLOSE,), whitespace=True)
        self._reason(out, buf[: len(buf) - keep].rstrip() if final else buf[: len(buf) - keep])
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

    def _head(self, out: list[Event], final: bool) -> bool:
        """After `<|tool_call>`: `call:NAME` up to the `{`."""
        buf = self._buf
        brace = buf.find("{")
        stop, _ = _first(buf, (CALL_CLOSE, CALL_OPEN))
        if stop >= 0 and (brace < 0 or stop < brace):
            self._mode = "skip"
            return True
        if brace < 0:
            if final:
                self._mode = "skip"
                return True
            return False
        head = buf[:brace].strip()
        name = head[len(HEAD) :].strip() if head.startswith(HEAD) else ""
        if name not in self._tools:
            self._mode = "skip"
            return True
        self._index, self._calls = self._calls, self._calls + 1
        out.append(ToolCallStart(self._index, self._new_id(), name))
        self._args, self._buf, self._mode = _Args(), buf[brace:], "args"
        return True

    def _skip(self, out: list[Event], final: bool) -> bool:
        """A block that is not a call: text, up to and with its end."""
        buf = self._buf
        at, marker = _first(buf, (CALL_CLOSE, CALL_OPEN))
        if at >= 0:
            end = at + len(marker) if marker == CALL_CLOSE else at
            out.append(TextDelta("".join(self._raw) + buf[:end]))
            self._buf, self._mode = buf[end:], "text"
            return True
        if final:
            out.append(TextDelta("".join(self._raw) + buf))
            self._buf = ""
        return False

    def _arguments(self, out: list[Event], final: bool) -> bool:
        args = self._args
        assert args is not None
        used = args.feed(self._buf, final)
        self._buf = self._buf[used:]
        self._stream(out)
        if args.done or args.broken or self._buf.startswith((CALL_CLOSE, CALL_OPEN)):
            self._mode = "tail"
            return True
        if final:
            self._end(out)
        return False

    def _tail(self, out: list[Event], final: bool) -> bool:
        """After the arguments: up to `<tool_call|>`, or the next call."""
        buf = self._buf
        at, marker = _first(buf, (CALL_CLOSE, CALL_OPEN))
        if at >= 0:
            self._end(out)
            if marker == CALL_CLOSE:
                self._buf, self._mode = buf[at + len(CALL_CLOSE) :], "gap"
            else:
                self._buf, self._mode = buf[at + len(CALL_OPEN) :], "head"
                self._raw = [CALL_OPEN]
            return True
        if final:
            self._end(out)
            return False
        keep = held(buf, (CALL_CLOSE, CALL_OPEN), whitespace=False)
        self._buf = buf[len(buf) - keep :]
        return False

    def _stream(self, out: list[Event]) -> None:
        assert self._args is not None
        piece = self._args.unsent()
        if piece:
            out.append(ToolCallDelta(self._index, piece))

    def _end(self, out: list[Event]) -> None:
        args = self._args
        assert args is not None
        args.close()
        whole, last = args.arguments()
        if last:
            out.append(ToolCallDelta(self._index, last))
        out.append(ToolCallEnd(self._index, whole))
        self._args = None
        self._mode = "gap"


# ---- forced calls ------------------------------------------------------------


def _key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else QUOTE + key + QUOTE


def _notation(value: Any) -> str:
    """A JSON value in Gemma notation, as the template's format_argument."""
    if isinstance(value, str):
        return QUOTE + value + QUOTE
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_notation(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_notation(v) for v in value) + "]"
    return json.dumps(value)


# Strings between <|"|> quotes (a character: anything but the start of
# `<|"|>`, that is `<|`), bare keys, no spaces.
NOTATION = Notation(quote=QUOTE, char='[^<] | "<"+ [^|<]', space='""', key=_key, constant=_notation)


def call_rules(names: list[str], roots: list[str], rules: dict[str, str]) -> None:
    """<|tool_call>call:NAME{key:VALUE,...}<tool_call|>, the arguments'
    rules written in Gemma notation (NOTATION)."""
    for i, (name, root) in enumerate(zip(names, roots, strict=True)):
        rules[f"call-{i}"] = literal(name) + " " + root
    alternatives = " | ".join(f"call-{i}" for i in range(len(names)))
    rules["call"] = f"{literal(CALL_OPEN + HEAD)} ({alternatives}) {literal(CALL_CLOSE)}"


FAMILY = Family(
    name="gemma4",
    markers=(CALL_OPEN, CALL_CLOSE, QUOTE),
    parser=Gemma4Parser,
    call_rules=call_rules,
    priority=80,
    reasoning_end=THOUGHT_CLOSE,
    notation=NOTATION,
)
