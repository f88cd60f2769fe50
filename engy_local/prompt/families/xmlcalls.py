"""Tool calls written as tags, one tag per parameter: the shared parser and
grammar of the families qwen3_coder, glm and minimax_m2 (they differ only in
their tags, `XmlFormat`).

    Qwen3-Coder  <tool_call>\\n<function=NAME>\\n<parameter=KEY>\\nVALUE\\n</parameter>\\n
                 </function>\\n</tool_call>
    GLM 4.6      <tool_call>NAME\\n<arg_key>KEY</arg_key>\\n<arg_value>VALUE</arg_value>\\n
                 </tool_call>
    MiniMax M2   <minimax:tool_call>\\n<invoke name="NAME">\\n<parameter name="KEY">VALUE
                 </parameter>\\n</invoke>\\n</minimax:tool_call>

A block (`<tool_call>`, `<minimax:tool_call>`) holds one call (GLM) or any
number (Qwen3-Coder, MiniMax). Reasoning and text are read as in
`toolparse.PlainParser`; whitespace touching a call is dropped.

Values and the arguments' JSON
- The templates write a string value as it is and any other value as JSON
  (Qwen3-Coder writes booleans and None the Python way: `True`, `None`). So
  a value is typed by the tool's schema, which the parser gets when `tools`
  is a mapping of names to parameters schemas:
    string   the parameter's schema says "string" and nothing else (or an
             enum / const of strings): a JSON string, streamed piece by
             piece as it is generated;
    other    any other type, several types, no schema, an unknown key: held
             while it can still be one JSON value (or `True` / `False` /
             `None`, sent as true / false / null) and sent as that JSON when
             it ends; its close tag counts only where the JSON is complete, so
             a string inside it may hold the tag. As soon as it cannot be
             JSON it streams as a string, from its first character.
  Qwen3-Coder puts a newline after the value's open tag and before its close
  tag; one of each is layout and dropped, anything more is the value's.
- The call's arguments are a JSON object built as the tags go by: `{"key": `
  when a value begins to go out, its pieces, `}` when the call ends. The
  deltas joined equal the `ToolCallEnd` arguments, always a JSON object.

Bad output (never an exception, nothing lost before a call starts)
1. A call whose name is not an offered tool, or does not end within 256
   characters: the call, from its open tag through its close tag (or the
   block's), is delivered as text; for the first call of a block that
   includes the block's open tag and the whitespace before it, and a block
   with no call in it closes as text.
2. Text inside a call that is not a parameter's tags is dropped, and so is
   a key that does not end within 256 characters; a next call opening
   before the first closed ends the first; the block's close tag ends an
   open call.
3. Text after a call, inside a block, where the next call or the block's
   close tag should be: the block ends there and the text is text.
4. A value ends only at its own close tag (a JSON value, only where its
   JSON is complete): without one it runs to the end of the output.
5. The output ending inside a call: the call ends there; a parameter whose
   key is unfinished, or with no value yet, is dropped; an unfinished value
   counts as it stands (unfinished JSON becomes a string).
6. A key is taken as written, trimmed; a repeated key is sent again (JSON
   readers keep the last).

Forced calls (`tool_rules`): the parameters of the schema's `properties`, in
its order, each optional one skippable, no others (a schema without
properties takes any key with a free-text value). Strings are free text that
cannot contain the value's close tag; an enum / const of strings is one of
its values; a string with a maxLength up to 64 is at most that many
characters on one line without `<`; any other value is JSON from the schema
(`grammar.value_rules`); where the template writes top-level booleans and
null the Python way (Qwen3-Coder), `True` / `False` / `None` are allowed too.
Patterns and formats of top-level string parameters are not enforced.

Longer than about 500 lines: one XML-ish call parser that three families
share, with the forced-call rules that must match what it reads.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from ...chat import Event, TextDelta, ToolCallDelta, ToolCallEnd, ToolCallStart, ToolSpec
from ...grammar.gbnf import literal, until
from ...grammar.schema import value_rules
from ..parsing.jsonscan import JsonScanner
from ..parsing.toolparse import PlainParser, held

__all__ = ["XmlCallParser", "XmlFormat", "make_tool_rules", "value_kind"]


@dataclass(frozen=True)
class XmlFormat:
    """One family's tags. The parser reads the markers; the grammar writes
    the layout the template renders (the `grammar_*` fields)."""

    block_open: str
    block_close: str  # "" when the block is the call (GLM)
    call_open: str  # "" when the name follows the block's open tag
    name_end: str  # "" when the name ends at whitespace or "<"
    key_open: str
    key_end: str
    value_open: str  # "" unless a tag of its own opens the value
    value_close: str
    call_close: str
    trim_newline: bool  # one newline inside each end of a value is layout
    python_words: bool  # top-level booleans and null are written True / False / None
    grammar_head: str  # before the name
    grammar_after_name: str
    grammar_value_sep: str  # after the key, up to the value


_WS = " \t\n\r"
_PYTHON = {"True": "true", "False": "false", "None": "null"}
_TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})
_MAX_LENGTH = 64  # longest maxLength written out as a bounded repeat
_MAX_NAME = 256  # a tool name or key still unfinished after this is not one
_NEWLINE = literal("\n")


def value_kind(schema: Any) -> str:
    """How a parameter's value is read: "string" (the schema says a string
    and nothing else) or "json"."""
    if not isinstance(schema, dict):
        return "json"
    enum, kind = schema.get("enum"), schema.get("type")
    if isinstance(enum, list) and enum and all(isinstance(e, str) for e in enum):
        return "string"
    if isinstance(schema.get("const"), str) or kind == "string":
        return "string"
    return "json"


def _python_words(schema: Any) -> list[str]:
    """How a template that writes scalars with Python's `str` writes this
    schema's booleans and null."""
    kind = schema.get("type") if isinstance(schema, dict) else None
    kinds = {kind} if isinstance(kind, str) else set(kind) if isinstance(kind, list) else set()
    return (["True", "False"] if "boolean" in kinds else []) + (["None"] if "null" in kinds else [])


