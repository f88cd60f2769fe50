"""The answer read in as the next turn writes it, through the official
Anthropic SDK on a tiny model that calls a tool in bare JSON (as small
models do) and then answers: while the client runs the tool the server
reads the call as the template writes it (Llama 3.1's `tojson` spacing),
so turn 2 evaluates only the tool's result and what follows it; its
answer is the one the model gives. Without the read-in turn 2 evaluates
the call again (prompt/nextturn.py, runtime/engine/worker.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest
from support.paths import CACHE, need_fixtures
from support.server import EngyServer

pytestmark = pytest.mark.timeout(300)

CALL = '{"name": "read_file","parameters":{"path":"/tmp/Zebra.txt"}}'
AFTER = "It says build-host-7."
RESULT = "build-host-7"
READ_FILE = {
    "name": "read_file",
    "description": "Read a file.",
    "input_schema": {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
    },
}
LOGGED = "of the next turn's start"


@pytest.fixture(scope="module")
def server() -> Iterator[EngyServer]:
    need_fixtures()
    from support.ggufs import two_turn_gguf_cached

    path = two_turn_gguf_cached(CACHE / "ggufs", first=CALL, then=AFTER, marker="ebra")
    s = EngyServer(str(path), "--ctx-size", "4096")
    yield s
    s.stop()


def turns(server: EngyServer, question: str) -> tuple[Any, list[dict[str, Any]]]:
    """Turn 1 (a call) and turn 2's messages (its result sent back)."""
    model = httpx.get(server.url + "/v1/models").json()["data"][0]["id"]
    with anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0) as c:
        first = c.messages.create(
            model=model,
            max_tokens=200,
            tools=[READ_FILE],  # type: ignore[list-item]
            messages=[{"role": "user", "content": question}],
            extra_body={"temperature": 0},
        )
    [call] = [b for b in first.content if b.type == "tool_use"]
    assert call.input == {"path": "/tmp/Zebra.txt"}
    messages = [
        {"role": "user", "content": question},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": call.id, "name": call.name, "input": call.input}
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": RESULT}],
        },
    ]
    return first, messages


def second_turn(server: EngyServer, messages: list[dict[str, Any]]) -> anthropic.types.Message:
    model = httpx.get(server.url + "/v1/models").json()["data"][0]["id"]
    with anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0) as c:
        return c.messages.create(
            model=model,
            max_tokens=200,
            tools=[READ_FILE],  # type: ignore[list-item]
            messages=messages,  # type: ignore[arg-type]
            extra_body={"temperature": 0},
        )


def read_in(server: EngyServer, before: int, timeout: float = 30) -> None:
    """Waits, as while a client runs its tool, for the server to log one
    more read-in than `before`."""
    deadline = time.monotonic() + timeout
    while server.output().count(LOGGED) <= before:
        assert time.monotonic() < deadline, server.output()[-2000:]
        time.sleep(0.05)


def uncached(message: anthropic.types.Message) -> int:
    return message.usage.input_tokens


def test_turn_two_reads_only_the_result(server: EngyServer) -> None:
    before = server.output().count(LOGGED)
    first, messages = turns(server, "Read the host file for me.")
    read_in(server, before)
    second = second_turn(server, messages)
    assert [b.text for b in second.content if b.type == "text"] == [AFTER]
    # Only the result's message and the assistant's header are new: fewer
    # tokens than the call the template writes (~25 alone).
    assert uncached(second) <= 16, second.usage
    assert (second.usage.cache_read_input_tokens or 0) > first.usage.input_tokens + 20
