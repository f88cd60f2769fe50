"""GBNF text: string literals and the "anything up to a marker" automaton
the families build their call grammars from. Pure text; llama.cpp parses
the result (the runtime checks a whole grammar before sampling with it)."""

from __future__ import annotations

import re

_LITERAL_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def literal(text: str) -> str:
    """`text` as a GBNF string literal."""
    out = []
    for c in text:
        if c in _LITERAL_ESCAPES:
            out.append(_LITERAL_ESCAPES[c])
        elif c < " " or c == "\x7f":
            out.append(f"\\x{ord(c):02X}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


_CLASS_ESCAPES = {"\\": "\\\\", "]": "\\]", "[": "\\[", "-": "\\x2D", "^": "\\x5E"}


def class_char(c: str) -> str:
    """`c` as it stands inside a GBNF character class."""
    if c in _CLASS_ESCAPES:
        return _CLASS_ESCAPES[c]
    return f"\\x{ord(c):02X}" if c < " " or c == "\x7f" else c


def until(marker: str, name: str) -> dict[str, str]:
    """Rules `name-0` ... matching any text up to and including the first
    `marker`: a right-linear grammar of the automaton that looks for it, one
    rule per state (how much of the marker was just seen)."""
    rules = {}
    for k in range(len(marker)):
        moves = {c: _advance(marker, k, c) for c in sorted(set(marker))}
        moves = {c: j for c, j in moves.items() if j}
        other = "[^" + "".join(class_char(c) for c in moves) + "]"
        alternatives = [f"{other} {name}-0"]
        for c, j in moves.items():
            alternatives.append(literal(c) if j == len(marker) else f"{literal(c)} {name}-{j}")
        rules[f"{name}-{k}"] = " | ".join(alternatives)
    return rules


def _advance(marker: str, k: int, c: str) -> int:
    """After matching `marker[:k]` and reading `c`: how much of it is matched."""
    seen = marker[:k] + c
    for j in range(min(len(seen), len(marker)), 0, -1):
        if seen.endswith(marker[:j]):
            return j
    return 0


_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]|\{[^}]*\}|[A-Za-z0-9-]+|[()|?*+]|\S')
_UNESCAPES = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "[": "[", "]": "]"}


def unliteral(token: str) -> str:
    """The text of a GBNF string literal (the inverse of `literal`)."""
    out, i, body = [], 0, token[1:-1]
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            if nxt in "xuU":
                width = {"x": 2, "u": 4, "U": 8}[nxt]
                out.append(chr(int(body[i + 2 : i + 2 + width], 16)))
                i += 2 + width
                continue
            out.append(_UNESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def fixed_start(rules: dict[str, str], root: str = "root") -> str:
    """The text every sentence of the grammar starts with: a forced call's
    scaffolding (its markers, and the tool's name when there is one tool),
    which the engine takes without sampling."""
    return _fixed(_TOKEN.findall(rules[root]), rules, 0)[0]


def _fixed(tokens: list[str], rules: dict[str, str], depth: int) -> tuple[str, bool]:
    """(the fixed text `tokens` start with, whether that is all of them)."""
    if depth > 32:
        return "", False
    # Top-level alternatives share no fixed text we could take safely.
    level = 0
    for t in tokens:
        level += (t == "(") - (t == ")")
        if t == "|" and level == 0:
            return "", False
    text, i = "", 0
    while i < len(tokens):
        t = tokens[i]
        if t == "(":
            close, level = i, 0
            for j in range(i, len(tokens)):
                level += (tokens[j] == "(") - (tokens[j] == ")")
                if level == 0:
                    close = j
                    break
            inner, end = tokens[i + 1 : close], close + 1
        else:
            inner, end = [t], i + 1
        if end < len(tokens) and tokens[end][0] in "?*+{":
            return text, False  # repeated or optional: not fixed
        if t.startswith('"'):
            text += unliteral(t)
        elif t == "(" or (t in rules and not t.startswith("[")):
            sub, whole = _fixed(inner if t == "(" else _TOKEN.findall(rules[t]), rules, depth + 1)
            text += sub
            if not whole:
                return text, False
        else:
            return text, False
        i = end
    return text, True
