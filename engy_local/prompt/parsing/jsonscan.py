"""JSON read one character at a time, for the tool-call parsers: a scanner
that knows at every point whether what it has read can still become a value
and how to close it, and the repairs that make a cut object whole."""

from __future__ import annotations

import json

__all__ = ["WHITESPACE", "JsonOut", "JsonScanner", "decode_string", "repair_object"]

WHITESPACE = " \t\n\r"
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}
_HEX = "0123456789abcdefABCDEF"
_LITERALS = {"t": "rue", "f": "alse", "n": "ull"}
# number sub-state -> character class -> next sub-state (RFC 8259 grammar)
_NUMBER: dict[str, dict[str, str]] = {
    "-": {"0": "0", "d": "int"},
    "0": {".": ".", "e": "e"},
    "int": {"0": "int", "d": "int", ".": ".", "e": "e"},
    ".": {"0": "frac", "d": "frac"},
    "frac": {"0": "frac", "d": "frac", "e": "e"},
    "e": {"0": "exp", "d": "exp", "s": "sign"},
    "sign": {"0": "exp", "d": "exp"},
    "exp": {"0": "exp", "d": "exp"},
}
_NUMBER_ENDS = frozenset({"0", "int", "frac", "exp"})


def _number_class(c: str) -> str:
    if c == "0":
        return "0"
    if "1" <= c <= "9":
        return "d"
    return {".": ".", "e": "e", "E": "e", "+": "s", "-": "s"}.get(c, "")


class JsonScanner:
    """Reads one JSON value a character at a time and knows, at every point,
    whether the text so far can still become valid JSON and what closes it.

    States: value, value_or_close (after `[`), key, key_or_close (after `{`),
    colon, after (a value ended inside a container), string, number, literal,
    done. Once `feed` returns None the scanner is broken: feed it no more.
    """

    def __init__(self) -> None:
        self.stack: list[str] = []  # open containers, "{" or "["
        self.state = "value"
        self.number = ""  # sub-state while in a number
        self.literal = ""  # the rest of true / false / null still expected
        self.in_key = False  # the open string is an object key
        self.escape = 0  # 1 after a backslash, 2..5 inside \\uXXXX

    @property
    def done(self) -> bool:
        return self.state == "done"

    def feed(self, c: str) -> str | None:
        """Takes one character; returns the text to keep for it (itself, or an
        escape for a raw control character in a string), or None if it cannot
        continue valid JSON."""
        state = self.state
        if state == "string":
            return self._string(c)
        if state == "number":
            step = _NUMBER[self.number].get(_number_class(c))
            if step is not None:
                self.number = step
                return c
            if self.number not in _NUMBER_ENDS:
                return None
            self._end_value()
            return None if self.done else self.feed(c)
        if state == "literal":
            if c != self.literal[0]:
                return None
            self.literal = self.literal[1:]
            if not self.literal:
                self._end_value()
            return c
        if state == "done":
            return None
        if c in WHITESPACE:
            return c
        if state in ("value", "value_or_close"):
            if c == "]" and state == "value_or_close":
                return self._close(c)
            return self._begin_value(c)
        if state in ("key", "key_or_close"):
            if c == '"':
                self.state, self.in_key = "string", True
                return c
            return self._close(c) if c == "}" and state == "key_or_close" else None
        if state == "colon":
            if c != ":":
                return None
            self.state = "value"
            return c
        # after a value inside a container
        top = self.stack[-1]
        if c == ",":
            self.state = "key" if top == "{" else "value"
            return c
        return self._close(c) if c == ("}" if top == "{" else "]") else None

    def closer(self, base: int = 0) -> str | None:
        """The text that completes the value open at nesting depth `base`
        (0: the whole document) right here, or None if closing brackets and
        a quote cannot complete it at this point."""
        state = self.state
        if state == "done":
            return ""
        if state == "string":
            if self.in_key or self.escape:
                return None
            tail = '"'
        elif state in ("after", "key_or_close", "value_or_close") or (
            state == "number" and self.number in _NUMBER_ENDS
        ):
            tail = ""
        else:
            return None
        return tail + "".join("}" if k == "{" else "]" for k in reversed(self.stack[base:]))

    def _begin_value(self, c: str) -> str | None:
        if c in "{[":
            self.stack.append(c)
            self.state = "key_or_close" if c == "{" else "value_or_close"
        elif c == '"':
            self.state, self.in_key = "string", False
        elif c == "-" or c in "0123456789":
            self.state = "number"
            self.number = "-" if c == "-" else "0" if c == "0" else "int"
        elif c in _LITERALS:
            self.state, self.literal = "literal", _LITERALS[c]
        else:
            return None
        return c

    def _string(self, c: str) -> str | None:
        if self.escape == 1:
            if c == "u":
                self.escape = 2
            elif c in '"\\/bfnrt':
                self.escape = 0
            else:
                return None
            return c
        if self.escape:
            if c not in _HEX:
                return None
            self.escape = 0 if self.escape == 5 else self.escape + 1
            return c
        if c == '"':
            if self.in_key:
                self.state = "colon"
            else:
                self._end_value()
            return c
        if c == "\\":
            self.escape = 1
            return c
        if c < " ":
            return _ESCAPES.get(c, f"\\u{ord(c):04x}")
        return c

    def _close(self, c: str) -> str:
        self.stack.pop()
        self._end_value()
        return c

    def _end_value(self) -> None:
        self.state = "after" if self.stack else "done"


def repair_object(text: str) -> str:
    """`text` as a JSON object: itself when it is one (ignoring what follows
    it), else cut back to the last point where closing what is open gives a
    valid object and closed there, else `{}`."""
    text = text.lstrip()
    if not text.startswith("{"):
        return "{}"
    scanner = JsonScanner()
    out, good, closer = "", 0, "}"
    for c in text:
        piece = scanner.feed(c)
        if piece is None:
            break
        out += piece
        end = scanner.closer()
        if end is not None:
            good, closer = len(out), end
        if scanner.done:
            break
    return out[:good] + closer


class JsonOut:
    """A call's arguments written out as JSON a piece at a time, by a parser
    that reads them in a notation of the model's own (Gemma's, Python's),
    checked by a JsonScanner as they go: `good` holds the pieces up to the
    last point where the JSON can be closed, `pending` what came after it,
    `closer` what closes `good` ("{}" until the object opens); `sent`: the
    pieces gone out as deltas. A piece the scanner refuses breaks it."""

    def __init__(self) -> None:
        self.scanner = JsonScanner()
        self.broken = False
        self.good: list[str] = []
        self.pending = ""
        self.closer = "{}"
        self.sent = 0

    @property
    def done(self) -> bool:
        return self.scanner.done

    def arguments(self) -> tuple[str, str]:
        """(the whole arguments text, the last delta that completes it)."""
        end = "" if self.done else self.closer
        return "".join(self.good) + end, "".join(self.good[self.sent :]) + end

    def unsent(self) -> str:
        piece = "".join(self.good[self.sent :])
        self.sent = len(self.good)
        return piece

    def _emit(self, text: str) -> None:
        scanner = self.scanner
        for c in text:
            if self.broken or scanner.done:
                return
            piece = scanner.feed(c)
            if piece is None:
                self.broken = True
                return
            self.pending += piece
            end = scanner.closer()
            if end is not None:
                self.good.append(self.pending)
                self.pending, self.closer = "", end


def decode_string(literal: str) -> str | None:
    try:
        value = json.loads(literal)
    except ValueError:
        return None
    return value if isinstance(value, str) else None
