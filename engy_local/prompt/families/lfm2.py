"""LFM2 / LFM2.5 (Liquid AI): Pythonic calls between special tokens.

    <|tool_call_start|>[get_weather(city="Paris", days=3), Bash(command="ls")]<|tool_call_end|>

possibly followed by text; LFM2.5's thinking models reason first in
`<think>` ... `</think>`. Tool results are `tool` messages, which the
templates render (LFM2-8B wraps them in `<|tool_response_start|>` ...).

The templates list the tools themselves (`List of tools: [...]` JSON at
the end of the system prompt, LFM2-8B's between `<|tool_list_start|>` and
`<|tool_list_end|>`), but two of the three render no assistant tool calls
(LFM2.5-8B's writes them with unescaped quotes), so `as_text` writes
earlier calls in the model's own syntax in the assistant's content
(strings JSON-quoted, `True` / `False` / `None`, numbers as they came);
results are left to the template.

Rules (beyond toolparse's reasoning rules)
- Text is delivered verbatim, except the whitespace touching a call
  section. `<|tool_call_start|>` opens a section: a list of calls (the
  brackets may be missing), `NAME(key=value, ...)` each, separated by `,`.
- Values are Python literals: strings in either quote, triple-quoted too,
  with Python's escapes; numbers (hex and `_` too); `True` / `False` /
  `None` (or JSON's words); lists, tuples and dicts, trailing commas
  allowed. A call starts at its `(` when NAME is offered; its arguments
  stream out as a JSON object, strings as they are generated, other
  values once whole.
- A name that is not offered, or a section that breaks before a call
  started: the text read so far, markers and all, is text, and the rest
  is read again as text.
- A bare value that is not a number or one of the words is a string.
  Arguments that break after the call started (a positional argument, a
  nested call), or a marker inside them: the JSON sent is cut back to the
  last point where it can be closed, and closed; the rest of the section
  up to `<|tool_call_end|>` is dropped (a `<|tool_call_start|>` there opens
  the next one). Output that ends inside a call closes it.
- After `]`, `<|tool_call_end|>` is expected; anything else is text.
JSON calls (which Liquid offers when the system prompt asks for them) are
not read: they come out as text.

Forced calls write the call as the model does: keyword arguments in the
schema's order (required first, then any of the optional ones), values
in JSON's notation with Python's words.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Sequence
from typing import Any

from ...chat import (
    Event,
    Message,
    Part,
    Text,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolSpec,
)
from ...grammar.gbnf import literal
from ...grammar.schema import JSON_CHAR, Notation, root_schema, value_rules
from ..parsing.jsonscan import WHITESPACE
from ..parsing.pyargs import MAX_NAME, STOPS, Arguments
from ..parsing.toolparse import PlainParser, held
from ..render.messages import PARAGRAPH
from .base import Family

START = "<|tool_call_start|>"
END = "<|tool_call_end|>"
_MARKERS = (START, END)


class Lfm2Parser(PlainParser):
    """LFM2 Pythonic call lists and `<think>` reasoning (family "lfm2")."""

    parses_calls = True

    def __init__(
        self, *, tools: Collection[str], thinking: bool, new_id: Callable[[], str]
    ) -> None:
        super().__init__(tools=tools, thinking=thinking, new_id=new_id)
        self._raw: list[str] = []  # the section read so far, for the text fallback
        self._name = ""  # the call name being read
        self._args: Arguments | None = None
        self._index = -1  # the open call's index
        self._steps.update(
            open=self._open,
            name=self._read_name,
            args=self._arguments,
            next=self._next,
            tail=self._tail,
            skip=self._skip,
        )

    def _text(self, out: list[Event], final: bool) -> bool:
        buf = self._buf
        at = buf.find(START)
        if at >= 0:
            before = buf[:at]
            text = before.rstrip()
            if text:
                out.append(TextDelta(text))
            self._raw = [before[len(text) :], START]
            self._buf, self._mode = buf[at + len(START) :], "open"
            return True
        keep = 0 if final else held(buf, (START,), whitespace=True)
        if len(buf) > keep:
            out.append(TextDelta(buf[: len(buf) - keep]))
        self._buf = buf[len(buf) - keep :]
        return False

    def _open(self, out: list[Event], final: bool) -> bool:
        """After `<|tool_call_start|>`: whitespace, then `[` (or a name)."""
        buf = self._buf
        rest = buf.lstrip()
        self._raw.append(buf[: len(buf) - len(rest)])
        self._buf, self._name = rest, ""
        if rest.startswith("["):
            self._raw.append("[")
            self._buf = rest[1:]
        elif not rest:
            return self._not_a_call(out) if final else False
        self._mode = "name"
        return True

    def _read_name(self, out: list[Event], final: bool) -> bool:
        buf = self._buf
        for i, c in enumerate(buf):
            if c == "(" and self._name.strip() in self._tools:
                self._index, self._calls = self._calls, self._calls + 1
                out.append(ToolCallStart(self._index, self._new_id(), self._name.strip()))
                self._args, self._raw = Arguments(_MARKERS), []
                self._buf, self._mode = buf[i + 1 :], "args"
                return True
            lead = c in WHITESPACE and not self._name.strip()
            if not lead and (c in STOPS or len(self._name) >= MAX_NAME):
                self._buf = buf[i:]
                return self._not_a_call(out)
            self._name += c
        self._buf = ""
        return self._not_a_call(out) if final else False

    def _not_a_call(self, out: list[Event]) -> bool:
        """What was read of the section is text; the rest is read again."""
        name = self._name if self._raw else self._name.lstrip()  # no call yet, or after one
        text = "".join(self._raw) + name
        if text:
            out.append(TextDelta(text))
        self._raw, self._name, self._mode = [], "", "text"
        return True

    def _arguments(self, out: list[Event], final: bool) -> bool:
        args = self._args
        assert args is not None
        used = args.feed(self._buf, final)
        self._buf = self._buf[used:]
        self._send(out)
        if args.done:
            self._end(out, "next")
            return True
        if args.broken or self._buf.startswith(_MARKERS) or final:
            self._end(out, "skip")
            return True
        return False

    def _next(self, out: list[Event], final: bool) -> bool:
        """After a call: `,` and the next, `]`, or the section's end."""
        buf = self._buf = self._buf.lstrip()
        if buf.startswith(","):
            self._buf, self._mode, self._name = buf[1:], "name", ""
        elif buf.startswith("]"):
            self._buf, self._mode = buf[1:], "tail"
        elif buf:
            self._mode = "skip"  # the end marker, or what ends the calls
        return bool(buf)

    def _tail(self, out: list[Event], final: bool) -> bool:
        """After `]`: the end marker; without it, what follows is text."""
        buf = self._buf.lstrip()
        if buf.startswith(END):
            self._buf, self._mode = buf[len(END) :], "gap"
            return True
        if not final and END.startswith(buf):
            self._buf = buf
            return False
        self._buf, self._mode = buf, "gap"
        return True

    def _skip(self, out: list[Event], final: bool) -> bool:
        """The rest of a section whose calls ended: dropped up to its end."""
        buf = self._buf
        ends = [(at, m) for m in _MARKERS if (at := buf.find(m)) >= 0]
        if ends:
            at, marker = min(ends)
            self._buf = buf[at + len(marker) :]
            self._mode = "gap" if marker == END else "open"
            self._raw = [START]
            return True
        self._buf = "" if final else buf[len(buf) - held(buf, _MARKERS, whitespace=False) :]
        return False

    def _send(self, out: list[Event]) -> None:
        assert self._args is not None
        piece = self._args.unsent()
        if piece:
            out.append(ToolCallDelta(self._index, piece))

    def _end(self, out: list[Event], mode: str) -> None:
        args = self._args
        assert args is not None
        args.close()
        whole, last = args.arguments()
        if last:
            out.append(ToolCallDelta(self._index, last))
        out.append(ToolCallEnd(self._index, whole))
        self._args, self._mode = None, mode


