"""A freeform tool's grammar (Lark, or a regular expression) as GBNF rules
of the JSON string that carries the tool's input.

Codex sends apply_patch as a freeform tool whose input must match a Lark
grammar; the model writes that input as the string of a JSON call
(`{"input": "*** Begin Patch\\n..."}`), so the rules here match the text a
sentence of the grammar becomes once JSON-escaped: a quote as `\\"`, a
backslash as `\\\\`, a newline as `\\n` or as the raw newline models also
write (the call parsers escape it).

The subset converted is what tools send: rules and terminals, string
literals (and "a".."z" ranges), regular expressions, ( ) [ ] ? * + ~ n..m,
`-> alias` (ignored), rule priorities (ignored), and %import of common
terminals (COMMON). Regular expressions: literals, escapes, classes, `.`,
groups, alternation and quantifiers; `^` and `$` at the ends of a regex
tool's pattern. Anything else (%ignore, templates, lookarounds, flags but
`s`, left recursion, which llama.cpp's grammars refuse) converts to None:
the input is then any string, as before. A literal's character may also
come as its `\\uXXXX` escape; a class or `.` that admits characters beyond
ASCII takes any `\\uXXXX`, without checking which character it names.

Pure: text in, rules out.
"""

from __future__ import annotations

import ast
import re

from .gbnf import literal
from .regex import Chars, Node, Unconvertible, regex_tree

MAX_REPEAT = 64
MAX_RULES = 512
_LAST = 0x10FFFF

# -- Lark ----------------------------------------------------------------------------

# Lark's common.lark terminals a grammar may %import, as regular expressions.
COMMON = {
    "LF": r"\n",
    "CR": r"\r",
    "NEWLINE": r"(\r?\n)+",
    "WS": r"[ \t\f\r\n]+",
    "WS_INLINE": r"[ \t]+",
    "DIGIT": r"[0-9]",
    "HEXDIGIT": r"[a-fA-F0-9]",
    "INT": r"[0-9]+",
    "SIGNED_INT": r"[+-]?[0-9]+",
    "LETTER": r"[A-Za-z]",
    "LCASE_LETTER": r"[a-z]",
    "UCASE_LETTER": r"[A-Z]",
    "WORD": r"[A-Za-z]+",
    "CNAME": r"[_A-Za-z][_A-Za-z0-9]*",
}

_TOKEN = re.compile(
    r"""\s+|//[^\n]*
    |(?P<string>"(?:[^"\\\n]|\\.)*"i?)
    |(?P<regex>/(?:[^/\\\n]|\\.)+/[a-z]*)
    |(?P<alias>->\s*\w+)
    |(?P<punct>\.\.|[()\[\]|?*+~])
    |(?P<number>\d+)
    |(?P<name>[A-Za-z_]\w*)
    |(?P<bad>.)""",
    re.X | re.S,
)
_HEADER = re.compile(r"\s*[?!]?([A-Za-z_]\w*)(?:\.-?\d+)?\s*:(.*)", re.S)
_IMPORT = re.compile(r"%import\s+common\s*(?:\.\s*(\w+)(?:\s*->\s*(\w+))?|\(([\w\s,]+)\))\s*$")


def lark_rules(definition: str) -> dict[str, Node]:
    """The rules of a Lark grammar by name (`start` among them)."""
    statements: list[str] = []
    for line in definition.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("//"):
            continue
        if statements and not stripped.startswith("%") and not _HEADER.match(line):
            statements[-1] += "\n" + line  # a continued rule: `| more`
        else:
            statements.append(line)
    rules: dict[str, Node] = {}
    for statement in statements:
        stripped = statement.strip()
        if stripped.startswith("%"):
            for name, alias in _imports(stripped):
                rules[alias] = regex_tree(COMMON[name])
            continue
        m = _HEADER.match(statement)
        if m is None:
            raise Unconvertible(f"lark: cannot read {stripped[:40]!r}")
        rules[m[1]] = _LarkExpr(_tokens(m[2])).parse()
    if "start" not in rules:
        raise Unconvertible("lark: no start rule")
    return rules