def _properties(parameters: Any) -> dict[str, Any] | None:
    props = parameters.get("properties") if isinstance(parameters, dict) else None
    return props if isinstance(props, dict) else None


class _JsonValue:
    """A value read a character at a time while it can still be one JSON
    value (whitespace around it allowed) or a Python literal."""

    def __init__(self) -> None:
        self.text = ""
        self.scanner = JsonScanner()
        self.json = True  # the text can still be JSON
        self.started = False
        self.ended = False  # a whole JSON value, then only whitespace

    def take(self, c: str) -> bool:
        """Adds `c`; False (and `c` not added) when the value could no longer
        be JSON or a Python literal."""
        if self.json:
            self.json = self._json(c)
        word = (self.text + c).strip(_WS)
        if not self.json and not any(w.startswith(word) for w in _PYTHON):
            return False
        self.text += c
        return True

    def _json(self, c: str) -> bool:
        if self.ended or (not self.started and c in _WS):
            return c in _WS
        self.started = True
        ok = self.scanner.feed(c) is not None or (self.scanner.done and c in _WS)
        self.ended = self.scanner.done
        return ok

    @property
    def complete(self) -> bool:
        """Whether the value may end here."""
        word = self.text.strip(_WS)
        if not word or word in _PYTHON:
            return True
        return self.json and (self.ended or self.scanner.closer() == "")


