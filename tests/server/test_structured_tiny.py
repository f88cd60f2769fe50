"""Structured outputs end to end on a tiny GGUF with the real Qwen3 template
(zero weights: what it writes is decided by the grammar alone), on all
three endpoints, streaming and not: the answer's text validates against
the schema; with tools under auto it is a call or that JSON; the Responses
object echoes text.format. The schema has only enums and booleans, so any
answer the grammar allows ends well within the token limit."""

from __future__ import annotations

import json
from typing import Any

import httpx
import jsonschema
import pytest
from support.server import EngyServer

TIMEOUT = 300
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "kind": {"enum": ["bug", "feature", "question"]},
        "urgent": {"type": "boolean"},
        "area": {"$ref": "#/$defs/area"},
    },
    "required": ["kind", "urgent", "area"],
    "additionalProperties": False,
    "$defs": {"area": {"enum": ["ui", "api", "docs"]}},
}
ASK = "Classify: the save button does nothing."


def sse_text(r: httpx.Response, kinds: tuple[str, ...], key: str) -> str:
    text = ""
    for line in r.iter_lines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        data = json.loads(line[6:])
        if data.get("type") in kinds:
            text += data.get(key) or data.get("delta", {}).get(key, "")
        for choice in data.get("choices") or []:
            text += (choice.get("delta") or {}).get("content") or ""
    return text


def served(server: EngyServer) -> str:
    name: str = httpx.get(server.url + "/v1/models").json()["data"][0]["id"]
    return name


def answer(server: EngyServer, endpoint: str, stream: bool, **extra: Any) -> str:
    """The answer's text."""
    kinds: tuple[str, ...]
    if endpoint == "messages":
        body = {
            "model": served(server),
            "max_tokens": 300,
            "messages": [{"role": "user", "content": ASK}],
            "output_config": {"format": {"type": "json_schema", "schema": SCHEMA}},
            "stream": stream,
            **extra,
        }
        path, kinds, key = "/v1/messages", ("content_block_delta",), "text"
    elif endpoint == "responses":
        fmt = {"type": "json_schema", "name": "triage", "schema": SCHEMA, "strict": True}
        body = {
            "model": served(server),
            "max_output_tokens": 300,
            "input": ASK,
            "text": {"format": fmt},
            "stream": stream,
            **extra,
        }
        path, kinds, key = "/v1/responses", ("response.output_text.delta",), "delta"
    else:
        spec = {"name": "triage", "schema": SCHEMA}
        body = {
            "model": served(server),
            "max_tokens": 300,
            "messages": [{"role": "user", "content": ASK}],
            "response_format": {"type": "json_schema", "json_schema": spec},
            "stream": stream,
            **extra,
        }
        path, kinds, key = "/v1/chat/completions", (), "content"
    with httpx.stream("POST", server.url + path, json=body, timeout=TIMEOUT) as r:
        assert r.status_code == 200, r.read()
        if stream:
            return sse_text(r, kinds, key)
        data = json.loads(r.read())
    if endpoint == "messages":
        assert data["stop_reason"] == "end_turn"
        return "".join(b["text"] for b in data["content"] if b["type"] == "text")
    if endpoint == "responses":
        assert data["status"] == "completed"
        assert data["text"] == {"format": fmt}
        return "".join(c["text"] for i in data["output"] for c in i.get("content", []))
    assert data["choices"][0]["finish_reason"] == "stop"
    return str(data["choices"][0]["message"]["content"])


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
@pytest.mark.parametrize("endpoint", ["messages", "responses", "chat"])
def test_the_answer_follows_the_schema(
    tiny_server: EngyServer, endpoint: str, stream: bool
) -> None:
    jsonschema.validate(json.loads(answer(tiny_server, endpoint, stream)), SCHEMA)


def test_tools_under_auto_give_a_call_or_the_json(tiny_server: EngyServer) -> None:
    tool = {
        "name": "open_ticket",
        "description": "Open a ticket.",
        "input_schema": {
            "type": "object",
            "properties": {"kind": {"enum": ["bug", "feature"]}},
            "required": ["kind"],
            "additionalProperties": False,
        },
    }
    r = httpx.post(
        tiny_server.url + "/v1/messages",
        json={
            "model": served(tiny_server),
            "max_tokens": 300,
            "messages": [{"role": "user", "content": ASK}],
            "tools": [tool],
            "output_config": {"format": {"type": "json_schema", "schema": SCHEMA}},
        },
        timeout=TIMEOUT,
    )
    assert r.status_code == 200, r.text
    data = r.json()
    calls = [b for b in data["content"] if b["type"] == "tool_use"]
    text = "".join(b["text"] for b in data["content"] if b["type"] == "text")
    if calls:
        assert data["stop_reason"] == "tool_use" and not text.strip()
        jsonschema.validate(calls[0]["input"], tool["input_schema"])
    else:
        jsonschema.validate(json.loads(text), SCHEMA)
