"""Python keyword arguments read as a stream and written out as JSON: the
arguments of a Pythonic call, `NAME(key=value, ...)`, from just after its
`(`. Values are Python literals (strings in either quote, triple-quoted too,
with Python's escapes; numbers, hex and `_` too; `True` / `False` / `None`
or JSON's words; lists, tuples and dicts, trailing commas allowed); a bare
value that is not a number or a word is a string."""

from __future__ import annotations

import json
import math
import re

from .jsonscan import WHITESPACE, JsonOut

MAX_NAME = 256  # a name or key longer than this is not one
# Ends a bare key, value or tool name.
STOPS = frozenset(WHITESPACE + "=,()[]{}'\"<:;")
_WORDS = {"True": "true", "False": "false", "None": "null"}
_WORDS.update({w: w for w in ("true", "false", "null")})
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "v": "\v", "a": "\a"}
_ESCAPES.update({c: c for c in "\\'\"/"})
_HEX_WIDTH = {"x": 2, "u": 4, "U": 8}
_HEX = frozenset("0123456789abcdefABCDEF")
_CLOSERS = {"(": ")", "t": ")", "[": "]", "{": "}"}


def _bare(token: str) -> str:
    """A bare Python value as JSON text: a word, a number, else a string."""
    if token in _WORDS:
        return _WORDS[token]
    if _JSON_NUMBER.fullmatch(token):
        return token
    try:
        return str(int(token, 0))
    except ValueError:
        pass
    try:
        number = float(token)
    except ValueError:
        number = math.nan
    return repr(number) if math.isfinite(number) else json.dumps(token, ensure_ascii=False)


def _json_char(c: str) -> str:
    if c in '"\\' or c < " ":
        return json.dumps(c)[1:-1]
    if "\ud800" <= c <= "\udfff":  # half of a pair from \\uXXXX: JSON joins them
        return f"\\u{ord(c):04x}"
    return c


