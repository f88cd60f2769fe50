"""The in-process side of a generation: a served model's description and the
async stream of one job's events (the pool in pool.py hands these out)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from ..chat import Event, Heartbeat
from ..errors import EngyError, GenerationTimeout
from .model import LoadOptions
from .worker import Job


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
        self._queue: asyncio.Queue[Event | EngyError | None] = asyncio.Queue()
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

    async def __aiter__(self) -> AsyncIterator[Event]:
        try:
            while True:
                wait = self._heartbeat
                if self._deadline is not None:
                    remaining = self._deadline - time.monotonic()
                    if remaining <= 0:
                        raise GenerationTimeout(
                            f"generation did not finish within {self._timeout:g} s"
                        )
                    wait = min(wait, remaining)
                try:
                    item = await asyncio.wait_for(self._queue.get(), wait)
                except asyncio.TimeoutError:
                    yield Heartbeat()
                    continue
                _raise_if_cancelled()
                if item is None:
                    return
                if isinstance(item, EngyError):
                    raise item
                yield item
        finally:
            # However the consumer leaves (done, error, client gone), the
            # model is released at once.
            self.cancel()


def _raise_if_cancelled() -> None:
    """Before Python 3.12, wait_for loses a cancellation that arrives as
    its inner get finishes; with events pouring in that is most of the time
    (a Ctrl-C in the REPL went unheard). The task still counts the request."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    if cancelling is not None and cancelling():
        raise asyncio.CancelledError
