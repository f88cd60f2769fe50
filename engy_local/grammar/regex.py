"""Regular expressions (Python's syntax, the subset freeform tools use) read
into the small tree lark.py turns into GBNF: literals, escapes, classes,
`.`, groups, alternation and quantifiers. Anything else (anchors inside,
lookarounds, back-references, possessive quantifiers) is Unconvertible.
Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# -- the neutral tree both syntaxes read into ------------------------------------


@dataclass(frozen=True)
class Chars:
    """One character from `ranges` (or, when `negated`, from none of them)."""

    ranges: tuple[tuple[int, int], ...]
    negated: bool = False


# A node: ("text", str) | ("chars", Chars) | ("ref", name) | ("seq", [node])
#         | ("alt", [node]) | ("rep", node, low, high or None)
Node = tuple[Any, ...]


class Unconvertible(Exception):
    """The grammar uses something this module does not convert."""


# -- reading -------------------------------------------------------------

_DIGIT = ((0x30, 0x39),)
_WORD = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))
_SPACE = ((0x09, 0x0D), (0x20, 0x20))
_CLASS_ESCAPES = {"d": _DIGIT, "w": _WORD, "s": _SPACE}
_CHAR_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v", "0": "\0"}


class _Regex:
    """Python's regular expressions, the subset above, read into nodes."""

    def __init__(self, pattern: str, dot_all: bool) -> None:
        self.s, self.i, self.dot_all = pattern, 0, dot_all

    def parse(self) -> Node:
        node = self._alt()
        if self.i != len(self.s):
            raise Unconvertible(f"regex: unexpected {self.s[self.i]!r}")
        return node

    def _peek(self) -> str:
        return self.s[self.i] if self.i < len(self.s) else ""

    def _alt(self) -> Node:
        options = [self._seq()]
        while self._peek() == "|":
            self.i += 1
            options.append(self._seq())
        return options[0] if len(options) == 1 else ("alt", options)

    def _seq(self) -> Node:
        items: list[Node] = []
        while self._peek() not in ("", "|", ")"):
            items.append(self._quantified(self._atom()))
        return items[0] if len(items) == 1 else ("seq", items)

    def _quantified(self, atom: Node) -> Node:
        c = self._peek()
        if c in ("*", "+", "?"):
            self.i += 1
            low, high = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
        elif c == "{" and (m := re.compile(r"\{(\d*)(,?)(\d*)\}").match(self.s, self.i)):
            self.i = m.end()
            low = int(m[1] or 0)
            high = int(m[3]) if m[3] else (None if m[2] else low)
        else:
            return atom
        if self._peek() == "?":  # lazy: the same strings
            self.i += 1
        elif self._peek() == "+":
            raise Unconvertible("regex: possessive quantifier")
        return ("rep", atom, low, high)

    def _atom(self) -> Node:
        c = self._peek()
        self.i += 1
        if c == "(":
            if self.s.startswith("?:", self.i):
                self.i += 2
            elif self.s.startswith("?P<", self.i):
                self.i = self.s.index(">", self.i) + 1
            elif self._peek() == "?":
                raise Unconvertible("regex: (? group")
            node = self._alt()
            if self._peek() != ")":
                raise Unconvertible("regex: unclosed group")
            self.i += 1
            return node
        if c == "[":
            return ("chars", self._class())
        if c == ".":
            return ("chars", Chars(() if self.dot_all else ((10, 10),), negated=True))
        if c == "\\":
            return self._escape(in_class=False)
        if c in ("^", "$", "*", "+", "?", "{"):
            raise Unconvertible(f"regex: {c!r} here")
        return ("text", c)

    def _escape(self, in_class: bool) -> Node:
        c = self._peek()
        self.i += 1
        if c.lower() in _CLASS_ESCAPES:
            return ("chars", Chars(_CLASS_ESCAPES[c.lower()], negated=c.isupper()))
        if c in _CHAR_ESCAPES:
            return ("text", _CHAR_ESCAPES[c])
        if c in ("x", "u", "U"):
            width = {"x": 2, "u": 4, "U": 8}[c]
            digits = self.s[self.i : self.i + width]
            if len(digits) != width or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise Unconvertible("regex: bad \\x escape")
            self.i += width
            return ("text", chr(int(digits, 16)))
        if c == "b" and in_class:
            return ("text", "\b")
        if c == "" or c.isalnum():  # \b \A \Z, back-references
            raise Unconvertible(f"regex: \\{c}")
        return ("text", c)

    def _class(self) -> Chars:
        negated = self._peek() == "^"
        if negated:
            self.i += 1
        ranges: list[tuple[int, int]] = []
        first = True
        while True:
            c = self._peek()
            if c == "":
                raise Unconvertible("regex: unclosed class")
            if c == "]" and not first:
                self.i += 1
                break
            first = False
            lo = self._class_item()
            if isinstance(lo, Chars):
                if lo.negated:
                    raise Unconvertible("regex: \\S, \\W or \\D in a class")
                ranges += lo.ranges
                continue
            if self._peek() == "-" and self.s[self.i + 1 : self.i + 2] not in ("]", ""):
                self.i += 1
                hi = self._class_item()
                if isinstance(hi, Chars) or ord(hi) < ord(lo):
                    raise Unconvertible("regex: bad class range")
                ranges.append((ord(lo), ord(hi)))
            else:
                ranges.append((ord(lo), ord(lo)))
        return Chars(tuple(ranges), negated)

    def _class_item(self) -> str | Chars:
        c = self._peek()
        self.i += 1
        if c != "\\":
            return c
        item: str | Chars = self._escape(in_class=True)[1]
        return item


def regex_tree(pattern: str, dot_all: bool = False) -> Node:
    return _Regex(pattern, dot_all).parse()
