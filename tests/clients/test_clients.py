"""The real clients against a real `engy serve`: Claude Code 2.1.332 and
Codex 0.171.0 from the npm registry, run as ../shared/reference/clients.md
says, and the first requests they were recorded sending, replayed as sent.

The server runs the tiny "answer" model (conftest.tiny_answer): whatever the
prompt, it says ANSWER and ends its turn, so a client that exits 0 and prints
ANSWER has parsed our stream all the way to its end.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.clients import (
    Clients,
    Run,
    base_env,
    diagnose,
    model_id,
    run_client,
)
from support.paths import ANSWER, FIXTURES
from support.server import EngyServer

REQUESTS = FIXTURES / "requests"


# ---- installing the clients ----------------------------------------------------


# ---- running them --------------------------------------------------------------


# ---- Claude Code -----------------------------------------------------------------


def run_claude(clients: Clients, server: EngyServer, tmp: Path, **auth: str) -> Run:
    """`claude -p "Say hi"` as clients.md runs it, in a fresh HOME."""
    home = tmp / "home"
    home.mkdir()
    env = base_env(home)
    env.update(ANTHROPIC_BASE_URL=server.url, CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", **auth)
    run = run_client([clients.claude, "-p", "Say hi", "--model", model_id(server)], env, home)
    print(f"claude -p: {run.seconds:.1f} s")
    return run


def test_claude_code_says_the_answer(
    clients: Clients, answer_server: EngyServer, tmp_path: Path
) -> None:
    run = run_claude(clients, answer_server, tmp_path, ANTHROPIC_API_KEY="any-key")
    why = diagnose("claude -p 'Say hi' (ANTHROPIC_API_KEY)", run, answer_server)
    assert run.returncode == 0, why
    assert ANSWER in run.stdout, why


KEY = "engy-test-key"


@pytest.fixture(scope="module")
def keyed_server(tiny_answer: Path) -> Iterator[EngyServer]:
    server = EngyServer(str(tiny_answer), "--api-key", KEY)
    yield server
    server.stop()


def test_claude_code_with_bearer_token_against_a_keyed_server(
    clients: Clients, keyed_server: EngyServer, tmp_path: Path
) -> None:
    # The key is really required: without it, 401.
    probe = {
        "model": model_id(keyed_server),
        "max_tokens": 8,
        "messages": [{"role": "user", "content": "hi"}],
    }
    r = httpx.post(keyed_server.url + "/v1/messages", json=probe, timeout=60)
    assert r.status_code == 401, r.text
    run = run_claude(clients, keyed_server, tmp_path, ANTHROPIC_AUTH_TOKEN=KEY)
    why = diagnose("claude -p 'Say hi' (ANTHROPIC_AUTH_TOKEN)", run, keyed_server)
    assert run.returncode == 0, why
    assert ANSWER in run.stdout, why


# ---- Codex -----------------------------------------------------------------------


def test_codex_says_the_answer(clients: Clients, answer_server: EngyServer, tmp_path: Path) -> None:
    codex_home, work = tmp_path / "codex-home", tmp_path / "work"
    codex_home.mkdir()
    work.mkdir()
    (codex_home / "config.toml").write_text(
        f'model = "{model_id(answer_server)}"\n'
        'model_provider = "local"\n'
        "\n"
        "[model_providers.local]\n"
        'name = "local"\n'
        f'base_url = "{answer_server.url}/v1"\n'
        'wire_api = "responses"\n'
        'env_key = "LOCAL_API_KEY"\n'
    )
    env = base_env(tmp_path)
    env.update(CODEX_HOME=str(codex_home), LOCAL_API_KEY="x")
    cmd: list[str | Path] = [
        clients.codex,
        "exec",
        "--skip-git-repo-check",
        "--disable",
        "plugins",
        "--disable",
        "apps",
        "-c",
        "analytics.enabled=false",
        "Say hi",
    ]
    run = run_client(cmd, env, work)
    print(f"codex exec: {run.seconds:.1f} s")
    why = diagnose("codex exec 'Say hi'", run, answer_server)
    assert run.returncode == 0, why
    assert ANSWER in run.stdout, why


# ---- the captured requests, replayed ---------------------------------------------


@dataclass(frozen=True)
class Captured:
    path: str  # with its query, e.g. /v1/messages?beta=true
    headers: dict[str, str]
    body: dict[str, Any]


def captured(name: str, server: EngyServer) -> Captured:
    """A request a client sent, as recorded, for this server: only `model`
    is changed, to the id this server serves (a client sends whatever it is
    configured with; the recording used a made-up name, which the contract
    answers with 404)."""
    path = REQUESTS / name
    if not path.is_file():
        pytest.skip(f"captured request not found: {path}")
    recorded = json.loads(path.read_text())
    # Transport headers are httpx's to set for the body it sends.
    drop = {"host", "content-length", "accept-encoding", "connection"}
    headers = {k: v for k, v in recorded["headers"] if k.lower() not in drop}
    body = dict(recorded["body"])
    body["model"] = model_id(server)
    return Captured(recorded["path"], headers, body)


def sse_events(lines: Iterator[str]) -> list[tuple[str | None, dict[str, Any]]]:
    """(event name, data) per SSE event, strictly framed."""
    events: list[tuple[str | None, dict[str, Any]]] = []
    name: str | None = None
    data: list[str] = []
    for line in lines:
        if line == "":
            if data:
                events.append((name, json.loads("\n".join(data))))
            name, data = None, []
        elif line.startswith("event: "):
            name = line[len("event: ") :]
        elif line.startswith("data: "):
            data.append(line[len("data: ") :])
        else:
            assert line.startswith(":"), f"not an SSE line: {line!r}"
    assert not data, "stream ended in the middle of an event"
    return events


def test_claude_code_first_turn_is_accepted_streaming(answer_server: EngyServer) -> None:
    req = captured("claude-code-2.1.332-first-turn.json", answer_server)
    body = req.body
    assert req.path == "/v1/messages?beta=true" and body["stream"] is True
    url = answer_server.url + req.path
    with httpx.stream("POST", url, headers=req.headers, json=body, timeout=300) as r:
        if r.status_code != 200:
            r.read()
        assert r.status_code == 200, r.text
        assert r.headers["content-type"].startswith("text/event-stream")
        events = sse_events(r.iter_lines())
    for name, data in events:
        assert name is not None and name == data["type"], (name, data)
    events = [(n, d) for n, d in events if n != "ping"]
    names = [n for n, _ in events]
    assert names[0] == "message_start", names
    assert names[-2:] == ["message_delta", "message_stop"], names
    assert "error" not in names, events
    start = events[0][1]["message"]
    assert start["model"] == body["model"] and start["usage"]["input_tokens"] > 1000
    # Blocks 0, 1, ... opened in order, each closed before the next opens.
    open_index: int | None = None
    next_index, text = 0, ""
    for name, data in events[1:-2]:
        if name == "content_block_start":
            assert open_index is None and data["index"] == next_index, events
            open_index, next_index = data["index"], next_index + 1
        elif name == "content_block_delta":
            assert data["index"] == open_index, events
            if data["delta"]["type"] == "text_delta":
                text += data["delta"]["text"]
        else:
            assert name == "content_block_stop" and data["index"] == open_index, events
            open_index = None
    assert open_index is None and next_index > 0, events
    assert ANSWER in text
    delta = events[-2][1]
    assert delta["delta"]["stop_reason"] == "end_turn"
    assert delta["usage"]["output_tokens"] > 0


def test_claude_code_first_turn_is_accepted_not_streaming(answer_server: EngyServer) -> None:
    # What Claude Code resends after a mid-stream error.
    req = captured("claude-code-2.1.332-first-turn.json", answer_server)
    body = {**req.body, "stream": False}
    r = httpx.post(answer_server.url + req.path, headers=req.headers, json=body, timeout=300)
    assert r.status_code == 200, r.text
    msg = r.json()
    assert msg["type"] == "message" and msg["role"] == "assistant"
    assert msg["model"] == body["model"]
    assert msg["stop_reason"] == "end_turn"
    assert [b["type"] for b in msg["content"]] == ["text"]
    assert ANSWER in msg["content"][0]["text"]
    assert msg["usage"]["input_tokens"] + msg["usage"]["cache_read_input_tokens"] > 1000


@pytest.mark.parametrize(
    "name", ["codex-0.171.0-first-turn.json", "codex-0.171.0-first-turn-gpt-5.5-slug.json"]
)
def test_codex_first_turn_is_accepted(answer_server: EngyServer, name: str) -> None:
    req = captured(name, answer_server)
    assert req.path == "/v1/responses" and req.body["stream"] is True
    url = answer_server.url + req.path
    with httpx.stream("POST", url, headers=req.headers, json=req.body, timeout=300) as r:
        if r.status_code != 200:
            r.read()
        assert r.status_code == 200, r.text
        assert r.headers["content-type"].startswith("text/event-stream")
        events = sse_events(r.iter_lines())
    for event_name, data in events:
        assert event_name == data["type"], (event_name, data)
    seqs = [d.get("sequence_number") for _, d in events]
    assert seqs == list(range(len(events))), seqs
    names = [n for n, _ in events]
    assert names[:2] == ["response.created", "response.in_progress"], names
    assert names[-1] == "response.completed", names
    assert "response.failed" not in names and "error" not in names, events
    response = events[-1][1]["response"]
    assert response["status"] == "completed"
    assert response["id"].startswith("resp_")
    messages = [item for item in response["output"] if item["type"] == "message"]
    assert len(messages) == 1, response["output"]
    text = "".join(p["text"] for p in messages[0]["content"] if p["type"] == "output_text")
    assert ANSWER in text
    # Codex takes final items from output_item.done only.
    done = [d["item"] for n, d in events if n == "response.output_item.done"]
    assert any(i["type"] == "message" and ANSWER in i["content"][0]["text"] for i in done), done
    usage = response["usage"]
    assert usage["input_tokens"] > 1000 and usage["output_tokens"] > 0
