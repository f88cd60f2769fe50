"""Continuous batching over the KV sequences of one model.

Each step builds one batch: the last sampled token of every generating
request, then chunks of the prompts still being read, up to BATCH tokens;
one llama_decode runs it, and every request that has logits samples from
its own chain. A request that ends (or is cancelled) gives its sequence
back at once; the others go on undisturbed.

Which sequence a request takes, and where its cached prefix comes from
(its own sequence, another one, the RAM cache or the disk tier), is decided
by slots.py and carried out by prefixes.py; drafts come from speculate.py.

No failing phase ends the thread or leaves a request unanswered (faults.py
lists them and what each costs): admission answers its own job, a chunk of
a prompt or a draw fails its own request, a decode that raises runs again
once.

Longer than about 500 lines: admission, the step and what each does when
it fails share every sequence's state; split, each part would reach into
the other's.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from typing import Any

from ...backend import CacheStatus
from ...chat import PromptProgress, Started
from ...errors import ContextFull, EngyError, ServerError
from ...prompt.parsing.assemble import AnswerAssembler
from ...prompt.parsing.detokenize import TextEnd, TokenText
from .. import faults
from ..cache.disk import DiskTier
from ..cache.prefixes import MIN_SAVE, Prefixes, points
from ..cache.slots import Slot, choose, common_prefix, usable_length, worth_pre_reading
from ..loading.context import Context
from ..loading.model import Model
from . import widen
from .job import Job
from .running import Fed, Running
from .sampling import Sampler
from .speculate import SHARE, SIZES, Costs, Drafter, Gate, Recent, measure, output_rows

log = logging.getLogger("engy.requests")


class Scheduler:
    def __init__(self, model: Model, disk: DiskTier | None = None) -> None:
        self.model = model
        # A recurrent state can take a draft back only from llama.cpp's
        # snapshots of it (dropped again if drafts do not pay: _gate).
        draft_max = model.draft_max if model.speculative != "off" else 0
        rollback = min(draft_max, SHARE)  # each snapshot is a copy of every state
        self.ctx = Context(model, rollback=rollback, outputs=output_rows(model.parallel, draft_max))
        self.slots = [Slot(i) for i in range(self.ctx.n_seq)]
        self.disk = disk
        self.prefixes = Prefixes(model, self.ctx, self.slots, disk)
        self.cache = self.prefixes.cache
        self.running: list[Running] = []
        self._clock = itertools.count(1)
        # A waiting job with these tokens, taken from the queue: it inherits a read its sender left.
        self.heir: Callable[[list[int]], Job | None] = lambda tokens: None
        # An answer ended: the worker reads its next turn's start in (Job.pre_read).
        self.followed: Callable[[Job], None] = lambda job: None
        self.gate: Gate | None = None
        self.recent = Recent()  # answers drafted from across requests
        # What a tier or drafting cannot do for this model (engy ps, the page).
        self.limits: list[str] = self.prefixes.limits()
        # Faults the thread lived through, by phase (faults.py; the page).
        self.faults: dict[str, int] = self.prefixes.faults
        self._placing: tuple[Slot | None, Sampler | None] = (None, None)

    def start(self) -> None:
        """On the thread that runs every step, before the first: anything
        that decodes must run there. ggml computes in an OpenMP team of the
        calling thread; a decode on another thread gives the process a second
        team, libgomp then counts more threads than cores and every barrier
        between two graph nodes sleeps instead of spinning (measured: prompts
        read 7-10% slower, the CPUs a tenth idle)."""
        try:
            self.gate = self._gate()
        except Exception:  # drafting is an optimisation: the model serves without it
            name = self.model.path.name
            log.exception("%s: speculative decoding off (timing steps failed)", name)
            self.ctx.clear(0)

    def _gate(self) -> Gate | None:
        """Drafting where it can pay ("auto"): state that can take a draft
        back (a recurrent one: from llama.cpp's snapshots), and a measured
        step cost that leaves room for a gain. "on" drafts whatever the
        cost (for tests, and machines known to gain)."""
        model = self.model
        if model.speculative == "off":
            return None
        why = "a token more costs a step here"
        if model.recurrent and self.ctx.rollback == 0:
            why = "llama.cpp cannot take a draft back from this model's recurrent state"
        else:
            cap = min(model.draft_max, self.ctx.rollback) if model.recurrent else model.draft_max
            if model.speculative == "on":
                return Gate(Costs(tuple(1.0 for _ in SIZES)), cap=cap, fixed=True)
            # Rows past the answer can be taken back: plain attention (widen.py).
            pads = model.n_swa <= 0 and not model.recurrent
            gate = Gate(measure(self._time_step), cap=cap, pads=pads)
            if gate.pays_at_all():
                return gate
            if not model.recurrent:
                # Timings at start-up may be a burst of other work: serving
                # times its steps again, and drafts where they pay then.
                log.info("%s: speculative decoding waits (%s at start-up)", model.path.name, why)
                return gate
        log.info("%s: speculative decoding off (%s)", model.path.name, why)
        if model.recurrent and not self.ctx.rollback:
            self.limits.append(f"drafts off: {why}")
        if self.ctx.rollback:  # its recurrent-state snapshots cost memory for nothing
            self.ctx.close()
            self.ctx = self.prefixes.ctx = Context(self.model)
        return None

    def _time_step(self, n: int) -> None:
        """One decode step of n tokens on an empty sequence, undone."""
        batch = self.ctx.batch
        batch.clear()
        for i in range(n):
            batch.add(i % max(1, self.model.n_vocab), i, 0, True)
        self.ctx.decode()
        self.ctx.clear(0)
        batch.clear()

    def free(self) -> int:
        return sum(not s.busy for s in self.slots)

    def reading_the_same(self, job: Job) -> bool:
        """Another request is reading exactly this prompt (a client that
        timed out and sent it again): this one waits and then starts from
        that prefill's end instead of evaluating it twice, whether or not
        the first one's client is still there (its tokens stay in its
        sequence)."""
        return any(
            r.next_token is None and len(r.slot.held) < len(r.prompt) and r.prompt == job.tokens
            for r in self.running
        )

    def pre_reading(self, tokens: list[int]) -> bool:
        """A pre-read of the start of `tokens` is running: a request with
        them waits for it (one step) and then reads only the rest."""
        return any(r.job.read_only and tokens[: len(r.prompt)] == r.prompt for r in self.running)

    # -- admission ------------------------------------------------------

    def admit(self, job: Job) -> None:
        """Takes `job` into a sequence with its cached prefix. Whatever fails
        on the way answers this job with the error and leaves its sequence
        empty: the thread and every other job go on."""
        self._placing = (None, None)
        try:
            self._admit(job)
        except Exception as exc:  # a restore llama.cpp refuses, a copy that raises
            self._admit_failed(job, exc)
        finally:
            self._placing = (None, None)

    def _admit_failed(self, job: Job, exc: Exception) -> None:
        slot, sampler = self._placing
        phase = exc.phase if isinstance(exc, faults.Injected) else "admit"
        where = f"seq {slot.id}" if slot is not None else "no sequence yet"
        log.error("admitting a request failed (%s): %s", where, exc, exc_info=exc)
        self._count("next-turn" if job.read_only else phase)
        running = next((r for r in self.running if r.job is job), None)
        if running is not None:
            self.running.remove(running)
        if sampler is not None:
            sampler.close()
        if slot is not None:  # what it holds is unknown now
            self.ctx.drop_stash(slot.id)
            self.ctx.clear(slot.id)
            slot.replace([])
            slot.busy = False
            slot.used = next(self._clock)
        self.prefixes.shift = None
        self.prefixes.pin()
        err = (
            exc
            if isinstance(exc, EngyError)
            else ServerError(f"admitting the request failed: {exc}")
        )
        job.emit(err)
        job.emit(None)

    def _count(self, phase: str) -> None:
        self.faults[phase] = self.faults.get(phase, 0) + 1

    def _admit(self, job: Job) -> None:
        if job.cancelled.is_set():
            job.emit(None)
            return
        faults.check("next-turn" if job.read_only else "admit", job)
        try:
            sampler = Sampler(self.model, job.params)
        except EngyError as exc:
            job.emit(exc)
            job.emit(None)
            return
        self._placing = (None, sampler)
        prompt = job.tokens
        media = {m.start: m for m in job.media}
        usable = usable_length(prompt, job.media)
        cached = self.prefixes.cached(prompt, usable)
        hit = self.disk.best(prompt, usable(len(prompt))) if self.disk is not None else None
        stored = hit.tokens if hit is not None else 0
        recurrent = self.model.recurrent
        covers = self.prefixes.covers
        cuts = self.prefixes.cuts
        replaces = job.read_only
        plan = choose(
            prompt, self.slots, cached, MIN_SAVE, usable, covers, stored, recurrent, cuts, replaces
        )
        assert plan is not None, "admitted without a free sequence"
        room = self.ctx.n_batch
        if job.read_only and not worth_pre_reading(plan, self.slots, prompt, room):
            sampler.close()
            job.emit(None)
            return
        slot = self.slots[plan.slot]
        self._placing = (slot, sampler)
        if plan.save:
            self.prefixes.save(slot)
        # Idle conversations out of the cache before this one's cells are
        # placed (see park_idle); a copy's donor once it has copied.
        first = plan.options[0] if plan.options else None
        donor = self.slots[first.src] if first and first.src is not None else None
        if first is not None and first.source == "cache":
            self.prefixes.touch(prompt, usable)  # the entry it restores is not let go
        if not job.read_only:  # a pre-read adds to its own cells only
            self.prefixes.park_idle(slot, spare=donor)
        least = 0 if job.media else job.cache_reuse
        reuse = self.prefixes.reuse(slot, plan.options, prompt, hit, least)
        if donor is not None:
            self.prefixes.park_idle(slot)
        known = max(stored, cached, *(common_prefix(s.held, prompt) for s in self.slots))
        miss = self.prefixes.missed(job.where, len(prompt), known, usable(known), reuse)
        shift = self.prefixes.shift  # a later run, read at its new place (shift.py)
        if shift is not None:
            media[shift.start] = shift
            miss += f"; {shift.n_tokens} tokens after it read from the cache, moved"
        slot.busy = True
        slot.used = next(self._clock)
        text = TokenText(self.model, job.params.stop, job.params.max_tokens, job.params.ends)
        answer = AnswerAssembler(job.parser, job.single_call, job.check)
        recent = self.recent.blob if job.params.seed is None else b""  # see Recent
        read = reuse + (shift.n_tokens if shift is not None else 0)  # from the cache
        running = Running(job, slot, sampler, text, answer, read, media, miss=miss)
        if not job.read_only:
            running.points = points(self.model, len(prompt), reuse, job.marks, job.answer_start)
        running.drafter = Drafter(prompt, recent) if self.gate is not None else None
        if self.gate is not None:
            self.gate.forget(slot.id)
        self.running.append(running)
        job.emit(Started(len(prompt), read, miss))

    # -- one step -------------------------------------------------------

    def step(self) -> None:
        for r in [r for r in self.running if r.job.cancelled.is_set()]:
            reading = r.next_token is None and len(r.slot.held) < len(r.prompt)
            heir = self.heir(r.prompt) if reading else None
            if heir is not None:
                self._hand_over(r, heir)
            else:
                self._release(r)
        if not self.running:
            return
        if any(r.next_token is None for r in self.running):
            self.flush()  # a prompt is read this step: seconds, not a token's time
        ran = self._run_batch()
        if ran is None:
            return
        outputs, fed = ran
        for f in fed:
            r, tokens = f.running, f.tokens
            # A draft is kept only as far as it is verified (_verify).
            r.slot.held.extend(tokens if f.reading else tokens[: len(r.pending) + 1])
            r.pending = []
            prompt_read = r.next_token is None and len(r.slot.held) == len(r.prompt)
            r.next_token = None
            if len(r.slot.held) < len(r.prompt):
                r.job.emit(PromptProgress(len(r.slot.held), len(r.prompt)))
                if f.reading and len(r.slot.held) in r.points:
                    mark = len(r.slot.held) in r.job.marks
                    if mark:
                        r.slot.ends.append(len(r.slot.held))
                    self.prefixes.checkpoint(r.slot, mark=mark)
            elif prompt_read:
                if not r.slot.ends or r.slot.ends[-1] != len(r.slot.held):
                    r.slot.ends.append(len(r.slot.held))
                if r.job.read_only:  # no checkpoints: the answer's prompt keeps its own
                    n = len(r.prompt) - r.cached
                    log.info("seq %d: read %d tokens of the next turn's start", r.slot.id, n)
                    self._release(r)
                elif not self.model.recurrent:  # its checkpoint is one token before
                    self.prefixes.checkpoint(r.slot)
        now = time.monotonic()
        for r, at in outputs:
            if not r.t_prefilled:
                r.t_prefilled = now
            try:
                if r.job.scaffold and not r.scaffold:
                    r.scaffold = True
                    for token in r.job.scaffold:
                        r.sampler.accept(token)
                    self._advance(r, list(r.job.scaffold), in_cache=0)
                else:
                    tokens = self._verify(r, at)
                    self._advance(r, tokens, in_cache=len(tokens) - 1)
            except Exception as exc:  # one request's failure is not the others'
                self._fail(r, self._failure(exc, "sample", r), forget=None)

    def _hand_over(self, r: Running, job: Job) -> None:
        """A read whose client went away goes on for the request that sent
        the same prompt again: it starts from what is read so far."""
        try:
            sampler = Sampler(self.model, job.params)
        except EngyError as exc:
            job.emit(exc)
            job.emit(None)
            self._release(r)
            return
        r.sampler.close()
        r.job.emit(None)
        read = len(r.slot.held)
        r.job, r.sampler, r.cached, r.miss = job, sampler, read, ""
        r.text = TokenText(self.model, job.params.stop, job.params.max_tokens, job.params.ends)
        r.answer = AnswerAssembler(job.parser, job.single_call, job.check)
        r.t_start = time.monotonic()
        log.info("seq %d: a resent prompt takes over its read (%d tokens in)", r.slot.id, read)
        job.emit(Started(len(r.prompt), read))

    def _build(self, prompts: bool) -> tuple[list[tuple[Running, list[int]]], list[Fed]]:
        """The step's batch: the last sampled token of every generating
        request and its draft, if it drafts this step, then (`prompts`)
        chunks of the prompts being read. Returns where each request samples
        and what each one fed."""
        batch = self.ctx.batch
        batch.clear()
        outputs: list[tuple[Running, list[int]]] = []
        fed: list[Fed] = []
        generating = [r for r in self.running if r.next_token is not None]
        drafts = self._drafts(generating)
        for r in generating:
            assert r.next_token is not None
            r.draft = drafts.get(r.slot.id, [])
            pos, seq = len(r.slot.held), r.slot.id
            for k, t in enumerate(r.pending):  # output not sampled here: no logits
                batch.add(t, pos + k, seq, False)
            pos += len(r.pending)
            at = [batch.add(r.next_token, pos, seq, True)]
            at += [batch.add(t, pos + 1 + k, seq, True) for k, t in enumerate(r.draft)]
            outputs.append((r, at))
            fed.append(Fed(r, [*r.pending, r.next_token, *r.draft], reading=False))
        budget = self.ctx.n_batch - batch.n
        for r in list(self.running) if prompts else ():
            if r.next_token is not None or budget <= 0:
                continue
            mark, marked = batch.n, len(outputs)
            try:
                faults.check("next-turn" if r.job.read_only else "prompt", r.job)
                taken = self._feed_prompt(r, budget, outputs)
            except Exception as exc:  # an image that would not evaluate, a fault
                # What it put in the step goes: the step runs without it.
                batch.n = mark
                del outputs[marked:]
                self._fail(r, self._failure(exc, "prompt", r), forget=True)
                continue
            if taken:
                fed.append(Fed(r, taken, reading=True))
                budget -= len(taken)
        return outputs, fed

    def _drafts(self, generating: list[Running]) -> dict[int, list[int]]:
        """Each generating sequence's draft for this step (see speculate.py),
        within the batch's room and the sequence's window."""
        gate = self.gate
        if gate is None or not generating:
            return {}
        room = self.ctx.n_batch - sum(1 + len(r.pending) for r in generating)
        room = min(room, self.ctx.outputs - self.ctx.n_seq)  # rows of logits, one a sequence kept
        guesses = {}
        for r in generating:
            left = min(self.model.n_ctx - len(r.slot.held) - 2, r.text.left - 1)
            if left > 0 and r.drafter is not None:
                guess = r.drafter.draft(min(gate.reach, left))
                if guess:
                    guesses[r.slot.id] = guess
        followed = {r.slot.id: r.drafter.followed for r in generating if r.drafter is not None}
        wants = {s: len(g) for s, g in guesses.items()}
        held = {r.slot.id: len(r.slot.held) for r in generating}
        lengths = gate.lengths(len(generating), wants, followed, held)
        out = {}
        for seq, k in lengths.items():
            k = min(k, room)
            if k > 0:
                out[seq] = guesses[seq][:k]
                room -= k
        return out

    def _verify(self, r: Running, at: list[int]) -> list[int]:
        """Draws at the sequence's positions in turn while each draw is the
        drafted token: the tokens it outputs this step (the last one is not
        in the KV cache yet)."""
        faults.check("verify" if r.draft else "sample", r.job)
        out: list[int] = []
        for k, index in enumerate(at):
            token = r.sampler.sample(self.ctx.ctx, index)
            out.append(token)
            if k >= len(r.draft) or token != r.draft[k]:
                break
        if r.draft and self.gate is not None:
            r.drafted += len(r.draft)
            r.accepted += len(out) - 1
            self.gate.account(r.slot.id, len(r.draft), len(out) - 1)
        return out

    def _run_batch(self) -> tuple[list[tuple[Running, list[int]]], list[Fed]] | None:
        """Builds and decodes the step's batch. Where the KV cache has no
        room for it, idle sequences are freed (least recently used first,
        saved to the RAM cache when worth it); with none left, the prompts
        being read wait for the generating requests, and a prompt that does
        not fit even alone fails with ContextFull."""
        outputs, fed = self._build(prompts=True)
        built = self.ctx.batch.n
        pad = widen.pad(self.ctx.batch, self.gate, fed, self.model.n_ctx)
        retried = False
        while True:
            try:
                t0 = time.perf_counter()
                faults.check("decode")
                if self.ctx.decode():
                    took, n = time.perf_counter() - t0, self.ctx.batch.n
                    if pad and not self.ctx.cut(*pad):
                        raise ServerError("the KV cache could not take back a step's padding")
                    if self.gate is not None:  # what a row attended to, on average
                        self.gate.observe(n, took, widen.attended(fed, n - built) // max(1, n))
                    return outputs, fed
            except EngyError as exc:
                for f in fed:
                    self._fail(f.running, exc, forget=True)
                return None
            except Exception as exc:
                # One decode serves every sequence in the step: none is to
                # blame alone. Cells past what each holds go, and the step
                # (as built, unpadded) runs once more; a second failure
                # fails its requests.
                log.error("a step of %d tokens failed: %s", self.ctx.batch.n, exc, exc_info=exc)
                self._count("decode")
                if not all(self._known(f.running) for f in fed):
                    retried = True  # what a sequence holds is unknown: no retry
                if retried:
                    failed = ServerError(f"generation failed: {exc}")
                    for f in fed:
                        self._fail(f.running, failed, forget=True)
                    return None
                retried = True
                self.ctx.batch.n, pad = built, None
                continue
            if pad:  # no room for the padding: the step as built
                self.ctx.batch.n, pad = built, None
                continue
            if self.prefixes.evict_idle():
                continue
            readers = [f.running for f in fed if f.reading]
            if readers and len(readers) < len(fed):
                outputs, fed = self._build(prompts=False)  # the prompts wait a step
                built = self.ctx.batch.n
                continue
            busy = sum(s.busy for s in self.slots)
            err = ContextFull(
                f"no room in the KV cache for this request beside {busy - 1} other busy "
                "conversations; try again shortly"
            )
            for f in fed:
                self._fail(f.running, err, forget=True)
            return None

    def _feed_prompt(
        self, r: Running, budget: int, outputs: list[tuple[Running, list[int]]]
    ) -> list[int]:
        """Adds the next chunk of r's prompt to the batch; images (and a
        shifted run) on the way are put in first, on their own."""
        prompt, slot = r.prompt, r.slot
        done = len(slot.held)
        while done in r.media:
            m = r.media[done]
            m.eval(self.ctx.ctx, slot.id, done, self.ctx.n_batch)
            slot.held.extend(prompt[done : done + m.n_tokens])
            done = len(slot.held)
        # A chunk ends at the next image and at the next checkpoint (taken
        # once it is read).
        end = min((s for s in (*r.media, *r.points) if s > done), default=len(prompt))
        take = prompt[done : min(end, done + budget)]
        batch = self.ctx.batch
        for k, token in enumerate(take):
            last = done + k == len(prompt) - 1 and not r.job.read_only
            i = batch.add(token, done + k, slot.id, last)
            if last:
                outputs.append((r, [i]))
        return take

    def _advance(self, r: Running, tokens: list[int], in_cache: int) -> None:
        """Outputs the step's tokens, in order, until one ends the answer.
        The first `in_cache` are in the KV cache already (a verified draft);
        kept ones that are not are fed next step (a forced call's fixed
        start); what the cache holds beyond the kept tokens goes."""
        if not r.t_first:
            r.t_first = time.monotonic()
        end: TextEnd | None = None
        kept = 0
        for token in tokens:
            kept += 1
            text, end = r.text.push_token(token)
            if end is None and len(r.slot.held) + kept >= self.model.n_ctx:
                text, end = text + r.text.flush(), "length"  # the window is full
            for event in r.answer.feed(text):
                r.job.emit(event)
            if end is None and r.answer.done:
                end = "end"
            if end is not None:
                break
        if r.drafter is not None:
            r.drafter.push(tokens[:kept])
        stored = min(in_cache, kept - 1)
        r.slot.held.extend(tokens[:stored])
        r.pending = tokens[stored : kept - 1]
        # In the cache beside the kept tokens: the draft after them.
        extra = r.draft and len(r.slot.held) < self.ctx.held(r.slot.id)
        if extra and not self.ctx.drop_after(r.slot.id, len(r.slot.held)):
            r.slot.replace([])  # cleared: nothing of it is known now
            r.draft = []
            raise ServerError("the KV cache could not take back a draft")
        r.draft = []
        if end is None:
            r.next_token = tokens[kept - 1]
        else:
            self._finish(r, end)

    def _finish(self, r: Running, end: TextEnd) -> None:
        usage = (len(r.prompt), r.cached, r.text.produced)
        for event in r.answer.finish(end, *usage, drafted=r.drafted, accepted=r.accepted):
            r.job.emit(event)
        log.info(r.summary(self.model.path.name, r.answer.stop_reason or end))
        self.recent.add(r.drafter)
        self._release(r)
        self.followed(r.job)

    def _failure(self, exc: Exception, phase: str, r: Running) -> EngyError:
        """The error a job's client gets for `exc`; an unexpected one is
        logged and counted under its phase."""
        if isinstance(exc, EngyError):
            return exc
        if isinstance(exc, faults.Injected):
            phase = exc.phase
        elif r.job.read_only:
            phase = "next-turn"
        log.error("seq %d: %s failed: %s", r.slot.id, phase, exc, exc_info=exc)
        self._count(phase)
        return ServerError(f"generation failed: {exc}")

    def _known(self, r: Running) -> bool:
        """Drops r's cells past the tokens it holds; False where they
        cannot be dropped (what it holds is unknown then)."""
        return self.ctx.held(r.slot.id) == len(r.slot.held) or self.ctx.drop_after(
            r.slot.id, len(r.slot.held)
        )

    def _fail(self, r: Running, err: EngyError, forget: bool | None = False) -> None:
        """Answers r with `err` and gives its sequence back. `forget`: what
        the sequence holds is unknown now, it is cleared; None: only cells
        past its tokens may be (a draft), cleared where they cannot go."""
        r.job.emit(err)
        if forget is None:
            forget = not self._known(r)
        if forget:
            self.ctx.clear(r.slot.id)
            r.slot.replace([])
        self._release(r)

    def _release(self, r: Running) -> None:
        if r not in self.running:
            return
        self.running.remove(r)
        self.ctx.drop_stash(r.slot.id)  # a shifted run not read yet
        r.slot.busy = False
        r.slot.used = next(self._clock)
        r.sampler.close()
        r.job.emit(None)

    def flush(self) -> None:
        """Every running job's held-back text goes out now."""
        for r in self.running:
            r.job.flush()

    def fail_all(self, err: EngyError) -> None:
        for r in list(self.running):
            self._fail(r, err, forget=True)

    # -- introspection --------------------------------------------------

    def describe(self) -> list[dict[str, Any]]:
        return [{"index": s.id, "tokens": len(s.held), "busy": s.busy} for s in self.slots]

    def close(self) -> None:
        """Frees the context; with a disk tier, every conversation worth
        keeping is written there first (a graceful stop keeps the cache)."""
        self.prefixes.keep_all()
        self.ctx.close()

    def caches(self) -> list[CacheStatus]:
        return self.prefixes.caches()

    def mismatches(self) -> list[str]:
        return self.prefixes.mismatches()