# ---- the conversation as text ------------------------------------------------


class _Number(str):
    """A JSON number as it was written."""


def python(value: Any) -> str:
    """A JSON value as a Python literal (strings JSON-quoted, which Python
    reads the same)."""
    if isinstance(value, _Number):
        return str(value)
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, dict):
        items = (f"{json.dumps(str(k), ensure_ascii=False)}: {python(v)}" for k, v in value.items())
        return "{" + ", ".join(items) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(python(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def call_text(call: ToolCall) -> str:
    """One call in the model's syntax: `NAME(key=value, ...)`."""
    try:
        args = json.loads(call.arguments, parse_int=_Number, parse_float=_Number)
    except ValueError:
        args = {}
    pairs = args.items() if isinstance(args, dict) else ()
    return f"{call.name}({', '.join(f'{k}={python(v)}' for k, v in pairs)})"


def calls_text(calls: Sequence[ToolCall]) -> str:
    return START + "[" + ", ".join(map(call_text, calls)) + "]" + END


def as_text(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> list[Message]:
    """`messages` with each assistant turn's calls in its text (the
    template lists the tools)."""
    return [_calls_in_text(m) if m.role == "assistant" else m for m in messages]


def _calls_in_text(message: Message) -> Message:
    """One text: the turn's texts and its calls in order, each run of calls
    one list, written right against the text as the model writes it."""
    if not any(isinstance(p, ToolCall) for p in message.parts):
        return message
    pieces: list[str] = []
    calls: list[ToolCall] = []
    others: list[Part] = []  # reasoning, for the template
    after_text = False
    for part in [*message.parts, None]:
        if isinstance(part, ToolCall):
            calls.append(part)
            continue
        if calls:
            pieces.append(calls_text(calls))
            calls, after_text = [], False
        if isinstance(part, Text):
            if part.text:
                pieces.append((PARAGRAPH if after_text else "") + part.text)
                after_text = True
        elif part is not None:
            others.append(part)
    return Message(message.role, (*others, Text("".join(pieces))))


# ---- forced calls ------------------------------------------------------------

NOTATION = Notation(quote='"', char=JSON_CHAR, space='" "?', key=json.dumps, constant=python)
# schema.py writes JSON's words for booleans and null; the model writes Python's.
_JSON_WORDS = re.compile(r'(?<![^\s(|])"(true|false|null)"(?![^\s)|])')


def tool_rules(tools: list[ToolSpec], rules: dict[str, str]) -> None:
    """<|tool_call_start|>[NAME(key=VALUE, ...)]<|tool_call_end|>: the
    schema's properties in its order, required first, then any of the
    optional ones; a schema without properties takes any keywords."""
    own: dict[str, str] = {}
    sep = literal(", ")
    for i, tool in enumerate(tools):
        schema = root_schema(tool.parameters)
        props: dict[str, Any] | None = schema.get("properties")
        defs = {k: schema[k] for k in ("$defs", "definitions") if k in schema}
        if props is None:
            value = value_rules({}, f"t{i}-any-", own, NOTATION)
            pair = f'[A-Za-z_] [A-Za-z0-9_]* "=" {value}'
            body = f"({pair} ({sep} {pair})*)?"
        else:
            needed = set(schema.get("required") or ())
            pairs = {
                key: f"{literal(key + '=')} "
                + value_rules({**sub, **defs}, f"t{i}-p{j}-", own, NOTATION)
                for j, (key, sub) in enumerate(props.items())
            }
            first = [pairs[k] for k in props if k in needed]
            optional = [pairs[k] for k in props if k not in needed]
            # rest-j: any of the optional pairs from j on, each after a comma
            for j in reversed(range(len(optional))):
                after = f" t{i}-rest{j + 1}" if j + 1 < len(optional) else ""
                own[f"t{i}-rest{j}"] = f"({sep} {optional[j]})?{after}"
            body = f" {sep} ".join(first)
            if optional and first:
                body += f" t{i}-rest0"
            elif optional:
                starts = (
                    p + (f" t{i}-rest{j + 1}" if j + 1 < len(optional) else "")
                    for j, p in enumerate(optional)
                )
                body = f"({' | '.join(starts)})?"
        parts = [literal(tool.name + "("), body, literal(")")]
        own[f"call-{i}"] = " ".join(p for p in parts if p)
    for name, body in own.items():
        rules[name] = _JSON_WORDS.sub(lambda m: literal(_WORDS_BACK[m.group(1)]), body)
    alternatives = " | ".join(f"call-{i}" for i in range(len(tools)))
    rules["call"] = f"{literal(START + '[')} ({alternatives}) {literal(']' + END)}"


_WORDS_BACK = {"true": "True", "false": "False", "null": "None"}

FAMILY = Family(
    name="lfm2",
    markers=("List of tools: ", "<|im_start|>"),
    parser=Lfm2Parser,
    tool_rules=tool_rules,
    tools_as_text=as_text,
    template_lists_tools=True,
)
