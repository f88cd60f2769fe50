"""A forced tool call round trip through a real `engy serve`: the official
anthropic SDK on /v1/messages and the official openai SDK on /v1/responses,
streaming and not, then a follow-up carrying the call and its result.

The tiny models' weights are zero, so what one writes under a forced call
is decided by the family's grammar: the call comes out in the family's own
syntax, goes through the family's parser, and its arguments must validate
against the tool's schema. Without a grammar it writes whatever it writes,
which is all a follow-up needs to show that the conversation rendered (a
longer result makes a longer prompt) and was answered."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anthropic
import httpx
import jsonschema
import openai
import pytest

from support.families.spec import RoundTrip
from support.paths import CACHE
from support.server import EngyServer

# This machine is small and shared: generous timeouts, never timed assertions.
TIMEOUT = 600
ASK = "Read /etc/hostname for me."
RESULT = "build-host-7"
# A required string, an enum, an integer, a number, a nested object with its
# own required field, an array of strings; no extra keys allowed.
READ: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "Absolute path of the file"},
        "mode": {"type": "string", "enum": ["text", "binary"]},
        "limit": {"type": "integer"},
        "scale": {"type": "number"},
        "options": {
            "type": "object",
            "properties": {"follow": {"type": "boolean"}, "encoding": {"type": "string"}},
            "required": ["follow"],
            "additionalProperties": False,
        },
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["path", "mode", "limit", "scale", "options", "tags"],
    "additionalProperties": False,
}
# The other tool offered beside read_file.
SEARCH: dict[str, Any] = {
    "type": "object",
    "properties": {"pattern": {"type": "string"}, "paths": {"type": "array"}},
    "required": ["pattern"],
}


@contextmanager
def tiny_server(trip: RoundTrip) -> Iterator[str]:
    """`engy serve` on the trip's tiny GGUF, built on first use; its URL."""
    from support.ggufs import fixtures_missing_reason, tiny_gguf_cached

    assert trip.template is not None
    reason = fixtures_missing_reason(trip.vocab, trip.template)
    if reason:
        pytest.skip(reason)
    path = tiny_gguf_cached(
        CACHE / "ggufs",
        vocab=trip.vocab,
        template=trip.template,
        answer=trip.answer,
        end_token=trip.end_token,
    )
    # Drafts in every step (whatever they cost here): the forced call must
    # parse with speculation on, in every family.
    server = EngyServer(str(path), "--ctx-size", str(trip.ctx_size), "--speculative", "on")
    try:
        yield server.url
    finally:
        server.stop()


def model_id(url: str) -> str:
    name: str = httpx.get(url + "/v1/models", timeout=TIMEOUT).json()["data"][0]["id"]
    return name


def anthropic_tools(schema: dict[str, Any]) -> list[Any]:
    return [
        {"name": "read_file", "description": "Read a file.", "input_schema": schema},
        {"name": "search", "description": "Search the code.", "input_schema": SEARCH},
    ]


def function_tools(schema: dict[str, Any]) -> list[Any]:
    return [
        {"type": "function", "name": t["name"], "description": t["description"]}
        | {"parameters": t["input_schema"]}
        for t in anthropic_tools(schema)
    ]


# ---- /v1/messages ---------------------------------------------------------------


