"""kvstate on synthetic state blobs laid out as llama.cpp writes them:
cells with M-RoPE positions (Qwen3.5) read only as such, kept through
cutting and joining, and a hybrid's recurrent part split off whole."""

from __future__ import annotations

import numpy as np
import pytest

from engy_local.runtime.cache import kvstate


def cache(positions: list[int], ext: bool, v_trans: int = 0) -> kvstate.Cache:
    n = len(positions)
    rng = np.random.default_rng(n)

    def layer(width: int) -> kvstate.Layer:
        if width:
            data = rng.integers(0, 255, (width, n, 2), dtype=np.uint8)
            return kvstate.Layer(1, 2, width, data)
        return kvstate.Layer(1, 8, 0, rng.integers(0, 255, (n, 8), dtype=np.uint8))

    extra = np.array([[p % 3, p % 5, 100 + p] for p in positions], dtype=np.int32) if ext else None
    return kvstate.Cache(
        np.array(positions, dtype=np.int32),
        0,
        v_trans,
        (layer(0), layer(0)),
        (layer(4 if v_trans else 0), layer(4 if v_trans else 0)),
        extra,
    )


def same(a: kvstate.Cache, b: kvstate.Cache) -> bool:
    return kvstate.write([a]) == kvstate.write([b])


@pytest.mark.parametrize("v_trans", [0, 1])
def test_cells_with_extended_positions_read_only_as_such(v_trans: int) -> None:
    blob = kvstate.write([cache([0, 1, 2, 3, 4], ext=True, v_trans=v_trans)])
    [back] = kvstate.parse(blob, 1, ext=True)
    assert back is not None and back.ext is not None
    assert back.ext[:, 2].tolist() == [100, 101, 102, 103, 104]
    assert kvstate.write([back]) == blob
    with pytest.raises(kvstate.Unparsed):
        kvstate.parse(blob, 1)  # read as plain cells, the layout does not add up


def test_cutting_and_joining_keeps_each_cells_extension() -> None:
    whole = cache(list(range(10)), ext=True)
    pieces = [whole.take(0, 4), whole.take(4, 7), whole.take(7, 10)]
    assert pieces[1].ext is not None and pieces[1].ext[:, 2].tolist() == [104, 105, 106]
    assert same(kvstate.concat(pieces), whole)


def test_cells_come_back_in_position_order() -> None:
    shuffled = cache([3, 0, 2, 1], ext=True)
    [back] = kvstate.parse(kvstate.write([shuffled]), 1, ext=True)
    assert back is not None and back.ext is not None
    assert back.positions.tolist() == [0, 1, 2, 3]
    assert back.ext[:, 2].tolist() == [100, 101, 102, 103]


@pytest.mark.parametrize("ext", [False, True])
def test_a_hybrid_state_splits_into_cells_and_the_recurrent_part(ext: bool) -> None:
    cells = cache([0, 1, 2], ext=ext)
    recurrent = b"\x01\x00\x00\x00recurrent state bytes"
    blob = kvstate.write([cells]) + recurrent
    got, rest = kvstate.split_recurrent(blob, True, ext)
    assert got is not None and same(got, cells) and rest == recurrent
    assert kvstate.join_recurrent(got, rest, True) == blob
