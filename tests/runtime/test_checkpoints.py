"""Where reading a prompt stops to keep a checkpoint (prefixes.points), as
a table: what each kind of model keeps, and what a recurrent one drops."""

from __future__ import annotations

import itertools
from types import SimpleNamespace
from typing import Any

import pytest

from engy_local.runtime.cache.prefixes import NEAR, STRIDE, Prefixes, points

R = SimpleNamespace(recurrent=True, n_swa=0)  # recurrent state (a hybrid too)
W = SimpleNamespace(recurrent=False, n_swa=512)  # a sliding window
A = SimpleNamespace(recurrent=False, n_swa=0)  # full attention
S = STRIDE

# name, model, prompt, reuse, marks, answer start, the points
CASES: list[tuple[str, Any, int, int, tuple[int, ...], int, tuple[int, ...]]] = [
    ("full attention keeps none", A, 3000, 0, (1700,), 2990, ()),
    ("a window: the messages' start, one before the end", W, 3000, 0, (1700,), 2990,
     (1700, 2999)),
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


def parked(model: Any) -> Prefixes:
    """A RAM cache holding one sequence parked after turn 1 (prompt of 700
    tokens, messages from 400, a 40-token answer), its checkpoints with it;
    the window layers hold its last 512 positions."""
    model = SimpleNamespace(cache_ram=1 << 20, **vars(model))
    prefixes = Prefixes(model, SimpleNamespace(), [], None)  # type: ignore[arg-type]
    tokens = list(range(740))
    prefixes.cache.put(tokens, b"state", 740 - 512, [(400, b"m"), (700, b"e")], [700])
    return prefixes


TURN2 = [*range(705), -1, -2]  # the answer re-rendered: it parts 5 tokens in

# name, model, prompt, what the RAM cache gives, covers all 740
REACH: list[tuple[str, Any, list[int], int, bool]] = [
    ("full attention: the shared prefix", A, TURN2, 705, True),
    ("a window: where the answer began", W, TURN2, 700, False),
    ("a window: its messages' start", W, [*range(450), -1], 400, False),
    ("a window: where it still reaches", W, [*range(739), -1, -2], 739, False),
    ("recurrent: where the answer began", R, TURN2, 700, False),
]  # fmt: skip


@pytest.mark.parametrize(("model", "prompt", "gives", "covers"), [c[1:] for c in REACH],
                         ids=[c[0] for c in REACH])  # fmt: skip
def test_a_parked_state_resumes_at_its_checkpoints(
    model: Any, prompt: list[int], gives: int, covers: bool
) -> None:
    prefixes = parked(model)
    whole = len(prompt) - 1
    assert prefixes.cached(prompt, lambda n: min(n, whole)) == gives
    assert prefixes.covers(list(range(740)))
    assert prefixes.covers(list(range(700)))  # a checkpoint there, or cut
    assert prefixes.covers(list(range(705))) is covers
