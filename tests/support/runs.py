"""A request run to its end on a model pool, in-process: what the runtime
tests read of it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

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