def _json_text(raw: str) -> str:
    """A value written as JSON, as JSON text; text that is not JSON as a
    JSON string."""
    text = raw.strip(_WS)
    if text in _PYTHON:
        return _PYTHON[text]
    try:
        value = json.loads(text, strict=False, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return json.dumps(raw, ensure_ascii=False)
    return json.dumps(value, ensure_ascii=False)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class XmlCallParser(PlainParser):
    """Reasoning, text and tag-per-parameter calls; a family's subclass sets
    `fmt`. While inside a block the mode is "call" and `_at` says where."""

    parses_calls = True
    fmt: ClassVar[XmlFormat]

    def __init__(
        self, *, tools: Collection[str], thinking: bool, new_id: Callable[[], str]
    ) -> None:
        super().__init__(tools=tools, thinking=thinking, new_id=new_id)
        # configuration
        self._schemas: dict[str, dict[str, Any]] = {}
        if isinstance(tools, Mapping):
            for name, parameters in tools.items():
                props = _properties(parameters)
                if props is not None:
                    self._schemas[name] = props
        # state, inside a block
        self._at = "block"  # block, name, skip, params, key, value_open, value
        self._raw: list[str] = []  # read and not yet part of a started call
        self._started = False  # a call of this block has started
        self._index = -1  # the open call's index, -1 when none
        self._name = ""
        self._args = ""  # the open call's arguments sent so far
        self._params = 0  # parameters sent in the open call
        self._key = ""
        self._value_lead = False  # a newline may still open the value
        self._json: _JsonValue | None = None  # a value held while it may be JSON
        self._streaming = False  # the open value is being sent as a string
        self._at_steps: dict[str, Callable[[list[Event], bool], bool]] = {
            "block": self._at_block,
            "name": self._at_name,
            "skip": self._at_skip,
            "params": self._at_params,
            "key": self._at_key,
            "value_open": self._at_value_open,
            "value": self._at_value,
        }

    # ---- text and the block -------------------------------------------------

    def _text(self, out: list[Event], final: bool) -> bool:
        buf, opener = self._buf, self.fmt.block_open
        at = buf.find(opener)
        if at >= 0:
            before = buf[:at]
            text = before.rstrip()
            if text:
                out.append(TextDelta(text))
            self._open_block(before[len(text) :] + opener)
            self._buf = buf[at + len(opener) :]
            return True
        keep = 0 if final else held(buf, (opener,), whitespace=True)
        if len(buf) > keep:
            out.append(TextDelta(buf[: len(buf) - keep]))
        self._buf = buf[len(buf) - keep :]
        return False

    def _open_block(self, raw: str) -> None:
        self._mode, self._raw, self._started = "call", [raw], False
        self._at = "block" if self.fmt.call_open else "name"

    def _in_call(self, out: list[Event], final: bool) -> bool:
        while self._at_steps[self._at](out, final):
            if self._mode != "call":
                return True
        if final:
            self._give_up(out)
        return False

    def _take(self, n: int, *, keep: bool = True) -> str:
        """Consumes `n` characters of the buffer (kept for the text fallback
        while no call of the block has started, unless `keep` is False)."""
        piece, self._buf = self._buf[:n], self._buf[n:]
        if keep:
            self._raw.append(piece)
        return piece

    def _as_text(self, out: list[Event]) -> None:
        text = "".join(self._raw)
        self._raw = []
        if self._started:  # between calls: whitespace touching them is dropped
            text = text.lstrip()
        if text:
            out.append(TextDelta(text))

    def _leave_block(self, out: list[Event]) -> None:
        """The block ended: back to text (a block with no call was text)."""
        if self._started:
            self._raw, self._mode = [], "gap"
        else:
            self._as_text(out)
            self._mode = "text"

    def _at_block(self, out: list[Event], final: bool) -> bool:
        """Between calls: the next call, or the block's close tag."""
        fmt, buf = self.fmt, self._buf
        rest = buf.lstrip(_WS)
        lead = len(buf) - len(rest)
        for marker, step in ((fmt.call_open, "name"), (fmt.block_close, "")):
            if rest.startswith(marker):
                self._take(lead + len(marker))
                if step:
                    self._at = step
                else:
                    self._leave_block(out)
                return True
        partial = fmt.call_open.startswith(rest) or fmt.block_close.startswith(rest)
        if not rest or (partial and not final):
            return False
        self._leave_block(out)  # rule 3 (or rule 1: a block with no call)
        return True

    def _at_name(self, out: list[Event], final: bool) -> bool:
        found = self._split_name(self._buf)
        if found is None or found[1] > _MAX_NAME:
            if found is None and len(self._buf) <= _MAX_NAME:
                return False
            self._at = "skip"  # rule 1: too long for a name
            return True
        name, used = found
        self._take(used)
        name = name.strip(_WS)
        if name not in self._tools:
            self._at = "skip"
            return True
        self._index, self._calls = self._calls, self._calls + 1
        self._name, self._args, self._params = name, "", 0
        self._raw, self._started, self._at = [], True, "params"
        out.append(ToolCallStart(self._index, self._new_id(), name))
        return True

    def _split_name(self, buf: str) -> tuple[str, int] | None:
        """The name at the start of `buf` and how much of `buf` it takes with
        its end marker; None while it may go on."""
        end = self.fmt.name_end
        if end:
            at = buf.find(end)
            return None if at < 0 else (buf[:at], at + len(end))
        rest = buf.lstrip(_WS)
        lead = len(buf) - len(rest)
        for i, c in enumerate(rest):
            if c in _WS:
                return rest[:i], lead + i + 1
            if c == "<":
                return rest[:i], lead + i
        return None

    def _at_skip(self, out: list[Event], final: bool) -> bool:
        """A call that did not start (rule 1): read through its close tag
        (or the block's), then deliver it as text."""
        fmt, buf = self.fmt, self._buf
        ends = tuple(m for m in (fmt.call_close, fmt.block_close) if m)
        hits = sorted((buf.find(m), m) for m in ends if m in buf)
        if not hits:
            self._take(len(buf) - held(buf, ends, whitespace=False))
            return False
        at, marker = hits[0]
        self._take(at + len(marker))
        self._as_text(out)
        if marker == fmt.block_close or not fmt.block_close:
            self._mode = "gap" if self._started else "text"
        else:
            self._at = "block"
        return True

    # ---- inside a started call ----------------------------------------------

    def _at_params(self, out: list[Event], final: bool) -> bool:
        """Inside a call: the next parameter, or the end of the call."""
        fmt, buf = self.fmt, self._buf
        nexts = (fmt.call_open, fmt.block_close) if fmt.block_close else (fmt.block_open,)
        markers = (fmt.key_open, fmt.call_close, *nexts)
        hits = sorted((buf.find(m), i) for i, m in enumerate(markers) if m and m in buf)
        if not hits:  # rule 2: what is not a tag is dropped
            self._take(len(buf) - held(buf, markers, whitespace=False), keep=False)
            return False
        at, which = hits[0]
        self._take(at, keep=False)
        marker = markers[which]
        if marker == fmt.key_open:
            self._take(len(marker), keep=False)
            self._at = "key"
            return True
        self._close_call(out)
        if marker == fmt.call_close:
            self._take(len(marker), keep=False)
            if fmt.block_close:
                self._at = "block"
            else:
                self._mode = "gap"
        elif marker == fmt.block_close:
            self._take(len(marker), keep=False)
            self._mode = "gap"
        elif marker == fmt.call_open:  # the next call of the block
            self._raw = [self._take(len(marker), keep=False)]
            self._at = "name"
        else:  # GLM: a new block
            self._take(len(marker), keep=False)
            self._open_block(marker)
        return True

    def _at_key(self, out: list[Event], final: bool) -> bool:
        fmt, buf = self.fmt, self._buf
        at, close = buf.find(fmt.key_end), buf.find(fmt.call_close)
        if close >= 0 and (at < 0 or close < at):  # the call closed in the key
            self._at = "params"
            return True
        if at > _MAX_NAME or (at < 0 and len(buf) > _MAX_NAME):
            self._at = "params"  # rule 2: too long for a key, dropped
            return True
        if at < 0:
            return False
        self._key = buf[:at].strip(_WS)
        self._take(at + len(fmt.key_end), keep=False)
        props = self._schemas.get(self._name, {})
        kind = value_kind(props.get(self._key)) if self._key in props else "json"
        self._json = _JsonValue() if kind == "json" else None
        self._value_lead, self._streaming = fmt.trim_newline, False
        self._at = "value_open" if fmt.value_open else "value"
        return True

    def _at_value_open(self, out: list[Event], final: bool) -> bool:
        opener, buf = self.fmt.value_open, self._buf
        rest = buf.lstrip(_WS)
        if rest.startswith(opener):
            self._take(len(buf) - len(rest) + len(opener), keep=False)
        elif opener.startswith(rest):  # all of it may still be the tag
            return False
        self._at = "value"  # without its open tag, the value starts here
        return True

    def _at_value(self, out: list[Event], final: bool) -> bool:
        fmt = self.fmt
        if self._value_lead:
            if not self._buf:
                return False
            if self._buf[0] == "\n":
                self._take(1, keep=False)
            self._value_lead = False
        if self._json is not None:
            return self._read_json(out)
        buf = self._buf
        at = buf.find(fmt.value_close)
        if at >= 0:
            piece = self._take(at, keep=False)
            self._take(len(fmt.value_close), keep=False)
            self._stream_string(piece.removesuffix("\n") if fmt.trim_newline else piece, out)
            self._close_value(out)
            return True
        keep = held(buf, (fmt.value_close,), whitespace=False)
        if fmt.trim_newline and buf[: len(buf) - keep].endswith("\n"):
            keep += 1
        self._stream_string(self._take(len(buf) - keep, keep=False), out)
        return False

    def _read_json(self, out: list[Event]) -> bool:
        """A value that may be JSON: its close tag counts only where the
        JSON is complete (a string inside it may hold the tag); once it
        cannot be JSON it is a string from its first character."""
        value, close, buf = self._json, self.fmt.value_close, self._buf
        assert value is not None
        for i, c in enumerate(buf):
            if value.complete:
                if buf.startswith(close, i):
                    self._buf = buf[i + len(close) :]
                    self._close_value(out)
                    return True
                if len(buf) - i < len(close) and close.startswith(buf[i:]):
                    self._buf = buf[i:]
                    return False
            if not value.take(c):
                text, rest = value.text, buf[i:]
                if self.fmt.trim_newline and text.endswith("\n"):
                    text, rest = text[:-1], "\n" + rest  # may be the close's newline
                self._json, self._buf = None, rest
                self._stream_string(text, out)
                return True
        self._buf = ""
        return False

    def _stream_string(self, text: str, out: list[Event]) -> None:
        if not self._streaming:
            self._streaming = True
            self._send(self._key_text() + '"', out)
        if text:
            self._send(json.dumps(text, ensure_ascii=False)[1:-1], out)

    def _close_value(self, out: list[Event]) -> None:
        if self._json is not None:
            self._send(self._key_text() + _json_text(self._json.text), out)
        else:
            self._stream_string("", out)
            self._send('"', out)
        self._json, self._streaming, self._at = None, False, "params"

    def _key_text(self) -> str:
        head = ", " if self._params else "{"
        self._params += 1
        return head + json.dumps(self._key, ensure_ascii=False) + ": "

    def _send(self, piece: str, out: list[Event]) -> None:
        self._args += piece
        out.append(ToolCallDelta(self._index, piece))

    def _close_call(self, out: list[Event]) -> None:
        self._send("}" if self._params else "{}", out)
        out.append(ToolCallEnd(self._index, self._args))
        self._index, self._args = -1, ""

    def _give_up(self, out: list[Event]) -> None:
        """The output ended inside a block (rules 1 and 5)."""
        at, rest = self._at, self._buf
        self._buf = ""
        if self._index < 0:  # block, name, skip: no call open
            if at != "block" or not self._started:
                self._raw.append(rest)
                self._as_text(out)
        else:
            if at == "value":  # the value counts as it stands
                if self._json is None:  # a string: what was held is part of it
                    if self._value_lead:
                        rest = rest.removeprefix("\n")
                    if self.fmt.trim_newline:
                        rest = rest.removesuffix("\n")
                    self._stream_string(rest, out)
                self._close_value(out)
            self._close_call(out)
        self._mode = "text"


# ---- forced calls -------------------------------------------------------------


def make_tool_rules(
    fmt: XmlFormat, prefix: str = ""
) -> Callable[[list[ToolSpec], dict[str, str]], None]:
    """The family's `tool_rules`: adds "call", one call to one of the tools
    in `fmt`'s layout (see the module's docstring for what it enforces);
    every rule's name starts with `prefix` ("tcall" ...)."""
    # After a value that is not free text (free text takes its own close tag).
    value_end = literal(("\n" if fmt.trim_newline else "") + fmt.value_close + "\n")
    tail = literal(fmt.call_close + ("\n" + fmt.block_close if fmt.block_close else ""))

    def value_rule(schema: Any, name: str, rules: dict[str, str]) -> str:
        if value_kind(schema) != "string":
            rule = value_rules(schema, name + "-", rules)
            words = _python_words(schema) if fmt.python_words else []
            if words:
                rule = "(" + " | ".join([rule, *map(literal, words)]) + ")"
            return rule + " " + value_end
        choices = schema.get("enum") if "enum" in schema else [schema.get("const")]
        if all(isinstance(c, str) for c in choices):
            return "(" + " | ".join(literal(c) for c in choices) + ") " + value_end
        high, low = schema.get("maxLength"), schema.get("minLength")
        if isinstance(high, int) and not isinstance(high, bool) and 0 <= high <= _MAX_LENGTH:
            low = low if isinstance(low, int) and not isinstance(low, bool) else 0
            return f"[^<\\n]{{{min(max(low, 0), high)},{high}}} {value_end}"
        rules.update(until(fmt.value_close, name + "-s"))
        return f"{name}-s-0 {_NEWLINE}"

    def tool_rules(tools: list[ToolSpec], rules: dict[str, str]) -> None:
        for i, tool in enumerate(tools):
            parts = [literal(fmt.grammar_head + tool.name + fmt.grammar_after_name)]
            props = _properties(tool.parameters)
            if props is None:  # no declared parameters: any key, free text
                rules.update(until(fmt.value_close, f"{prefix}x{i}-any-s"))
                key = literal(fmt.key_open) + ' [^<>"\\n]+ ' + literal(fmt.grammar_value_sep)
                rules[f"{prefix}x{i}-any"] = f"{key} {prefix}x{i}-any-s-0 {_NEWLINE}"
                parts.append(f"{prefix}x{i}-any*")
            else:
                required = tool.parameters.get("required")
                needed = set(required) if isinstance(required, list) else set()
                for j, (key, schema) in enumerate(props.items()):
                    name = f"{prefix}x{i}-p{j}"
                    head = literal(fmt.key_open + key + fmt.grammar_value_sep)
                    rules[name] = head + " " + value_rule(schema, name, rules)
                    parts.append(name if key in needed else name + "?")
            parts.append(tail)
            rules[f"{prefix}call-{i}"] = " ".join(parts)
        alternatives = " | ".join(f"{prefix}call-{i}" for i in range(len(tools)))
        rules[f"{prefix}call"] = f'"\\n"? ({alternatives})'

    return tool_rules