class Arguments(JsonOut):
    """One call's keyword arguments, from just after its `(`, read a
    character at a time and written out as JSON (see JsonOut).

    States: key (a keyword or `)`), keyword, equals, value, item (after `[`
    `(` or a comma in them: a value or the close), dict_key (the same in a
    dict), colon, string, bare (a bare key or value), after (a value ended).
    `stack` holds the open brackets, the call's own `(` first; `role` says
    whether the open string or bare token is a dict key."""

    def __init__(self, markers: tuple[str, ...]) -> None:
        super().__init__()
        self.markers = markers  # where the arguments stop
        self.state = "key"
        self.stack = ["("]
        self.role = "value"
        self.token = ""
        self.quote = ""  # the open string's quote: ' " ''' or \"\"\"
        self.opened = False  # the JSON object's `{` was written
        self.comma = False  # a comma read in a container, written with the next item
        self.closed = False  # the call's `)` was read

    @property
    def done(self) -> bool:
        return self.closed

    def feed(self, buf: str, final: bool) -> int:
        """Reads from `buf`; returns how many characters it used. It stops
        before a marker, before what may still become one or an escape or
        quote cut short (unless `final`), and once done or broken."""
        i = 0
        while i < len(buf) and not self.done and not self.broken:
            if buf[i] == "<":
                rest = buf[i:]
                if rest.startswith(self.markers):
                    return i
                if not final and any(m.startswith(rest) for m in self.markers):
                    return i
            used = self._step(buf, i, final)
            if not used:
                return i
            i += used
        return i

    def close(self) -> None:
        """The output ended: a bare value cut off is taken as it stands."""
        if self.state == "bare" and self.role == "value" and not self.broken:
            self._emit(_bare(self.token))

    # ---- the notation --------------------------------------------------

    def _step(self, buf: str, i: int, final: bool) -> int:
        """Takes what starts at `buf[i]`; returns how many characters (0:
        more are needed to tell)."""
        c, state = buf[i], self.state
        if state == "string":
            return self._string(buf, i, final)
        if state == "bare":
            if c not in STOPS:
                self.token += c
                return 1
            self._end_bare()
            return 0 if self.broken else self._step(buf, i, final)
        if state == "keyword":
            if c not in STOPS and len(self.token) < MAX_NAME:
                self.token += c
                return 1
            self.state = "equals"
            return self._step(buf, i, final)
        if c in WHITESPACE:
            return 1
        if state == "key":
            if c == ")":
                self._close()
            elif c in STOPS:
                self.broken = True  # a positional argument
            else:
                self.state, self.token = "keyword", c
            return 1
        if state == "equals":
            if c != "=" or not self.token:
                self.broken = True
                return 1
            self._emit((", " if self.opened else "{") + json.dumps(self.token) + ": ")
            self.opened, self.state = True, "value"
            return 1
        if state == "colon":
            if c != ":":
                self.broken = True
                return 1
            self._emit(": ")
            self.state = "value"
            return 1
        if state == "after":
            if c == ",":
                top = self.stack[-1]
                self.comma = top != "("
                self.state = {"(": "key", "{": "dict_key"}.get(top, "item")
            elif c == _CLOSERS[self.stack[-1]]:
                self._close()
            else:
                self.broken = True
            return 1
        # value, item, dict_key: something begins (or a container closes)
        if state != "value" and c == _CLOSERS[self.stack[-1]]:
            self.comma = False  # a trailing comma writes nothing
            self._close()
            return 1
        self.role = "key" if state == "dict_key" else "value"
        if c in "'\"":
            return self._open_string(buf, i, final)
        if c in "[({" and self.role == "value":
            self._emit(", " * self.comma + ("{" if c == "{" else "["))
            self.comma = False
            self.stack.append("t" if c == "(" else c)
            self.state = "dict_key" if c == "{" else "item"
            return 1
        if c in STOPS:
            self.broken = True
            return 1
        self.state, self.token = "bare", c
        return 1

    def _open_string(self, buf: str, i: int, final: bool) -> int:
        q = buf[i]
        three = buf[i : i + 3]
        if not final and len(three) < 3 and three == q * len(three):
            return 0  # "" or the start of \"\"\"
        self.quote = q * 3 if three == q * 3 else q
        self._emit(", " * self.comma + '"')
        self.comma, self.state = False, "string"
        return len(self.quote)

    def _string(self, buf: str, i: int, final: bool) -> int:
        c, q = buf[i], self.quote
        if c == "\\":
            return self._escape(buf, i, final)
        if buf.startswith(q, i):
            self._emit('"')
            self.state = "colon" if self.role == "key" else "after"
            return len(q)
        if len(q) == 3 and not final and q.startswith(buf[i:]):
            return 0  # maybe the closing quotes
        self._emit(_json_char(c))
        return 1

    def _escape(self, buf: str, i: int, final: bool) -> int:
        if i + 1 >= len(buf):
            if not final:
                return 0
            return 1  # a lone backslash at the very end: dropped
        e = buf[i + 1]
        width = _HEX_WIDTH.get(e)
        if width is not None:
            digits = buf[i + 2 : i + 2 + width]
            if not final and len(digits) < width and set(digits) <= _HEX:
                return 0
            if len(digits) == width and set(digits) <= _HEX and int(digits, 16) <= 0x10FFFF:
                self._emit(_json_char(chr(int(digits, 16))))
                return 2 + width
        elif e == "\n":  # a line continuation
            return 2
        elif e in _ESCAPES:
            self._emit(_json_char(_ESCAPES[e]))
            return 2
        self._emit("\\\\" + _json_char(e))  # not an escape: kept, as Python does
        return 2

    def _end_bare(self) -> None:
        token, self.token = self.token, ""
        if self.role == "key":
            self._emit(", " * self.comma + json.dumps(token, ensure_ascii=False))
            self.state = "colon"
        else:
            self._emit(", " * self.comma + _bare(token))
            self.state = "after"
        self.comma = False

    def _close(self) -> None:
        top = self.stack.pop()
        if top == "(":
            self._emit("}" if self.opened else "{}")
            self.closed = True
        else:
            self._emit("}" if top == "{" else "]")
            self.state = "after"
