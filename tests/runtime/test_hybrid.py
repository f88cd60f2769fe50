"""Hybrid models (attention beside recurrent layers: Qwen3.5, LFM2) keep
every cache tier, in-process on real llama.cpp and tiny random GGUFs:
turn 2 reads turn 1 from a checkpoint of the recurrent state, so do an
identical resend, a changed earlier answer (from the checkpoint before the
change), a new conversation sharing the system prompt (copied from the
sequence that holds it), a turn after a side request, a turn after a
restart (from disk) and a conversation parked in the RAM cache; drafts are
taken back from llama.cpp's snapshots. Every greedy answer is the one a
run without any cache gives."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from support.paths import CACHE, need_fixtures
from support.runs import Run, finish, run

from engy_local.chat import ChatRequest, Message, Sampling, Text
from engy_local.runtime.cache.prefixes import NEAR
from engy_local.runtime.engine.local import ServedModel
from engy_local.runtime.loading.model import LoadOptions
from engy_local.runtime.pool import DiskSettings, ModelPool

# (arch, template): Qwen3.5 with Qwen3's template, whose thinking switch
# writes an empty think block that a re-rendered answer drops; LFM2 with its own.
MODELS = [("qwen35", "Qwen-Qwen3-0.6B.jinja"), ("lfm2", "LFM2.5-Instruct.jinja")]


@pytest.fixture(scope="module", params=MODELS, ids=[m[0] for m in MODELS])
def hybrid(request: pytest.FixtureRequest) -> Path:
    need_fixtures()
    from support.hybrid import hybrid_gguf_cached

    arch, template = request.param
    return hybrid_gguf_cached(CACHE / "ggufs", arch=arch, template=template)


def notes(seed: int, lines: int) -> str:
    rng = random.Random(seed)
    return "\n".join(f"note {seed}.{i}: keep {rng.randint(1, 9999)}" for i in range(lines))


SYSTEM = notes(0, 120)  # ~2k tokens shared by conversations


def chat(*turns: str, system: str = SYSTEM, max_tokens: int = 12) -> ChatRequest:
    roles = ["user", "assistant"]
    messages = [Message("system", (Text(system),))] if system else []
    messages += [Message(roles[i % 2], (Text(t),)) for i, t in enumerate(turns)]  # type: ignore[arg-type]
    return ChatRequest(
        "m",
        tuple(messages),
        sampling=Sampling(max_tokens=max_tokens, temperature=0),
        thinking=False,
    )


@dataclass
class Engine:
    """One model pool, and the run it gives for each request."""

    pool: ModelPool
    runs: list[Run] = field(default_factory=list)

    def __call__(self, request: ChatRequest) -> Run:
        done = run(self.pool, request)
        self.runs.append(done)
        return done

    def consistent(self) -> None:
        """Every idle sequence's tokens match what llama.cpp holds."""
        worker = self.pool._loaded["m"].worker  # the test looks inside: nothing runs now
        deadline = time.monotonic() + 10  # the last step may still be ending
        while not worker.idle() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert worker.idle()
        assert worker.scheduler.mismatches() == []

    def close(self) -> None:
        self.pool.close()


def engine(model: Path, disk: Path | None = None, cache: bool = True, **load: object) -> Engine:
    options = LoadOptions(
        model,
        ctx_size=8192,
        threads=2,
        parallel=2,
        cache_ram=(1 << 30) if cache else 0,
        # Flash attention sums a row's cells in blocks by where they lie in
        # the cache, so a sequence copied from another differs from a fresh
        # one in the last bits: enough to flip two tokens 0.005 apart.
        flash_attn="off",
        **load,  # type: ignore[arg-type]
    )
    settings = DiskSettings(disk, 1 << 30) if disk is not None else None
    return Engine(ModelPool([ServedModel("m", options)], primary="m", disk=settings))


def fresh(model: Path, request: ChatRequest) -> str:
    """The answer with nothing cached: no RAM cache, no disk, no drafts."""
    alone = engine(model, cache=False, speculative="off")
    try:
        return alone(request).text
    finally:
        alone.close()


def share(run: Run, of: int) -> float:
    return run.started.cached_tokens / of


def test_turn_two_and_a_resend_read_the_first_turn(hybrid: Path) -> None:
    e = engine(hybrid)
    try:
        first = e(chat(notes(1, 40)))
        n1 = first.started.prompt_tokens
        again = e(chat(notes(1, 40)))
        # All but the last few tokens: from one before the end, or from the
        # answer's opening just before it (Qwen3's empty think block).
        assert n1 - NEAR < again.started.cached_tokens <= n1 - 1
        assert again.text == first.text
        second_request = chat(notes(1, 40), first.text, "and then?")
        second = e(second_request)
        assert share(second, n1) >= 0.9, (second.started, n1)
        # It leaves the cache in the answer (Qwen3 drops the empty think
        # block turn 1 was given), or after it: where it says.
        assert second.started.miss.endswith("in messages[1]"), second.started
        e.consistent()
    finally:
        e.close()
    assert second.text == fresh(hybrid, second_request)
    assert first.text == fresh(hybrid, chat(notes(1, 40)))


