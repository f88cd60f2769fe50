"""The prompt cache's promise held by a stateful property test: random
sequences of the flows agents produce (new conversations, some sharing a
system prompt and tools; next turns; side requests; edited histories;
resent requests; answers cancelled mid-way; restarts; more conversations than sequences;
on the tiny models, sessions of the launched clients from their captured
first requests, support.captured, where the launch tests have captured
them) against a real engine per model kind, drafts on. After every request: it read at
least what the rule gives (support.flows.least, the table in
docs/caches-and-sessions.md), no error, the sequences' bookkeeping agrees
with llama.cpp, and the greedy answer is a cold engine's or parts from it
only at a near tie.

Bounded for CI (a few short flows a model, derandomized), on all four
models; a longer random run: ENGY_STATEFUL_EXAMPLES=50
ENGY_STATEFUL_STEPS=20. A failure prints its flow (the operations by name):
it goes into FOUND below as a table row."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)
from support import captured
from support.flows import Cold, Head, Kind, Session, head_of, kind_of, replay, watching
from support.paths import CACHE, need_fixtures
from support.realmodels import QWEN_05B, need

pytestmark = pytest.mark.timeout(900)

LONG = "ENGY_STATEFUL_EXAMPLES" in os.environ
# Flows (examples) and requests a flow (steps) in CI: more on the tiny
# models, whose requests take milliseconds; 2 of 6 on gemma-3-270m and
# Qwen2.5-Coder-0.5B (the 0.5B's file, FOUND's rows too: 98 s on a 2-core VM).
TINY = ("qwen35", "qwen3moe")


def bounds(name: str) -> tuple[int, int]:
    if LONG:
        return int(os.environ["ENGY_STATEFUL_EXAMPLES"]), int(
            os.environ.get("ENGY_STATEFUL_STEPS", "20")
        )
    return (6, 10) if name in TINY else (2, 6)


LOAD: dict[str, object] = {"speculative": "on"}  # drafts on; the cold engine's off
# The launched clients' heads (up to 12k tokens): on the tiny models only,
# in a window that holds them.
CLIENT_LOAD: dict[str, object] = {"ctx_size": 32768}


# Sliding window, hybrid, MoE, full attention.
MODELS = ["gemma", "qwen35", "qwen3moe", "qwen0.5b"]


@pytest.fixture(autouse=True)
def _outputs() -> Iterator[None]:
    with watching():
        yield


@pytest.fixture(scope="module", params=MODELS)
def name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def model(name: str, request: pytest.FixtureRequest) -> Path:
    if name == "gemma":
        return Path(request.getfixturevalue("gemma_path"))
    if name == "qwen0.5b":
        return need(QWEN_05B)
    need_fixtures()
    from support.hybrid import hybrid_gguf_cached

    return hybrid_gguf_cached(CACHE / "ggufs", arch=name, template="Qwen-Qwen3-0.6B.jinja")


@pytest.fixture(scope="module")
def kind(model: Path) -> Kind:
    return kind_of(model)


@pytest.fixture(scope="module")
def heads(name: str) -> tuple[Head, ...]:
    return tuple(head_of(b) for b in captured.present()) if name in TINY else ()


@pytest.fixture(scope="module")
def load(heads: tuple[Head, ...]) -> dict[str, object]:
    return {**LOAD, **CLIENT_LOAD} if heads else LOAD


@pytest.fixture(scope="module")
def cold(model: Path, heads: tuple[Head, ...]) -> Iterator[Cold]:
    c = Cold(model, **(CLIENT_LOAD if heads else {}))
    yield c
    c.close()


def test_the_promise_holds_over_random_flows(
    name: str,
    model: Path,
    kind: Kind,
    cold: Cold,
    heads: tuple[Head, ...],
    load: dict[str, object],
    tmp_path: Path,
) -> None:
    examples, steps = bounds(name)
    count = itertools.count()
    systems, seeds, chats = st.integers(0, 1), st.integers(0, 3), st.integers(0, 5)

    class Flows(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            disk = tmp_path / f"kv{next(count)}"
            self.s = Session(model, disk, cold, kind, heads, **load)

        @initialize(system=systems, seed=seeds)
        def first(self, system: int, seed: int) -> None:
            self.s.new(system, seed)

        @rule(system=systems, seed=seeds)
        def new(self, system: int, seed: int) -> None:
            self.s.new(system, seed)

        @precondition(lambda self: self.s.clients > 0)
        @rule(n=st.integers(0, 6), seed=seeds)
        def client(self, n: int, seed: int) -> None:
            self.s.client(n, seed)

        @rule(chat=chats)
        def turn(self, chat: int) -> None:
            self.s.turn(chat)

        @rule(chat=chats)
        def edit(self, chat: int) -> None:
            self.s.edit(chat)

        @rule(chat=chats)
        def resend(self, chat: int) -> None:
            self.s.resend(chat)

        @rule(chat=chats)
        def cancel(self, chat: int) -> None:
            self.s.cancel(chat)

        @rule(seed=seeds)
        def side(self, seed: int) -> None:
            self.s.side(seed)

        @rule()
        def restart(self) -> None:
            self.s.restart()

        def teardown(self) -> None:
            self.s.close()

    run_state_machine_as_test(
        Flows,
        settings=settings(
            max_examples=examples,
            stateful_step_count=steps,
            deadline=None,
            derandomize=not LONG,
            # Shrinking replays flows on a real engine: the long run only
            # (in CI a failure prints its flow as it was).
            phases=list(Phase) if LONG else [Phase.explicit, Phase.generate],
            database=None,
            suppress_health_check=list(HealthCheck),
        ),
    )


# Flows kept as table rows: the issue's, and each one a random run found wrong
# (its printed flow).
FOUND: list[tuple[str, list[str]]] = [
    ("a side request between turns", ["new 0 0", "side 1", "turn 0"]),
    ("three conversations in two sequences", ["new 0 0", "new 1 1", "new 0 2", "turn 0", "turn 1"]),
    ("an edit, then the next turn", ["new 0 0", "turn 0", "edit 0", "turn 0"]),
    ("a restart between turns", ["new 0 0", "turn 0", "restart", "turn 0", "new 0 3"]),
    ("a cancel mid-answer, then the next turn", ["new 0 0", "cancel 0", "turn 0"]),
]  # fmt: skip


@pytest.mark.parametrize("flow", [f[1] for f in FOUND], ids=[f[0] for f in FOUND])
def test_found_flows(
    model: Path,
    kind: Kind,
    cold: Cold,
    load: dict[str, object],
    tmp_path: Path,
    flow: list[str],
) -> None:
    session = Session(model, tmp_path / "kv", cold, kind, **load)
    try:
        replay(session, flow)
    finally:
        session.close()
