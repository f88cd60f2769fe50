"""Wide steps (widen.py): where llama.cpp's CPU flash attention makes a step
of 64 rows cheaper than one of a few over a long sequence, a step gets rows
past its last sequence's end and gives them back after; drafts fill such
rows for free. The gate's arithmetic as tables, then the mechanics on a
real engine: answers as a cold server's, the cache as its tokens say."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.flows import Cold, Engine, conversation, parted, question, title_request

from engy_local.runtime.engine import widen
from engy_local.runtime.engine.speculate import LONG, PROBE, SIZES, WIDE, Costs, Gate

pytestmark = pytest.mark.timeout(300)

# Qwen2.5-Coder-0.5B on a 2-core Xeon VM with flash attention: steps timed
# at start-up (a nearly empty cache), and what a row costs a token it
# attends to, a row at a time (narrow) and in tiles (wide), as served.
EMPTY = Costs((0.038, 0.041, 0.052, 0.078, 0.095, 0.171, 0.277))
NARROW, TILED = 13e-6, 1.5e-7


def gate(wide: float | None = TILED, pads: bool = True) -> Gate:
    return Gate(EMPTY, per_cell=NARROW, wide_cell=wide, pads=pads)  # drafts of 16


@pytest.mark.parametrize(("rows", "held", "wide", "pads", "probe", "padded"), [
    (22, 1778, TILED, True, False, 42),  # a tool's result read over 1.8k tokens
    (16, 1778, TILED, True, False, 48),
    (4, 1778, TILED, True, False, 0),  # a few rows: cheaper as they are
    (22, 200, TILED, True, False, 0),  # a short sequence: attention costs little
    (64, 1778, TILED, True, False, 0),  # wide already
    (22, 1778, NARROW, True, False, 0),  # a machine whose wide rows cost as much
    (22, 1778, TILED, False, False, 0),  # a sliding window or a recurrent state
    (22, 1778, None, True, False, 0),  # never timed: no guess
    (22, 1778, None, True, True, 42),  # never timed: a probe times it
    (PROBE - 1, 1778, None, True, True, 0),  # too small to probe
    (22, LONG // 2, None, True, True, 0),  # too short to probe
])  # fmt: skip
def test_a_step_is_padded_where_a_wide_one_costs_less(
    rows: int, held: int, wide: float | None, pads: bool, probe: bool, padded: int
) -> None:
    cells = rows * held
    assert gate(wide, pads).pad(rows, cells, held, probe=probe) == padded


def test_a_copy_over_a_long_sequence_drafts_the_rows_a_wide_step_holds() -> None:
    """A copy under way (a run of 40 tokens as its source said) over 3.2k
    tokens: 63 drafted tokens (past --draft-max's 16) make a step of 64
    rows, which costs less than one of 17; where wide rows cost as much as
    narrow ones, or the model's steps cannot be padded, 16 or fewer."""
    wide, flat = gate(), gate(NARROW)
    lengths = wide.lengths(1, {0: 64}, {0: 40}, {0: 3200})
    assert lengths == {0: WIDE - 1}
    assert 0 < flat.lengths(1, {0: 64}, {0: 40}, {0: 3200})[0] <= 16
    assert 0 < gate(pads=False).lengths(1, {0: 64}, {0: 40}, {0: 3200})[0] <= 16
    assert (wide.reach, flat.reach, gate(pads=False).reach) == (WIDE - 1, WIDE - 1, 16)
    # Not a copy (its first draft, no run): no more than a newcomer's 4.
    assert sum(gate().lengths(1, {1: 64}, {1: 0}, {1: 3200}).values()) <= 4


def test_only_a_wide_step_of_a_timed_size_times_the_wide_rows() -> None:
    """A prompt's chunk of 512 rows costs less a row of weights than a step
    of 64: it says nothing of the attention, so only steps of 64 count."""
    g = gate(None)
    g.observe(512, 2.3, 1280)
    assert g.wide_cell is None
    g.observe(WIDE, EMPTY.of(WIDE) + WIDE * 2000 * 2e-7, 2000)
    assert g.wide_cell == pytest.approx(2e-7)
    g.observe(WIDE, EMPTY.of(WIDE) * 0.9, 2000)  # cheaper than empty: attention free
    assert g.wide_cell == pytest.approx(1e-7)
    assert g.costs == EMPTY and g.per_cell == NARROW
    assert max(SIZES) == WIDE


@pytest.fixture
def forced(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Every narrow step the scheduler may pad is padded (whatever the
    timings say); yields the pads' sizes as they happen."""
    real_pad, sizes = widen.pad, []

    def always(self: Gate, rows: int, cells: int, attend: int, probe: bool = False) -> int:
        return WIDE - rows if probe and self.pads and rows < WIDE else 0

    def counted(*args: object) -> tuple[int, int] | None:
        where = real_pad(*args)  # type: ignore[arg-type]
        if where is not None:
            sizes.append(where[1])
        return where

    monkeypatch.setattr(Gate, "pad", always)
    monkeypatch.setattr(widen, "pad", counted)
    yield sizes


def test_padded_steps_answer_as_a_cold_server_and_leave_no_rows_behind(
    tiny_qwen3: Path, tmp_path: Path, forced: list[int]
) -> None:
    """A conversation's turns and a side request between them, every step
    padded to 64 rows: the answers are a cold server's (or part at a near
    tie), each turn reads the one before from the cache, and every
    sequence's cells are its tokens (the pads taken back)."""
    fa = {"flash_attn": "on"}  # the kernels wide steps are for
    engine, cold = Engine(tiny_qwen3, tmp_path / "kv", fa), Cold(tiny_qwen3, **fa)
    try:
        first = conversation(question(1))
        turn1 = engine.ask(first)
        assert forced, "no step was padded"
        engine.ask(title_request(question(1)))
        second = conversation(question(1), turn1.text or "Done.", "And line 3?")
        turn2 = engine.ask(second)
        for turn, request in ((turn1, first), (turn2, second)):
            assert parted(turn, cold.ask(request), tiny_qwen3, **fa) == ""
        assert turn2.cached >= turn1.answer_start  # all before the answer re-rendered
        assert engine.consistent() == []
    finally:
        engine.close()
        cold.close()


def test_a_sliding_window_is_never_padded(gemma_path: Path, forced: list[int]) -> None:
    """Rows past a sliding window's end would push its window on: gemma's
    steps stay as built."""
    engine = Engine(gemma_path, load={"ctx_size": 4096})
    try:
        engine.ask(conversation(question(2)))
        assert forced == []
        assert engine.consistent() == []
    finally:
        engine.close()
