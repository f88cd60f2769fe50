"""The owner of one loaded model: a thread that runs its scheduler.

Requests wait in a bounded queue (full: `Busy`, a 429) until a KV sequence
is free; the scheduler (scheduler.py) then runs every admitted request in
one batch per step. Each job streams its events back through `Job.emit`,
which the async side turns into a queue of its own. A cancelled job (the
client went away, or it timed out) gives its sequence back within one step.

When an answer ends, its next turn's start as the template writes it
(prompt/nextturn.py) is rendered on a thread of its own and, while nothing
else waits, read into the conversation's sequence (a pre-read job): the
client runs its tools meanwhile, and the next turn reads only what is new.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ...backend import CacheStatus
from ...errors import Busy, EngyError, ServerError
from ..cache.disk import DiskTier
from ..loading.model import Model
from .job import Job
from .scheduler import Scheduler

log = logging.getLogger("engy.worker")


class Worker:
    def __init__(self, model: Model, queue_size: int = 16, disk: DiskTier | None = None) -> None:
        self.model = model
        self.queue_size = queue_size
        self.scheduler = Scheduler(model, disk)  # builds the context: fails here, not later
        self.scheduler.heir = self._heir
        self.scheduler.followed = self._followed
        self._next_turns = ThreadPoolExecutor(1, thread_name_prefix="engy-next-turn")
        self._rendering = 0  # next turns being rendered (idle() waits for them)
        self._waiting: deque[Job] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._busy = False
        self._admitting: list[Job] = []  # taken from _waiting, not yet running
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="engy-model", daemon=True)
        self._thread.start()
        self._ready.wait()  # the scheduler's start (it times steps) is part of the load

    def idle(self) -> bool:
        """Nothing running, waiting or being rendered (a next turn's start):
        the model may be unloaded."""
        with self._cond:
            return not self._busy and not self._waiting and not self._rendering

    def serving(self) -> bool:
        """A client's request runs or waits; an answer's next turn being
        read in does not count (unloading the model only loses that)."""
        with self._cond:
            running = (r.job for r in list(self.scheduler.running))
            jobs = [*self._waiting, *self._admitting, *running]
            return any(not job.read_only for job in jobs)

    def submit(self, job: Job) -> None:
        with self._cond:
            if len(self._waiting) >= self.queue_size:
                # Jobs whose clients went away wait for nothing: they give
                # up their places instead of turning the next request away.
                self._drop_cancelled()
            if len(self._waiting) >= self.queue_size:
                raise Busy(
                    f"too many requests waiting for the model ({self.queue_size} queued)",
                    retry_after=2,
                )
            self._waiting.append(job)
            self._cond.notify()

    def _drop_cancelled(self) -> None:
        dropped = [j for j in self._waiting if j.cancelled.is_set()]
        for job in dropped:
            self._waiting.remove(job)
            job.emit(None)

    def _heir(self, tokens: list[int]) -> Job | None:
        """The first waiting job (not cancelled) with these prompt tokens."""
        with self._cond:
            for job in self._waiting:
                if job.tokens == tokens and not job.cancelled.is_set():
                    self._waiting.remove(job)
                    job.joined = True
                    return job
        return None

    def _followed(self, job: Job) -> None:
        """An answer ended (on the model's thread): its next turn's start is
        rendered on another."""
        if job.follow is None:
            return
        with self._cond:
            if self._closed:
                return
            self._rendering += 1
        self._next_turns.submit(self._pre_read, job)

    def _pre_read(self, job: Job) -> None:
        try:
            tokens = job.follow() if job.follow is not None else []
        except Exception:  # an optimisation: the next turn reads them itself
            log.exception("rendering the next turn's start failed")
            tokens = []
        with self._cond:
            self._rendering -= 1
            # Only where the answer parts from its rendering (the prompt
            # stays whole for a request sent again), and nothing waits.
            if tokens[: len(job.tokens)] == job.tokens and not self._waiting and not self._closed:
                self._waiting.append(job.pre_read(tokens))
            self._cond.notify()

    def _admissible(self, free: int) -> list[Job]:
        """Up to `free` waiting jobs, first come first; a job whose prompt is
        being read right now (or by one admitted with it) waits for that
        read, and is marked as joining it."""
        admitted: list[Job] = []
        for job in list(self._waiting):
            if len(admitted) >= free:
                break
            if self.scheduler.pre_reading(job.tokens) or any(
                a.read_only and job.tokens[: len(a.tokens)] == a.tokens for a in admitted
            ):
                continue  # its start is being read in (one step)
            if self.scheduler.reading_the_same(job) or any(
                a.tokens == job.tokens for a in admitted
            ):
                job.joined = True
                continue
            self._waiting.remove(job)
            admitted.append(job)
        return admitted

    def caches(self) -> list[CacheStatus]:
        return self.scheduler.caches()

    def kv_bytes(self) -> int:
        """The KV cache's size, as llama.cpp said when it made it."""
        return self.scheduler.ctx.kv_bytes

    def limits(self) -> list[str]:
        return list(self.scheduler.limits)

    def faults(self) -> dict[str, int]:
        """Faults the thread answered and went on from, by phase."""
        return dict(self.scheduler.faults)

    def sequences(self) -> list[dict[str, Any]]:
        """What each KV sequence holds (for `engy ps`); a snapshot."""
        return self.scheduler.describe()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        # A rendering under way tokenizes with the model: it ends before the
        # model is freed (and queues nothing now).
        self._next_turns.shutdown(wait=True, cancel_futures=True)
        # Long enough for a graceful stop to write the conversations to disk.
        self._thread.join(timeout=600)

    def _loop(self) -> None:
        scheduler = self.scheduler
        try:
            scheduler.start()
            self._ready.set()
            while True:
                with self._cond:
                    while (
                        not self._closed
                        and not scheduler.running
                        and (not self._waiting or scheduler.free() == 0)
                    ):
                        self._busy = False
                        self._cond.wait()
                    if self._closed:
                        break
                    self._busy = True
                    admitted = self._admitting = self._admissible(scheduler.free())
                try:
                    if admitted:
                        scheduler.flush()  # admitting may restore a state from disk
                    for job in admitted:
                        scheduler.admit(job)  # a failure answers that job alone
                finally:
                    with self._cond:
                        self._admitting = []
                try:
                    scheduler.step()
                except EngyError as exc:
                    scheduler.fail_all(exc)
                except Exception as exc:  # never let one step kill the model's thread
                    log.exception("generation failed")
                    scheduler.fail_all(ServerError(f"generation failed: {exc}"))
        finally:
            self._ready.set()
            with self._cond:
                left = list(self._waiting)
                self._waiting.clear()
            for job in left:
                job.emit(ServerError("the model was unloaded"))
                job.emit(None)
            scheduler.fail_all(ServerError("the model was unloaded"))
            scheduler.close()
