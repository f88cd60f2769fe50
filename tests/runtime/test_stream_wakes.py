"""The worker thread wakes the event loop at most every STREAM_INTERVAL for
text: the first delta goes at once, deltas in between go with the next wake
merged into one, anything else (a call's start, the end, an error) goes at
once with what was held, and `flush` sends what is held."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from engy_local.chat import TextDelta, ThinkingDelta, ToolCallDelta, ToolCallEnd, ToolCallStart
from engy_local.errors import ServerError
from engy_local.prompt.parsing.toolparse import merged
from engy_local.runtime.engine import local
from engy_local.runtime.engine.local import LocalGeneration


@pytest.mark.parametrize(
    ("items", "want"),
    [
        ([TextDelta("a"), TextDelta("b")], [TextDelta("ab")]),
        ([ThinkingDelta("a"), TextDelta("b")], [ThinkingDelta("a"), TextDelta("b")]),
        ([ThinkingDelta("a"), ThinkingDelta("b"), TextDelta("c")],
         [ThinkingDelta("ab"), TextDelta("c")]),
        ([ToolCallDelta(0, '{"a"'), ToolCallDelta(0, ": 1}")], [ToolCallDelta(0, '{"a": 1}')]),
        ([ToolCallDelta(0, "{}"), ToolCallDelta(1, "{")],
         [ToolCallDelta(0, "{}"), ToolCallDelta(1, "{")]),
        ([TextDelta("a"), ToolCallStart(0, "c", "f"), TextDelta("b")],
         [TextDelta("a"), ToolCallStart(0, "c", "f"), TextDelta("b")]),
        ([TextDelta("a"), None], [TextDelta("a"), None]),
        ([], []),
    ],
    ids=["text", "kinds apart", "thinking then text", "one call's arguments",
         "two calls", "across a start", "the end", "nothing"],
)  # fmt: skip
def test_merged(items: list[Any], want: list[Any]) -> None:
    assert merged(items) == want


def run_in_worker(generation: LocalGeneration, steps: list[Any]) -> None:
    """Emits (or flushes, for "flush") from another thread, as the model's
    thread does."""

    def work() -> None:
        for step in steps:
            if step == "flush":
                generation.flush()
            else:
                generation.emit(step)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()


async def queued(generation: LocalGeneration) -> list[Any]:
    await asyncio.sleep(0.05)  # the loop runs what the worker sent
    out = []
    while not generation._queue.empty():
        out.append(generation._queue.get_nowait())
    return out


@pytest.fixture
def long_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local, "STREAM_INTERVAL", 60.0)  # however slow the machine


@pytest.mark.usefixtures("long_interval")
def test_text_between_wakes_is_held_and_merged() -> None:
    async def main() -> None:
        g = LocalGeneration(1, None, 10.0)
        run_in_worker(g, [TextDelta("a"), TextDelta("b"), TextDelta("c")])
        assert await queued(g) == [TextDelta("a")]  # the first at once
        run_in_worker(g, ["flush"])
        assert await queued(g) == [TextDelta("bc")]
        run_in_worker(g, ["flush"])
        assert await queued(g) == []  # nothing held: no wake

    asyncio.run(main())


@pytest.mark.usefixtures("long_interval")
def test_anything_but_a_delta_goes_at_once_with_what_is_held() -> None:
    async def main() -> None:
        g = LocalGeneration(1, None, 10.0)
        run_in_worker(g, [TextDelta("a"), TextDelta("b"), ToolCallStart(0, "c", "f")])
        assert await queued(g) == [TextDelta("a"), TextDelta("b"), ToolCallStart(0, "c", "f")]
        run_in_worker(g, [ToolCallDelta(0, "{"), ToolCallEnd(0, "{}"), None])
        assert await queued(g) == [ToolCallDelta(0, "{"), ToolCallEnd(0, "{}"), None]
        g2 = LocalGeneration(1, None, 10.0)
        err = ServerError("x")
        run_in_worker(g2, [TextDelta("a"), TextDelta("b"), err])
        assert await queued(g2) == [TextDelta("a"), TextDelta("b"), err]

    asyncio.run(main())


def test_a_delta_after_the_interval_wakes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local, "STREAM_INTERVAL", 0.5)

    async def main() -> None:
        g = LocalGeneration(1, None, 10.0)
        run_in_worker(g, [TextDelta("a"), TextDelta("b")])
        assert await queued(g) == [TextDelta("a")]
        await asyncio.sleep(0.6)  # > STREAM_INTERVAL since the last wake
        run_in_worker(g, [TextDelta("c")])
        assert await queued(g) == [TextDelta("bc")]

    asyncio.run(main())


def test_a_job_that_outlives_its_event_loop_ends_quietly() -> None:
    """The server stopped mid-answer (its loop closed): the worker thread's
    last events, the error that ends the job among them, go nowhere and
    raise nothing in that thread."""
    loop = asyncio.new_event_loop()

    async def make() -> LocalGeneration:
        return LocalGeneration(prompt_tokens=3, timeout=None, heartbeat=5.0)

    generation = loop.run_until_complete(make())
    loop.close()
    failed: list[BaseException] = []

    def worker() -> None:
        try:
            generation.emit(TextDelta("late"))
            generation.emit(ServerError("the model was unloaded"))
            generation.emit(None)
        except BaseException as exc:  # what the thread would die of
            failed.append(exc)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert failed == []
