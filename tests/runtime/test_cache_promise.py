"""The prompt cache's promise on the flows agents produce, per model kind,
in-process on real llama.cpp: a Claude Code-shaped conversation of about
2k tokens (a system prompt, tools, a user message), then something in
between, then turn 2 (turn 1's prompt, its answer, a new message). Turn 2
reads at least 95% of turn 1's prompt from the cache whatever came between,
and its greedy answer is a cold engine's or parts from it only at a near
tie. (Issue 42: on gemma-3-270m, a sliding window, a side request or another
conversation between the turns made turn 2 read nothing: the parked state
could not be cut back to where the answer began.)"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.flows import (
    Cold,
    Engine,
    conversation,
    parted,
    question,
    rules,
    title_request,
    watching,
)
from support.realmodels import QWEN_05B, need

pytestmark = pytest.mark.timeout(600)

Between = Callable[[Engine], None]


def side_request(e: Engine) -> None:
    e.ask(title_request(question(1)))


def another_conversation(e: Engine) -> None:
    e.ask(conversation(question(7), system="You review pull requests.\n" + rules(5, 60)))


def two_other_conversations(e: Engine) -> None:
    """More conversations than sequences (two): each takes one in turn."""
    another_conversation(e)
    e.ask(conversation(question(8), system="You write release notes.\n" + rules(6, 50)))


def restart(e: Engine) -> None:
    e.restart()


def nothing(e: Engine) -> None:
    pass


# name, what comes between turn 1 and turn 2, disk tier on
FLOWS: list[tuple[str, Between, bool]] = [
    ("next turn", nothing, False),
    ("side request", side_request, False),
    ("another conversation", another_conversation, False),
    ("two other conversations", two_other_conversations, False),
    ("restart", restart, True),
]


@pytest.fixture(autouse=True)
def _outputs() -> Iterator[None]:
    with watching():
        yield


@pytest.fixture(scope="module")
def qwen_path() -> Path:
    return need(QWEN_05B)


@pytest.fixture(scope="module")
def gemma_cold(gemma_path: Path) -> Iterator[Cold]:
    c = Cold(gemma_path)
    yield c
    c.close()


# A turn 1 whose answer is longer than the window layers keep behind a
# state's end (gemma-3-270m, two sequences: 1536 cells of window, ~1000
# positions past the prompt's end): the base model repeats the line, drafts
# make that quick.
LOOP = "Print this line again and again: `ok = check(1)`\n" + "ok = check(1)\n" * 30


def test_a_long_answer_then_a_side_request_then_turn_two_gemma(
    gemma_path: Path, gemma_cold: Cold
) -> None:
    """Issue 42 as reported: turn 1's state is parked at its end (prompt
    and a long answer) when the side request comes; turn 2 sends the answer
    back rewritten, so it must resume where that answer began, which only
    the checkpoint kept there can give. Before the fix it read nothing."""
    e = Engine(gemma_path, load={"speculative": "on"})
    try:
        first = e.ask(conversation(question(0) + "\n" + LOOP, max_tokens=1100))
        n1 = len(first.prompt)
        assert len(first.output) > 1050, first.finished  # past what the window keeps
        e.ask(title_request(question(1)))
        request = conversation(question(0) + "\n" + LOOP, "ok", "Now fix it.")
        second = e.ask(request)
        assert second.cached == n1, (second.started, n1)  # the checkpoint at turn 1's end
        assert second.started.miss.endswith("in messages[1]"), second.started
        assert e.consistent() == []
    finally:
        e.close()
    assert parted(second, gemma_cold.ask(request), gemma_path) == ""


def test_the_same_request_sent_again_after_a_long_answer_gemma(
    gemma_path: Path, gemma_cold: Cold
) -> None:
    """A retry after the answer (a client that timed out): the state went
    on past the prompt farther than the window reaches back, so only the
    checkpoint kept one token before the prompt's end can give all but its
    last token. Before it, the same 2k-token prompt was read again whole
    (the messages' start, a few hundred tokens, from the cache)."""
    e = Engine(gemma_path, load={"speculative": "on"})
    request = conversation(question(0) + "\n" + LOOP, max_tokens=1100)
    try:
        first = e.ask(request)
        assert len(first.output) > 1050, first.finished  # past what the window keeps
        again = e.ask(request)
        assert again.cached == len(first.prompt) - 1, again.started
        assert e.consistent() == []
    finally:
        e.close()
    assert parted(again, gemma_cold.ask(request), gemma_path) == ""


@pytest.mark.parametrize(("between", "disk"), [f[1:] for f in FLOWS], ids=[f[0] for f in FLOWS])
def test_turn_two_reads_turn_one_from_the_cache_gemma(
    gemma_path: Path, gemma_cold: Cold, between: Between, disk: bool, tmp_path: Path
) -> None:
    flow(gemma_path, gemma_cold, between, tmp_path / "kv" if disk else None)


def test_turn_two_after_a_side_request_reads_turn_one_qwen(qwen_path: Path) -> None:
    """Full attention (the default model): the same promise. (Its restart
    and the other flows: test_cache_stateful.py, test_disk_cache.py.)"""
    cold = Cold(qwen_path)
    try:
        flow(qwen_path, cold, side_request, None)
    finally:
        cold.close()


def flow(model: Path, cold: Cold, between: Between, disk: Path | None) -> None:
    """Turn 1, what comes `between`, turn 2 (the answer sent back as it
    came): turn 2 reads at least 95% of turn 1's prompt from the cache, and
    says what a cold engine says (or parts at a near tie)."""
    e = Engine(model, disk=disk)
    try:
        first = e.ask(conversation(question(0)))
        n1 = len(first.prompt)
        assert n1 > 1800, n1  # a conversation, not a greeting
        between(e)
        request = conversation(question(0), first.text or "ok", "Now fix it.")
        second = e.ask(request)
        assert second.cached >= 0.95 * n1, (second.started, n1)
        assert e.consistent() == []
    finally:
        e.close()
    assert parted(second, cold.ask(request), model) == ""
