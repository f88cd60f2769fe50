"""The prompt cache's promise over the prompts of the clients `engy launch`
runs beside Claude Code and Codex: each one's first request as the real
client sent it (captured by tests/commands/test_launch_agents.py into
support.captured, never copied into the repo) is the head of its sessions
here: the preamble and tools before its task, then new tasks, next turns,
a restart and a side request, each request held to the rule
(support.flows.least), a cold engine's greedy answer and the sequences'
bookkeeping, as in test_cache_stateful.py (whose random flows draw these
heads too, where they are captured).

On the two tiny models (hybrid and MoE): the clients' prompts are 1k-12k
tokens, which they read in about a second; the real 0.5B would take
minutes a flow."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support import captured
from support.flows import Cold, Kind, Session, head_of, kind_of, replay, watching
from support.paths import CACHE, need_fixtures

pytestmark = pytest.mark.timeout(900)

CLIENTS = ["opencode", "kilo", "qwen", "cline", "continue", "aider", "mini-swe-agent"]
# Qwen Code's first prompt is 12k tokens: a window that holds two sessions' worth.
LOAD: dict[str, object] = {"speculative": "on", "ctx_size": 32768}
# Two sessions of the client, their next turns (the second session reads
# the first's head from the cache), a restart (its head from the disk
# tier), a side request between turns.
FLOW = ["client 0 0", "turn 0", "client 0 1", "turn 1", "restart", "turn 0", "side 0", "turn 1"]


@pytest.fixture(autouse=True)
def _outputs() -> Iterator[None]:
    with watching():
        yield


@pytest.fixture(scope="module", params=["qwen35", "qwen3moe"])
def model(request: pytest.FixtureRequest) -> Path:
    need_fixtures()
    from support.hybrid import hybrid_gguf_cached

    return hybrid_gguf_cached(CACHE / "ggufs", arch=request.param, template="Qwen-Qwen3-0.6B.jinja")


@pytest.fixture(scope="module")
def kind(model: Path) -> Kind:
    return kind_of(model)


@pytest.fixture(scope="module")
def cold(model: Path) -> Iterator[Cold]:
    c = Cold(model, ctx_size=LOAD["ctx_size"])
    yield c
    c.close()


@pytest.mark.parametrize("client", CLIENTS)
def test_a_launched_clients_sessions_keep_the_promise(
    model: Path, kind: Kind, cold: Cold, tmp_path: Path, client: str
) -> None:
    head = head_of(captured.load(client))
    assert head.messages, "a client's first request has a preamble before its task"
    session = Session(model, tmp_path / "kv", cold, kind, clients=(head,), **LOAD)
    try:
        replay(session, FLOW)
    finally:
        session.close()