def _imports(statement: str) -> list[tuple[str, str]]:
    m = _IMPORT.match(statement)
    if m is None:
        raise Unconvertible(f"lark: {statement.split()[0]}")
    names = [(m[1], m[2] or m[1])] if m[1] else [(n, n) for n in re.split(r"[\s,]+", m[3].strip())]
    for name, _ in names:
        if name not in COMMON:
            raise Unconvertible(f"lark: common.{name}")
    return names


def _tokens(text: str) -> list[tuple[str, str]]:
    out = []
    for m in _TOKEN.finditer(text):
        if m.lastgroup is None:
            continue
        if m.lastgroup == "bad":
            raise Unconvertible(f"lark: {m[0]!r}")
        out.append((m.lastgroup, m[0]))
    return out


class _LarkExpr:
    """One rule's body read into a node."""

    def __init__(self, tokens: list[tuple[str, str]]) -> None:
        self.tokens, self.i = tokens, 0

    def _peek(self) -> tuple[str, str]:
        return self.tokens[self.i] if self.i < len(self.tokens) else ("end", "")

    def _take(self) -> tuple[str, str]:
        token = self._peek()
        self.i += 1
        return token

    def parse(self) -> Node:
        node = self._alt()
        if self.i != len(self.tokens):
            raise Unconvertible(f"lark: unexpected {self._peek()[1]!r}")
        return node

    def _alt(self) -> Node:
        options = [self._seq()]
        while self._peek()[1] == "|":
            self.i += 1
            options.append(self._seq())
        return options[0] if len(options) == 1 else ("alt", options)

    def _seq(self) -> Node:
        items: list[Node] = []
        while True:
            kind, text = self._peek()
            if kind == "end" or (kind == "punct" and text in ("|", ")", "]")):
                break
            if kind == "alias":
                self.i += 1
                continue
            items.append(self._quantified(self._atom()))
        return items[0] if len(items) == 1 else ("seq", items)

    def _quantified(self, atom: Node) -> Node:
        kind, text = self._peek()
        if text in ("?", "*", "+") and kind == "punct":
            self.i += 1
            low, high = {"*": (0, None), "+": (1, None), "?": (0, 1)}[text]
            return ("rep", atom, low, high)
        if text == "~":
            self.i += 1
            low = high = self._number()
            if self._peek()[1] == "..":
                self.i += 1
                high = self._number()
            return ("rep", atom, low, high)
        return atom

    def _number(self) -> int:
        kind, text = self._take()
        if kind != "number":
            raise Unconvertible("lark: ~ without a number")
        return int(text)

    def _atom(self) -> Node:
        kind, text = self._take()
        if text in ("(", "["):
            node = self._alt()
            if self._take()[1] != {"(": ")", "[": "]"}[text]:
                raise Unconvertible("lark: unclosed group")
            return node if text == "(" else ("rep", node, 0, 1)
        if kind == "string":
            value = _string(text)
            if self._peek()[1] == "..":
                self.i += 1
                kind2, text2 = self._take()
                end = _string(text2) if kind2 == "string" else ""
                if len(value) != 1 or len(end) != 1 or end < value:
                    raise Unconvertible("lark: bad range")
                return ("chars", Chars(((ord(value), ord(end)),)))
            return ("text", value)
        if kind == "regex":
            body, _, flags = text[1:].rpartition("/")
            if set(flags) - {"s"}:
                raise Unconvertible(f"lark: regex flags {flags!r}")
            return regex_tree(body.replace("\\/", "/"), dot_all="s" in flags)
        if kind == "name":
            return ("ref", text)
        raise Unconvertible(f"lark: unexpected {text!r}")


def _string(token: str) -> str:
    if token.endswith("i"):
        raise Unconvertible("lark: case-insensitive string")
    try:
        value = ast.literal_eval(token)
    except (ValueError, SyntaxError) as e:
        raise Unconvertible("lark: bad string") from e
    if not isinstance(value, str):
        raise Unconvertible("lark: bad string")
    return value


