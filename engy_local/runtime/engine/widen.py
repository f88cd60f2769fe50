"""Wide steps: llama.cpp's CPU flash attention reads a step of 64 rows or
more in tiles and a narrower one a row at a time, so over a long sequence
a step of a few rows (a tool's result read in, a short draft) can cost
more than one of 64 (Qwen2.5-Coder-0.5B over 2k cached tokens, a 2-core
VM: 22 rows 0.70 s, the same 22 and 42 more 0.39 s). Where the gate's
timings say so (Gate.pad), a step gets rows past its last sequence's end,
decoded without logits and taken back from the KV cache after the step.
"""

from __future__ import annotations

from ..loading.context import Batch
from .running import Fed
from .speculate import Gate


def attended(fed: list[Fed], padded: int = 0) -> int:
    """Tokens a step's rows attend to in all: each row to its sequence's
    tokens up to itself; `padded` rows after the last sequence's."""
    total = 0
    for f in fed:
        n, held = len(f.tokens), len(f.running.slot.held)
        total += n * held + n * (n + 1) // 2
    if padded and fed:
        end = len(fed[-1].running.slot.held) + len(fed[-1].tokens)
        total += padded * end + padded * (padded + 1) // 2
    return total


def pad(batch: Batch, gate: Gate | None, fed: list[Fed], n_ctx: int) -> tuple[int, int] | None:
    """Adds the rows that make the step wide where that pays: returns the
    sequence they went to and the position they start at (to take them
    back), or None."""
    if gate is None or not gate.pads or not fed:
        return None
    last = fed[-1]
    seq, at = last.running.slot.id, len(last.running.slot.held) + len(last.tokens)
    n = gate.pad(batch.n, attended(fed), at, probe=True)
    if not n or at + n > n_ctx:
        return None
    for k in range(n):
        batch.add(last.tokens[-1], at + k, seq, False)
    return seq, at
