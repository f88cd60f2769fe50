"""GBNF text: string literals and the "anything up to a marker" automaton
the families build their call grammars from. Pure text; llama.cpp parses
the result (the runtime checks a whole grammar before sampling with it)."""

from __future__ import annotations

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


def _class_char(c: str) -> str:
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
        other = "[^" + "".join(_class_char(c) for c in moves) + "]"
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
