"""The scheduler: one thread owns a loaded model and runs queued jobs.

Requests wait in a bounded queue (full: `Busy`, a 429). Each job streams its
events back through `Job.emit`, which the async side turns into a queue of
its own. Cancelling a job (the client went away, or it timed out) is seen
between two steps of the token loop, so the model is free again within one
token.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from ..chat import (
    Event,
    Finished,
    PromptProgress,
    Started,
    StopReason,
    ThinkingDelta,
    ToolCallEnd,
    Usage,
)
from ..errors import Busy, EngyError, ServerError
from . import decode
from .model import Model
from .toolparse import ToolParser

log = logging.getLogger("engy.worker")

_REASONS: dict[str, StopReason] = {
    "end": "end_turn",
    "length": "max_tokens",
    "stop": "stop_sequence",
}

Sink = Callable[[Event | EngyError | None], None]


@dataclass
class Job:
    tokens: list[int]
    params: decode.SamplingParams
    parser: ToolParser
    emit: Sink  # thread-safe; None marks the end of the job's events
    single_call: bool = False  # stop after the first complete tool call
    cancelled: threading.Event = field(default_factory=threading.Event)


class Worker:
    def __init__(self, model: Model, queue_size: int = 16) -> None:
        self.model = model
        self._jobs: queue.Queue[Job | None] = queue.Queue(maxsize=queue_size)
        self._running = False
        self._thread = threading.Thread(target=self._loop, name="engy-model", daemon=True)
        self._thread.start()

    def idle(self) -> bool:
        """Nothing running and nothing waiting: the model may be unloaded."""
        return not self._running and self._jobs.empty()

    def submit(self, job: Job) -> None:
        try:
            self._jobs.put_nowait(job)
            return
        except queue.Full:
            pass
        # Jobs whose clients went away wait for nothing: they give up their
        # places instead of turning the next request away.
        self._drop_cancelled()
        try:
            self._jobs.put_nowait(job)
        except queue.Full:
            raise Busy(
                f"too many requests waiting for the model ({self._jobs.maxsize} queued)",
                retry_after=2,
            ) from None

    def _drop_cancelled(self) -> None:
        jobs = self._jobs
        with jobs.mutex:
            dropped = [j for j in jobs.queue if j is not None and j.cancelled.is_set()]
            if not dropped:
                return
            kept = [j for j in jobs.queue if j is None or not j.cancelled.is_set()]
            jobs.queue.clear()
            jobs.queue.extend(kept)
            jobs.not_full.notify(len(dropped))
        for job in dropped:
            job.emit(None)  # as the loop does for a job cancelled while waiting

    def close(self) -> None:
        self._jobs.put(None)
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            if job.cancelled.is_set():
                job.emit(None)
                continue
            self._running = True
            try:
                self._run(job)
            except EngyError as exc:
                job.emit(exc)
            except Exception as exc:  # never let one request kill the worker
                log.exception("generation failed")
                job.emit(ServerError(f"generation failed: {exc}"))
            finally:
                self._running = False
                job.emit(None)

    def _run(self, job: Job) -> None:
        prompt_tokens = len(job.tokens)
        cached = reasoning = produced = 0
        called = False
        for step in decode.run(self.model, job.tokens, job.params):
            if job.cancelled.is_set():
                return
            if isinstance(step, decode.Prefilled):
                cached = step.cached
                job.emit(Started(prompt_tokens, cached))
            elif isinstance(step, decode.Progress):
                job.emit(PromptProgress(step.done, step.total))
            elif isinstance(step, decode.Piece):
                produced += step.sampled
                events = job.parser.feed(step.text)
                if any(isinstance(e, ThinkingDelta) for e in events):
                    reasoning += 1
                for event in events:
                    job.emit(event)
                called = called or any(isinstance(e, ToolCallEnd) for e in events)
                if called and job.single_call:
                    # One call was asked for: stop here, as at an end token.
                    step = decode.Done("end", 0)
                    break
            else:
                break
        else:  # pragma: no cover - decode.run always ends with Done
            return
        assert isinstance(step, decode.Done)
        for event in job.parser.finish():
            job.emit(event)
            called = called or isinstance(event, ToolCallEnd)
        reason = _REASONS[step.reason]
        if called and reason == "end_turn":
            reason = "tool_use"
        job.emit(Finished(reason, Usage(prompt_tokens, cached, produced, reasoning)))
