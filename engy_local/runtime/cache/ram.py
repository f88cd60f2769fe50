"""The host-RAM prompt cache: saved sequence states, described by the tokens
they hold, bounded in bytes, least recently used out first.

It answers one question: which saved state shares the longest prefix with
these tokens. Pure Python; the scheduler saves and restores the bytes.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from .slots import common_prefix

_clock = itertools.count()


@dataclass
class Entry:
    tokens: list[int]
    state: bytes
    pos_min: int  # the lowest position the state still holds (sliding windows)
    # Checkpoints of the sequence at earlier positions (sliding windows,
    # recurrent states): where the entry can be resumed short of its end.
    windows: list[tuple[int, bytes]] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)  # see Slot.ends
    used: int = field(default_factory=lambda: next(_clock))

    @property
    def size(self) -> int:
        return len(self.state) + 4 * len(self.tokens) + sum(len(w) for _, w in self.windows)


class PromptCache:
    def __init__(self, budget: int, on_drop: Callable[[Entry], None] | None = None) -> None:
        self.budget = budget
        self.on_drop = on_drop  # an entry let go for room (not one a longer entry replaced)
        self.entries: list[Entry] = []
        # Bytes the budget also pays for outside the entries: the sequences'
        # checkpoints (llama-server left those out of its limit).
        self.pinned = 0
        self.hits = 0  # restores from it
        self.restored_tokens = 0  # prompt tokens those restores spared

    @property
    def used(self) -> int:
        return self.pinned + sum(e.size for e in self.entries)

    def best(
        self, tokens: list[int], reach: Callable[[Entry, int], int] | None = None
    ) -> tuple[Entry | None, int]:
        """The entry sharing the longest prefix with `tokens`, and its length;
        with `reach`, the entry and length that can be resumed at (for a
        recurrent model, its end or one of its checkpoints)."""
        found, length = None, 0
        for entry in self.entries:
            n = common_prefix(entry.tokens, tokens)
            if reach is not None:
                n = reach(entry, n)
            if n > length:
                found, length = entry, n
        return found, length

    def covers(self, tokens: list[int], recurrent: bool = False) -> bool:
        """An entry already holds all of `tokens` (`recurrent`: and can be
        resumed at their end)."""
        n = len(tokens)
        for e in self.entries:
            held = len(e.tokens) >= n and e.tokens[:n] == tokens
            if held and (not recurrent or n in (len(e.tokens), *(p for p, _ in e.windows))):
                return True
        return False

    def put(
        self,
        tokens: list[int],
        state: bytes,
        pos_min: int,
        windows: list[tuple[int, bytes]] | None = None,
        ends: list[int] | None = None,
    ) -> bool:
        """Keeps a state; entries it extends are dropped. False when it
        cannot fit the budget at all."""
        entry = Entry(list(tokens), state, pos_min, list(windows or ()), list(ends or ()))
        if entry.size + self.pinned > self.budget:
            return False
        self.entries = [
            e
            for e in self.entries
            if not (len(e.tokens) <= len(tokens) and tokens[: len(e.tokens)] == e.tokens)
        ]
        self.entries.append(entry)
        self.shrink()
        return True

    def shrink(self) -> None:
        """Least recently used entries out until the budget holds."""
        while self.entries and self.used > self.budget:
            gone = min(self.entries, key=lambda e: e.used)
            self.entries.remove(gone)
            if self.on_drop is not None:
                self.on_drop(gone)

    def touch(self, entry: Entry) -> None:
        entry.used = next(_clock)
