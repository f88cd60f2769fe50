"""Llama 3.1 / 3.2 / 3.3: a JSON object `{"name": NAME, "parameters": {...}}`.

The templates tell the model to "respond in the format {"name": function
name, "parameters": dictionary of argument name and its value}" and render
earlier calls that way, bare, as the whole assistant turn. 3.1 and 3.3 also
know `<|python_tag|>`, which the models put before a call (and before the
builtin tools' `brave_search.call(...)` and code, which are out of scope);
3.2's template has no `<|python_tag|>` at all. One parser reads both forms,
and the models' habit of writing several calls one after another, separated
by `;` or newlines.

How a call is told from text
- `<|python_tag|>` anywhere starts a call (the text before it is text).
- A bare `{` starts a call only at the start of the answer (after optional
  whitespace) or right after another call: from there the output is held
  while it may still be a call, which it is once its first keys are
  `"name"` (optionally after `"type"`, as in `{"type": "function", "name":
  ...}`) and the name is an offered tool. Any other first key, a name that
  is not offered, or JSON that breaks before the name ends the hold: what
  was held is text, and the rest is read again as text. JSON in the middle
  of an answer is always text.
- After `<|python_tag|>` the keys may come in any order (as in hermes).
- "parameters" or "arguments" hold the arguments; the rest of toolparse's
  reading of a call object applies (string arguments, other keys, missing
  arguments, raw control characters).

Rules of this family, where a call has no closing tag
- A call ends where its JSON object ends. After it, whitespace and `;` are
  dropped; then `{` or `<|python_tag|>` starts the next call, anything else
  is text.
- A name that is not an offered tool, or JSON that breaks before the name is
  complete: the call's text so far, with `<|python_tag|>` and the whitespace
  before it, is delivered as text, and the rest is read again as text (so
  builtin-tool calls and code after `<|python_tag|>` come out as text).
- JSON that breaks after the call started, or output that ends inside it:
  the arguments are cut back and closed (toolparse rule 2), and the text from
  the break on is read again as after a call.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection

from ...chat import Event, TextDelta, ToolCallDelta, ToolCallEnd
from ...grammar.gbnf import literal
from ..parsing.jsonscan import WHITESPACE
from ..parsing.toolparse import CallBlock, PlainParser, held
from .base import Family

PYTHON_TAG = "<|python_tag|>"
_SEPARATORS = WHITESPACE + ";"
_NAME_KEYS = frozenset({"name", "type"})


class Llama3Parser(PlainParser):
    """Llama 3.x JSON calls, bare or after `<|python_tag|>` (family "llama3")."""

    parses_calls = True

    def __init__(
        self, *, tools: Collection[str], thinking: bool, new_id: Callable[[], str]
    ) -> None:
        super().__init__(tools=tools, thinking=thinking, new_id=new_id)
        self._fresh = True  # only whitespace since the answer or the last call began
        self._bare = False  # the open call has no tag: it must name a tool first
        self._steps["after"] = self._after

    def _text(self, out: list[Event], final: bool) -> bool:
        buf = self._buf
        if self._fresh:
            rest = buf.lstrip()
            if rest.startswith("{"):
                self._open(buf[: len(buf) - len(rest)], "", rest[1:], bare=True)
                return True
            if not final and (not rest or (PYTHON_TAG.startswith(rest) and rest != PYTHON_TAG)):
                return False  # whitespace, or the start of a tag: wait
            self._fresh = False
        at = buf.find(PYTHON_TAG)
        if at >= 0:
            before = buf[:at]
            text = before.rstrip()
            if text:
                out.append(TextDelta(text))
            self._open(before[len(text) :], PYTHON_TAG, buf[at + len(PYTHON_TAG) :], bare=False)
            return True
        keep = 0 if final else held(buf, (PYTHON_TAG,), whitespace=True)
        if len(buf) > keep:
            out.append(TextDelta(buf[: len(buf) - keep]))
        self._buf = buf[len(buf) - keep :]
        return False

    def _open(self, lead: str, tag: str, rest: str, *, bare: bool) -> None:
        call = CallBlock(lead)
        call.raw = [lead, tag]
        if bare:
            call.feed_json("{")
        self._call, self._bare, self._buf, self._mode = call, bare, rest, "call"

    def _in_call(self, out: list[Event], final: bool) -> bool:
        call = self._call
        assert call is not None
        buf = self._buf
        # One character at a time: whether this is a call is decided at an
        # exact character, however the output was split.
        for i, c in enumerate(buf):
            if not call.feed_json(c):
                self._buf = buf[i:]
                return self._stop(call, out)
            if call.index < 0 and self._rejected(call):
                self._buf = buf[i + 1 :]
                return self._stop(call, out)
            self._stream(call, out)
            if not call.in_json:  # the object is complete
                self._buf = buf[i + 1 :]
                return self._stop(call, out)
        self._buf = ""
        if final:
            return self._stop(call, out)
        return False

    def _rejected(self, call: CallBlock) -> bool:
        """Whether the call, not started yet, can no longer become one."""
        if call.bad_name or (call.name is not None and call.name not in self._tools):
            return True
        return self._bare and call.name is None and call.key not in (None, *_NAME_KEYS)

    def _stop(self, call: CallBlock, out: list[Event]) -> bool:
        """Ends the call (or gives up on it as text) where it stands."""
        self._call = None
        if call.index < 0:
            out.append(TextDelta("".join(call.raw)))
            self._mode, self._fresh = "text", False
            return True
        whole, last = call.final_arguments()
        if last:
            out.append(ToolCallDelta(call.index, last))
        out.append(ToolCallEnd(call.index, whole))
        self._mode = "after"
        return True

    def _after(self, out: list[Event], final: bool) -> bool:
        self._buf = self._buf.lstrip(_SEPARATORS)
        if not self._buf:
            return False
        self._mode, self._fresh = "text", True
        return True


def call_rules(names: list[str], roots: list[str], rules: dict[str, str]) -> None:
    """{"name": "NAME", "parameters": ARGS}, bare, as the templates render calls."""
    for i, (name, root) in enumerate(zip(names, roots, strict=True)):
        quoted = json.dumps(name, ensure_ascii=False)[1:-1]
        rules[f"call-{i}"] = literal(quoted + '", "parameters": ') + " " + root
    alternatives = " | ".join(f"call-{i}" for i in range(len(names)))
    head, tail = literal('{"name": "'), literal("}")
    rules["call"] = f"{head} ({alternatives}) {tail}"


# The tool-result role and the call format, both in every Llama 3.x
# template (3.2's has no <|python_tag|>).
FAMILY = Family(
    name="llama3",
    markers=("<|start_header_id|>ipython<|end_header_id|>", '"parameters": '),
    parser=Llama3Parser,
    call_rules=call_rules,
    priority=80,
)
