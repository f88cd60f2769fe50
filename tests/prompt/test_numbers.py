"""Bounded numbers as digit ranges (prompt/numbers.py), run through
llama.cpp's own grammar sampler: for each range, every value near its
bounds (and far from them) is allowed exactly when exact arithmetic says it
lies within them. The oracle is Python's Fraction, not the compiler."""

from __future__ import annotations

from fractions import Fraction

import pytest
from support.grammar import Vocab

from engy_local.grammar.numbers import integer_range, number_range

INTEGER_RANGES = [
    (3, 319),  # the issue's {"minimum": 3, "maximum": 319}, which let 320 through
    (0, None),
    (None, 0),
    (-5, 5),
    (-1000, -317),
    (10, 99),
    (1, 1),
    (None, 100),
    (-317, None),
    (7, 1200),
    (5, 3),  # empty
]

INTEGERS = sorted(
    {*range(-25, 26), 99, 100, 101, 318, 319, 320, 321, 999, 1000, 1001, 1199, 1200, 1201}
    | {-99, -100, -101, -316, -317, -318, -999, -1000, -1001, 123456}
)
# Spellings JSON has that a grammar might let through by mistake.
ODD = ["01", "-0", "00", "1.0", "1e2", "+1", ""]


def _grammar(body: str) -> str:
    return f"root ::= {body}\n"


@pytest.mark.parametrize(("low", "high"), INTEGER_RANGES, ids=str)
def test_integer_ranges_allow_exactly_their_integers(
    vocab: Vocab, low: int | None, high: int | None
) -> None:
    body = integer_range(low, high)
    inside = [v for v in INTEGERS if (low is None or v >= low) and (high is None or v <= high)]
    if not body:  # no integer lies there
        assert low is not None and high is not None and low > high
        return
    gbnf = _grammar(body)
    for v in INTEGERS:
        assert vocab.accepts(gbnf, str(v)) == (v in inside), (low, high, v)
    for text in ODD:
        assert not vocab.accepts(gbnf, text), (low, high, text)


NUMBER_RANGES = [
    # (low, low open, high, high open)
    (0, True, 1, False),  # exclusiveMinimum 0, maximum 1
    (0, False, 1, True),
    (-1, False, 1, False),
    (-3, True, -1, True),
    (None, False, 0, True),  # negatives only
    (0, False, None, False),
    (2, False, 2, False),  # exactly 2
    (2, True, 2, False),  # empty
    (-100, False, 100, True),
]

NUMBERS = [
    f"{i}{frac}"
    for i in ["0", "1", "2", "3", "99", "100", "101"]
    for frac in ["", ".0", ".00", ".5", ".05", ".999"]
] + [f"-{n}" for n in ["0.5", "1", "1.0", "1.5", "2", "2.5", "3", "3.0", "99.5", "100", "100.5"]]


@pytest.mark.parametrize(("low", "low_open", "high", "high_open"), NUMBER_RANGES, ids=str)
def test_number_ranges_allow_exactly_their_numbers(
    vocab: Vocab, low: int | None, low_open: bool, high: int | None, high_open: bool
) -> None:
    def inside(x: Fraction) -> bool:
        above = low is None or (x > low if low_open else x >= low)
        return above and (high is None or (x < high if high_open else x <= high))

    body = number_range(low, low_open, high, high_open)
    if not body:  # no number lies there
        assert not any(inside(Fraction(t)) for t in NUMBERS)
        return
    gbnf = _grammar(body)
    for text in NUMBERS:
        assert vocab.accepts(gbnf, text) == inside(Fraction(text)), (low, high, text)
    for text in ["1e0", "01", "+1"]:
        assert not vocab.accepts(gbnf, text)
