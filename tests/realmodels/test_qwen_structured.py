"""Structured outputs on a real model: Qwen2.5-Coder-0.5B-Instruct through a
real `engy serve` (greedy, no drafting) and the official SDKs' parse
helpers, on all three APIs: each returns a parsed object (a nested object,
an array, an enum, an optional field), plain and streamed; an answer cut by
the token limit says so on each API; tools under auto with a format give a
call or an answer in the format."""

from __future__ import annotations

import json
from collections.abc import Iterator
from enum import Enum
from pathlib import Path
from typing import Any

import anthropic
import httpx
import jsonschema  # type: ignore[import-untyped]
import openai
import pytest
from pydantic import BaseModel
from support.realmodels import GREEDY_SERVE, QWEN_05B, need
from support.server import EngyServer

ADA = (
    "Ada Lovelace was born in 1815 in London, England. She was a mathematician and "
    "writer, remembered for her notes on the Analytical Engine; people called her "
    "the Enchantress of Numbers."
)
ASK = f"Extract the person from this text.\n\n{ADA}"


class Kind(str, Enum):
    mathematician = "mathematician"
    poet = "poet"
    engineer = "engineer"


class Place(BaseModel):
    city: str
    country: str


class Person(BaseModel):
    name: str
    born: int
    kind: Kind
    born_in: Place
    tags: list[str]
    nickname: str | None = None


@pytest.fixture(scope="module")
def server() -> Iterator[EngyServer]:
    qwen: Path = need(QWEN_05B)
    s = EngyServer(str(qwen), *GREEDY_SERVE)
    yield s
    s.stop()


def model_id(server: EngyServer) -> str:
    served: str = httpx.get(server.url + "/v1/models").json()["data"][0]["id"]
    return served


def claude(server: EngyServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0, timeout=600)


def gpt(server: EngyServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=600)


def check(person: Person | None) -> None:
    assert isinstance(person, Person), person
    assert "Ada" in person.name and person.born == 1815
    assert isinstance(person.kind, Kind) and isinstance(person.born_in, Place)


@pytest.mark.parametrize("stream", [False, True], ids=["parse", "stream"])
def test_anthropic_messages_parse(server: EngyServer, stream: bool) -> None:
    args: Any = {
        "model": model_id(server),
        "max_tokens": 160,
        "messages": [{"role": "user", "content": ASK}],
        "output_format": Person,
    }
    with claude(server) as c:
        if stream:
            with c.messages.stream(**args) as s:
                message = s.get_final_message()
        else:
            message = c.messages.parse(**args)
    assert message.stop_reason == "end_turn"
    check(message.parsed_output)


def test_openai_responses_parse(server: EngyServer) -> None:
    with gpt(server) as o:
        response = o.responses.parse(
            model=model_id(server),
            input=[{"role": "user", "content": ASK}],
            text_format=Person,
            max_output_tokens=160,
        )
    assert response.status == "completed"
    assert response.text is not None and response.text.format is not None
    assert response.text.format.type == "json_schema"
    check(response.output_parsed)


def test_openai_responses_stream(server: EngyServer) -> None:
    """The streamed Responses path: the SDK parses the final response's
    text into the model, and the text deltas add up to that text."""
    deltas: list[str] = []
    with (
        gpt(server) as o,
        o.responses.stream(
            model=model_id(server),
            input=[{"role": "user", "content": ASK}],
            text_format=Person,
            max_output_tokens=160,
        ) as s,
    ):
        for event in s:
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
        response = s.get_final_response()
    assert response.status == "completed"
    assert "".join(deltas) == response.output_text
    check(response.output_parsed)


def test_openai_chat_completions_parse(server: EngyServer) -> None:
    with gpt(server) as o:
        completion = o.chat.completions.parse(
            model=model_id(server),
            messages=[{"role": "user", "content": ASK}],
            response_format=Person,
            max_tokens=160,
        )
    assert completion.choices[0].finish_reason == "stop"
    check(completion.choices[0].message.parsed)


def test_openai_chat_completions_stream(server: EngyServer) -> None:
    """The streamed chat path: the SDK parses the final completion's
    content into the model, and the content deltas add up to it."""
    deltas: list[str] = []
    with (
        gpt(server) as o,
        o.chat.completions.stream(
            model=model_id(server),
            messages=[{"role": "user", "content": ASK}],
            response_format=Person,
            max_tokens=160,
        ) as s,
    ):
        for event in s:
            if event.type == "content.delta":
                deltas.append(event.delta)
        completion = s.get_final_completion()
    choice = completion.choices[0]
    assert choice.finish_reason == "stop"
    assert "".join(deltas) == choice.message.content
    check(choice.message.parsed)


