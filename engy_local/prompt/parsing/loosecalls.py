"""Calls written outside the family's syntax, read as calls: the forms
small tool-trained models write under tool_choice auto instead of their
template's markers,

    ```json\\n{"name": "get_weather", "arguments": {"city": "Paris"}}\\n```
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    [{"name": "a", "arguments": {}}, {"name": "b", "parameters": {}}]

A JSON object (or a list of them) is a call when its "name" is an offered
tool's and it stands bare or in a ```json fence. One naming a tool that was
not offered is text. A "name" that cannot be a tool's at all (a command,
`"name": "echo hi > a.txt"`: small models write what they mean to do there)
is a call where its arguments fit one offered tool and no other, else text
as written. Anything else stays text.

Given a `tagged` parser (Qwen3-Coder's, from prepare.py: this package
knows no family), a call in Qwen3-Coder's tags to an offered tool is a
call too, the block's tags around it or not: Qwen2.5-Coder writes these
after Qwen Code's prompt, whose examples show them,

    <function=write_file>\n<parameter=file_path>\na.txt\n</parameter>\n</function>

and one whose body is a JSON object takes that as its arguments (Llama
3.1's `<function=NAME>{...}</function>`). It is read whole once its
`</function>` comes (a `</tool_call>` right after it goes with it), or at
the end of the output.
`LooseCallParser` wraps a family's parser and reads these in the text that
parser passes on: text that may still open such a call is held back until
the name decides; a call's arguments come out whole once its object is
complete (under the call grammar, autocall.py, it always completes); one
cut short by the token limit is a call with its arguments repaired
(jsonscan.repair_object), its name being already known. Calls the family
parser reads are passed on, numbered with these in one sequence.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Mapping
from typing import Any

from ...chat import Event, TextDelta, ToolCallDelta, ToolCallEnd, ToolCallStart
from .jsonscan import repair_object
from .toolparse import ParserFactory, ToolParser, merged

_FENCE = re.compile(r"```(?:json|JSON)?")
_HEAD = re.compile(r'(```(?:json|JSON)?\s*)?(\[\s*)?\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"')
_HELD = 256  # a candidate longer than this that has not opened a call is text
# The characters a tool's name has, as written ("." is one's spelling,
# math.factorial), as a character class's body (regex and GBNF alike); a
# "name" holding another is no tool's. The call grammar's stray rule
# (autocall.py) is built from the same.
NAME_CHARS = "A-Za-z0-9_.-"
_NO_NAME = re.compile(f"[^{NAME_CHARS}]")
_STRAY_HELD = 64 * 1024  # a stray call not closed within this is text
# A call in Qwen3-Coder's tags, outside its block: its head, its end, and
# the block's close that may follow it.
_TAG_OPEN = "<function="
_TAG_HEAD = re.compile(f"<function=([{NAME_CHARS}]{{1,{_HELD}}})>")
_TAG_CLOSE = "</function>"
_BLOCK_OPEN = re.compile(r"<tool_call>\s*\Z")  # just before the head: part of the call
_BLOCK_CLOSE = "</tool_call>"


def _could_open(text: str) -> bool:
    """Whether `text`, which does not match _HEAD, is a start of a head
    that more text may complete (a call's, once its name is known)."""
    if len(text) > _HELD:
        return False
    rest = text
    for step in ("```", "json", "[", "{", '"name"', ":", '"'):
        if step in ("```", "json", "["):  # optional
            word = "JSON" if step == "json" and rest[:1] == "J" else step
            if step == "json" and text[:1] != "`":
                continue
            if not rest.startswith(word[:1]):
                continue
        else:
            word = step
        if len(rest) < len(word):
            return word.startswith(rest)
        if not rest.startswith(word):
            return False
        rest = rest[len(word) :].lstrip()
        if not rest:
            return True
    # inside the name: held until it closes (an offered tool's, a name no
    # tool can have, read by its arguments, or text)
    return True


def _could_open_tag(text: str) -> bool:
    """Whether `text`, which does not match _TAG_HEAD, may become a head."""
    if len(text) < len(_TAG_OPEN):
        return _TAG_OPEN.startswith(text)
    name = text[len(_TAG_OPEN) :]
    return text.startswith(_TAG_OPEN) and len(name) <= _HELD and not _NO_NAME.search(name)


def spellings(name: str) -> list[str]:
    """`name` and the spellings a model may write for it: a tool offered as
    `math_factorial` whose description or question says `math.factorial`
    (one "_" written as "."). At most 8."""
    out = [name]
    for i, c in enumerate(name):
        if c == "_" and 0 < i < len(name) - 1 and len(out) < 8:
            out.append(f"{name[:i]}.{name[i + 1 :]}")
    return out


class LooseCallParser:
    def __init__(
        self,
        inner: ToolParser,
        tools: Mapping[str, Any] | Collection[str],
        new_id: Callable[[], str],
        tagged: ParserFactory | None = None,
    ) -> None:
        """`tools`: the offered names, or a mapping of them to their
        parameters' schemas (without schemas no call is read by its
        arguments). `tagged`: the parser of Qwen3-Coder's tags (None: they
        are text)."""
        # configuration
        self._inner = inner
        self._tools = {spelled: name for name in tools for spelled in spellings(name)}
        schemas = tools if isinstance(tools, Mapping) else {}
        self._params = {name: _parameters(schema) for name, schema in schemas.items()}
        self._new_id = new_id
        self._tagged = tagged
        self._offered: Mapping[str, Any] | Collection[str] = (
            dict(schemas) if schemas else list(tools)
        )
        # state
        self._buf = ""  # text the family parser passed on, not yet handled
        self._call = ""  # a loose call's text from its head on ("" outside one)
        self._name = ""  # the first call's name, from its head
        self._stray = False  # the call read names no tool: decided when complete
        self._tag = False  # the call read is in Qwen3-Coder's tags
        self._gap = ""  # the whitespace before it, text again if it is not a call
        self._after = False  # just after a call: whitespace is dropped
        # Of the loose call being read: values already out (each goes out once
        # complete, so a model looping on calls is seen, assemble.py), and
        # where in `_call` the text after them starts.
        self._emitted = 0
        self._resume = 0
        self._next = 0  # the next call's index
        self._theirs: dict[int, int] = {}  # the family parser's call index -> ours

    def feed(self, text: str) -> list[Event]:
        return self._events(self._inner.feed(text), final=False)

    def finish(self) -> list[Event]:
        return self._events(self._inner.finish(), final=True)

    def _events(self, events: list[Event], final: bool) -> list[Event]:
        out: list[Event] = []
        for event in events:
            if isinstance(event, TextDelta):
                self._buf += event.text
                self._scan(out, final=False)
                continue
            if isinstance(event, (ToolCallStart, ToolCallDelta, ToolCallEnd)):
                self._flush(out)
                event = self._renumbered(event)
            out.append(event)
        if final:
            self._scan(out, final=True)
            if self._call:
                self._cut(out)
            self._flush(out)
        return merged(out)

    def _renumbered(self, event: ToolCallStart | ToolCallDelta | ToolCallEnd) -> Event:
        if isinstance(event, ToolCallStart):
            self._theirs[event.index] = self._take()
            name = self._tools.get(event.name, event.name)  # the offered spelling
            return ToolCallStart(self._theirs[event.index], event.id, name)
        index = self._theirs.get(event.index, event.index)
        if isinstance(event, ToolCallDelta):
            return ToolCallDelta(index, event.arguments)
        return ToolCallEnd(index, event.arguments)

    def _take(self) -> int:
        self._next += 1
        return self._next - 1

    def _flush(self, out: list[Event]) -> None:
        """Text held back goes out as it is (a family call comes next)."""
        if self._call:
            self._buf, self._call = self._call[self._resume :] + self._buf, ""
            self._emitted = self._resume = 0
            self._tag = False
        if self._buf:
            out.append(TextDelta(self._buf))
        self._buf = ""

    # -- text ---------------------------------------------------------------

    def _scan(self, out: list[Event], final: bool) -> None:
        while True:
            if self._call:
                self._call += self._buf
                self._buf = ""
                if not self._read_call(out, final):
                    return
                continue
            if self._after:
                self._buf = self._buf.lstrip()
                self._after = not self._buf
            start, hold = self._find(self._buf, final)
            if start < 0:
                keep = hold if hold >= 0 else len(self._buf)
                if keep:
                    out.append(TextDelta(self._buf[:keep]))
                self._buf = self._buf[keep:]
                return
            before = self._buf[:start].rstrip()
            if before:
                out.append(TextDelta(before))
            self._gap = self._buf[len(before) : start]
            self._call, self._buf = self._buf[start:], ""

    def _find(self, buf: str, final: bool) -> tuple[int, int]:
        """(where a call to an offered tool opens in `buf`, -1: none; where
        to hold back from when none does, -1: nothing held)."""
        at = 0
        marks = "`{[<" if self._tagged is not None else "`{["
        while True:
            found = [i for i in (buf.find(m, at) for m in marks) if i >= 0]
            if not found:
                return -1, -1
            i = min(found)
            if buf[i] == "<":
                tag = _TAG_HEAD.match(buf, i)
                name = self._tools.get(tag[1]) if tag is not None else None
                if name is not None:
                    self._name, self._stray, self._tag = name, False, True
                    block = _BLOCK_OPEN.search(buf, 0, i)
                    return (block.start() if block else i), -1
                if tag is None and not final and _could_open_tag(buf[i:]):
                    return -1, len(buf[:i].rstrip())
                at = i + 1
                continue
            head = _HEAD.match(buf, i)
            if head is not None:
                written = _decoded(head[3]) or ""
                name = self._tools.get(written)
                if name is not None or (self._params and _NO_NAME.search(written)):
                    self._name, self._stray = name or "", name is None
                    return i, -1
            elif not final and _could_open(buf[i:]):
                return -1, len(buf[:i].rstrip())  # and the whitespace before it
            at = i + 1

    # -- a call -------------------------------------------------------------

    def _read_call(self, out: list[Event], final: bool) -> bool:
        """Reads the loose call in `_call` when it is complete: its calls go
        out, what follows is text again. False while more may complete it
        (`final`: nothing more comes)."""
        if self._tag:
            return self._read_tagged(out, final)
        text = self._call
        if self._stray and len(text) > _STRAY_HELD:
            self._unstray(out)
            return True
        fence = _FENCE.match(text)
        at = fence.end() if fence else 0
        decoder = json.JSONDecoder(strict=False)  # raw newlines in strings: code
        values: list[Any] = []
        while True:
            at = _skip_space(text, at)
            if values and not fence and text.startswith(";", at):  # {...};{...}
                at = _skip_space(text, at + 1)
            if fence and text.startswith("```", at):
                at += 3
                break
            if at >= len(text) or (fence and "```".startswith(text[at:])):
                if final and values:
                    break
                return False  # more to come: a call, the closing fence
            if text[at] not in "{[":
                break
            try:
                value, at = decoder.raw_decode(text, at)
            except json.JSONDecodeError:
                return False
            values.append(value)
            if self._stray:  # the first value decides: a call, or the text as written
                first = value[0] if isinstance(value, list) and value else value
                if self._resolve(first) is None:
                    self._unstray(out)
                    return True
                self._stray = False
            if len(values) > self._emitted:
                for call in value if isinstance(value, list) else [value]:
                    self._emit(out, call)
                self._emitted, self._resume = len(values), at
        self._call, self._buf, self._after = "", text[at:], True
        self._emitted = self._resume = 0
        return True

    def _read_tagged(self, out: list[Event], final: bool) -> bool:
        """Reads the tagged call in `_call` once its close tag (and a block
        close right after it) has come, or at the end of the output."""
        text = self._call
        end = _tag_end(text)
        closed = end >= 0
        if not closed:
            if not final:
                return False
            end = after = len(text)
        else:
            after = end + len(_TAG_CLOSE)
            rest = text[after:].lstrip()
            if rest.startswith(_BLOCK_CLOSE):
                after = len(text) - len(rest) + len(_BLOCK_CLOSE)
            elif not final and _BLOCK_CLOSE.startswith(rest):
                return False  # may still be the block's close
        self._emit_tagged(out, text[:end], closed)
        self._call, self._buf, self._after, self._tag = "", text[after:], True, False
        return True

    def _emit_tagged(self, out: list[Event], text: str, closed: bool) -> None:
        """One call from its tags (`<function=NAME>` up to, not with, its
        close tag; `closed`: it had one), read by the tagged parser under
        the offered name."""
        head = _TAG_HEAD.search(text)
        assert head is not None and self._tagged is not None
        body = text[head.end() :].strip()
        if body.startswith("{"):  # Llama 3.1's form: the arguments as JSON
            arguments = _object(repair_object(body))
        else:  # the ids are ours (_emit)
            parser = self._tagged(tools=self._offered, thinking=False, new_id=lambda: "")
            block = f"<tool_call>\n<function={self._name}>{text[head.end() :]}"
            block += _TAG_CLOSE if closed else ""  # cut short: a value runs to the end
            events = parser.feed(block) + parser.finish()
            ends = [e.arguments for e in events if isinstance(e, ToolCallEnd)]
            arguments = _object(ends[0]) if ends else {}
        self._emit(out, {"name": self._name, "arguments": arguments})

    def _unstray(self, out: list[Event]) -> None:
        """The stray call being read is no call: its text goes out as written,
        up to the end of its name (what follows may open a call)."""
        text, self._call, self._stray = self._call, "", False
        head = _HEAD.match(text)
        cut = head.end() if head else len(text)
        out.append(TextDelta(self._gap + text[:cut]))
        self._buf = text[cut:] + self._buf
        self._emitted = self._resume = 0

    def _resolve(self, call: Any) -> str | None:
        """The offered tool `call` (a decoded object) calls: by its name, or,
        where that name can be no tool's, by arguments that fit one tool."""
        written = call.get("name") if isinstance(call, dict) else None
        if not isinstance(written, str):
            return None
        if written in self._tools or not _NO_NAME.search(written):
            return self._tools.get(written)
        arguments = call.get("arguments", call.get("parameters"))
        if not isinstance(arguments, dict) or not arguments:
            return None
        keys = set(arguments)
        fits = [
            name
            for name, (known, required) in self._params.items()
            if keys <= known and required <= keys
        ]
        return fits[0] if len(fits) == 1 else None

    def _emit(self, out: list[Event], call: Any) -> None:
        name = self._resolve(call)
        if name is None:
            out.append(TextDelta(json.dumps(call, ensure_ascii=False)))
            return
        arguments = call.get("arguments", call.get("parameters"))
        if isinstance(arguments, str):
            arguments = _object(repair_object(arguments))
        text = json.dumps(arguments if isinstance(arguments, dict) else {}, ensure_ascii=False)
        index = self._take()
        out += [
            ToolCallStart(index, self._new_id(), name),
            ToolCallDelta(index, text),
            ToolCallEnd(index, text),
        ]

    def _cut(self, out: list[Event]) -> None:
        """A call the token limit cut short: its name is known (the head
        named an offered tool), its arguments are repaired; a stray one is
        text."""
        if self._stray:
            self._unstray(out)  # the rest goes out with the text held (_flush)
            return
        start = self._call.find("{", self._resume)
        if start >= 0:
            whole = _object(repair_object(self._call[start:]))
            # After calls already out, the cut one's name is what it wrote
            # (it may be cut too: then it is dropped, no call markup as text).
            name = whole.get("name") if self._emitted else self._name
            arguments = whole.get("arguments", whole.get("parameters"))
            if not self._emitted or (isinstance(name, str) and name in self._tools):
                self._emit(out, {"name": name, "arguments": arguments})
        self._call = ""
        self._emitted = self._resume = 0


def _tag_end(text: str) -> int:
    """Where the tagged call in `text` closes (-1: not yet): at a
    `</function>` outside a value (a file's text may hold one)."""
    at = text.find(_TAG_CLOSE)
    while at >= 0 and text.count("<parameter=", 0, at) > text.count("</parameter>", 0, at):
        at = text.find(_TAG_CLOSE, at + 1)
    return at


def _parameters(schema: Any) -> tuple[set[str], set[str]]:
    """A parameters schema's property names and required names."""
    if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
        return set(), set()
    required = schema.get("required")
    names = {r for r in required if isinstance(r, str)} if isinstance(required, list) else set()
    return set(schema["properties"]), names


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at] in " \t\r\n":
        at += 1
    return at


def _decoded(literal: str) -> str | None:
    try:
        value = json.loads(f'"{literal}"')
    except ValueError:
        return None
    return value if isinstance(value, str) else None


def _object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
