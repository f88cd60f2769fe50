"""The next turn's start read in after an answer (worker.py), on each kind
of model: full attention (the tiny Qwen3), a sliding window (gemma-3-270m)
and a hybrid recurrent state (the tiny Qwen3.5). The answer as written is
replaced by its rendering (here: other tokens), resuming where each kind
can; then the next turn reads all of that start from the cache, the same
request sent again still reads what the promise gives (all but its last
token; a recurrent state less at most NEAR), and the sequences'
bookkeeping agrees with llama.cpp."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.flows import load_options
from support.paths import CACHE, need_fixtures
from support.runs import Sink, wait_for

from engy_local.prompt.prepare import SamplingParams
from engy_local.runtime.cache.prefixes import NEAR
from engy_local.runtime.engine.job import Job
from engy_local.runtime.engine.worker import Worker
from engy_local.runtime.loading.model import Model

pytestmark = pytest.mark.timeout(300)

KINDS = ["full", "sliding window", "recurrent"]


@pytest.fixture(scope="module", params=KINDS)
def model(request: pytest.FixtureRequest) -> Iterator[tuple[str, Model]]:
    kind = request.param
    if kind == "full":
        path: Path = request.getfixturevalue("tiny_qwen3")
    elif kind == "sliding window":
        path = request.getfixturevalue("gemma_path")
    else:
        need_fixtures()
        from support.hybrid import hybrid_gguf_cached

        path = hybrid_gguf_cached(CACHE / "ggufs", arch="qwen35", template="Qwen-Qwen3-0.6B.jinja")
    m = Model(load_options(path, ctx_size=4096, speculative="off"))  # the catalog's template too
    yield kind, m
    m.close()


def run(worker: Worker, model: Model, tokens: list[int], follow: list[int] | None = None) -> Sink:
    """A greedy job of 6 tokens run to its end; then the engine settles
    (as while a client runs its tools)."""
    sink = Sink()
    parser = model.family.parser(tools={}, thinking=False, new_id=lambda: "call_1")
    job = Job(tokens, SamplingParams(max_tokens=6, temperature=0), parser, sink)
    if follow is not None:
        job.follow = lambda: follow
    worker.submit(job)
    wait_for(lambda: sink.done.is_set() and worker.idle(), timeout=120)
    return sink


def prompt(model: Model, text: str) -> list[int]:
    rendered = model.template.render([{"role": "user", "content": text}])
    return model.tokenize(rendered)


def test_the_start_is_read_in_and_the_promise_holds(model: tuple[str, Model]) -> None:
    kind, m = model
    asked = prompt(m, "Name three colours of the rainbow, please.")
    start = [*asked, *m.tokenize(" Red, orange and yellow are three of them.\n")]
    worker = Worker(m, queue_size=4)
    try:
        run(worker, m, asked, follow=start)
        assert start in [s.held for s in worker.scheduler.slots]  # read in
        assert worker.scheduler.mismatches() == []
        more = [*start, *m.tokenize(" And two more?")]
        assert run(worker, m, more).cached() == len(start)
    finally:
        worker.close()

    worker = Worker(m, queue_size=4)
    try:
        run(worker, m, asked, follow=start)
        again = run(worker, m, asked).cached()
        least = len(asked) - 1 - (NEAR if kind == "recurrent" else 0)
        assert again >= least, (again, len(asked))
        assert worker.scheduler.mismatches() == []
    finally:
        worker.close()
