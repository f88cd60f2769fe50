"""The in-process side of a generation: a served model's description and the
async stream of one job's events (the pool in pool.py hands these out)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from ...chat import Event, Sampling, TextDelta, ThinkingDelta, ToolCallDelta
from ...errors import EngyError, GenerationTimeout
from ...events import Queue, drain
from ...prompt.parsing.toolparse import merged
from ..loading.model import LoadOptions
from .job import Job


@dataclass(frozen=True)
class ServedModel:
    """A model this server can serve, under its id and aliases."""

    id: str
    options: LoadOptions
    aliases: tuple[str, ...] = ()
    quantization: str = ""
    owner: str = ""  # the tool whose files these are (Ollama, LM Studio ...); "": engy's or given
    # The model's own sampling defaults (Ollama's params layer): its stop
    # words end every answer; the rest stand where a request sets none.
    defaults: Sampling = field(default_factory=Sampling)


# Text reaches the event loop at most this often while tokens come faster;
# a delta in between goes with the next wake, merged. Each wake costs the
# loop a pass through the protocol and a socket write (0.5-0.7 ms on the
# CPU llama.cpp's threads decode on: ~2% of a token of a 0.5B model on two
# cores); 25 updates a second still read as a smooth stream.
STREAM_INTERVAL = 0.04

_Item = Event | EngyError | None
_DELTAS = (TextDelta, ThinkingDelta, ToolCallDelta)


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
        self._held: list[_Item] = []  # the worker thread's alone
        self._woke = 0.0

    def emit(self, item: _Item) -> None:
        """Called from the worker thread. A delta within STREAM_INTERVAL of
        the last wake is held for the next one (or `flush`)."""
        self._held.append(item)
        now = time.monotonic()
        if isinstance(item, _DELTAS) and now - self._woke < STREAM_INTERVAL:
            return
        self._send(now)

    def flush(self) -> None:
        """Called from the worker thread before a step that may take long."""
        if self._held:
            self._send(time.monotonic())

    def _send(self, now: float) -> None:
        items, self._held = merged(self._held), []
        self._woke = now
        # A loop closed under a running job (the server stopped mid-answer):
        # no one is left to read what it says.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._put, items)

    def _put(self, items: list[_Item]) -> None:
        for item in items:
            self._queue.put_nowait(item)

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
