"""Where reading a prompt stops to keep a checkpoint (prefixes.points), as
a table: what each kind of model keeps, and what a recurrent one drops."""

from __future__ import annotations

import itertools
from types import SimpleNamespace
from typing import Any

import pytest

from engy_local.runtime.prefixes import NEAR, STRIDE, points

R = SimpleNamespace(recurrent=True, n_swa=0)  # recurrent state (a hybrid too)
W = SimpleNamespace(recurrent=False, n_swa=512)  # a sliding window
A = SimpleNamespace(recurrent=False, n_swa=0)  # full attention
S = STRIDE

# name, model, prompt, reuse, marks, answer start, the points
CASES: list[tuple[str, Any, int, int, tuple[int, ...], int, tuple[int, ...]]] = [
    ("full attention keeps none", A, 3000, 0, (1700,), 2990, ()),
    ("a window keeps the messages' start", W, 3000, 0, (1700,), 2990, (1700,)),
    ("messages, the answer's opening, one before the end", R, 3000, 0, (1700,), 2900,
     (1700, 2900, 2999)),
    ("one before the end, close to the answer, goes", R, 3000, 0, (1700,), 2994, (1700, 2994)),
    ("an answer opening at the end is the end", R, 3000, 0, (1700,), 3000, (1700, 2999)),
    ("what is read already keeps none", R, 3000, 2000, (1700,), 2994, (2994,)),
    ("a long read every STRIDE", R, 9000, 0, (), 8990, (S, 2 * S, 8990)),
    ("of near points, the first", R, 5000, 0, (S - 10,), 4990, (S - 10, 4990)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("model", "prompt", "reuse", "marks", "answer", "expected"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_points(
    model: Any, prompt: int, reuse: int, marks: tuple[int, ...], answer: int,
    expected: tuple[int, ...],
) -> None:  # fmt: skip
    got = points(model, prompt, reuse, marks, answer)
    assert got == expected
    if model.recurrent:
        assert all(b - a >= NEAR for a, b in itertools.pairwise(got))