# -- checks ----------------------------------------------------------------------------


def _check(rules: dict[str, Node]) -> None:
    """Every name defined, and no rule that can start with itself."""
    nullable: dict[str, bool] = {name: False for name in rules}

    def can_be_empty(node: Node) -> bool:
        kind = node[0]
        if kind == "text":
            return not node[1]
        if kind == "chars":
            return False
        if kind == "ref":
            if node[1] not in rules:
                raise Unconvertible(f"lark: {node[1]} is not defined")
            return nullable[node[1]]
        if kind == "seq":
            return all(can_be_empty(n) for n in node[1])
        if kind == "alt":
            return any(can_be_empty(n) for n in node[1])
        return node[2] == 0 or can_be_empty(node[1])

    changed = True
    while changed:
        changed = False
        for name, node in rules.items():
            if not nullable[name] and can_be_empty(node):
                nullable[name] = changed = True

    def first_refs(node: Node) -> set[str]:
        kind = node[0]
        if kind == "ref":
            return {node[1]}
        if kind == "alt":
            return set().union(*(first_refs(n) for n in node[1]))
        if kind == "rep":
            return first_refs(node[1])
        if kind == "seq":
            out: set[str] = set()
            for n in node[1]:
                out |= first_refs(n)
                if not can_be_empty(n):
                    break
            return out
        return set()

    starts = {name: first_refs(node) for name, node in rules.items()}
    for name in rules:
        seen, todo = set(), list(starts[name])
        while todo:
            ref = todo.pop()
            if ref == name:
                raise Unconvertible(f"lark: {name} is left-recursive")
            if ref not in seen:
                seen.add(ref)
                todo += starts[ref]


# -- GBNF of the JSON-escaped text --------------------------------------------------

# How JSON writes a character it must escape (the first form is the escape;
# engy's call parsers also take a raw newline, tab or carriage return).
_JSON_FORMS = {
    '"': ['\\"'],
    "\\": ["\\\\"],
    "\n": ["\\n", "\n"],
    "\t": ["\\t", "\t"],
    "\r": ["\\r", "\r"],
    "\b": ["\\b"],
    "\f": ["\\f"],
}
_SPECIAL = [(0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C), (0x7F, 0x7F)]


def _forms(c: str) -> list[str]:
    if c in _JSON_FORMS:
        return _JSON_FORMS[c]
    if c < " " or c == "\x7f":
        return [f"\\u{ord(c):04x}"]
    return [c]


def _one_of(alternatives: list[str]) -> str:
    """GBNF of any one of `alternatives` (GBNF expressions)."""
    return alternatives[0] if len(alternatives) == 1 else "(" + " | ".join(alternatives) + ")"


def _text(text: str) -> str:
    """`text` JSON-escaped: each character as itself (or its escape), or as
    `\\u` and its code, which JSON writers may use for any character."""
    if not text:
        return '""'
    parts = []
    for c in text:
        forms = [literal(f) for f in _forms(c) if not f.startswith("\\u")]
        if ord(c) <= 0xFFFF:  # hex digits in either case
            digits = (f"[{d}{d.upper()}]" if d.isalpha() else f'"{d}"' for d in f"{ord(c):04x}")
            forms.append(literal("\\u") + " " + " ".join(digits))
        parts.append(_one_of(forms))
    return " ".join(parts)


def _class_char(code: int) -> str:
    c = chr(code)
    if c in "\\]-^[" or code < 0x20 or code == 0x7F:
        return f"\\x{code:02X}"
    if code > 0xFFFF:
        return f"\\U{code:08X}"
    if code > 0x7E:
        return f"\\u{code:04X}"
    return c


