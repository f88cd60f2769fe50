"""The in-process side of a generation: a served model's description and the
async stream of one job's events (the pool in pool.py hands these out)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from ..chat import Event
from ..errors import EngyError, GenerationTimeout
from ..events import Queue, drain
from .job import Job
from .model import LoadOptions


@dataclass(frozen=True)
class ServedModel:
    """A model this server can serve, under its id and aliases."""

    id: str
    options: LoadOptions
    aliases: tuple[str, ...] = ()
    quantization: str = ""


class LocalGeneration:
    """The async side of one job: events arrive from the worker thread."""

    def __init__(self, prompt_tokens: int, timeout: float | None, heartbeat: float) -> None:
        self.prompt_tokens = prompt_tokens
        self._loop = asyncio.get_running_loop()
        self._queue: Queue = asyncio.Queue()
        self._deadline = time.monotonic() + timeout if timeout else None
        self._timeout = timeout
        self._heartbeat = heartbeat
        self.job: Job | None = None

    def emit(self, item: Event | EngyError | None) -> None:
        """Called from the worker thread."""
        self._loop.call_soon_threadsafe(self._queue.put_nowait, item)

    def cancel(self) -> None:
        if self.job is not None:
            self.job.cancelled.set()

    def _next_wait(self) -> float:
        if self._deadline is None:
            return self._heartbeat
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise GenerationTimeout(f"generation did not finish within {self._timeout:g} s")
        return min(self._heartbeat, remaining)

    async def __aiter__(self) -> AsyncIterator[Event]:
        try:
            async for event in drain(self._queue, self._next_wait):
                yield event
        finally:
            # However the consumer leaves (done, error, client gone), the
            # model is released at once.
            self.cancel()
