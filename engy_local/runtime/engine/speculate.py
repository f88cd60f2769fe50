"""Speculative decoding without a draft model: a sequence's next tokens
guessed from its own tokens (prompt and output), verified in the same
llama_decode step as every other sequence's token.

- Drafting (`Drafter`): the longest suffix of the sequence (8, 4, then 2
  tokens) that occurred before; the tokens that followed it then are the
  draft, and the next drafts go on from there while the output agrees.
  Agents repeat what they read (an Edit's old_string, a patch's context
  lines, a file written back), so drafts of that kind get accepted. The
  search is a byte search over the tokens, nothing to index.
- Verifying: the draft goes into the batch after the sequence's last token,
  with logits at every position; the sampler draws at each position in turn
  and the draft holds while each draw equals the drafted token. Every output
  token is a draw from the model's own distribution given the kept tokens,
  so the output is what decoding one token at a time would give (greedy:
  the same tokens; sampled: the same distribution, the same draws), up to
  rounding: a step of several rows adds in another order than a step of
  one, which can turn a near tie the other way.
- Recent answers (`Recent`): the model's last few answers are searched
  too, before the sequence's own tokens, so a request asked again (a
  retry, another session's same first turn, the same edit in another
  file) drafts its answer from the last one, as llama.cpp's ngram-mod
  drafts from a table it keeps across requests.
- Paying for itself (`Gate`): at load the model's step times are measured
  for batches of 1 to 64 tokens (`measure`), and every generating step
  while serving times its size again (`observe`: down at once, up by a
  little a step, so a burst of other work at start-up or later does not
  turn drafting off for good). Those timings are of a nearly empty KV
  cache; each row of a step also attends to its sequence's tokens, which
  at a few thousand can cost more than the weights (on a CPU with flash
  attention, Qwen2.5-Coder-0.5B at 3.2k tokens: a step of 17 rows 0.9 s
  against 0.12 s empty), so steps over long sequences time that part
  alone, per row and token attended to (`per_cell`; `wide_cell` for
  steps of WIDE rows, another kernel: widen.py). A sequence drafts
  only as far as its expected accepted tokens are worth more than the
  extra rows cost beside what the step already holds; where the step is
  padded to WIDE rows anyway, its draft fills them. Where no draft, even
  one kept whole, could pay (`pays_at_all`), one sequence drafts one token
  every RETRY steps, which times a step of two rows again. Acceptance is
  tracked per sequence: drafts lengthen as they are accepted and shorten
  as they are not, and a sequence whose drafts fail stops drafting, trying
  again now and then, or at once when its output has gone as its drafter's
  source said for a run of tokens (`Drafter.followed`: a copy under way).
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

SIZES = (1, 2, 4, 8, 16, 32, 64)  # batch sizes timed at load
SUFFIXES = (8, 4, 2)  # tokens of the sequence's end looked for, longest first
CANDIDATES = 16  # occurrences of a suffix compared, latest first
AGREEMENT = 64  # tokens before an occurrence compared with those before the suffix
RETRY = 32  # steps a sequence that stopped drafting waits before it tries again
DECAY = 0.8  # what a draft's outcome still counts one draft later
RISE = 1.05  # the most a step size's cost goes up for one slower step observed
RUN = 8  # output tokens that followed a drafter's source: evidence enough to draft on
LONG = 1024  # tokens a row attends to, from which a step is timed for its attention
# llama.cpp's CPU flash attention takes a step of 64 rows or more in tiles
# (GGML_FA_TILE_Q), a narrower one a row at a time: over 2k cached tokens on
# Qwen2.5-Coder-0.5B, 16 rows cost 0.52 s, 64 rows 0.43 s. Both kinds of
# step are timed apart (other backends may price them alike).
WIDE = 64
PROBE = 8  # rows from which a step over a long sequence is padded to time a wide one
FOLLOW = 0.5  # how far one such step moves the estimate of that cost
RECENT = 8  # answers kept for drafts across requests
RECENT_TOKENS = 4096  # the most of one answer kept (its end)
LEAD = 16  # prompt tokens kept before an answer: what a repeat agrees with
# Between two token runs that do not follow each other: no token's bytes
# (a token id is under 2**31), so no suffix, and no agreement, spans it.
_APART = np.asarray([-1], dtype="<i4").tobytes()


SHARE = 16  # drafted tokens a sequence is sure of room for, beside the others


def output_rows(n_seq: int, draft_max: int) -> int:
    """The most tokens one step asks logits for: each sequence's next token
    (or its prompt's last) and a draft of SHARE, or one sequence's draft of
    draft_max or of a wide step's rows beside the others' (the scheduler
    keeps a row a sequence out of the drafts' room); the steps timed while
    drafts are measured."""
    if not draft_max:
        return n_seq
    return max(n_seq * (1 + min(draft_max, SHARE)), n_seq + draft_max, WIDE + n_seq, max(SIZES))


class Recent:
    """The model's last RECENT answers (RECENT_TOKENS of each at most, after
    their prompt's last LEAD tokens), as one run of bytes that drafters
    search before their own tokens. Not for a request with a seed: sent
    again, it should take the steps it took before, since a wide step
    rounds otherwise than a narrow one and can move a sampled draw (the
    same seed, another answer)."""

    def __init__(self) -> None:
        self._answers: list[bytes] = []
        self.blob = b""

    def add(self, drafter: Drafter | None) -> None:
        """The answer a finished request's drafter saw (None: it had none)."""
        answer = drafter.output() if drafter is not None else b""
        if not answer:
            return
        self._answers = [*self._answers, answer[-4 * (LEAD + RECENT_TOKENS) :]][-RECENT:]
        self.blob = b"".join(a + _APART for a in self._answers)


class Drafter:
    """One sequence's tokens, and drafts from them.

    A draft comes from a source: a place earlier in the sequence whose
    tokens are expected next. Found by the longest repeated suffix, and among
    its occurrences the one that agrees with the sequence furthest back (in
    code, `found = []` is in every function; the function being copied is
    the one whose name came before it). Once found, the source is followed
    for as long as the output agrees with it, so a file being copied is
    copied from itself, not from whichever of its look-alike lines came
    last; where the output leaves it (an edit), the next draft searches
    again.
    """

    def __init__(self, tokens: list[int], recent: bytes = b"") -> None:
        """`recent`: other token runs to draft from (Recent.blob), each
        ending in _APART; searched as if they came before `tokens`."""
        self._bytes = bytearray(recent) + np.asarray(tokens, dtype="<i4").tobytes()
        # Where what Recent keeps of it begins: the prompt's end, then the output.
        self._start = len(self._bytes) - 4 * min(LEAD, len(tokens))
        self._prompt_end = len(self._bytes)
        self._source = -1  # byte offset of the token expected next; -1: none
        # Output tokens that went as the source said since it was found,
        # drafted or not: what drafts would have kept (the gate's evidence
        # while a sequence rests from drafting).
        self.followed = 0

    def push(self, tokens: list[int]) -> None:
        new = np.asarray(tokens, dtype="<i4").tobytes()
        if self._source >= 0:
            followed = self._bytes[self._source : self._source + len(new)] == new
            self._source = self._source + len(new) if followed else -1
            self.followed = self.followed + len(tokens) if followed else 0
        self._bytes += new

    def output(self) -> bytes:
        """The tokens pushed since the start, after the prompt's last LEAD,
        as bytes (for Recent); b"" when none were pushed."""
        if len(self._bytes) == self._prompt_end:
            return b""
        return bytes(self._bytes[self._start :])

    def draft(self, k: int) -> list[int]:
        """Up to `k` tokens from the source; [] when nothing repeats."""
        data = self._bytes
        if not 0 <= self._source < len(data) or data[self._source : self._source + 4] == _APART:
            self._source = self._find()
            self.followed = 0
        if self._source < 0:
            return []
        piece = np.frombuffer(bytes(data[self._source : self._source + 4 * k]), dtype="<i4")
        ends = np.flatnonzero(piece < 0)  # a recent answer's end: the draft stops there
        return [int(t) for t in piece[: ends[0] if len(ends) else len(piece)]]

    def _find(self) -> int:
        """Where the tokens after the best earlier occurrence of the longest
        repeated suffix start (a byte offset), or -1."""
        data = self._bytes
        end = len(data)
        for n in SUFFIXES:
            size = 4 * n
            if end <= size:
                continue
            tail = bytes(data[end - size :])
            best, agree = -1, -1
            at = data.rfind(tail, 0, end - 4)  # an occurrence before the very end
            for _ in range(CANDIDATES):
                while at >= 0 and at % 4:
                    at = data.rfind(tail, 0, at + size - 1)  # aligned to tokens only
                if at < 0:
                    break
                more = self._agreement(at, end - size)
                if more > agree:  # ties: the latest occurrence
                    best, agree = at, more
                at = data.rfind(tail, 0, at + size - 1)
            if best >= 0:
                return best + size
        return -1

    def _agreement(self, a: int, b: int) -> int:
        """Tokens before byte offsets `a` and `b` that are the same, up to
        AGREEMENT of them."""
        data = self._bytes
        n = 0
        while n < AGREEMENT and a - 4 * (n + 1) >= 0:
            if data[a - 4 * (n + 1) : a - 4 * n] != data[b - 4 * (n + 1) : b - 4 * n]:
                break
            n += 1
        return n


@dataclass
class Acceptance:
    """What one sequence's drafts have been worth.

    Acceptance comes in runs (a copy is accepted for dozens of tokens, then
    an edit misses), so the chance that a drafted token is kept, given the
    one before it was, is estimated from runs: tokens kept over tokens kept
    and drafts cut short by a miss, both decaying so the estimate follows
    what the sequence is doing now. A draft kept whole counts no miss: its
    run went on past it.
    """

    kept: float = 1.2  # drafted tokens accepted (decaying; a prior of 0.6 in 2)
    missed: float = 0.8  # drafts a miss cut short (decaying)
    length: int = 4  # the draft length it asks for next
    idle: int = 0  # steps since it stopped drafting (0: drafting)

    @property
    def rate(self) -> float:
        return self.kept / (self.kept + self.missed)

    def update(self, drafted: int, accepted: int, cap: int) -> None:
        if drafted == 0:
            return
        self.kept = DECAY * self.kept + accepted
        self.missed = DECAY * self.missed + (accepted < drafted)
        if accepted == drafted:
            self.length = min(cap, self.length * 2)
        else:
            self.length = max(1, accepted + 1)


@dataclass(frozen=True)
class Costs:
    """Seconds a step of b tokens takes, b in SIZES (others interpolated)."""

    seconds: tuple[float, ...]

    def of(self, tokens: int) -> float:
        # Plain Python, not np.interp: Gate.lengths asks this a few hundred
        # times a step where a draft may fill a wide step (63 lengths).
        seconds = self.seconds
        i = bisect.bisect_left(SIZES, tokens, hi=len(seconds))
        if i == len(seconds):  # a prompt's chunk: the widest step's cost a row
            return seconds[-1] * tokens / SIZES[i - 1]
        if i == 0 or SIZES[i] == tokens:
            return seconds[i]
        a, b = SIZES[i - 1], SIZES[i]
        return seconds[i - 1] + (seconds[i] - seconds[i - 1]) * (tokens - a) / (b - a)


def measure(run: Callable[[int], None], repeats: int = 3) -> Costs:
    """Times `run(b)` (one decode step of b tokens) for each size; the
    fastest of `repeats` rounds over all the sizes (a round at a time, so a
    burst of other work slows one round of every size, not every run of one
    size: the fastest is what noise left alone)."""
    best = [float("inf")] * len(SIZES)
    for _ in range(repeats):
        for i, b in enumerate(SIZES):
            t0 = time.perf_counter()
            run(b)
            best[i] = min(best[i], time.perf_counter() - t0)
    return Costs(tuple(best))


@dataclass
class Gate:
    """How far each generating sequence drafts this step."""

    costs: Costs
    cap: int = 16  # --draft-max
    margin: float = 1.1  # the expected gain must beat the extra cost by this
    stats: dict[int, Acceptance] = field(default_factory=dict)  # by sequence
    why: str = ""  # why drafting is off, when it is (for the log)
    waited: int = 0  # steps since a probe, while drafting does not pay at all
    fixed: bool = False  # costs given, not measured ("on": draft whatever it costs)
    pads: bool = False  # a step may take rows it takes back (widen.py): plain attention
    # Seconds one row of a step spends per token its sequence holds (the
    # costs above are of a nearly empty cache), from steps over long ones:
    # of fewer than WIDE rows, and of WIDE or more (None: none timed yet).
    per_cell: float = 0.0
    wide_cell: float | None = None

    @property
    def reach(self) -> int:
        """The longest draft asked for: the cap, or a wide step's rows
        where a step may be padded to them (lengths fills them)."""
        return max(self.cap, WIDE - 1) if self.pads else self.cap

    def _cell(self, rows: int) -> float:
        if rows >= WIDE and self.wide_cell is not None:
            return self.wide_cell
        return self.per_cell

    def step(self, rows: int, cells: int) -> float:
        """Seconds a step of `rows` rows takes, attending to `cells` tokens
        in all (each row to its sequence's)."""
        return self.costs.of(rows) + cells * self._cell(rows)

    def pad(self, rows: int, cells: int, attend: int, probe: bool = False) -> int:
        """Rows to add to a step of `rows` rows (`cells` attended to in
        all) so that it runs as a wide one, where that is cheaper by the
        margin; each added row attends to `attend` tokens. 0: as it is.
        `probe`: while no wide step over a long sequence has been timed,
        a step of PROBE rows or more over one is padded, to time it."""
        if rows >= WIDE or self.fixed or not self.pads:
            return 0
        extra = WIDE - rows
        if self.wide_cell is None:
            return extra if probe and rows >= PROBE and cells >= LONG * rows else 0
        wide = self.step(WIDE, cells + extra * attend)
        return extra if self.margin * wide < self.step(rows, cells) else 0

    def _best(self, rows: int, cells: int, attend: int) -> float:
        """A step's cost, padded where that is cheaper (pad)."""
        extra = self.pad(rows, cells, attend)
        return self.step(rows + extra, cells + extra * attend)

    def lengths(
        self,
        rows: int,
        wants: dict[int, int],
        followed: dict[int, int] | None = None,
        held: dict[int, int] | None = None,
    ) -> dict[int, int]:
        """Draft lengths for the sequences in `wants` (sequence -> tokens
        its drafter has, at most), in a step that holds `rows` tokens
        already; `held`: the tokens each sequence holds, which its rows
        attend to. A sequence drafts k tokens when what they are expected
        to save beats what they add to the step. `followed` (sequence -> its
        output tokens that went as its drafter's source said, drafted or
        not): a run of them is evidence that the next ones will too, so a
        copy is drafted at length however its sequence fared before (a run
        of n tokens goes on with a chance of about n / (n + 2))."""
        if not wants:
            return {}
        followed, held = followed or {}, held or {}
        if not self.pays_at_all():
            # A probe now and then: a one-token draft times a step of two.
            self.waited += 1
            if self.waited < RETRY or rows != 1:
                return {}
            self.waited = 0
            return {next(iter(wants)): 1}
        per_row = self.costs.of(rows) / max(1, rows)  # the weights' share of a row now
        out: dict[int, int] = {}
        extra = 0
        cells = sum(held.values())  # what the step's rows attend to so far
        for seq, available in wants.items():
            stat = self.stats.setdefault(seq, Acceptance())
            run = followed.get(seq, 0)
            if stat.idle:
                stat.idle += 1
                if stat.idle < RETRY and run < RUN:
                    continue
                stat = self.stats[seq] = Acceptance(length=1)  # try again, as a newcomer
            rate, own = max(stat.rate, run / (run + 2)), held.get(seq, 0)
            base = self._best(rows + extra, cells, own)
            per_token = per_row + self.per_cell * own  # what one output of it costs
            length = max(stat.length, run if run >= RUN else 0)
            top = min(length, available, self.cap)
            if self.pad(rows + extra + top, cells + top * own, own):
                # The step is padded to WIDE rows anyway: a draft fills them for free.
                top = max(top, min(available, WIDE - rows - extra))
            best, gain, expected = 0, 0.0, 0.0
            for k in range(1, top + 1):
                expected += rate**k  # tokens a k-token draft is expected to keep
                cost = self._best(rows + extra + k, cells + k * own, own) - base
                value = expected * per_token - self.margin * cost
                if value > gain:
                    best, gain = k, value
            if best:
                out[seq] = best
                extra += best
                cells += best * own
            else:
                # Its drafts do not pay now: rest a while, then try again
                # (else one early miss would stop a sequence for good: its
                # rate only moves when it drafts).
                stat.idle = 1
        return out

    def observe(self, tokens: int, seconds: float, cells: int = 0) -> None:
        """A step of `tokens` rows (generating or reading a prompt), each
        attending to `cells` tokens on average, took `seconds`. Over long
        sequences, what it took beyond the weights' cost is its attention's
        (per_cell or wide_cell follows it); else that size's cost follows
        it, down at once, up by at most RISE."""
        if self.fixed:
            return
        weights = self.costs.of(tokens)
        if tokens >= WIDE and cells >= LONG:
            # Only a step of a timed size: past it, what a row of weights
            # costs is a guess (a prompt's wide chunks cost less a row).
            if tokens in SIZES[: len(self.costs.seconds)]:
                seen = max(seconds - weights, 0.0) / (tokens * cells)
                now = seen if self.wide_cell is None else self.wide_cell
                self.wide_cell = now + FOLLOW * (seen - now)
            return
        if cells >= LONG and seconds > weights:
            seen = (seconds - weights) / (tokens * cells)
            self.per_cell += FOLLOW * (seen - self.per_cell)
            return
        if tokens not in SIZES[: len(self.costs.seconds)]:
            return
        # The weights' part (never all of it: per_cell may be high for now).
        seconds = max(seconds - self._cell(tokens) * tokens * cells, 0.1 * seconds)
        i = SIZES.index(tokens)
        seconds_now = list(self.costs.seconds)
        seconds_now[i] = min(seconds, seconds_now[i] * RISE)
        self.costs = Costs(tuple(seconds_now))

    def account(self, seq: int, drafted: int, accepted: int) -> None:
        self.stats.setdefault(seq, Acceptance()).update(drafted, accepted, self.cap)

    def forget(self, seq: int) -> None:
        """A sequence taken by another request starts afresh."""
        self.stats.pop(seq, None)

    def pays_at_all(self) -> bool:
        """Whether even a draft accepted whole could pay on this machine: a
        step of 1 + k rows, for some k up to the cap, must cost less than
        the k + 1 steps of one row it saves. (Rows cost less the more a
        step holds: where two rows cost almost two steps, seventeen may
        still cost far less than seventeen.)"""
        one = self.costs.of(1)
        return any(
            k * one > self.margin * (self.costs.of(1 + k) - one) for k in range(1, self.cap + 1)
        )
