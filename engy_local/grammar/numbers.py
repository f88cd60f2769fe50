"""GBNF of JSON numbers within bounds, digit by digit.

A grammar cannot compare values, but it can compare digit strings of one
length: "at least 317" among three-digit numbers is `"3" ("1" [7-9] | [2-9]
[0-9]) | [4-9] [0-9]{2}`. A range of integers is a choice over lengths,
each such a comparison; a negative range is a positive one after a minus.

Numbers with a fraction hold integral bounds exactly: the integral part I
and the fraction F of a value I.F (F possibly none) decide where it lies,
since I <= I.F < I + 1, and I.F equals I only when F is all zeros. A bound
with a fraction of its own (minimum 0.5 on a number) is not said here
(schema.py leaves it to the check after the answer).

Bounded numbers are written without an exponent: a value the grammar
allows is one the schema allows. Pure text.
"""

from __future__ import annotations

MAX_DIGITS = 16  # an unbounded integral part (what the plain number rule allows)

_FRACTION = '"." [0-9]{1,16}'
_ZERO_FRACTION = '"." "0"{1,16}'
_NONZERO_FRACTION = '"." [0-9]{0,15} [1-9] [0-9]{0,15}'


def integer_range(low: int | None, high: int | None) -> str:
    """GBNF of the JSON integers in [low, high] (None: unbounded), or "" for
    none."""
    if low is not None and high is not None and low > high:
        return ""
    parts = []
    if high is None or high >= 0:
        parts.append(_naturals(max(low, 0) if low is not None else 0, high))
    if low is None or low < 0:
        # -k for k in [max(-high, 1), -low]
        least = 1 if high is None or high >= 0 else -high
        parts.append(f'"-" ({_naturals(least, None if low is None else -low)})')
    return " | ".join(f"({p})" for p in parts if p)


def number_range(low: int | None, low_open: bool, high: int | None, high_open: bool) -> str:
    """GBNF of JSON numbers v with low <= v (low < v when `low_open`) and
    v <= high (v < high when `high_open`); bounds are integers or None.
    "" for none."""
    parts = []
    # v >= 0: the non-negative half.
    if high is None or high > 0 or (high == 0 and not high_open):
        if low is None or low < 0:
            half = _unsigned(0, False, high, high_open)
        else:
            half = _unsigned(low, low_open, high, high_open)
        parts.append(half)
    # v = -u with u > 0: -high <= u <= -low.
    if low is None or low < 0:
        if high is None or high >= 0:
            least, least_open = 0, True
        else:
            least, least_open = -high, high_open
        most = None if low is None else -low
        half = _unsigned(least, least_open, most, low_open)
        if half:
            parts.append(f'"-" ({half})')
    return " | ".join(f"({p})" for p in parts if p)


def _unsigned(low: int, low_open: bool, high: int | None, high_open: bool) -> str:
    """Non-negative numbers I.F within the bounds (low >= 0)."""
    parts = []
    # Any fraction: low (+1 when open) <= I <= high - 1.
    first = low + 1 if low_open else low
    last = None if high is None else high - 1
    if last is None or first <= last:
        parts.append(f"({_naturals(first, last)}) ({_FRACTION})?")
    # I = low with a fraction above zero, where the bound is open.
    if low_open and (high is None or low < high):
        parts.append(f"{_literal(low)} {_NONZERO_FRACTION}")
    # I = high, exactly (a fraction of zeros), where the bound is closed.
    if high is not None and not high_open and (high > low or (high == low and not low_open)):
        parts.append(f"{_literal(high)} ({_ZERO_FRACTION})?")
    return " | ".join(f"({p})" for p in parts)


def _naturals(low: int, high: int | None) -> str:
    """GBNF of the integers in [low, high] (low >= 0) as JSON writes them:
    no leading zeros. One choice per length of digits; lengths in a row
    that take every number of their length share one."""
    if high is not None and low > high:
        return ""
    short = len(str(low))
    long = len(str(high)) if high is not None else max(short, MAX_DIGITS)
    parts: list[str] = []
    every: list[int] = []  # lengths (in a row) whose every number is in range
    for n in range(short, long + 1):
        least = low if n == short else 10 ** (n - 1)
        most = high if high is not None and n == long else 10**n - 1
        if least > most:
            continue
        if n > short and least == 10 ** (n - 1) and most == 10**n - 1:
            every.append(n)
            continue
        parts.append(_same_length(str(least), str(most)))
    if every:  # lengths between the shortest and the longest: one choice
        parts.append(f"[1-9] [0-9]{{{every[0] - 1},{every[-1] - 1}}}")
    return " | ".join(f"({p})" for p in parts)


def _same_length(a: str, b: str) -> str:
    """GBNF of the digit strings from `a` to `b` (a <= b, both of the same
    length; leading zeros stand as digits)."""
    n = len(a)
    if a == b:
        return f'"{a}"'
    if a == "0" * n and b == "9" * n:
        return f"[0-9]{{{n}}}"
    if n == 1:
        return f"[{a}-{b}]"  # a < b here
    if a[0] == b[0]:
        return f'"{a[0]}" ({_same_length(a[1:], b[1:])})'
    parts = [f'"{a[0]}" ({_same_length(a[1:], "9" * (n - 1))})']
    first, last = int(a[0]) + 1, int(b[0]) - 1
    if first == last:
        parts.append(f'"{first}" [0-9]{{{n - 1}}}')
    elif first < last:
        parts.append(f"[{first}-{last}] [0-9]{{{n - 1}}}")
    parts.append(f'"{b[0]}" ({_same_length("0" * (n - 1), b[1:])})')
    return " | ".join(f"({p})" for p in parts)


def _literal(value: int) -> str:
    return f'"{value}"'
