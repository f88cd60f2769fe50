"""Mistral: `[TOOL_CALLS]` calls and `[THINK]` ... `[/THINK]` reasoning.

Two call syntaxes follow the marker; one parser reads both, whichever family
the template was detected as, since the first character after the marker
tells them apart:

    name  Small 3.2, Devstral, Magistral, Ministral 3 (family "mistral"):
          [TOOL_CALLS]NAME[ARGS]{...}, one marker per call. Small 3.2's
          template writes NAME[CALL_ID]a1b2c3d4e[ARGS]{...} in the history,
          so that form is read too (the id is skipped), and so is the
          compact NAME{...} some v11 models write.
    list  Nemo, Mistral 7B v0.3, Small 2409 / 2501 (family "mistral-nemo",
          in mistral_nemo.py): [TOOL_CALLS][{"name": NAME, "arguments":
          {...}, "id": "a1b2c3d4e"}, ...]; a single object without the list
          is read too. Each object is read like a Hermes call (keys in any
          order, "parameters" for "arguments", arguments as a JSON string).

The model's own call ids are not kept: every call gets a fresh id from
`new_id`, and prompt.py maps ids to the 9 alphanumerics these templates
demand when a conversation is rendered again.

Reasoning, text, streaming and the shared bad-output rules are those of
`engy_local.prompt.parsing.toolparse`, with [THINK] / [/THINK] for the tags. Rules
of this family, where a Mistral call has no closing tag:
- A call ends where its arguments' JSON value ends (the list form: at the
  `]` after the last object); text after it is text, whitespace touching a
  call is dropped, and a later [TOOL_CALLS] starts the next call.
- Before a block's first call has started (the name is not an offered tool,
  is not followed by [ARGS] / [CALL_ID] / `{`, or the list's first object
  breaks or ends before its name): the marker, with the whitespace before
  it, is delivered as text, and everything after it is read again as text.
  A later object of a list that fails this way is read again as text from
  its `{`, and the list ends there.
- JSON that breaks after the call started, or output that ends inside it:
  the arguments are cut back and closed (toolparse rule 2), and the text
  from the break on is read again as text. Arguments that are not JSON at
  all (`[ARGS]now please`), or a [CALL_ID] that is not followed by [ARGS],
  give the call `{}`, and that text is read again as text.
- After an object of a list, anything but `,` or `]` (or a `{` that starts
  the next object) ends the list; it is read again as text.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from ...chat import Event, TextDelta, ToolCallDelta, ToolCallEnd, ToolCallStart
from ...grammar.gbnf import literal
from ..parsing.jsonscan import WHITESPACE, JsonScanner, decode_string, repair_object
from ..parsing.toolparse import CallBlock, PlainParser, held
from .base import Family

OPEN = "[TOOL_CALLS]"
ARGS = "[ARGS]"
CALL_ID = "[CALL_ID]"
_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
_ID_MAX = 64  # longer is not an id (and is not held back waiting for [ARGS])


class _Args:
    """One call's arguments value (after [ARGS]), read a character at a
    time: `good` holds the pieces up to the last point where the value can
    be closed, `pending` what came after it (as in toolparse's `CallBlock`)."""

    def __init__(self) -> None:
        self.scanner = JsonScanner()
        self.kind = ""  # "{", '"' or "other" once the value begins
        self.good: list[str] = []
        self.pending = ""
        self.closer = ""
        self.reading = True  # False once the value is complete or broken
        self.sent = 0
        self.other = ""  # the text of a value that is not an object or string
        self.giveback = ""  # that text, when it breaks: to read again as text

    def feed(self, text: str) -> int:
        """Reads JSON from `text`; returns how many characters it used."""
        scanner = self.scanner
        for i, c in enumerate(text):
            piece = scanner.feed(c)
            if piece is None:
                self.reading = False
                if self.kind == "other" and not scanner.done:
                    self.giveback = self.other
                return i
            if not self.kind and c not in WHITESPACE:
                self.kind = c if c in '{"' else "other"
            if self.kind == "other":
                self.other += c
            elif self.kind:
                self.pending += piece
                end = scanner.closer()
                if end is not None:
                    self.good.append(self.pending)
                    self.pending, self.closer = "", end
            if scanner.done:
                self.reading = False
                return i + 1
        return len(text)

    def unsent(self) -> str:
        if self.kind != "{":
            return ""
        piece = "".join(self.good[self.sent :])
        self.sent = len(self.good)
        return piece

    def final(self) -> tuple[str, str]:
        """(the whole arguments text, the last delta that completes it)."""
        if self.kind == "{":
            return "".join(self.good) + self.closer, "".join(self.good[self.sent :]) + self.closer
        if self.kind == '"':
            whole = repair_object(decode_string("".join(self.good) + self.closer) or "")
            return whole, whole
        return "{}", "{}"


class MistralParser(PlainParser):
    """[TOOL_CALLS] calls in either Mistral syntax, [THINK] reasoning."""

    parses_calls = True
    think_open = "[THINK]"
    think_close = "[/THINK]"

    def __init__(
        self, *, tools: Collection[str], thinking: bool, new_id: Callable[[], str]
    ) -> None:
        super().__init__(tools=tools, thinking=thinking, new_id=new_id)
        # state of the [TOOL_CALLS] block being read
        self._phase = ""
        self._marker = ""  # the marker and the whitespace before it
        self._read = ""  # read since the point a failure goes back to
        self._started = False  # a call of this block has started
        self._in_list = False
        self._index = -1  # the call open now
        self._item: CallBlock | None = None
        self._args: _Args | None = None
        self._phases: dict[str, Callable[[list[Event], bool], bool]] = {
            "head": self._head,
            "name": self._name,
            "id": self._call_id,
            "args": self._arguments,
            "list": self._list,
            "item": self._list_item,
            "next": self._after_item,
        }

    def _text(self, out: list[Event], final: bool) -> bool:
        buf = self._buf
        at = buf.find(OPEN)
        if at >= 0:
            before = buf[:at]
            text = before.rstrip()
            if text:
                out.append(TextDelta(text))
            self._marker = before[len(text) :] + OPEN
            self._buf = buf[at + len(OPEN) :]
            self._mode, self._phase, self._read = "call", "head", ""
            self._started = self._in_list = False
            return True
        keep = 0 if final else held(buf, (OPEN,), whitespace=True)
        if len(buf) > keep:
            out.append(TextDelta(buf[: len(buf) - keep]))
        self._buf = buf[len(buf) - keep :]
        return False

    def _in_call(self, out: list[Event], final: bool) -> bool:
        while self._mode == "call":
            if not self._phases[self._phase](out, final):
                return False
        return True

    # Each phase reads `self._buf`; True when it moved on (to another phase
    # or out of the block) and the next one should go on.

    def _head(self, out: list[Event], final: bool) -> bool:
        buf = self._buf
        rest = buf.lstrip()
        if not rest:
            return self._fail(out) if final else False
        self._consume(len(buf) - len(rest))
        if rest[0] == "[":
            self._consume(1)
            self._phase, self._in_list = "list", True
        else:
            self._phase = "item" if rest[0] == "{" else "name"
        return True

    def _name(self, out: list[Event], final: bool) -> bool:
        buf = self._buf
        cuts = [i for i in (buf.find("["), buf.find("{")) if i >= 0]
        if not cuts:
            if final or not any(t.startswith(buf) for t in self._tools):
                return self._fail(out)
            return False
        name, rest = buf[: min(cuts)], buf[min(cuts) :]
        if name not in self._tools:
            return self._fail(out)
        if rest[0] == "{":
            return self._begin(out, name, len(name), "args")
        for marker, phase in ((ARGS, "args"), (CALL_ID, "id")):
            if rest.startswith(marker):
                return self._begin(out, name, len(name) + len(marker), phase)
        if not final and (ARGS.startswith(rest) or CALL_ID.startswith(rest)):
            return False
        return self._fail(out)

    def _call_id(self, out: list[Event], final: bool) -> bool:
        buf = self._buf
        at = buf.find(ARGS)
        head = buf[:at] if at >= 0 else buf[: len(buf) - held(buf, (ARGS,), whitespace=False)]
        if len(head) <= _ID_MAX and all(c in _ID_CHARS for c in head):
            if at >= 0:
                self._buf, self._phase = buf[at + len(ARGS) :], "args"
                return True
            if not final:
                return False
        self._close(out, "{}", "{}")
        self._mode = "gap"
        return True

    def _arguments(self, out: list[Event], final: bool) -> bool:
        args = self._args = self._args or _Args()
        used = args.feed(self._buf)
        self._buf = args.giveback + self._buf[used:]
        piece = args.unsent()
        if piece:
            out.append(ToolCallDelta(self._index, piece))
        if args.reading and not final:
            return False
        whole, last = args.final()
        self._args = None
        self._close(out, whole, last)
        self._mode = "gap"
        return True

    def _list(self, out: list[Event], final: bool) -> bool:
        """Before an object of the list: after `[` or `,`."""
        buf = self._buf
        rest = buf.lstrip()
        if not rest:
            if not final:
                return False
            return self._end_block() if self._started else self._fail(out)
        if rest[0] == "{":
            self._consume(len(buf) - len(rest))
            if self._started:  # a failure goes back to this object's `{`
                self._read = ""
            self._phase = "item"
            return True
        if not self._started:
            return self._fail(out)
        self._buf = rest[1:] if rest[0] == "]" else rest
        return self._end_block()

    def _list_item(self, out: list[Event], final: bool) -> bool:
        call = self._item = self._item or CallBlock("")
        buf = self._buf
        used = call.feed_json(buf)
        self._buf = buf[used:]
        if call.index < 0:
            self._read += buf[:used]
            known = call.name is not None and call.name in self._tools
            if call.bad_name or (call.name is not None and not known):
                return self._fail(out)
            if not known:
                if call.in_json and not final:
                    return False
                return self._fail(out)
            self._open_call(out, call.name or "")
            call.index = self._index
        piece = call.unsent()
        if piece:
            out.append(ToolCallDelta(call.index, piece))
        if call.in_json and not final:
            return False
        whole, last = call.final_arguments()
        self._item = None
        self._close(out, whole, last)
        if call.scanner.done and self._in_list:
            self._phase = "next"
            return True
        return self._end_block()

    def _after_item(self, out: list[Event], final: bool) -> bool:
        """After an object of the list: `,`, `]` or the end of the list."""
        rest = self._buf.lstrip()
        if not rest:
            self._buf = ""
            return self._end_block() if final else False
        if rest[0] == ",":
            self._buf, self._phase = rest[1:], "list"
            return True
        if rest[0] == "{":
            self._buf, self._phase = rest, "list"
            return True
        self._buf = rest[1:] if rest[0] == "]" else rest
        return self._end_block()

    # ---- helpers

    def _consume(self, n: int) -> None:
        self._read += self._buf[:n]
        self._buf = self._buf[n:]

    def _begin(self, out: list[Event], name: str, used: int, phase: str) -> bool:
        self._buf, self._phase = self._buf[used:], phase
        self._open_call(out, name)
        return True

    def _open_call(self, out: list[Event], name: str) -> None:
        self._index, self._calls = self._calls, self._calls + 1
        self._started, self._read = True, ""
        out.append(ToolCallStart(self._index, self._new_id(), name))

    def _close(self, out: list[Event], whole: str, last: str) -> None:
        if last:
            out.append(ToolCallDelta(self._index, last))
        out.append(ToolCallEnd(self._index, whole))

    def _end_block(self) -> bool:
        self._mode = "gap"
        return True

    def _fail(self, out: list[Event]) -> bool:
        """What was read is text after all (see the module docstring)."""
        if not self._started:
            out.append(TextDelta(self._marker))
        self._buf, self._read = self._read + self._buf, ""
        self._item = None
        self._mode = "text"
        return True


def call_rules(names: list[str], roots: list[str], rules: dict[str, str]) -> None:
    """[TOOL_CALLS]NAME[ARGS]ARGS"""
    for i, (name, root) in enumerate(zip(names, roots, strict=True)):
        rules[f"call-{i}"] = literal(name + ARGS) + " " + root
    alternatives = " | ".join(f"call-{i}" for i in range(len(names)))
    rules["call"] = f"{literal(OPEN)} ({alternatives})"


# Before mistral-nemo, whose one marker this family's templates also hold.
FAMILY = Family(
    name="mistral",
    markers=(OPEN, ARGS),
    parser=MistralParser,
    call_rules=call_rules,
    priority=40,
    reasoning_start="[THINK]",
    reasoning_end="[/THINK]",
)
