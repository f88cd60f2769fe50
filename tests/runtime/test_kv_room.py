"""The KV cache never runs out under a mix of shared prefixes, concurrency
and fresh prompts (issue 22): the steps a user took to get `llama_decode
failed (1)` on gemma, and a longer random mix on gemma and a tiny model,
with every answer complete and every sequence's tokens matching what the
KV cache holds once the model is idle."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from engy_local.chat import ChatRequest, Finished, Message, Sampling, Text
from engy_local.runtime.engine.local import ServedModel
from engy_local.runtime.loading.model import LoadOptions
from engy_local.runtime.pool import ModelPool


def source(seed: int, lines: int) -> str:
    """A Python file of about 20 tokens a line, different for each seed."""
    rng = random.Random(seed)
    return "".join(
        f"def f{i}_{seed}(x):\n    return x * {rng.randint(1, 999)} + {rng.randint(1, 999)}\n"
        for i in range(lines)
    )


def request(text: str, max_tokens: int = 16) -> ChatRequest:
    user = Message("user", (Text(text + "\n\nRepeat the file above exactly."),))
    return ChatRequest("m", (user,), sampling=Sampling(max_tokens=max_tokens, temperature=0))


async def answer(pool: ModelPool, chat: ChatRequest) -> Finished:
    generation = await pool.submit(chat)
    finished = None
    async for event in generation:
        if isinstance(event, Finished):
            finished = event
    assert finished is not None
    return finished


def consistent(pool: ModelPool) -> list[str]:
    """What the idle model's sequences hold against their bookkeeping."""
    worker = pool._loaded["m"].worker  # the test looks inside, once nothing runs
    deadline = time.monotonic() + 60  # the next turn's start may be being read in
    while not worker.idle():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return worker.scheduler.mismatches()


def load(served: ServedModel, parallel: int = 4) -> ModelPool:
    options = replace(served.options, parallel=parallel, threads=2)
    return ModelPool([replace(served, id="m", aliases=(), options=options)], primary="m")


@pytest.fixture(scope="module")
def gemma(gemma_path: Path) -> Iterator[ModelPool]:
    from engy_local.server.backends import resolve_model
    from engy_local.server.options import ServeOptions

    pool = load(resolve_model(str(gemma_path), ServeOptions()))
    yield pool
    pool.close()


def test_the_reported_steps_on_gemma(gemma: ModelPool) -> None:
    """One prompt, the same four times at once, then fresh prompts: the
    sequence that reported `llama_decode failed (1)` on the second fresh one."""

    async def steps() -> None:
        shared = request(source(1, 70))
        first = await answer(gemma, shared)
        assert first.usage.prompt_tokens > 1300
        four = await asyncio.gather(*(answer(gemma, shared) for _ in range(4)))
        # Each of the four reads the prefix the first one left (copied into
        # free sequences), none evaluates it again.
        assert all(f.usage.cached_tokens >= first.usage.prompt_tokens - 1 for f in four)
        for seed in range(2, 7):
            fresh = await answer(gemma, request(source(seed, 70)))
            assert fresh.stop_reason == "length" and fresh.usage.output_tokens == 16

    asyncio.run(steps())
    assert consistent(gemma) == []


def mix(pool: ModelPool, seed: int, rounds: int, lines: int) -> None:
    """Rounds of shared-prefix, concurrent and fresh requests at random."""
    rng = random.Random(seed)
    prefixes = [source(100 + i, lines) for i in range(3)]

    def pick() -> ChatRequest:
        kind = rng.choice(["shared", "shared", "fresh", "turn"])
        if kind == "fresh":
            return request(
                source(rng.randint(1000, 9999), rng.randint(5, lines)), rng.randint(1, 24)
            )
        base = rng.choice(prefixes)
        if kind == "turn":  # the same conversation, a question more
            base += f"\n# question {rng.randint(0, 3)}"
        return request(base, rng.randint(1, 24))

    async def run() -> None:
        for _ in range(rounds):
            batch = [pick() for _ in range(rng.randint(1, 6))]  # 5 and 6 wait in the queue
            done = await asyncio.gather(*(answer(pool, r) for r in batch))
            for chat, finished in zip(batch, done, strict=True):
                assert finished.usage.output_tokens >= 1
                assert finished.stop_reason in ("end", "length")
                assert finished.usage.output_tokens <= (chat.sampling.max_tokens or 0)

    asyncio.run(run())
    assert consistent(pool) == []


def test_a_random_mix_on_gemma(gemma: ModelPool) -> None:
    mix(gemma, seed=7, rounds=5, lines=40)


@pytest.mark.parametrize("parallel", [2, 4])
def test_a_random_mix_on_a_tiny_model(tiny_qwen3: Path, parallel: int) -> None:
    served = ServedModel("m", LoadOptions(tiny_qwen3, ctx_size=4096))
    pool = load(served, parallel)
    try:
        mix(pool, seed=parallel, rounds=30, lines=40)
    finally:
        pool.close()