def messages_round_trip(url: str, trip: RoundTrip, *, stream: bool) -> None:
    model, tools = model_id(url), anthropic_tools(trip.schema)
    with anthropic.Anthropic(
        base_url=url, api_key="unused", max_retries=0, timeout=TIMEOUT
    ) as claude:
        forced: Any = {
            "model": model,
            "max_tokens": 400,
            "messages": [{"role": "user", "content": ASK}],
            "tools": tools,
            # one call: the family's syntax is what is tested here
            "tool_choice": {"type": "tool", "name": "read_file", "disable_parallel_tool_use": True},
        }
        if stream:
            with claude.messages.stream(**forced) as s:
                events = list(s)
                message = s.get_final_message()
            starts = [e.content_block.type for e in events if e.type == "content_block_start"]
            assert starts == ["tool_use"], starts
            partial = [
                e.delta.partial_json
                for e in events
                if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
            ]
            assert len(partial) > 1, partial  # the input streams as it is generated
        else:
            message = claude.messages.create(**forced)
        assert message.stop_reason == "tool_use", message
        assert [b.type for b in message.content] == ["tool_use"], message
        [call] = message.content
        assert call.name == "read_file" and call.id
        jsonschema.validate(call.input, trip.schema)
        if stream:
            assert json.loads("".join(partial)) == call.input

        def conversation(result: str) -> list[Any]:
            return [
                {"role": "user", "content": ASK},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": "Reading it."},
                        {"type": "tool_use", "id": call.id, "name": call.name, "input": call.input},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": call.id, "content": result},
                        {"type": "text", "text": "What does it say?"},
                    ],
                },
            ]

        follow_up: Any = {
            "model": model,
            "max_tokens": 16,
            "messages": conversation(RESULT),
            "tools": tools,
        }
        if stream:
            with claude.messages.stream(**follow_up) as s:
                answer = s.get_final_message()
        else:
            answer = claude.messages.create(**follow_up)
        assert answer.role == "assistant" and answer.content, answer
        if trip.answer_is_text:
            assert [b.type for b in answer.content] == ["text"], answer
            assert answer.stop_reason in ("end_turn", "max_tokens"), answer
        else:
            assert answer.stop_reason in ("end_turn", "max_tokens", "tool_use"), answer
        # The prompt the answer was made from holds the call and its result.
        count = claude.messages.count_tokens(
            model=model, messages=conversation(RESULT), tools=tools
        )
        used = answer.usage.input_tokens + (answer.usage.cache_read_input_tokens or 0)
        assert used == count.input_tokens
        longer = claude.messages.count_tokens(
            model=model, messages=conversation(f"{RESULT} " * 20), tools=tools
        )
        assert longer.input_tokens > count.input_tokens + 20


# ---- /v1/responses --------------------------------------------------------------


def responses_round_trip(url: str, trip: RoundTrip, *, stream: bool) -> None:
    model, tools = model_id(url), function_tools(trip.schema)
    with openai.OpenAI(
        base_url=url + "/v1", api_key="unused", max_retries=0, timeout=TIMEOUT
    ) as gpt:
        forced: Any = {
            "model": model,
            "input": ASK,
            "tools": tools,
            "tool_choice": {"type": "function", "name": "read_file"},
            "parallel_tool_calls": False,
            "max_output_tokens": 400,
        }
        if stream:
            with gpt.responses.stream(**forced) as s:
                events = list(s)
                response = s.get_final_response()
            deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
            [done] = [e for e in events if e.type == "response.function_call_arguments.done"]
            assert len(deltas) > 1, deltas  # the arguments stream as they are generated
            assert "".join(deltas) == done.arguments
        else:
            response = gpt.responses.create(**forced)
        assert response.status == "completed", response
        assert [item.type for item in response.output] == ["function_call"], response
        [call] = response.output
        assert call.name == "read_file" and call.call_id
        jsonschema.validate(json.loads(call.arguments), trip.schema)
        if stream:
            assert call.arguments == done.arguments

        def ask(output: str) -> Any:
            follow_up: Any = {
                "model": model,
                "input": [
                    {"role": "user", "content": ASK},
                    {
                        "type": "function_call",
                        "call_id": call.call_id,
                        "name": call.name,
                        "arguments": call.arguments,
                    },
                    {"type": "function_call_output", "call_id": call.call_id, "output": output},
                ],
                "tools": tools,
                "max_output_tokens": 16,
            }
            if stream:
                with gpt.responses.stream(**follow_up) as s:
                    return s.get_final_response()
            return gpt.responses.create(**follow_up)

        answer = ask(RESULT)
        assert answer.status in ("completed", "incomplete"), answer
        assert answer.output, answer
        if trip.answer_is_text:
            assert [item.type for item in answer.output] == ["message"], answer
        assert answer.usage is not None and answer.usage.output_tokens > 0
        longer = ask(f"{RESULT} " * 20)
        assert longer.usage is not None
        assert longer.usage.input_tokens > answer.usage.input_tokens + 20
