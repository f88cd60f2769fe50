"""Where a request's prompt prefix comes from, on the context: the sequence
itself (cut back, or rewound to a sliding-window checkpoint), another
sequence (copied), the RAM cache or the disk tier (restored); and what is
saved before a sequence is overwritten (slots.py decides which, this carries
it out). Only the scheduler's thread uses it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial

from ...backend import CacheStatus
from .. import faults
from ..loading.context import Context
from ..loading.model import Model
from .disk import DiskTier, Hit
from .ram import Entry as CacheEntry
from .ram import PromptCache
from .shift import Shift, find
from .slots import Checkpoint, Option, Slot, resumable

log = logging.getLogger("engy.requests")

# A sequence holding at least this many tokens that a request would drop is
# saved to the RAM cache first (below it, evaluating again is cheaper).
MIN_SAVE = 256
# Checkpoints kept per sequence, the latest (and the first mark): sliding-
# window models keep their prompts' ends and the token before each, so the
# last two prompts' pairs; recurrent ones more (`points`).
MAX_CHECKPOINTS = 5
MAX_RECURRENT_CHECKPOINTS = 8
# A recurrent model's long read keeps a checkpoint every STRIDE tokens (an
# edit far into a long prompt then costs at most this many tokens again).
STRIDE = 4096
# Of a recurrent model's checkpoints this close together only the first is
# kept: resuming a few tokens earlier costs nothing (one step reads them),
# a stop to keep one costs a step, a pass over the weights.
NEAR = 64


def points(
    model: Model, prompt: int, reuse: int, marks: tuple[int, ...], answer: int
) -> tuple[int, ...]:
    """Where reading a prompt of `prompt` tokens from `reuse` on stops to
    keep a checkpoint, before its end (which sliding-window models keep
    anyway). A sliding window: where the conversation's messages begin
    (`marks`) and one token before the end (the same prompt sent again
    must evaluate one token, and the window of a state that went on past
    it no longer reaches back there). A recurrent state: there too, where
    the last turn's answer begins once the next turn renders it (`answer`,
    just after the assistant's header), and every STRIDE tokens; of those
    within NEAR tokens of each other, the first."""
    if model.n_swa > 0 and not model.recurrent:
        return tuple(sorted(p for p in {*marks, prompt - 1} if reuse < p < prompt))
    if not model.recurrent:
        return ()
    found = {*marks, answer, prompt - 1, *range(STRIDE, prompt - 1, STRIDE)}
    kept: list[int] = []
    for p in sorted(p for p in found if reuse < p < prompt):
        if not kept or p - kept[-1] >= NEAR:
            kept.append(p)
    return tuple(kept)


class Prefixes:
    def __init__(
        self, model: Model, ctx: Context, slots: list[Slot], disk: DiskTier | None
    ) -> None:
        self.model = model
        self.ctx = ctx
        self.slots = slots
        self.disk = disk
        # What the RAM cache lets go is written to disk (when there is one).
        self.cache = PromptCache(model.cache_ram, on_drop=self.to_disk)
        # Set by `reuse`: a later run of the prompt kept aside (shift.py).
        self.shift: Shift | None = None
        self._wanted: tuple[list[int], int, int] | None = None  # (prompt, least, slot)
        # Faults lived through, by phase (faults.py): the scheduler's too.
        self.faults: dict[str, int] = {}

    def _count(self, phase: str) -> None:
        self.faults[phase] = self.faults.get(phase, 0) + 1

    def _save_failed(self, what: str, slot: Slot | None, exc: Exception) -> None:
        """Saving is an optimisation: a save that fails keeps nothing, and
        the request it was for goes on."""
        where = f"seq {slot.id}" if slot is not None else "the RAM cache"
        log.error("%s: %s failed, not kept: %s", where, what, exc, exc_info=exc)
        self._count("save")

    def limits(self) -> list[str]:
        """What no tier can do for this model, in a few words (logged: the
        scheduler asks once)."""
        if self.model.recurrent and self.cache.budget <= 0 and self.disk is None:
            line = "checkpoints off (--cache-ram 0): a turn resumes only where it stands"
            log.info("%s: %s", self.model.path.name, line)
            return [line]
        return []

    def reuse(
        self,
        slot: Slot,
        options: tuple[Option, ...],
        prompt: list[int],
        hit: Hit | None,
        least: int = 0,
    ) -> int:
        """Carries out the first option that works, best first; returns the
        prompt tokens now in `slot`. `least` > 0: a run of at least that
        many tokens further on that the source held after the prefix is kept
        aside too, as `shift` (where the cache can move cells)."""
        ctx = self.ctx
        self.shift = None
        self._wanted = (prompt, least, slot.id) if least > 0 and ctx.shifts else None
        # Each attempt gives True (the tokens it was asked for), or fewer
        # (a restored window resumed at an earlier checkpoint), or nothing.
        attempts: list[tuple[int, str, Callable[[int], bool | int]]] = []
        for option in options:
            if option.source == "self":
                attempts.append((option.reuse, "self", partial(self._cut, slot)))
                # Where the window layers no longer reach back that far, or
                # a recurrent state is past it, the latest checkpoint before
                # it does.
                usable = [c for c in slot.checkpoints if c.pos <= option.reuse]
                if usable:
                    cp = usable[-1]
                    attempts.append((cp.pos, "self", partial(self._rewind, slot, cp)))
            elif option.source == "copy":
                assert option.src is not None
                donor = self.slots[option.src]
                attempts.append((option.reuse, "copy", partial(self._copy, donor, slot)))
            elif option.source == "disk":
                assert hit is not None
                attempts.append((option.reuse, "disk", partial(self._restore_disk, slot, hit)))
            else:
                attempts.append((option.reuse, "ram", partial(self._restore, slot, prompt)))
        attempts.sort(key=lambda a: -a[0])
        broken = False  # the sequence was cleared after a fault: nothing of its own is left
        try:
            for n, source, attempt in attempts:
                if broken and source == "self":
                    continue
                try:
                    faults.check(f"admit-{source}")
                    got = attempt(n)
                except Exception as exc:  # a source that fails is one that misses
                    log.error(
                        "seq %d: taking %d tokens from %s failed: %s",
                        slot.id,
                        n,
                        source,
                        exc,
                        exc_info=exc,
                    )
                    self._count(f"admit-{source}")
                    ctx.clear(slot.id)
                    slot.replace([])
                    broken = True
                    got = False
                if got:
                    self.pin()
                    return n if got is True else int(got)
                self._drop_shift(slot)
        finally:
            self._wanted = None  # _cut and _copy stash only within this call
        ctx.clear(slot.id)
        slot.replace([])
        self.pin()
        return 0

    def _stash(self, src: Slot, n: int) -> None:
        """Where `reuse` was asked to: the longest later run of the prompt
        that `src` holds past `n`, kept aside before it is cut or left."""
        if self._wanted is None:
            return
        prompt, least, owner = self._wanted
        found = find(src.held, prompt, n, least)
        if found is None:
            return
        at_src, at, count = found
        if self.ctx.stash(src.id, at_src, at_src + count, owner):
            self.shift = Shift(self.ctx, at_src, at, count)
            log.debug(
                "seq %d: %d tokens kept aside to move from %d to %d", owner, count, at_src, at
            )

    def _drop_shift(self, slot: Slot) -> None:
        """Forgets a run an attempt that failed kept aside for `slot`."""
        self.shift = None
        self.ctx.drop_stash(slot.id)

    def _cut(self, slot: Slot, n: int) -> bool:
        self._stash(slot, n)
        if not self.ctx.cut(slot.id, n):
            return False
        slot.cut(n)
        return True

    def _rewind(self, slot: Slot, cp: Checkpoint, n: int) -> bool:
        if not self.ctx.rewind(slot.id, cp.pos, cp.state):
            slot.replace([])  # the sequence was cleared
            return False
        slot.cut(cp.pos)
        return True

    def _copy(self, donor: Slot, slot: Slot, n: int) -> bool:
        self._stash(donor, n)
        at = [c.state for c in donor.checkpoints if c.pos == n]
        if not self.ctx.copy(donor.id, slot.id, n, at[-1] if at else None):
            return False
        slot.replace(donor.held[:n])
        slot.checkpoints = [c for c in donor.checkpoints if c.pos <= n]
        slot.ends = [e for e in donor.ends if e <= n]
        return True

    def missed(
        self, where: Callable[[int], str], n: int, known: int, usable: int, reuse: int
    ) -> str:
        """Why a prompt of `n` tokens read only `reuse` from cache: where it
        left the longest cached prefix (`known` tokens, `usable` of them a
        place to resume), and for a recurrent model the checkpoint it
        resumed at instead. "" where all but the last token was cached."""
        if reuse >= n - 1:
            return ""
        part = where(known) if known else "nothing cached shares its start"
        miss = f"token {known} of {n}, in {part}"
        if self.checkpointed and reuse < usable:
            # The cached tokens go further than any state it could resume.
            if reuse:
                return f"{miss}; resumed at the checkpoint at token {reuse}"
            what = "the recurrent state" if self.model.recurrent else "the sliding window"
            return f"{miss}; no checkpoint of {what} before it"
        return miss

    def cached(self, prompt: list[int], usable: Callable[[int], int]) -> int:
        """The most of `prompt` the RAM cache can give (a recurrent model:
        where an entry can be resumed; any other: its longest prefix, which
        `usable` cuts to where evaluation can resume, later)."""
        return self._best(prompt, usable)[1]

    def touch(self, prompt: list[int], usable: Callable[[int], int]) -> None:
        """The entry `cached` found for `prompt` counts as just used."""
        entry, _ = self._best(prompt, usable)
        if entry is not None:
            self.cache.touch(entry)

    def _best(
        self, prompt: list[int], usable: Callable[[int], int]
    ) -> tuple[CacheEntry | None, int]:
        if not self.checkpointed:
            return self.cache.best(prompt)
        return self.cache.best(prompt, lambda entry, n: self._reach(entry, usable(n)))

    @property
    def checkpointed(self) -> bool:
        """The model resumes a saved state only at its end, where a checkpoint
        was kept, or (a sliding window) where its window still reaches."""
        return self.model.recurrent or self.model.n_swa > 0

    def _reach(self, entry: CacheEntry, n: int) -> int:
        """Where a saved state can be resumed when its first `n` tokens are
        wanted: `n` itself where it can be cut there, or else the latest of
        its checkpoints at or before `n` (a sliding window parked at the end
        of an answer resumes where that answer began)."""
        held = len(entry.tokens)
        if n >= held or (not self.model.recurrent and self._window_reaches(entry.pos_min, n)):
            return min(n, held)
        return resumable(n, held, (p for p, _ in entry.windows))

    def _window_reaches(self, pos_min: int, n: int) -> bool:
        """A state whose sliding-window layers hold positions from `pos_min`
        on can resume at `n` (its token sees the n_swa - 1 before it)."""
        n_swa = self.model.n_swa
        return n_swa <= 0 or n <= 0 or pos_min <= max(0, n - n_swa + 1)

    def cuts(self, slot: Slot, n: int) -> bool:
        """`slot`'s state can be cut back to `n` tokens (for slots.choose)."""
        if self.model.recurrent:
            return n >= len(slot.held)
        if self.model.n_swa <= 0 or n >= len(slot.held) or not slot.held:
            return True
        return self._window_reaches(self.ctx.pos_min(slot.id), n)

    def covers(self, tokens: list[int]) -> bool:
        """An entry holds all of `tokens` and can be resumed at their end."""
        n = len(tokens)
        for e in self.cache.entries:
            held = len(e.tokens) >= n and e.tokens[:n] == tokens
            if held and (not self.checkpointed or self._reach(e, n) == n):
                return True
        return False

    def _restore(self, slot: Slot, prompt: list[int], n: int) -> bool | int:
        checkpointed = self.checkpointed

        def gives(entry: CacheEntry, k: int) -> int:
            """`n`, where the entry can be resumed there."""
            return n if k >= n and self._reach(entry, n) == n else 0

        entry, _ = self.cache.best(prompt, gives if checkpointed else None)
        if entry is None:
            return False
        if not self.ctx.restore(slot.id, entry.state):
            slot.replace([])
            return False
        self.cache.touch(entry)
        slot.replace(list(entry.tokens))
        slot.ends = [e for e in entry.ends if e <= len(entry.tokens)]
        if checkpointed:
            # The entry's checkpoints come back with it: a later turn (or a
            # later park) needs where this conversation's answers began.
            slot.checkpoints = [Checkpoint(p, w) for p, w in entry.windows]
            if n < len(entry.tokens) and not self._cut(slot, n):
                # A window restored may reach back less far than it did when
                # saved (llama.cpp drops cells it masks): the latest
                # checkpoint at or before `n` then.
                at = [c for c in slot.checkpoints if c.pos <= n]
                if self.model.recurrent:
                    at = [c for c in at if c.pos == n]
                if not (at and self._rewind(slot, at[-1], at[-1].pos)):
                    self.pin()
                    return False
                n = at[-1].pos
            self.pin()
        elif not self._cut(slot, n):
            return False
        self.cache.hits += 1
        self.cache.restored_tokens += n
        return n

    def _restore_disk(self, slot: Slot, hit: Hit, n: int) -> bool:
        assert self.disk is not None
        loaded = self.disk.load(hit)
        if loaded is None:
            return False
        held, state, ends = loaded
        if not self.ctx.restore(slot.id, state):
            slot.replace([])
            return False
        slot.replace(held)
        slot.ends = ends
        log.debug("seq %d: %d tokens from the disk tier", slot.id, n)
        return self._cut(slot, n)

    def checkpoint(self, slot: Slot, mark: bool = False) -> None:
        """Where a later prompt may leave this one, for models whose state
        cannot be cut back there (a sliding window, recurrent state): the
        end of a prompt (the next turn usually resumes there, after the
        answer it drops) and (`mark`) where the conversation's messages
        begin: a new conversation with the same system prompt and tools
        resumes there. Recurrent models keep more (see the scheduler), all
        counted in the RAM cache's budget: the oldest go first."""
        recurrent = self.model.recurrent
        if self.model.n_swa <= 0 and not recurrent:
            return
        if self.cache.budget <= 0 and self.disk is None:
            return
        pos = len(slot.held)
        if any(c.pos == pos for c in slot.checkpoints):
            return
        try:
            faults.check("save")
            state = self.ctx.save(slot.id, partial=True)
        except Exception as exc:
            self._save_failed(f"a checkpoint at {pos}", slot, exc)
            return
        most = MAX_RECURRENT_CHECKPOINTS if recurrent else MAX_CHECKPOINTS
        kept = sorted([*slot.checkpoints, Checkpoint(pos, state, mark)], key=lambda c: c.pos)
        marks = [c for c in kept if c.mark][:1]  # the first mark stays
        rest = [c for c in kept if not any(c is m for m in marks)]
        rest = rest[-(most - len(marks)) :]
        # Room in the budget: this sequence's oldest checkpoints go first.
        others = self.cache.pinned - sum(len(c.state) for c in slot.checkpoints)
        while len(rest) > 1 and others + sum(len(c.state) for c in [*marks, *rest]) > (
            self.cache.budget
        ):
            rest.pop(0)
        slot.checkpoints = sorted([*marks, *rest], key=lambda c: c.pos)
        self.pin()

    def pin(self) -> None:
        self.cache.pinned = sum(len(c.state) for s in self.slots for c in s.checkpoints)
        self.cache.shrink()

    def save(self, slot: Slot) -> None:
        """A sequence about to be overwritten, to the RAM cache (or, where
        it does not fit there, to disk)."""
        if len(slot.held) < MIN_SAVE or (self.cache.budget <= 0 and self.disk is None):
            return
        try:
            faults.check("save")
            state = self.ctx.save(slot.id)
            if self._keep(slot, state):
                n = len(slot.held)
                log.debug("seq %d: saved %d tokens (%d bytes)", slot.id, n, len(state))
            elif self.disk is not None:
                windows = [(c.pos, c.state) for c in slot.checkpoints]
                self.disk.put(slot.held, state, windows, slot.ends)
        except Exception as exc:
            self._save_failed("saving its state", slot, exc)

    def _keep(self, slot: Slot, state: bytes) -> bool:
        """`slot`'s state into the RAM cache; False where it does not fit."""
        windows = [(c.pos, c.state) for c in slot.checkpoints]
        return self.cache.put(slot.held, state, self.ctx.pos_min(slot.id), windows, slot.ends)

    def park_idle(self, keep: Slot, spare: Slot | None = None) -> None:
        """Every idle sequence but `keep` (and `spare`, a copy's donor until
        it has copied) into the RAM cache, its cells freed. In one unified
        cache llama.cpp's attention walks every cell up to the highest one
        in use, masked or not: with a second 4k conversation idle in the
        cache, the 0.5B's decode of the first fell from 14.9 to 5.7-7.2
        tokens a second (llama-server clears idle slots the same way). Done
        before the request's cells are placed, so that they go low, not
        above the parked ones' holes. A conversation comes back from the
        cache when it returns; one too large for the cache stays."""
        room = self.cache.budget - self.cache.pinned
        for slot in self.slots:
            if slot is keep or slot is spare or slot.busy or not slot.held:
                continue
            # Saved however short: a small state copies in no time, and
            # reading its tokens again costs a prefill.
            if not self.covers(slot.held):
                if self.ctx.state_size(slot.id) > room:
                    continue
                try:
                    faults.check("save")
                    if not self._keep(slot, self.ctx.save(slot.id)):
                        continue
                except Exception as exc:  # it stays where it is
                    self._save_failed("parking it", slot, exc)
                    continue
            log.debug("seq %d: parked (%d tokens)", slot.id, len(slot.held))
            self.ctx.clear(slot.id)
            slot.replace([])
        self.pin()

    def to_disk(self, entry: CacheEntry) -> None:
        if self.disk is None:
            return
        try:
            faults.check("save")
            self.disk.put(entry.tokens, entry.state, entry.windows, entry.ends)
        except Exception as exc:
            self._save_failed("writing an entry to the disk tier", None, exc)

    def evict_idle(self) -> bool:
        """Frees the least recently used idle sequence that holds anything."""
        idle = [s for s in self.slots if not s.busy and self.ctx.held(s.id) > 0]
        if not idle:
            return False
        slot = min(idle, key=lambda s: s.used)
        self.save(slot)
        self.ctx.clear(slot.id)
        slot.replace([])
        self.pin()
        log.info("seq %d: cleared to make room in the KV cache", slot.id)
        return True

    def caches(self) -> list[CacheStatus]:
        """The prompt cache's tiers as they are now (read from any thread:
        figures only)."""
        ram = self.cache
        out = [
            CacheStatus(
                "ram", len(ram.entries), ram.used, ram.budget, ram.hits, ram.restored_tokens
            )
        ]
        if self.disk is not None and self.disk.on:
            d = self.disk.stats()
            out.append(
                CacheStatus(
                    "disk", d["entries"], d["bytes"], d["budget"], d["hits"], d["restored_tokens"]
                )
            )
        return out

    def mismatches(self) -> list[str]:
        """Sequences whose tokens and KV cache disagree in length (none, or
        the bookkeeping is wrong). Only while the model's thread is idle."""
        out = []
        for s in self.slots:
            if s.busy:
                continue
            kv = self.ctx.held(s.id)
            if kv != len(s.held):
                out.append(f"seq {s.id}: {len(s.held)} tokens, {kv} in the KV cache")
        return out

    def keep_all(self) -> None:
        """With a disk tier, every conversation worth keeping goes there
        (a graceful stop keeps the cache)."""
        if self.disk is None:
            return
        for slot in self.slots:
            if len(slot.held) >= MIN_SAVE:
                windows = [(c.pos, c.state) for c in slot.checkpoints]
                try:
                    faults.check("save")
                    self.disk.put(slot.held, self.ctx.save(slot.id), windows, slot.ends)
                except Exception as exc:
                    self._save_failed("keeping it on disk", slot, exc)
                self.disk.flush()  # one state in memory at a time
        for entry in self.cache.entries:
            self.to_disk(entry)
        self.disk.close()
