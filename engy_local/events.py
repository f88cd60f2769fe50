"""From a queue of events filled by whatever generates (the model's thread,
an upstream's stream) to the async iteration a `Generation` offers: quiet
spells become heartbeats, an error in the queue is raised, None ends it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

from .chat import Event, Heartbeat
from .errors import EngyError

Queue = asyncio.Queue[Event | EngyError | None]


async def drain(queue: Queue, next_wait: Callable[[], float]) -> AsyncIterator[Event]:
    """Events of `queue` until None. `next_wait()` gives the seconds of
    silence before a Heartbeat (it may raise, to end the wait)."""
    while True:
        wait = next_wait()
        if not queue.empty():  # no timer and task for what is there already
            item = queue.get_nowait()
        else:
            try:
                item = await asyncio.wait_for(queue.get(), wait)
            except asyncio.TimeoutError:
                yield Heartbeat()
                continue
        _raise_if_cancelled()
        if item is None:
            return
        if isinstance(item, EngyError):
            raise item
        yield item


def _raise_if_cancelled() -> None:
    """Before Python 3.12, wait_for loses a cancellation that arrives as
    its inner get finishes; with events pouring in that is most of the time
    (a Ctrl-C in the REPL went unheard). The task still counts the request."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    if cancelling is not None and cancelling():
        raise asyncio.CancelledError
