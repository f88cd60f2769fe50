"""Tool calls framed by marker strings: the machinery the DeepSeek and Kimi
families share. Not a family itself (no `FAMILY`); the grammar of their
forced calls, one element per parameter, is in elements.py.

The families here group calls in a section that text opens:

    SECTION_OPEN  CALL_OPEN head body CALL_CLOSE  CALL_OPEN ...  SECTION_CLOSE

and differ in how a call's head names the tool and how its body holds the
arguments. `JsonCallsParser` reads a body that is one JSON object (DeepSeek
R1 and V3.1, Kimi K2); `MarkupCallsParser` reads a body of parameter
elements, or one JSON object (DeepSeek V3.2 / V4 DSML, Kimi K3).

Rules (the families' docstrings add their own):
- Text is delivered verbatim, except the whitespace before a section; it is
  held back only while it may still be the start of a marker.
- A call starts when its head is complete and names an offered tool; its
  arguments stream out as generated and always add up to a JSON object.
- A section marker with nothing but whitespace before a call marker, and a
  lone call marker in text, both open a section. Whitespace between calls and
  after the section is dropped; a section with no call that started is
  delivered as text, markers and all.
- A call whose head does not name an offered tool (unknown name, no name, a
  head cut off by another marker or longer than `_MAX_HEAD`): its raw text,
  from the whitespace before it (and the section marker when it is the
  section's first) to its close marker, is delivered as text.
- Inside a section, text that is not a call ends the section: it is text.
- Output that ends inside a call closes the call (arguments repaired as in
  `toolparse`); output that ends inside a possible marker is text, except
  after a call of the section, where it can only be the section's own close
  (the engine stops a single forced call right after its close marker).

Longer than about 500 lines: one state machine that five families share;
its states (lead, json, markup, tail) only read right side by side.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection

from ...chat import Event, TextDelta, ToolCallDelta, ToolCallEnd, ToolCallStart
from ..parsing.jsonscan import JsonScanner, repair_object
from ..parsing.toolparse import PlainParser, held

__all__ = [
    "JsonArgs",
    "JsonCallsParser",
    "MarkupCallsParser",
    "attributes",
    "json_text",
]

# A head longer than this (a name, an id, attributes) is not a head.
_MAX_HEAD = 512
# Lead text allowed before a JSON object: whitespace and one code fence
# (```json), which DeepSeek R1 writes and models of the other families copy.
_LEAD = re.compile(r"\s*(?:`{1,3}[A-Za-z]*\s*)?")


def _find(buf: str, markers: Collection[str]) -> tuple[int, str]:
    """The first of `markers` in `buf` (the longest where two start at the
    same place): (position, marker), or (-1, "")."""
    best, found = -1, ""
    for marker in markers:
        at = buf.find(marker)
        if at >= 0 and (best < 0 or at < best or (at == best and len(marker) > len(found))):
            best, found = at, marker
    return best, found


def json_text(value: str) -> str:
    """The inside of a JSON string holding `value` (escaping is per character,
    so pieces escaped one by one join to the whole escaped)."""
    return json.dumps(value, ensure_ascii=False)[1:-1]


def _no_constants(name: str) -> object:
    raise ValueError(name)


def _json_value(text: str) -> str | None:
    """`text` stripped when it is one valid JSON value (no NaN / Infinity)."""
    text = text.strip()
    try:
        json.loads(text, parse_constant=_no_constants)
    except ValueError:
        return None
    return text


_ATTRIBUTE = re.compile(r'([\w-]+)\s*=\s*"([^"]*)"')
_ENTITIES = {"&quot;": '"', "&amp;": "&", "&lt;": "<", "&gt;": ">", "&apos;": "'"}


def attributes(head: str, *, entities: bool = False) -> dict[str, str]:
    """`key="value"` pairs of a tag head; `entities`: values are XML-escaped."""
    found = {}
    for key, value in _ATTRIBUTE.findall(head):
        if entities:
            value = re.sub(r"&\w+;", lambda m: _ENTITIES.get(m.group(), m.group()), value)
        found[key] = value
    return found


class JsonArgs:
    """A call's arguments written as one JSON object, read as generated.

    States: lead (whitespace and a code fence so far), json (inside the
    object), done (the object ended, or broke and was cut back), other (the
    arguments are not an object: kept raw for `final`)."""

    def __init__(self) -> None:
        self.state = "lead"
        self._lead = ""
        self._scanner = JsonScanner()
        self._kept: list[str] = []  # pieces up to the last point it can be closed
        self._pending = ""  # after that point
        self._closer = ""  # what closes the object after `_kept`
        self._sent = 0  # pieces of `_kept` already streamed
        self._other: list[str] = []

    def feed(self, text: str) -> int:
        """Reads from `text`; returns how many characters it used: all of them
        unless the object ended (or broke) in it."""
        for i, c in enumerate(text):
            if self.state == "lead":
                if c == "{":
                    self.state = "json"
                elif _LEAD.fullmatch(self._lead + c):
                    self._lead += c
                    continue
                else:
                    self.state = "other"
            if self.state == "other":
                self._other.append(c)
                continue
            if self.state == "done":
                return i
            piece = self._scanner.feed(c)
            if piece is None:
                self.state = "done"
                return i
            self._pending += piece
            end = self._scanner.closer()
            if end is not None:
                self._kept.append(self._pending)
                self._pending, self._closer = "", end
            if self._scanner.done:
                self.state = "done"
                return i + 1
        return len(text)

    def unsent(self) -> str:
        """Arguments text ready to stream (an object's complete pieces)."""
        piece = "".join(self._kept[self._sent :])
        self._sent = len(self._kept)
        return piece

    def final(self) -> tuple[str, str]:
        """(the whole arguments, the last delta that completes them)."""
        if self._kept:
            rest = "".join(self._kept[self._sent :]) + self._closer
            return "".join(self._kept) + self._closer, rest
        text = "".join(self._other).strip()
        if text.startswith('"'):
            try:
                decoded = json.loads(text)
            except ValueError:
                decoded = None
            text = decoded if isinstance(decoded, str) else ""
        whole = repair_object(text)
        return whole, whole


class _Call:
    """The call being read: its raw text (for the text fallback) and, once
    started, its index and what was streamed of its arguments."""

    def __init__(self, raw: str) -> None:
        self.raw = [raw]
        self.index = -1
        self.streamed: list[str] = []
        self.args: JsonArgs | None = None  # a JSON object body
        self.keys = 0  # parameters written so far (markup bodies)
        self.kind = ""  # the parameter being read: string, json, drop; or json-body
        self.key = ""
        self.value: list[str] = []  # a held (non-string) parameter value
        self.string_open = False  # a string value is streaming


class _FramedParser(PlainParser):
    """Sections of framed calls; subclasses read a call's head and body."""

    parses_calls = True
    # configuration, per family
    section_open: tuple[str, ...] = ()  # markers that open a section in text
    section_close = ""
    call_open = ""
    call_close = ""
    head_end = ""  # the marker that ends a call's head
    # Markers of the turn's own frame, dropped wherever text has them (Kimi K3).
    dropped: tuple[str, ...] = ()

    def __init__(
        self, *, tools: Collection[str], thinking: bool, new_id: Callable[[], str]
    ) -> None:
        super().__init__(tools=tools, thinking=thinking, new_id=new_id)
        # state
        self._held_text = ""  # the section so far, text unless a call in it starts
        self._started = False  # a call of this section started
        self._open: _Call | None = None
        self._steps.update(
            {
                "text": self._text,
                "section": self._section,
                "head": self._head,
                "skip": self._skip,
                "body": self._body,
            }
        )

    # ---- per family ----

    def _name(self, head: str) -> str | None:
        """The tool a complete call head names."""
        raise NotImplementedError

    def _split_head(self, buf: str, final: bool) -> tuple[str, int] | None:
        """(the head, how much of `buf` it takes) once the head is complete."""
        at = buf.find(self.head_end)
        if at < 0:
            return (buf, len(buf)) if final else None
        return buf[:at], at + len(self.head_end)

    def _body(self, out: list[Event], final: bool) -> bool:
        raise NotImplementedError

    # ---- text and sections ----

    def _openers(self) -> tuple[str, ...]:
        return (*self.section_open, self.call_open)

    def _text(self, out: list[Event], final: bool) -> bool:
        buf = self._buf
        at, marker = _find(buf, (*self._openers(), *self.dropped))
        if at >= 0:
            self._buf = buf[at + len(marker) :]
            if marker in self.dropped:
                self._emit(out, buf[:at])
                return True
            text = buf[:at].rstrip()
            self._emit(out, text)
            self._held_text, self._started = buf[len(text) : at + len(marker)], False
            if marker == self.call_open:
                self._begin_call("")
            else:
                self._mode = "section"
            return True
        keep = 0
        if not final:
            keep = max(
                held(buf, self._openers(), whitespace=True),
                held(buf, self.dropped, whitespace=False),
            )
        self._emit(out, buf[: len(buf) - keep])
        self._buf = buf[len(buf) - keep :]
        return False

    def _emit(self, out: list[Event], text: str) -> None:
        if text:
            out.append(TextDelta(text))

    def _section(self, out: list[Event], final: bool) -> bool:
        """Between calls: whitespace, then a call, the section's end, or text."""
        rest = self._buf.lstrip()
        self._held_text += self._buf[: len(self._buf) - len(rest)]
        self._buf = rest
        if rest.startswith(self.call_open):
            self._buf = rest[len(self.call_open) :]
            self._begin_call(self.call_open)
            return True
        if rest.startswith(self.section_close):
            self._buf = rest[len(self.section_close) :]
            self._end_section(out, self.section_close)
            return True
        markers = (self.call_open, self.section_close)
        partial = not rest or any(m.startswith(rest) for m in markers)
        if partial and not final:
            return False
        if partial and self._started:
            self._buf = ""  # the section's own markers, cut off: nothing of the answer
        self._end_section(out, "")  # else text that is not a call: the section is over
        return bool(self._buf)

    def _end_section(self, out: list[Event], marker: str) -> None:
        if not self._started:
            self._emit(out, self._held_text + marker)
        self._mode = "gap" if self._started and marker else "text"
        self._held_text = ""

    # ---- one call ----

    def _begin_call(self, marker: str) -> None:
        self._open = _Call(self._held_text + marker if marker else self._held_text)
        self._held_text = ""
        self._mode = "head"

    def _head(self, out: list[Event], final: bool) -> bool:
        call, buf = self._open, self._buf
        assert call is not None
        split = self._split_head(buf, final)
        cut, _ = _find(buf, (self.call_open, self.call_close, self.section_close))
        if split is not None:
            head, used = split
            if len(head) <= _MAX_HEAD and (cut < 0 or cut >= len(head)):
                call.raw.append(buf[:used])
                self._buf = buf[used:]
                name = self._name(head.strip())
                if name is not None and name in self._tools:
                    call.index, self._calls = self._calls, self._calls + 1
                    self._started = True
                    out.append(ToolCallStart(call.index, self._new_id(), name))
                    self._mode = "body"
                else:
                    self._mode = "skip"
                return True
        if cut >= 0 or len(buf) > _MAX_HEAD or final:
            self._mode = "skip"  # not a head
            return True
        return False

    def _skip(self, out: list[Event], final: bool) -> bool:
        """A call that did not start: its raw text, to its end, is text."""
        call, buf = self._open, self._buf
        assert call is not None
        ends = (self.call_close, self.call_open, self.section_close)
        at, marker = _find(buf, ends)
        if at < 0 and not final:
            keep = held(buf, ends, whitespace=False)
            call.raw.append(buf[: len(buf) - keep])
            self._buf = buf[len(buf) - keep :]
            return False
        if at < 0:
            at, marker = len(buf), ""
        used = at + len(marker) if marker == self.call_close else at
        call.raw.append(buf[:used])
        self._buf = buf[used:]
        self._emit(out, "".join(call.raw))
        self._open, self._mode = None, "section"
        return True

    def _send(self, out: list[Event], call: _Call, piece: str) -> None:
        if piece:
            call.streamed.append(piece)
            out.append(ToolCallDelta(call.index, piece))

    def _close_call(self, out: list[Event], call: _Call) -> None:
        if call.args is not None:
            whole, last = call.args.final()
        else:
            last = ('"' if call.string_open else "") + ("}" if call.keys else "{}")
            whole = "".join(call.streamed) + last
        self._send(out, call, last)
        out.append(ToolCallEnd(call.index, whole))
        self._open, self._mode = None, "section"

    def _read_args(
        self, out: list[Event], call: _Call, final: bool, ends: tuple[str, ...]
    ) -> str | None:
        """Reads the call's JSON arguments from the buffer, up to the first of
        `ends` outside the object. Returns that marker (not consumed; "" at
        the end of the output), or None when more text is needed."""
        args = call.args
        assert args is not None
        while True:
            buf = self._buf
            if args.state == "json":
                used = args.feed(buf)
                self._buf = buf[used:]
                self._send(out, call, args.unsent())
                if args.state == "json":
                    return "" if final else None
                continue
            at, marker = _find(buf, ends)
            if at >= 0:
                segment = buf[:at]
            else:
                segment = buf if final else buf[: len(buf) - held(buf, ends, whitespace=False)]
            before = args.state
            used = args.feed(segment) if before != "done" else len(segment)
            if before == "lead" and args.state in ("json", "done"):
                # The object may run on past what looked like a marker.
                self._buf = buf[used:]
                self._send(out, call, args.unsent())
                continue
            self._buf = buf[len(segment) :]
            if at < 0:
                return "" if final else None
            return marker


class JsonCallsParser(_FramedParser):
    """Calls whose body is one JSON object, after optional whitespace and a
    code fence. Text after the object, up to the call's close marker (the
    fence's closing backticks, a stray brace), is dropped."""

    def _body(self, out: list[Event], final: bool) -> bool:
        call = self._open
        assert call is not None
        if call.args is None:
            call.args = JsonArgs()
        ends = (self.call_close, self.call_open, self.section_close)
        marker = self._read_args(out, call, final, ends)
        if marker is None:
            return False
        if marker == self.call_close:
            self._buf = self._buf[len(marker) :]
        self._close_call(out, call)
        return True


class MarkupCallsParser(_FramedParser):
    """Calls whose body holds parameter elements,
    `PARAM_OPEN attributes PARAM_HEAD_END value PARAM_CLOSE`, or one JSON
    object (a bare one when `json_open` is "{", else in its own element).

    - A string parameter's value streams as a JSON string, verbatim, as it
      is generated; any other value is held until it ends and kept as JSON
      when it is one valid JSON value, else as a string.
    - A value ends at its close marker; left unclosed, at the next parameter
      or the end of the call.
    - A parameter without a name is dropped, and so is text between
      parameters. Of parameters and a JSON object, the first given makes
      the arguments; the other is dropped.
    """

    param_open = ""
    param_close = ""
    param_head_end = ""
    param_key = "name"  # the parameter head's attribute that names it
    json_open = ""
    json_close = ""  # "" when the JSON object is bare
    name_key = "name"  # the call head's attribute that names the tool
    entities = False  # attribute values are XML-escaped

    def __init__(
        self, *, tools: Collection[str], thinking: bool, new_id: Callable[[], str]
    ) -> None:
        super().__init__(tools=tools, thinking=thinking, new_id=new_id)
        self._steps.update({"param": self._param, "value": self._value, "json": self._json})

    def _name(self, head: str) -> str | None:
        return attributes(head, entities=self.entities).get(self.name_key)

    def _is_string(self, attrs: dict[str, str]) -> bool:
        """Whether a parameter with these attributes holds a plain string."""
        raise NotImplementedError

    def _body(self, out: list[Event], final: bool) -> bool:
        call, buf = self._open, self._buf
        assert call is not None
        markers = (
            self.param_open,
            self.json_open,
            self.call_close,
            self.call_open,
            self.section_close,
        )
        at, marker = _find(buf, markers)
        if at < 0:
            keep = 0 if final else held(buf, markers, whitespace=False)
            self._buf = buf[len(buf) - keep :]  # what comes before is dropped
            if final:
                self._close_call(out, call)
            return final
        rest = buf[at + len(marker) :]
        free = call.args is None and not call.keys
        if marker == self.param_open and call.args is None:
            self._buf, self._mode, call.kind = rest, "param", ""
        elif marker == self.json_open and free:
            call.args = JsonArgs()
            if self.json_close:  # its element's head first
                self._buf, self._mode, call.kind = rest, "param", "json-body"
            else:
                self._buf, self._mode = buf[at:], "json"
        elif marker in (self.param_open, self.json_open):
            self._buf = rest  # dropped
        else:
            self._buf = rest if marker == self.call_close else buf[at:]
            self._close_call(out, call)
        return True

    def _param(self, out: list[Event], final: bool) -> bool:
        """A parameter's head (or the JSON element's), up to its end marker."""
        call, buf = self._open, self._buf
        assert call is not None
        at = buf.find(self.param_head_end)
        cut, _ = _find(buf, (self.call_close, self.param_close, self.param_open))
        if at < 0 or 0 <= cut < at or at > _MAX_HEAD:
            if cut >= 0 or at > _MAX_HEAD or len(buf) > _MAX_HEAD or final:
                if call.kind == "json-body":
                    call.args = None
                call.kind, self._mode = "", "body"  # a broken head: dropped
                return True
            return False
        head, self._buf = buf[:at], buf[at + len(self.param_head_end) :]
        if call.kind == "json-body":
            call.kind, self._mode = "", "json"
            return True
        attrs = attributes(head, entities=self.entities)
        key = attrs.get(self.param_key)
        call.key, call.value = key or "", []
        if key is None:
            call.kind = "drop"
        elif self._is_string(attrs):
            call.kind = "string"
            self._send(out, call, self._key_text(call) + '"')
            call.string_open = True
        else:
            call.kind = "json"
        self._mode = "value"
        return True

    def _key_text(self, call: _Call) -> str:
        lead = ", " if call.keys else "{"
        call.keys += 1
        return lead + json.dumps(call.key, ensure_ascii=False) + ": "

    def _value(self, out: list[Event], final: bool) -> bool:
        call, buf = self._open, self._buf
        assert call is not None
        ends = (self.param_close, self.param_open, self.call_close, self.section_close)
        at, marker = _find(buf, ends)
        if at >= 0:
            piece = buf[:at]
        else:
            piece = buf if final else buf[: len(buf) - held(buf, ends, whitespace=False)]
        self._buf = buf[len(piece) :]
        if call.kind == "string":
            self._send(out, call, json_text(piece))
        elif call.kind == "json":
            call.value.append(piece)
        if at < 0 and not final:
            return False
        if call.kind == "string":
            self._send(out, call, '"')
            call.string_open = False
        elif call.kind == "json":
            raw = "".join(call.value)
            value = _json_value(raw)
            if value is None:
                value = json.dumps(raw, ensure_ascii=False)
            self._send(out, call, self._key_text(call) + value)
        call.kind, call.value = "", []
        if marker == self.param_close:
            self._buf = self._buf[len(marker) :]
        self._mode = "body"
        return True

    def _json(self, out: list[Event], final: bool) -> bool:
        call = self._open
        assert call is not None
        if self.json_close:
            ends: tuple[str, ...] = (self.json_close, self.call_close, self.section_close)
        else:
            ends = (self.call_close, self.call_open, self.section_close, self.param_open)
        marker = self._read_args(out, call, final, ends)
        if marker is None:
            return False
        if marker and marker == self.json_close:
            self._buf = self._buf[len(marker) :]
        self._mode = "body"
        return True
