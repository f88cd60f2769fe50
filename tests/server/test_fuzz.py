"""A property-based fuzzer against a real `engy serve` on a tiny GGUF: valid
bodies of each endpoint with fields replaced by generated JSON (wrong types,
huge and non-finite numbers, deep values, missing and extra keys), and raw
bytes. No answer is a 5xx, every error body is well formed in its protocol,
every stream ends with its terminal event, and the server still answers a
normal request afterwards. Generation is capped at 4 tokens."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from support.server import EngyServer

TIMEOUT = 120
DELETE = object()

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=10,
)
SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}

MESSAGES_BASE: dict[str, Any] = {
    "model": "MODEL",
    "max_tokens": 2,
    "system": [{"type": "text", "text": "Be brief."}],
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Read /a."}]},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "read", "input": {"path": "/a"}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}],
        },
    ],
    "tools": [{"name": "read", "description": "Read.", "input_schema": SCHEMA}],
    "tool_choice": {"type": "auto"},
    "temperature": 0.5,
    "stream": False,
}
MESSAGES_PATHS = [
    ("model",), ("max_tokens",), ("system",), ("system", 0, "text"), ("messages",),
    ("messages", 0), ("messages", 0, "role"), ("messages", 0, "content"),
    ("messages", 0, "content", 0, "type"), ("messages", 0, "content", 0, "text"),
    ("messages", 1, "content", 0, "input"), ("messages", 1, "content", 0, "name"),
    ("messages", 2, "content", 0, "content"), ("messages", 2, "content", 0, "tool_use_id"),
    ("tools",), ("tools", 0, "name"), ("tools", 0, "input_schema"),
    ("tools", 0, "input_schema", "properties"), ("tool_choice",), ("tool_choice", "type"),
    ("tool_choice", "name"), ("temperature",), ("top_p",), ("top_k",), ("stop_sequences",),
    ("thinking",), ("stream",), ("metadata",), ("provider",), ("provider", "min_context"),
    ("extra_field",),
]  # fmt: skip

RESPONSES_BASE: dict[str, Any] = {
    "model": "MODEL",
    "instructions": "Be brief.",
    "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "Read /a."}]},
        {"type": "function_call", "call_id": "c1", "name": "read", "arguments": '{"path": "/a"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
    ],
    "tools": [{"type": "function", "name": "read", "parameters": SCHEMA}],
    "tool_choice": "auto",
    "max_output_tokens": 2,
    "temperature": 0.5,
    "stream": False,
}
RESPONSES_PATHS = [
    ("model",), ("instructions",), ("input",), ("input", 0), ("input", 0, "role"),
    ("input", 0, "content"), ("input", 0, "content", 0, "type"),
    ("input", 0, "content", 0, "text"), ("input", 1, "arguments"), ("input", 1, "name"),
    ("input", 1, "type"), ("input", 2, "output"), ("input", 2, "call_id"), ("tools",),
    ("tools", 0, "type"), ("tools", 0, "name"), ("tools", 0, "parameters"), ("tool_choice",),
    ("max_output_tokens",), ("temperature",), ("top_p",), ("parallel_tool_calls",),
    ("stream",), ("reasoning",), ("text",), ("metadata",), ("provider",), ("extra_field",),
]  # fmt: skip
CHAT_BASE: dict[str, Any] = {
    "model": "MODEL",
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Read /a."}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ],
    "tools": [{"type": "function", "function": {"name": "read", "parameters": SCHEMA}}],
    "tool_choice": "auto",
    "max_tokens": 2,
    "temperature": 0.5,
    "stream": False,
}
CHAT_PATHS = [
    ("model",), ("messages",), ("messages", 0), ("messages", 0, "role"),
    ("messages", 0, "content"), ("messages", 1, "content"), ("messages", 1, "content", 0),
    ("messages", 1, "content", 0, "type"), ("messages", 1, "content", 0, "text"),
    ("messages", 2, "tool_calls"), ("messages", 2, "tool_calls", 0, "function"),
    ("messages", 2, "tool_calls", 0, "function", "arguments"), ("messages", 2, "content"),
    ("messages", 3, "tool_call_id"), ("messages", 3, "content"), ("tools",),
    ("tools", 0, "type"), ("tools", 0, "function"), ("tools", 0, "function", "name"),
    ("tools", 0, "function", "parameters"), ("tool_choice",), ("max_tokens",),
    ("max_completion_tokens",), ("temperature",), ("top_p",), ("seed",), ("stop",), ("n",),
    ("stream",), ("stream_options",), ("response_format",), ("parallel_tool_calls",),
    ("provider",), ("extra_field",),
]  # fmt: skip


def mutate(base: dict[str, Any], edits: list[tuple[tuple[Any, ...], Any]]) -> Any:
    body = copy.deepcopy(base)
    for path, value in edits:
        parent: Any = body
        for step in path[:-1]:
            try:
                parent = parent[step]
            except (KeyError, IndexError, TypeError):
                parent = None
                break
        last = path[-1]
        if isinstance(parent, dict) or (isinstance(parent, list) and isinstance(last, int)):
            try:
                if value is DELETE:
                    del parent[last]
                else:
                    parent[last] = value
            except (KeyError, IndexError):
                pass
    return body


def bodies(base: dict[str, Any], paths: list[tuple[Any, ...]]) -> st.SearchStrategy[Any]:
    edit = st.tuples(st.sampled_from(paths), json_values | st.just(DELETE))
    mutated = st.lists(edit, min_size=1, max_size=3).map(lambda e: mutate(base, e))
    return st.one_of(mutated, mutated, json_values)


@pytest.fixture(scope="module")
def server(tiny_qwen3: Path) -> Iterator[EngyServer]:
    s = EngyServer(str(tiny_qwen3), "--ctx-size", "2048", "--max-output-tokens", "4")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server: EngyServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=TIMEOUT) as c:
        yield c


@pytest.fixture(scope="module")
def model(client: httpx.Client) -> str:
    name: str = client.get("/v1/models").json()["data"][0]["id"]
    return name


def check(client: httpx.Client, path: str, body: Any, model: str) -> None:
    if isinstance(body, dict) and body.get("model") == "MODEL":
        body["model"] = model
    raw = json.dumps(body, allow_nan=True).encode()
    with client.stream(
        "POST", path, content=raw, headers={"content-type": "application/json"}
    ) as r:
        data = r.read()
    event(f"status {r.status_code}")
    assert r.status_code < 500, (r.status_code, data[:500], raw[:500])
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        text = data.decode()
        if path == "/v1/chat/completions":  # data lines; a finish or an error, then [DONE]
            lines = [line for line in text.splitlines() if line.startswith("data: ")]
            assert lines[-1] == "data: [DONE]", text[-500:]
            last_chunk = json.loads(lines[-2][6:])
            finished = [c.get("finish_reason") for c in last_chunk.get("choices", [])]
            assert "error" in last_chunk or any(finished) or "usage" in last_chunk, text[-500:]
            return
        last = [line for line in text.splitlines() if line.startswith("event: ")][-1]
        ends = (
            ("event: message_stop", "event: error")
            if path == "/v1/messages"
            else (
                "event: response.completed",
                "event: response.incomplete",
                "event: response.failed",
            )
        )
        assert last in ends, text[-500:]
        return
    answer = json.loads(data)
    if r.status_code >= 400:
        if path.startswith(("/v1/responses", "/v1/chat/")):
            assert set(answer) == {"error"} and isinstance(answer["error"]["message"], str)
            assert {"type", "param", "code"} <= set(answer["error"])
        else:
            assert answer["type"] == "error"
            assert isinstance(answer["error"]["type"], str)
            assert isinstance(answer["error"]["message"], str)


FUZZ = settings(
    max_examples=100,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@FUZZ
@given(body=bodies(MESSAGES_BASE, MESSAGES_PATHS))
def test_fuzzed_messages_bodies(client: httpx.Client, model: str, body: Any) -> None:
    check(client, "/v1/messages", body, model)


@FUZZ
@given(body=bodies(RESPONSES_BASE, RESPONSES_PATHS))
def test_fuzzed_responses_bodies(client: httpx.Client, model: str, body: Any) -> None:
    check(client, "/v1/responses", body, model)


@FUZZ
@given(body=bodies(CHAT_BASE, CHAT_PATHS))
def test_fuzzed_chat_completions_bodies(client: httpx.Client, model: str, body: Any) -> None:
    check(client, "/v1/chat/completions", body, model)


@settings(max_examples=60, deadline=None, database=None)
@given(
    raw=st.binary(max_size=64),
    path=st.sampled_from(["/v1/messages", "/v1/responses", "/v1/chat/completions"]),
)
def test_fuzzed_raw_bytes(client: httpx.Client, raw: bytes, path: str) -> None:
    r = client.post(path, content=raw)
    assert r.status_code == 400, r.text


def test_the_server_still_answers(client: httpx.Client, model: str) -> None:
    body = {"model": model, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
    assert client.post("/v1/messages", json=body).status_code == 200
    body = {"model": model, "input": "hi"}
    assert client.post("/v1/responses", json=body).status_code == 200
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    assert client.post("/v1/chat/completions", json=body).status_code == 200
