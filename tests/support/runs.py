"""A request run to its end on a model pool, in-process: what the runtime
tests read of it; and a job's events as a worker emits them (Sink)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engy_local.chat import ChatRequest, Finished, Started, TextDelta
from engy_local.runtime.pool import ModelPool


@dataclass
class Run:
    started: Started
    text: str
    finished: Finished


async def finish(pool: ModelPool, request: ChatRequest) -> Run:
    """`request`'s events to the end: its Started, its text, its Finished."""
    started, text, finished = None, "", None
    async for event in await pool.submit(request):
        if isinstance(event, Started):
            started = event
        elif isinstance(event, TextDelta):
            text += event.text
        elif isinstance(event, Finished):
            finished = event
    assert started is not None and finished is not None
    return Run(started, text, finished)


def run(pool: ModelPool, request: ChatRequest) -> Run:
    return asyncio.run(finish(pool, request))


class Sink:
    """A Job's `emit`: its events in order; `done` once None ends them."""

    def __init__(self) -> None:
        self.events: list[Any] = []
        self.done = threading.Event()

    def __call__(self, item: Any) -> None:
        self.events.append(item)
        if item is None:
            self.done.set()

    def started(self) -> bool:
        return any(isinstance(e, Started) for e in self.events)

    def cached(self) -> int:
        [started] = [e for e in self.events if isinstance(e, Started)]
        return started.cached_tokens


def wait_for(check: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)
