"""Random schemas on a real model (issue 59): Qwen2.5-Coder-0.5B-Instruct
through a real `engy serve` and the official SDKs. Each schema is sent as a
forced tool's input_schema and as each API's answer format; every answer
that completes validates against it (the `jsonschema` library with its
format checker judges). A schema with a keyword no grammar holds is a 400
naming it under `strict`, and otherwise never a success that breaks it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from support.realmodels import GREEDY_SERVE, QWEN_05B, need
from support.schemas import seeded, validates
from support.server import EngyServer

pytestmark = pytest.mark.timeout(900)

ASK = "Fill in an example value that follows the schema. Make it up."
MAX_TOKENS = 160
SEEDS = range(10)


# The id `engy serve PATH` gives the file it serves.
MODEL = QWEN_05B.name.removesuffix(".gguf").lower()


@pytest.fixture(scope="module")
def server() -> Iterator[EngyServer]:
    qwen: Path = need(QWEN_05B)
    s = EngyServer(str(qwen), *GREEDY_SERVE)
    served = httpx.get(s.url + "/v1/models").json()["data"][0]["id"]
    assert served == MODEL, served
    yield s
    for client in _clients.values():
        client.close()
    _clients.clear()
    s.stop()


_clients: dict[str, Any] = {}


def claude(server: EngyServer) -> anthropic.Anthropic:
    """One client a server, closed with it (an unclosed one warns)."""
    key = "anthropic " + server.url
    if key not in _clients:
        _clients[key] = anthropic.Anthropic(
            base_url=server.url, api_key="x", max_retries=0, timeout=600
        )
    client: anthropic.Anthropic = _clients[key]
    return client


def gpt(server: EngyServer) -> openai.OpenAI:
    key = "openai " + server.url
    if key not in _clients:
        _clients[key] = openai.OpenAI(
            base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=600
        )
    client: openai.OpenAI = _clients[key]
    return client


def answers(server: EngyServer, schema: dict[str, Any], tool: dict[str, Any]) -> dict[str, Any]:
    """Each API's answer to `schema` (None where cut by the token limit)."""
    out: dict[str, Any] = {}
    msg = claude(server).messages.create(
        model=MODEL,
        max_tokens=MAX_TOKENS,
        messages=[{"role": "user", "content": ASK}],
        tools=[{"name": "fill", "description": "Fill in a value.", "input_schema": tool}],
        tool_choice={"type": "tool", "name": "fill"},
    )
    [use] = [b for b in msg.content if b.type == "tool_use"]
    out["messages tool input"] = use.input if msg.stop_reason != "max_tokens" else None
    msg = claude(server).messages.create(
        model=MODEL,
        max_tokens=MAX_TOKENS,
        messages=[{"role": "user", "content": ASK}],
        extra_body={"output_config": {"format": {"type": "json_schema", "schema": schema}}},
    )
    text = "".join(b.text for b in msg.content if b.type == "text")
    out["messages format"] = json.loads(text) if msg.stop_reason == "end_turn" else None
    response = gpt(server).responses.create(
        model=MODEL,
        input=ASK,
        max_output_tokens=MAX_TOKENS,
        text={"format": {"type": "json_schema", "name": "value", "schema": schema}},
    )
    done = response.status == "completed"
    out["responses format"] = json.loads(response.output_text) if done else None
    completion = gpt(server).chat.completions.create(
        model=MODEL,
        max_tokens=MAX_TOKENS,
        messages=[{"role": "user", "content": ASK}],
        response_format={"type": "json_schema", "json_schema": {"name": "v", "schema": schema}},
    )
    choice = completion.choices[0]
    done = choice.finish_reason == "stop"
    out["chat format"] = json.loads(choice.message.content or "") if done else None
    return out


@pytest.mark.parametrize("seed", SEEDS)
def test_every_completed_answer_validates(server: EngyServer, seed: int) -> None:
    schema, tool = seeded(seed), seeded(seed, tool=True)
    got = answers(server, schema, tool)
    completed = {k: v for k, v in got.items() if v is not None}
    assert completed, f"every answer was cut at {MAX_TOKENS} tokens: {json.dumps(schema)}"
    for where, value in completed.items():
        against = tool if where == "messages tool input" else schema
        broken = validates(value, against)
        assert broken is None, f"{where}: {value!r} breaks {json.dumps(against)}: {broken}"


UNIQUE = {
    "type": "object",
    "properties": {
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "minItems": 3, "uniqueItems": True}
    },
    "required": ["tags"],
    "additionalProperties": False,
}


def test_a_keyword_no_grammar_holds_is_never_a_broken_success(server: EngyServer) -> None:
    """Three distinct tags out of two: every answer the grammar allows
    repeats one, so the check after the answer must turn each into an error."""
    with pytest.raises(anthropic.InternalServerError, match="does not follow its schema"):
        claude(server).messages.create(
            model=MODEL,
            max_tokens=MAX_TOKENS,
            messages=[{"role": "user", "content": ASK}],
            tools=[{"name": "fill", "description": "Fill in tags.", "input_schema": UNIQUE}],
            tool_choice={"type": "tool", "name": "fill"},
        )
    with pytest.raises(openai.InternalServerError, match="uniqueItems"):
        gpt(server).chat.completions.create(
            model=MODEL,
            max_tokens=MAX_TOKENS,
            messages=[{"role": "user", "content": ASK}],
            response_format={"type": "json_schema", "json_schema": {"name": "v", "schema": UNIQUE}},
        )
    # The server goes on: the next request is answered.
    ok = gpt(server).chat.completions.create(
        model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "Say hi."}]
    )
    assert ok.choices[0].message.content


def test_strict_refuses_a_keyword_no_grammar_holds(server: EngyServer) -> None:
    with pytest.raises(openai.BadRequestError, match="uniqueItems") as err:
        gpt(server).responses.create(
            model=MODEL,
            input=ASK,
            text={"format": {"type": "json_schema", "name": "v", "schema": UNIQUE, "strict": True}},
        )
    assert err.value.body["param"] == "text.format.schema"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError, match="uniqueItems"):
        gpt(server).chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": ASK}],
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "v", "schema": UNIQUE, "strict": True},
            },
        )