def test_a_changed_answer_resumes_before_the_change(hybrid: Path) -> None:
    e = engine(hybrid)
    try:
        first = e(chat(notes(2, 40)))
        second = e(chat(notes(2, 40), first.text, notes(3, 30)))
        # The same conversation with the first answer edited (a client
        # that rewrites history): read up to that answer, not from 0.
        edited = chat(notes(2, 40), "an answer of my own", notes(3, 30))
        third = e(edited)
        assert share(third, first.started.prompt_tokens) >= 0.9
        assert third.started.cached_tokens < second.started.prompt_tokens
        e.consistent()
    finally:
        e.close()
    assert third.text == fresh(hybrid, edited)


def test_a_side_request_between_turns_keeps_the_conversation(hybrid: Path) -> None:
    e = engine(hybrid)
    try:
        first = e(chat(notes(4, 40)))
        e(chat("a title for this", system="You write titles."))
        e(chat(notes(5, 60), system=notes(6, 20)))  # two other conversations: both sequences
        second = e(chat(notes(4, 40), first.text, "more"))
        assert share(second, first.started.prompt_tokens) >= 0.9
        e.consistent()
    finally:
        e.close()


def test_conversations_share_the_system_prompt(hybrid: Path) -> None:
    e = engine(hybrid)
    try:
        a = e(chat(notes(7, 10)))
        request = chat(notes(8, 10))
        b = e(request)
        # The second reads the system prompt (most of its prompt) from the first.
        assert b.started.cached_tokens >= 0.8 * b.started.prompt_tokens, (a.started, b.started)
        e.consistent()
    finally:
        e.close()
    assert b.text == fresh(hybrid, request)


def test_a_restart_reads_the_conversation_from_disk(hybrid: Path, tmp_path: Path) -> None:
    disk = tmp_path / "kvcache"
    e = engine(hybrid, disk)
    first = e(chat(notes(9, 40)))
    e.close()  # a graceful stop keeps the conversation on disk
    assert list(disk.rglob("*.kv"))
    e = engine(hybrid, disk)
    try:
        resent = e(chat(notes(9, 40)))
        assert first.started.prompt_tokens - NEAR < resent.started.cached_tokens
        assert resent.text == first.text
    finally:
        e.close()
    e = engine(hybrid, disk)
    try:
        request = chat(notes(9, 40), first.text, "go on")
        second = e(request)
        assert share(second, first.started.prompt_tokens) >= 0.9
    finally:
        e.close()
    assert second.text == fresh(hybrid, request)


def test_a_long_read_parks_and_the_conversation_comes_back(hybrid: Path) -> None:
    e = engine(hybrid)
    try:
        first = e(chat(notes(10, 40)))
        e(chat(notes(11, 200), system=""))  # a long read parks the idle sequence
        e(chat(notes(12, 150), system=""))  # and this one takes its place
        second = e(chat(notes(10, 40), first.text, "back again"))
        assert share(second, first.started.prompt_tokens) >= 0.9
        e.consistent()
    finally:
        e.close()


def test_drafts_on_a_hybrid_are_taken_back_exactly(hybrid: Path) -> None:
    # The model writes the prompt's words and digits (support.hybrid), so
    # the drafter finds its last tokens in the prompt and proposes what
    # followed there; most of that the model refuses, and the recurrent
    # state is taken back to the last token kept.
    text = notes(13, 60)
    request = chat(text, max_tokens=48)
    e = engine(hybrid, speculative="on")
    try:
        drafted = e(request)
        e.consistent()
    finally:
        e.close()
    usage = drafted.finished.usage
    assert usage.drafted_tokens > usage.accepted_tokens, usage  # taken back, some
    assert drafted.text == fresh(hybrid, request)


def test_without_a_cache_the_model_says_what_it_cannot_do(
    hybrid: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="engy.requests")
    e = engine(hybrid, cache=False)
    try:
        first = e(chat(notes(14, 40)))
        edited = e(chat(notes(14, 40), "an answer of my own", "and?"))
        [status] = e.pool.status()
    finally:
        e.close()
    # No checkpoints: an earlier answer rewritten means reading it all again.
    assert edited.started.cached_tokens == 0
    assert "no checkpoint of the recurrent state" in edited.started.miss
    line = "checkpoints off (--cache-ram 0): a turn resumes only where it stands"
    assert status.limits == [line]  # what engy ps and the page show
    assert sum(line in r.getMessage() for r in caplog.records) == 1
    assert first.started.prompt_tokens > 0


def test_the_same_prompt_twice_at_once_is_read_once(hybrid: Path) -> None:
    """A client's retry of a prompt still being read waits for that read
    and resumes from its end (from the checkpoint before the answer)."""
    e = engine(hybrid)
    request = chat(notes(15, 80))

    async def both() -> list[Run]:
        return list(await asyncio.gather(finish(e.pool, request), finish(e.pool, request)))

    try:
        first, again = sorted(asyncio.run(both()), key=lambda r: r.started.cached_tokens)
        e.consistent()
    finally:
        e.close()
    n = first.started.prompt_tokens
    assert first.started.cached_tokens == 0
    assert n - NEAR < again.started.cached_tokens < n
    assert again.text == first.text == fresh(hybrid, request)
