"""The scheduler's queue: what counts against its size."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from engy_local.engine import decode
from engy_local.engine.worker import Job, Worker
from engy_local.errors import Busy


def _job(sink: list[Any]) -> Job:
    return Job(
        tokens=[1],
        params=decode.SamplingParams(max_tokens=1),
        parser=None,  # type: ignore[arg-type]  # never reached: _run is replaced
        emit=sink.append,
    )


def test_cancelled_waiting_jobs_give_up_their_places(monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()
    started = threading.Event()

    def run(self: Worker, job: Job) -> None:
        started.set()
        release.wait(30)

    monkeypatch.setattr(Worker, "_run", run)
    worker = Worker(model=None, queue_size=1)  # type: ignore[arg-type]
    try:
        running, waiting, turned_away, next_one = [], [], [], []  # type: ignore[var-annotated]
        worker.submit(_job(running))
        assert started.wait(10)
        left = _job(waiting)
        worker.submit(left)
        with pytest.raises(Busy):
            worker.submit(_job(turned_away))
        # The waiting request's client goes away: its place is free at once.
        left.cancelled.set()
        worker.submit(_job(next_one))
        assert waiting == [None]  # its events end, with nothing generated
        release.set()
        deadline = time.monotonic() + 10
        while next_one != [None] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert next_one == [None]  # the next request ran
        assert running == [None]
    finally:
        release.set()
        worker.close()
