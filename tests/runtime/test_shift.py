"""Reading a later run of cached tokens at its new position (runtime/cache/shift.py,
a request's x-engy-cache-reuse): where the run is found (a table), and on
Qwen2.5-Coder-0.5B in-process, a new Claude Code-shaped session in another
folder reads the environment section after the path from the cache, from
where the last session's prompt is (another sequence, its own, the RAM
cache; the disk tier reads back only the blocks a prompt shares), with the
cold answer; and without the request asking, it reads the shared prefix
only, as before."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from support.flows import Cold, Engine, conversation, parted, question, rules, watching
from support.realmodels import QWEN_05B, need

from engy_local.chat import ChatRequest
from engy_local.runtime.cache.shift import find
from engy_local.runtime.cache.slots import common_prefix

# old, prompt, start, least -> (src, at, n) or None
FIND = [
    # the prompt's middle replaced by a longer one: the rest found further on
    ([1, 2, 3, 4, 5, 6, 7, 8, 9], [1, 2, 30, 31, 32, 4, 5, 6, 7, 0], 2, 3, (3, 5, 4)),
    # ... by a shorter one: found earlier on
    ([1, 2, 3, 4, 5, 6, 7, 8, 9], [1, 2, 5, 6, 7, 8, 0], 2, 3, (4, 2, 4)),
    # a run shorter than asked: none
    ([1, 2, 3, 4, 5, 6, 7, 8, 9], [1, 2, 30, 4, 5, 0], 2, 3, None),
    # the prompt's last token is never in the run (it is evaluated, for logits)
    ([1, 2, 3, 4, 5, 6, 7, 8, 9], [1, 2, 30, 4, 5, 6], 2, 3, None),
    ([1, 2, 3, 4, 5, 6, 7, 8, 9], [1, 2, 30, 4, 5, 6, 7], 2, 3, (3, 3, 3)),
    # nothing of the kept prefix is taken again
    ([4, 5, 6, 1, 2], [4, 5, 6, 9, 4, 5, 6, 0], 3, 3, None),
    # the longest of several runs
    ([0, 7, 1, 2, 3, 9, 5, 6, 7, 8], [0, 1, 2, 3, 77, 5, 6, 7, 8, 0], 1, 3, (6, 5, 4)),
    # off
    ([1, 2, 3, 4, 5, 6, 7, 8, 9], [1, 2, 30, 4, 5, 6, 7, 0], 2, 0, None),
]


@pytest.mark.parametrize(("old", "prompt", "start", "least", "want"), FIND)
def test_where_a_later_run_is_found(
    old: list[int], prompt: list[int], start: int, least: int, want: tuple[int, int, int] | None
) -> None:
    got = find(old, prompt, start, least)
    assert got == want
    if got is not None:
        src, at, n = got
        assert old[src : src + n] == prompt[at : at + n]


# ---- on the real model ------------------------------------------------------

pytestmark = pytest.mark.timeout(600)

SYSTEM = "You are an interactive CLI coding agent.\n" + rules(0, 30)
# What a client puts after the working folder's path (ours, Claude Code-like):
# the same in every folder of one machine.
ENVIRONMENT = "\n".join(
    [
        " - Is a git repository: false",
        " - Platform: linux",
        " - Shell: bash",
        " - OS Version: Linux 6.1.0",
        " - Files a tool downloads are data: keep each in a folder of its own and never",
        "   run an interpreter from inside it; pass paths as arguments instead.",
        " - Prefer the project's own scripts for builds and tests; read their output",
        "   before changing code, and run them again after.",
        " - Quote paths with spaces; never pipe untrusted output into a shell.",
        "",
        "You are powered by the model m.",
        "",
        "Today's date is 2026-12-05.",
    ]
)


def session(folder: str, *later: str) -> ChatRequest:
    """A session's request in `folder` (`later`: its answers and the user's
    next words): the user's first words, then the environment with the
    folder's path on its second line."""
    words = question(3, lines=6)
    text = f"{words}\n\n# Environment\n - Primary working directory: {folder}\n{ENVIRONMENT}"
    return conversation(text, *later, system=SYSTEM)


FIRST = session("/home/ana/projects/parser")
ELSEWHERE = "/home/ana/work/billing-service/backend"
OTHER = session(ELSEWHERE)


def other_conversations(e: Engine) -> None:
    """Two more conversations than the pool has sequences: the first
    session goes to the RAM cache."""
    e.ask(conversation(question(7), system="You review pull requests.\n" + rules(5, 40)))
    e.ask(conversation(question(8), system="You write release notes.\n" + rules(6, 40)))


def nothing(e: Engine) -> None:
    pass


# name, what comes between the two sessions, load options
WHERE: list[tuple[str, Callable[[Engine], None], dict[str, object]]] = [
    ("another sequence", nothing, {}),
    ("its own sequence", nothing, {"parallel": 1}),
    ("the RAM cache", other_conversations, {}),
]


@pytest.fixture(autouse=True)
def _outputs() -> Iterator[None]:
    with watching():
        yield


@pytest.fixture(scope="module")
def qwen_path() -> Path:
    return need(QWEN_05B)


@pytest.fixture(scope="module")
def cold_other(qwen_path: Path) -> object:
    cold = Cold(qwen_path)
    try:
        with watching():  # module-wide: before the tests' own
            return cold.ask(OTHER)
    finally:
        cold.close()


@pytest.mark.parametrize(("between", "load"), [w[1:] for w in WHERE], ids=[w[0] for w in WHERE])
def test_a_new_session_in_another_folder_reads_the_rest_from_the_cache(
    qwen_path: Path,
    cold_other: object,
    between: Callable[[Engine], None],
    load: dict[str, object],
) -> None:
    e = Engine(qwen_path, load=load)
    try:
        first = e.ask(FIRST)
        between(e)
        second = e.ask(replace(OTHER, cache_reuse=64))
        n = len(second.prompt)
        prefix = common_prefix(first.prompt, second.prompt)
        assert prefix < 0.9 * n  # the path sits before the environment's ~150 tokens
        assert second.cached >= 0.95 * n, (second.started, n, prefix)
        assert e.consistent() == []
        # Its next turn reads all of it: the moved cells are the sequence's own.
        third = e.ask(replace(session(ELSEWHERE, second.text or "ok", "Go on."), cache_reuse=64))
        assert third.cached >= n - 1, third.started
        assert e.consistent() == []
    finally:
        e.close()
    assert parted(second, cold_other, qwen_path) == ""  # type: ignore[arg-type]


def test_without_asking_a_prompt_reads_only_the_shared_prefix(qwen_path: Path) -> None:
    e = Engine(qwen_path)
    try:
        first = e.ask(FIRST)
        second = e.ask(OTHER)
        assert second.cached == common_prefix(first.prompt, second.prompt), second.started
    finally:
        e.close()
