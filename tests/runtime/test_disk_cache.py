"""The disk tier under the RAM prompt cache, in-process on real llama.cpp:
states survive the model being unloaded and loaded again, a growing
conversation writes only its new tokens, bad files are removed and never
change an answer, the size bound and the files' modes hold, and a looping
chat template costs one limit."""

from __future__ import annotations

import itertools
import os
import random
import resource
import stat
import time
import zlib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from support.runs import Run, run

from engy_local.chat import ChatRequest, Message, Sampling, Text
from engy_local.errors import TemplateLimitHit
from engy_local.prompt.prepare import prepare
from engy_local.runtime.cache import kvstate
from engy_local.runtime.cache.identity import Identity
from engy_local.runtime.cache.kvfiles import read_file
from engy_local.runtime.engine.local import ServedModel
from engy_local.runtime.loading.model import LoadOptions
from engy_local.runtime.loading.vocab import Vocabulary
from engy_local.runtime.pool import DiskSettings, ModelPool


def prompt_text(seed: int, lines: int = 60) -> str:
    rng = random.Random(seed)
    return "\n".join(f"note {seed}.{i}: keep {rng.randint(1, 9999)}" for i in range(lines))


def chat(*turns: str, max_tokens: int = 8) -> ChatRequest:
    roles = ["user", "assistant"]
    messages = tuple(Message(roles[i % 2], (Text(t),)) for i, t in enumerate(turns))  # type: ignore[arg-type]
    return ChatRequest("m", messages, sampling=Sampling(max_tokens=max_tokens, temperature=0))


def pool_of(model: Path, disk: Path | None, budget: int = 1 << 30, **load: object) -> ModelPool:
    options = LoadOptions(model, ctx_size=8192, threads=2, parallel=2, **load)  # type: ignore[arg-type]
    settings = DiskSettings(disk, budget) if disk is not None else None
    return ModelPool([ServedModel("m", options)], primary="m", disk=settings)


def files(root: Path) -> list[Path]:
    return sorted(root.rglob("*.kv"))


@pytest.fixture
def disk(tmp_path: Path) -> Path:
    return tmp_path / "kvcache"


def test_a_state_survives_the_model_going_away(tiny_qwen3: Path, disk: Path) -> None:
    first = chat(prompt_text(1))
    pool = pool_of(tiny_qwen3, disk)
    cold = run(pool, first)
    pool.close()  # a graceful stop writes the conversation to disk
    assert cold.started.cached_tokens == 0 and files(disk)

    pool = pool_of(tiny_qwen3, disk)
    try:
        warm = run(pool, first)
        n = warm.started.prompt_tokens
        assert warm.started.cached_tokens == n - 1  # all but the token evaluated for logits
        assert warm.text == cold.text  # the same greedy answer
        # The next turn of that conversation reads the first turn from disk too.
        nxt = run(pool, chat(prompt_text(1), cold.text, "and then?"))
        assert nxt.started.cached_tokens >= n - 1
    finally:
        pool.close()
    without = pool_of(tiny_qwen3, None)
    try:
        assert run(without, first).text == cold.text
    finally:
        without.close()


def test_a_growing_conversation_writes_only_its_new_tokens(tiny_qwen3: Path, disk: Path) -> None:
    turns = [prompt_text(7, 80)]
    sizes = []
    for k in range(3):
        pool = pool_of(tiny_qwen3, disk)
        answer = run(pool, chat(*turns))
        pool.close()
        sizes.append(sum(p.stat().st_size for p in files(disk)))
        turns += [answer.text, prompt_text(100 + k, 20)]
    first, grown = sizes[0], [b - a for a, b in itertools.pairwise(sizes)]
    # Each later turn adds about its own ~20 lines' state, not the 80 before.
    assert all(0 < g < first / 2 for g in grown), sizes