TITLE = {
    "type": "object",
    "properties": {"title": {"type": "string"}},
    "required": ["title"],
    "additionalProperties": False,
}


def test_claude_codes_title_request_gets_a_title(server: EngyServer) -> None:
    """The side request Claude Code 2.1.332 sends to name a session."""
    body = {
        "model": model_id(server),
        "max_tokens": 60,
        "system": [{"type": "text", "text": "Generate a short title for this coding session."}],
        "messages": [{"role": "user", "content": "fix the failing date parser test in utils.py"}],
        "output_config": {"effort": "high", "format": {"type": "json_schema", "schema": TITLE}},
    }
    r = httpx.post(server.url + "/v1/messages", json=body, timeout=600)
    assert r.status_code == 200, r.text
    [block] = r.json()["content"]
    answer = json.loads(block["text"])
    jsonschema.validate(answer, TITLE)
    assert answer["title"].strip()


def test_an_answer_cut_by_the_limit_says_so_on_every_api(server: EngyServer) -> None:
    schema = Person.model_json_schema()
    model = model_id(server)
    messages = [{"role": "user", "content": ASK}]
    m = httpx.post(
        server.url + "/v1/messages",
        json={
            "model": model,
            "max_tokens": 8,
            "messages": messages,
            "output_config": {"format": {"type": "json_schema", "schema": schema}},
        },
        timeout=600,
    ).json()
    assert m["stop_reason"] == "max_tokens"
    r = httpx.post(
        server.url + "/v1/responses",
        json={
            "model": model,
            "max_output_tokens": 8,
            "input": messages,
            "text": {"format": {"type": "json_schema", "name": "P", "schema": schema}},
        },
        timeout=600,
    ).json()
    assert r["status"] == "incomplete"
    assert r["incomplete_details"] == {"reason": "max_output_tokens"}
    c = httpx.post(
        server.url + "/v1/chat/completions",
        json={
            "model": model,
            "max_tokens": 8,
            "messages": messages,
            "response_format": {"type": "json_schema", "json_schema": {"schema": schema}},
        },
        timeout=600,
    ).json()
    assert c["choices"][0]["finish_reason"] == "length"
    for text in (m["content"][0]["text"], c["choices"][0]["message"]["content"]):
        with pytest.raises(ValueError):
            json.loads(text)


WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The current weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


def test_tools_and_a_format_under_auto(server: EngyServer) -> None:
    """A question for the tool gets the call; one for the format gets JSON
    in it, never free text."""
    fmt = {"type": "json_schema", "name": "P", "schema": Person.model_json_schema()}

    def ask(text: str) -> Any:
        return httpx.post(
            server.url + "/v1/responses",
            json={
                "model": model_id(server),
                "max_output_tokens": 160,
                "input": text,
                "tools": [WEATHER],
                "text": {"format": fmt},
            },
            timeout=600,
        ).json()

    called = ask("What is the weather like in Paris right now?")
    assert [i["name"] for i in called["output"] if i["type"] == "function_call"] == ["get_weather"]
    answered = ask(ASK)
    [item] = answered["output"]
    check(Person.model_validate_json(item["content"][0]["text"]))


def test_a_keyword_the_grammar_cannot_hold_is_looser_not_an_error(server: EngyServer) -> None:
    """pattern and number bounds are documented as not enforced: the answer
    still has the schema's shape."""
    schema = {
        "type": "object",
        "properties": {
            "year": {"type": "integer", "minimum": 1800, "maximum": 1900, "multipleOf": 5},
            "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
        },
        "required": ["year", "code"],
        "additionalProperties": False,
    }
    r = httpx.post(
        server.url + "/v1/chat/completions",
        json={
            "model": model_id(server),
            "max_tokens": 60,
            "messages": [{"role": "user", "content": f"{ADA}\nGive her birth year and a code."}],
            "response_format": {"type": "json_schema", "json_schema": {"schema": schema}},
        },
        timeout=600,
    )
    assert r.status_code == 200, r.text
    answer = json.loads(r.json()["choices"][0]["message"]["content"])
    assert isinstance(answer["year"], int) and isinstance(answer["code"], str)


def test_a_malformed_format_is_a_400_in_each_apis_format(server: EngyServer) -> None:
    model = model_id(server)
    hi = [{"role": "user", "content": "hi"}]
    m = httpx.post(
        server.url + "/v1/messages",
        json={"model": model, "max_tokens": 8, "messages": hi, "output_config": {"format": {}}},
    )
    assert m.status_code == 400
    assert m.json()["type"] == "error"
    assert m.json()["error"]["message"].startswith("output_config.format.type")
    r = httpx.post(
        server.url + "/v1/responses",
        json={"model": model, "input": "hi", "text": {"format": {"type": "json_schema"}}},
    )
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "text.format.schema"
