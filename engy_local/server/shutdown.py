"""Graceful shutdown of `engy serve`.

On the first SIGINT or SIGTERM the server stops accepting connections, new
requests on open ones get 503, and generations in flight get `grace` seconds
to finish. Those still running then end with their protocol's terminal error
(`event: error` with `overloaded_error` on /v1/messages, `response.failed`
with `server_is_overloaded` on /v1/responses, 503 before a body was sent);
the models are freed and the process exits 0. A second signal ends what is
left at once.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Generator
from contextlib import contextmanager
from types import FrameType

import uvicorn

DEFAULT_GRACE = 5.0


class Drain:
    """The server's shutdown state, shared by the app and the process."""

    def __init__(self) -> None:
        self.started = False
        self._deadline: float | None = None  # time.monotonic() when the grace ends
        self._loop: asyncio.AbstractEventLoop | None = None
        self._expired: asyncio.Event | None = None
        self._timer: asyncio.TimerHandle | None = None

    def _event(self) -> asyncio.Event:
        if self._expired is None:
            self._loop = asyncio.get_running_loop()
            self._expired = asyncio.Event()
            if self._deadline is not None:  # the drain began before any request
                self._arm()
        return self._expired

    async def expired(self) -> None:
        """Returns when the grace period is over."""
        await self._event().wait()

    def begin(self, grace: float) -> None:
        """Refuse new requests; end those in flight after `grace` seconds.
        Safe to call from a signal handler or another thread."""
        self.started = True
        self._deadline = time.monotonic() + grace
        if self._loop is not None:  # else the first request arms it
            self._loop.call_soon_threadsafe(self._arm)

    def _arm(self) -> None:
        event = self._event()
        assert self._deadline is not None
        if self._timer is not None:
            self._timer.cancel()
        left = self._deadline - time.monotonic()
        if left <= 0:
            event.set()
        else:
            self._timer = asyncio.get_running_loop().call_later(left, event.set)


class GracefulServer(uvicorn.Server):
    """uvicorn's server with engy's signal handling: uvicorn's own waits for
    streams forever, and re-raises the signal when it is done (so SIGTERM
    would not exit 0)."""

    def __init__(self, config: uvicorn.Config, drain: Drain, grace: float = DEFAULT_GRACE) -> None:
        super().__init__(config)
        self.drain = drain
        self.grace = grace
        self.signals = 0

    @contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        handled = (signal.SIGINT, signal.SIGTERM)
        previous = {sig: signal.signal(sig, self.on_signal) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def on_signal(self, sig: int, frame: FrameType | None) -> None:
        self.signals += 1
        if self.signals == 1:
            self.drain.begin(self.grace)
            self.should_exit = True  # uvicorn closes its sockets, waits for the rest
        else:
            self.drain.begin(0)
            self.should_exit = self.force_exit = True