@pytest.mark.parametrize("damage", ["truncated", "random bytes", "another model's"])
def test_a_bad_file_is_removed_and_the_answer_is_right(
    tiny_qwen3: Path, tiny_answer: Path, disk: Path, damage: str
) -> None:
    request = chat(prompt_text(3))
    pool = pool_of(tiny_qwen3, disk)
    cold = run(pool, request)
    pool.close()
    # The segment the prompt starts in (the answer's tokens are one of their own).
    stored = next(p for p in files(disk) if read_file(p)[0]["start"] == 0)
    if damage == "truncated":
        stored.write_bytes(stored.read_bytes()[: stored.stat().st_size // 2])
    elif damage == "random bytes":
        data = bytearray(stored.read_bytes())
        body = len(data) // 2
        data[body:] = os.urandom(len(data) - body)  # the header stays readable
        stored.write_bytes(bytes(data))
    else:
        # A file in the directory of another model of the same shapes.
        other = pool_of(tiny_answer, disk)
        other.close()
        theirs = next(d for d in disk.iterdir() if d.is_dir() and d != stored.parent)
        stored.rename(theirs / stored.name)
    pool = pool_of(tiny_answer if damage == "another model's" else tiny_qwen3, disk)
    try:
        again = run(pool, request)
    finally:
        pool.close()
    assert again.started.cached_tokens == 0  # nothing came from the bad file
    if damage != "another model's":
        assert again.text == cold.text
    # What is left is whole and in its own model's directory (the bad file
    # is gone; the request's state may have been stored again under its name).
    for path in files(disk):
        header, payload = read_file(path)
        assert zlib.crc32(payload) == header["crc"]
        assert Identity(**header["identity"]).key == path.parent.name


def test_the_size_bound_holds_and_the_files_are_private(tiny_qwen3: Path, disk: Path) -> None:
    budget = 600_000  # a few states of the tiny model
    for seed in range(6):
        pool = pool_of(tiny_qwen3, disk, budget=budget)
        run(pool, chat(prompt_text(200 + seed)))
        pool.close()
        assert sum(p.stat().st_size for p in files(disk)) <= budget
    assert len(files(disk)) >= 2
    for directory in [disk, *(p for p in disk.rglob("*") if p.is_dir())]:
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
    for path in files(disk):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    # The least recently used went first: the last prompt is still there.
    pool = pool_of(tiny_qwen3, disk, budget=budget)
    try:
        assert run(pool, chat(prompt_text(205))).started.cached_tokens > 0
    finally:
        pool.close()


def test_a_full_disk_turns_the_tier_off(
    tiny_qwen3: Path, disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Writes past a file-size limit fail as on a full disk (EFBIG; Python
    ignores SIGXFSZ): one warning, the tier off, serving on."""
    pool = pool_of(tiny_qwen3, disk)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))
    try:
        for seed in (9, 10):
            assert run(pool, chat(prompt_text(seed))).finished.usage.output_tokens > 0
        pool.close()
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert caplog.text.count("the disk tier is off") == 1
    assert not files(disk)
    assert not list(disk.rglob(".*.tmp"))  # no half-written file left


def test_the_cells_cut_apart_and_put_together_are_the_state(tiny_qwen3: Path) -> None:
    from engy_local.runtime.loading.context import Context
    from engy_local.runtime.loading.model import Model

    model = Model(LoadOptions(tiny_qwen3, ctx_size=4096, threads=2, parallel=2))
    ctx = Context(model)
    try:
        tokens = model.tokenize(prompt_text(5))[:700]
        for at in range(0, len(tokens), 256):
            ctx.batch.clear()
            for k, t in enumerate(tokens[at : at + 256]):
                ctx.batch.add(t, at + k, 0, False)
            assert ctx.decode()
        blob = ctx.save(0)
        [cells] = kvstate.parse(blob, 1)
        assert cells is not None and cells.n_cells == len(tokens)
        assert np.array_equal(cells.positions, np.arange(len(tokens)))
        pieces = [cells.take(0, 300), cells.take(300, 301), cells.take(301, 10**6)]
        assert kvstate.write([kvstate.concat(pieces)]) == blob
        assert ctx.restore(1, kvstate.write([cells.take(0, 300)]))
        assert ctx.held(1) == 300
    finally:
        ctx.close()
        model.close()


LOOP = "{% set r = range(100000) %}{% for i in r %}{% for j in r %}{% endfor %}{% endfor %}"


def test_a_looping_template_costs_one_limit(tiny_qwen3: Path) -> None:
    vocab = Vocabulary(tiny_qwen3, chat_template=LOOP)
    try:
        started = time.monotonic()
        with pytest.raises(TemplateLimitHit, match="took over"):
            prepare(vocab, chat("hi"), 64)
        first = time.monotonic() - started
        started = time.monotonic()
        with pytest.raises(TemplateLimitHit):
            prepare(vocab, chat("hi"), 64)
        second = time.monotonic() - started
    finally:
        vocab.close()
    assert first < 15  # one 10 s limit, not one per probe
    assert second < 1  # refused at once from then on


@pytest.fixture(scope="module")
def gemma_pool(gemma_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield tmp_path_factory.mktemp("gemma-kv")


def test_gemma_resumes_a_new_conversation_after_its_system_prompt(
    gemma_path: Path, gemma_pool: Path
) -> None:
    """A sliding-window model resumes only where a window was kept: where
    the conversation's messages begin, after the system prompt."""
    from engy_local.server.backends import resolve_model
    from engy_local.server.options import ServeOptions

    served = resolve_model(str(gemma_path), ServeOptions())
    options = replace(served.options, threads=2, parallel=2, ctx_size=8192)
    served = replace(served, id="m", aliases=(), options=options)
    system = Message("system", (Text(prompt_text(11, 90)),))

    def ask(question: str) -> Run:
        pool = ModelPool([served], primary="m", disk=DiskSettings(gemma_pool, 1 << 30))
        try:
            request = ChatRequest(
                "m",
                (system, Message("user", (Text(question),))),
                sampling=Sampling(max_tokens=4, temperature=0),
            )
            return run(pool, request)
        finally:
            pool.close()

    first = ask("What is note 11.3?")
    assert first.started.miss.endswith("nothing cached shares its start")
    second = ask("And note 11.40?")
    n = second.started.prompt_tokens
    assert second.started.cached_tokens >= 0.9 * n
    assert second.started.miss.endswith("in messages[0]")
