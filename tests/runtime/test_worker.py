"""The model's queue: requests wait for a free KV sequence, a full queue
turns the next one away, and requests whose clients left give their places
back. On a real tiny model (it writes '"' for ever)."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import pytest
from support.runs import Sink, wait_for

from engy_local.chat import Finished
from engy_local.errors import Busy
from engy_local.prompt.prepare import SamplingParams
from engy_local.runtime.engine.worker import Job, Worker
from engy_local.runtime.loading.model import LoadOptions, Model


@pytest.fixture(scope="module")
def endless(tiny_qwen3: Path) -> Model:
    return Model(LoadOptions(tiny_qwen3, ctx_size=2048, parallel=1))


def job(model: Model, sink: Sink, max_tokens: int = 100_000) -> Job:
    tokens = model.tokenize(
        model.template.render([{"role": "user", "content": "hi"}], add_generation_prompt=True)
    )
    parser = model.family.parser(tools={}, thinking=False, new_id=lambda: "call_1")
    return Job(tokens, SamplingParams(max_tokens=max_tokens, temperature=0), parser, sink)


def test_cancelled_waiting_jobs_give_up_their_places(endless: Model) -> None:
    worker = Worker(endless, queue_size=1)
    try:
        running, waiting, turned_away, next_one = Sink(), Sink(), Sink(), Sink()
        first = job(endless, running)
        worker.submit(first)
        wait_for(running.started)  # it holds the only sequence
        assert worker.serving()
        left = job(endless, waiting)
        worker.submit(left)
        with pytest.raises(Busy):
            worker.submit(job(endless, turned_away))
        # The waiting request's client goes away: its place is free at once.
        left.cancelled.set()
        worker.submit(job(endless, next_one, max_tokens=5))
        assert waiting.events == [None]  # its events end, with nothing generated
        first.cancelled.set()  # the endless one is stopped within a step
        assert next_one.done.wait(30)
        finished = [e for e in next_one.events if isinstance(e, Finished)]
        assert finished and finished[0].usage.output_tokens == 5
        assert running.done.is_set() and not any(isinstance(e, Finished) for e in running.events)
        assert worker.idle()
    finally:
        worker.close()


def test_a_model_with_several_sequences_runs_jobs_side_by_side(endless: Model) -> None:
    model = Model(replace(LoadOptions(endless.path), ctx_size=2048, parallel=3))
    worker = Worker(model, queue_size=4)
    try:
        sinks = [Sink() for _ in range(3)]
        for sink in sinks:
            worker.submit(job(model, sink))
        wait_for(lambda: all(s.started() for s in sinks))  # none waits for another
        assert sum(d["busy"] for d in worker.sequences()) == 3
    finally:
        worker.close()
        model.close()
    for sink in sinks:  # unloading ends every job, each with its error
        assert sink.done.is_set() and sink.events[-1] is None


def test_the_next_turns_start_is_read_in_after_an_answer(endless: Model) -> None:
    """Once an answer ends, what its next turn will start with (here: the
    answer written otherwise, as a template may) is read into the
    sequence while nothing waits; the next turn then reads all of it from
    the cache. Where it only extends what the sequence holds, nothing is
    read in (the next turn reads those tokens as cheaply itself)."""
    worker = Worker(endless, queue_size=4)
    slot = worker.scheduler.slots[0]
    try:
        first, sink = job(endless, Sink(), max_tokens=6), Sink()
        first = replace(first, emit=sink)
        prompt = first.tokens
        other = endless.tokenize(" Hello there, friend")
        start = [*prompt, *other]
        first.follow = lambda: start
        worker.submit(first)
        wait_for(lambda: sink.done.is_set() and worker.idle())
        assert slot.held == start  # the answer as written went; the start is in
        second, seen = replace(job(endless, Sink(), max_tokens=2), tokens=[*start, 11]), Sink()
        second = replace(second, emit=seen)
        held_after_answer: list[int] = []

        def follow() -> list[int]:  # what the sequence holds, then one token more
            held_after_answer.extend(slot.held)
            return [*slot.held, 12]

        second.follow = follow
        worker.submit(second)
        wait_for(lambda: seen.done.is_set() and worker.idle())
        assert seen.cached() == len(start)
        assert held_after_answer and slot.held == held_after_answer  # nothing read in
    finally:
        worker.close()


def test_a_model_reading_a_next_turn_in_serves_no_client(endless: Model) -> None:
    """While an ended answer's next turn is rendered and read in, the
    model is not idle (keep-alive waits) but serves no client: the pool
    may unload it for another model instead of answering 429."""
    worker = Worker(endless, queue_size=4)
    rendering = threading.Event()
    go_on = threading.Event()
    try:
        first, sink = job(endless, Sink(), max_tokens=4), Sink()
        first = replace(first, emit=sink)

        def follow() -> list[int]:
            rendering.set()
            go_on.wait(timeout=30)
            return [*first.tokens, *endless.tokenize(" Hello there")]

        first.follow = follow
        assert not worker.serving()
        worker.submit(first)
        wait_for(rendering.is_set)
        wait_for(sink.done.is_set)
        assert not worker.idle() and not worker.serving()
        go_on.set()
        wait_for(worker.idle)
        assert not worker.serving()
    finally:
        go_on.set()
        worker.close()


def test_a_client_request_being_admitted_is_served(endless: Model) -> None:
    """Between the queue and the scheduler (admitting may restore a state
    from disk) a client's request is in neither: the pool must not take
    the model for idle then and unload it under the request."""
    worker = Worker(endless, queue_size=4)
    admitting, go_on = threading.Event(), threading.Event()
    admit = worker.scheduler.admit

    def slow_admit(j: Job) -> None:
        admitting.set()
        go_on.wait(timeout=30)
        admit(j)

    worker.scheduler.admit = slow_admit  # type: ignore[method-assign]
    try:
        sink = Sink()
        worker.submit(job(endless, sink, max_tokens=4))
        wait_for(admitting.is_set)
        assert worker.serving()
        go_on.set()
        wait_for(sink.done.is_set)
        wait_for(worker.idle)
        assert not worker.serving()
    finally:
        go_on.set()
        worker.close()
