"""Which KV sequence a request runs in, and where its cached prefix comes
from. Pure: the scheduler carries the plan out on the context.

The rules, in the words a user would use:
- A conversation's next turn goes back to the sequence that holds it.
- A request that shares only a prefix with a conversation (a subagent with
  the same system prompt) does not overwrite it: it takes a free sequence
  and the shared prefix is copied in (cells are shared, nothing is
  evaluated again).
- A sequence whose contents are worth keeping (`min_save` tokens or more
  that the request would drop) is saved to the RAM cache before it is
  overwritten; empty and near-empty sequences are taken first, then the
  least recently used.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from ..loading.tokenizing import common_prefix as common_prefix  # where prefixes are compared


def resumable(n: int, held: int, points: Iterable[int]) -> int:
    """Where a recurrent state holding `held` tokens can resume when the
    first `n` of them are wanted: at its end, or else at the latest
    checkpoint (`points`) at or before `n`."""
    if n >= held:
        return held
    return max((p for p in points if p <= n), default=0)


@dataclass(frozen=True)
class Checkpoint:
    """Where a sequence can be taken back to: a sliding-window model's
    window layers, or a recurrent model's state, as they were at `pos`."""

    pos: int
    state: bytes
    mark: bool = False  # where the conversation's messages begin (kept longest)


@dataclass
class Slot:
    id: int
    held: list[int] = field(default_factory=list)  # tokens in the KV, in order
    busy: bool = False
    used: int = 0  # when it last ran a job (a counter; higher is more recent)
    checkpoints: list[Checkpoint] = field(default_factory=list)  # oldest first
    # Where its prompts ended (and its messages began): where the next turn
    # re-renders what came after, so the disk tier cuts its segments there.
    ends: list[int] = field(default_factory=list)

    def replace(self, held: list[int]) -> None:
        """New contents: checkpoints of the old ones no longer apply."""
        self.held = held
        self.checkpoints = []
        self.ends = []

    def cut(self, keep: int) -> None:
        del self.held[keep:]
        self.checkpoints = [c for c in self.checkpoints if c.pos <= keep]
        self.ends = [e for e in self.ends if e <= keep]


Source = Literal["self", "copy", "cache", "disk"]


@dataclass(frozen=True)
class Option:
    source: Source
    reuse: int  # prompt tokens it provides
    src: int | None = None  # the sequence to copy from


@dataclass(frozen=True)
class Plan:
    slot: int
    save: bool  # save the slot's contents to the RAM cache first
    options: tuple[Option, ...]  # best first; the scheduler takes the first that works


# Dropping fewer tokens than this (the tail where a new turn departs from
# what was generated) does not count as overwriting a conversation.
SMALL_LOSS = 32


def choose(
    prompt: list[int],
    slots: list[Slot],
    cached: int,
    min_save: int,
    usable: Callable[[int], int] = lambda n: n,
    saved: Callable[[list[int]], bool] = lambda tokens: False,
    stored: int = 0,
    recurrent: bool = False,
    cuts: Callable[[Slot, int], bool] = lambda slot, n: True,
    replaces: bool = False,
) -> Plan | None:
    """A plan for `prompt`, or None when every sequence is busy. `cached` is
    the longest prefix the RAM cache holds and `saved(tokens)` whether it
    holds all of `tokens`; `usable(n)` cuts a prefix length back to one
    evaluation can resume from (at least one token must be left to
    evaluate, and no image may be split); `stored` is what the disk tier
    gives (already a length it can resume at). A `recurrent` sequence
    resumes only at its end or at one of its checkpoints (`cached` is then
    already such a length too); so does a sliding window's where `cuts`
    says its window layers no longer reach back to a length. A prompt that
    `replaces` what a sequence holds after it (an answer, re-rendered as
    the next turn writes it) takes the sequence holding the most of it,
    and nothing is saved."""
    free = [s for s in slots if not s.busy]
    if not free:
        return None

    def reach(s: Slot) -> int:
        n = usable(common_prefix(s.held, prompt))
        if recurrent or not cuts(s, n):
            return resumable(n, len(s.held), (c.pos for c in s.checkpoints))
        return n

    own = {s.id: reach(s) for s in slots}

    def loss(s: Slot) -> int:
        """Tokens only `s` holds that taking it for `prompt` would drop."""
        dropped = len(s.held) - own[s.id]
        if dropped < SMALL_LOSS or saved(s.held):
            return 0
        for other in slots:
            if other is not s and other.held[: len(s.held)] == s.held:
                return 0  # an older turn of a conversation another sequence holds
        return dropped

    def rank(s: Slot) -> tuple[int, int, int]:
        if replaces or loss(s) == 0:  # nothing is lost: the most of the prompt already there
            return (0, -own[s.id], s.used)
        # Then the least recently used, however long: a stale conversation
        # goes (to the RAM cache, when worth saving) before one that just spoke.
        return (1, 0, s.used)

    target = min(free, key=rank)
    options = [Option("self", own[target.id])]
    donor = max((s for s in slots if s is not target), key=lambda s: own[s.id], default=None)
    if donor is not None and own[donor.id] > own[target.id]:
        options.append(Option("copy", own[donor.id], donor.id))
    cached = cached if recurrent else usable(cached)
    if cached > own[target.id]:
        options.append(Option("cache", cached))
    if stored > max(own[target.id], cached):
        options.append(Option("disk", stored))
    options.sort(key=lambda o: -o.reuse)
    save = not replaces and loss(target) >= min_save
    return Plan(target.id, save, tuple(o for o in options if o.reuse > 0))


def usable_length(prompt: list[int], media: tuple[Any, ...]) -> Callable[[int], int]:
    """`usable` for `prompt` (see choose): a cached prefix cut back to where
    evaluation can resume, with the prompt's images (vision.Media)."""

    def usable(n: int) -> int:
        n = min(n, len(prompt) - 1)  # one token is always evaluated, for logits
        for m in media:
            if m.start < n < m.start + m.n_tokens:
                return int(m.start)  # an image is evaluated whole or not at all
        return max(n, 0)

    return usable


def worth_pre_reading(plan: Plan, slots: list[Slot], tokens: list[int], room: int) -> bool:
    """Whether a pre-read of `tokens` (an answer's next turn's start) goes
    ahead on `plan` (choose, with `replaces`): where its conversation's
    sequence is free, holds the answer as the model wrote it, parting from
    `tokens` before its end, and the rest fits one step of `room` tokens."""
    first = plan.options[0] if plan.options else None
    if first is None or first.source != "self":
        return False
    held = slots[plan.slot].held
    return common_prefix(held, tokens) < len(held) and len(tokens) - first.reuse <= room