def _class(ranges: list[tuple[int, int]], negated: bool) -> str:
    body = "".join(
        _class_char(lo) if lo == hi else f"{_class_char(lo)}-{_class_char(hi)}" for lo, hi in ranges
    )
    return f"[{'^' if negated else ''}{body}]"


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _minus(ranges: list[tuple[int, int]], cut: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out = []
    for lo, hi in ranges:
        pieces = [(lo, hi)]
        for clo, chi in cut:
            pieces = [
                p
                for a, b in pieces
                for p in ((a, min(b, clo - 1)), (max(a, chi + 1), b))
                if p[0] <= p[1]
            ]
        out += pieces
    return out


def _chars(chars: Chars) -> str:
    """One character of the set, JSON-escaped."""
    ranges = _merged(list(chars.ranges))
    if chars.negated:
        plain = _class(_merged(ranges + _SPECIAL), negated=True)
        # `\\uXXXX` takes any character, so only those with a short escape
        # (or a raw form) are listed
        specials = [
            (code, code)
            for lo, hi in _minus(_SPECIAL, ranges)
            for code in range(lo, hi + 1)
            if not _forms(chr(code))[0].startswith("\\u")
        ]
        alternatives = [plain, '"\\\\u" [0-9a-fA-F]{4}']
    else:
        plain_ranges = _minus(ranges, _SPECIAL)
        alternatives = [_class(plain_ranges, negated=False)] if plain_ranges else []
        specials = _merged([(max(lo, a), min(hi, b)) for lo, hi in ranges for a, b in _SPECIAL])
        specials = [r for r in specials if r[0] <= r[1]]
    for lo, hi in specials:
        alternatives += [literal(f) for code in range(lo, hi + 1) for f in _forms(chr(code))]
    if not alternatives:
        raise Unconvertible("an empty character class")
    return _one_of(alternatives)


def _repeat(low: int, high: int | None) -> str:
    if high is not None and high > MAX_REPEAT:
        high = None  # a looser bound, not thousands of copies of the item
    if low > MAX_REPEAT:
        raise Unconvertible(f"a repetition of at least {low}")
    if high is None:
        return "*" if low == 0 else "+" if low == 1 else f"{{{low},}}"
    if (low, high) == (0, 1):
        return "?"
    return f"{{{low}}}" if low == high else f"{{{low},{high}}}"


def _gbnf(node: Node, names: dict[str, str]) -> str:
    kind = node[0]
    if kind == "text":
        return _text(node[1])
    if kind == "chars":
        return _chars(node[1])
    if kind == "ref":
        return names[node[1]]
    if kind == "seq":
        return "(" + " ".join(_gbnf(n, names) for n in node[1]) + ")" if node[1] else '""'
    if kind == "alt":
        return "(" + " | ".join(_gbnf(n, names) for n in node[1]) + ")"
    _, inner, low, high = node
    return f"({_gbnf(inner, names)}){_repeat(low, high)}"


def _emit(tree: dict[str, Node], prefix: str, rules: dict[str, str]) -> str:
    if len(tree) > MAX_RULES:
        raise Unconvertible(f"over {MAX_RULES} rules")
    _check(tree)
    names = {name: prefix + name.replace("_", "-") for name in tree}
    rules.update({names[name]: _gbnf(node, names) for name, node in tree.items()})
    return names["start"]


def string_rules(syntax: str, definition: str, prefix: str, rules: dict[str, str]) -> str | None:
    """Adds the rules of a string's JSON-escaped content matching
    `definition` (syntax "lark" or "regex", a whole match) to `rules`, with
    names starting with `prefix`; returns the start rule's name, or None
    (nothing added) where the grammar is not converted."""
    try:
        if syntax == "lark":
            tree = lark_rules(definition)
        elif syntax == "regex":
            pattern = definition.removeprefix("^")
            if pattern.endswith("$") and not pattern.endswith("\\$"):
                pattern = pattern[:-1]
            tree = {"start": regex_tree(pattern)}
        else:
            return None
        own: dict[str, str] = {}
        start = _emit(tree, prefix, own)
    except (Unconvertible, RecursionError, KeyError):
        return None
    rules.update(own)
    return start
