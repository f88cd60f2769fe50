"""Reading a run of cached tokens at another position (KV shifting), for a
request that asks for it (`x-engy-cache-reuse`).

A prompt that leaves a cached one early may still hold a long run of its
later tokens: a new Claude Code session in another folder differs from the
last one in the folder's path, and the ~170 tokens of its environment
section after the path are the same. A cache that reads only the shared
prefix evaluates them again. Here the longest such run is found in what the
cache held beyond the prefix, kept aside in a scratch sequence, and put
back at its new position when the prompt's reading gets there (the tokens
before it are evaluated first, as llama.cpp requires a sequence's
positions to be consecutive).

The trade, as with llama-server's --cache-reuse: the run's keys and values
were computed after the old tokens, not the new ones, so the answer may
differ from a cold read's. It is off unless a request asks; only plain
attention models shift (not sliding windows, recurrent state or images).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


class Shifter(Protocol):
    def unstash(self, seq: int, delta: int) -> None: ...


def find(
    old: Sequence[int], prompt: Sequence[int], start: int, least: int
) -> tuple[int, int, int] | None:
    """The longest run `old[src:src + n] == prompt[at:at + n]` with both
    `src` and `at` at or after `start` (what is before it is the kept
    prefix), `n` at least `least`, and the prompt's last token left out
    (one is always evaluated, for logits): (src, at, n), or None."""
    end = len(prompt) - 1
    if least <= 0 or len(old) - start < least or end - start < least:
        return None
    a = array("i", old).tobytes()
    b = array("i", prompt).tobytes()
    w = 4 * least
    first: dict[bytes, int] = {}
    for c in range(start, len(old) - least + 1):
        first.setdefault(a[4 * c : 4 * c + w], c)
    best: tuple[int, int, int] | None = None
    at = start
    while at + least <= end:
        src = first.get(b[4 * at : 4 * at + w])
        if src is None:
            at += 1
            continue
        n = least
        while src + n < len(old) and at + n < end and old[src + n] == prompt[at + n]:
            n += 1
        if best is None or n > best[2]:
            best = (src, at, n)
        at += n
    return best


@dataclass
class Shift:
    """A run kept aside, read into the sequence when its prompt reaches
    `start` (the scheduler treats it as it does an image: a span of the
    prompt put into the KV cache on its own)."""

    shifter: Shifter
    src: int  # where the run was in the cache
    start: int  # where it goes in the prompt
    n_tokens: int

    def eval(self, _ctx: object, seq: int, pos: int, _n_batch: int) -> None:
        assert pos == self.start
        self.shifter.unstash(seq, self.start - self.src)
