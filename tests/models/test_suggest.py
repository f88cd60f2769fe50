"""Which model the banner names for real work, by the machine's memory."""

from __future__ import annotations

import pytest

from engy_local.models.catalog import load_catalog
from engy_local.models.suggest import for_real_work

GIB = 1 << 30


@pytest.mark.parametrize(
    ("memory_gib", "named", "about_gib"),
    [
        (4, None, None),
        (8, "qwen3:4b", 5),
        (16, "qwen3:14b", 11),
        (24, "qwen3:14b", 11),
        (32, "qwen3-coder:30b", 20),
        (128, "qwen3-coder:30b", 20),
    ],
)
def test_the_largest_that_fits_most_of_the_memory(
    memory_gib: int, named: str | None, about_gib: int | None
) -> None:
    pick = for_real_work(load_catalog(), memory_gib * GIB)
    if named is None:
        assert pick is None
        return
    assert pick is not None and pick.entry.id == named
    assert round(pick.need / GIB) == about_gib
    assert "tools" in pick.entry.capabilities
