"""A forced tool call round trip on a tiny GGUF, for the per-family tests:
the official anthropic SDK on /v1/messages and the official openai SDK on
/v1/responses, streaming and not, then a follow-up request that carries the
call and its result.

The tiny model's weights are zero, so what it writes under a forced call is
decided by the family's grammar: the call comes out in the family's own
syntax, goes through the family's parser, and its arguments must validate
against the tool's schema. Without a grammar it writes nonsense text, which
is all a follow-up needs to show that the conversation rendered and was
answered.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import jsonschema
import openai

# This machine is small and noisy: generous timeouts, never timed assertions.
TIMEOUT = 600

# A required string, an enum, an integer, a number, a nested object with its
# own required field, an array of strings; no extra keys allowed.
READ_SCHEMA: dict[str, Any] = {
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
SEARCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"pattern": {"type": "string"}, "paths": {"type": "array"}},
    "required": ["pattern"],
}
ASK = "Read /etc/hostname for me."
ANTHROPIC_TOOLS: list[Any] = [
    {"name": "read_file", "description": "Read a file.", "input_schema": READ_SCHEMA},
    {"name": "search", "description": "Search the code.", "input_schema": SEARCH_SCHEMA},
]
FUNCTION_TOOLS: list[Any] = [
    {
        "type": "function",
        "name": "read_file",
        "description": "Read a file.",
        "parameters": READ_SCHEMA,
    },
    {"type": "function", "name": "search", "description": "Search.", "parameters": SEARCH_SCHEMA},
]


def model_id(url: str) -> str:
    name: str = httpx.get(url + "/v1/models", timeout=TIMEOUT).json()["data"][0]["id"]
    return name


def claude(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=TIMEOUT)


def gpt(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=TIMEOUT)


# ---- /v1/messages ---------------------------------------------------------------


def messages_forced_call(url: str, *, stream: bool) -> Any:
    """A call forced with tool_choice {"type": "tool"}; returns its tool_use block."""
    kwargs: Any = {
        "model": model_id(url),
        "max_tokens": 400,
        "messages": [{"role": "user", "content": ASK}],
        "tools": ANTHROPIC_TOOLS,
        "tool_choice": {"type": "tool", "name": "read_file"},
    }
    with claude(url) as client:
        if stream:
            with client.messages.stream(**kwargs) as s:
                events = list(s)
                message = s.get_final_message()
            partial = [
                e.delta.partial_json
                for e in events
                if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
            ]
            assert len(partial) > 1, partial  # the input streams as it is generated
            streamed = json.loads("".join(partial))
        else:
            message = client.messages.create(**kwargs)
    assert message.stop_reason == "tool_use", message
    [call] = [b for b in message.content if b.type == "tool_use"]
    assert call.name == "read_file" and call.id
    jsonschema.validate(call.input, READ_SCHEMA)
    if stream:
        assert call.input == streamed
    return call


def messages_follow_up(url: str, call: Any, *, stream: bool) -> None:
    """The call and its result sent back: rendered (a longer result makes a
    longer prompt) and answered."""

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

    model = model_id(url)
    kwargs: Any = {
        "model": model,
        "max_tokens": 8,
        "messages": conversation("build-host-7"),
        "tools": ANTHROPIC_TOOLS,
    }
    with claude(url) as client:
        if stream:
            with client.messages.stream(**kwargs) as s:
                answer = s.get_final_message()
        else:
            answer = client.messages.create(**kwargs)
        assert answer.role == "assistant" and answer.content
        assert answer.stop_reason in ("end_turn", "max_tokens", "tool_use")
        short = client.messages.count_tokens(
            model=model, messages=conversation("build-host-7"), tools=ANTHROPIC_TOOLS
        )
        long = client.messages.count_tokens(
            model=model, messages=conversation("build-host-7 " * 20), tools=ANTHROPIC_TOOLS
        )
    assert long.input_tokens > short.input_tokens + 20


# ---- /v1/responses --------------------------------------------------------------


def responses_forced_call(url: str, *, stream: bool) -> Any:
    """A call forced with tool_choice {"type": "function"}; returns its item."""
    kwargs: Any = {
        "model": model_id(url),
        "input": ASK,
        "tools": FUNCTION_TOOLS,
        "tool_choice": {"type": "function", "name": "read_file"},
        "max_output_tokens": 400,
    }
    with gpt(url) as client:
        if stream:
            with client.responses.stream(**kwargs) as s:
                events = list(s)
                response = s.get_final_response()
            deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
            [done] = [e for e in events if e.type == "response.function_call_arguments.done"]
            assert len(deltas) > 1, deltas  # the arguments stream as they are generated
            assert "".join(deltas) == done.arguments
        else:
            response = client.responses.create(**kwargs)
    assert response.status == "completed", response
    [call] = [item for item in response.output if item.type == "function_call"]
    assert call.name == "read_file" and call.call_id
    jsonschema.validate(json.loads(call.arguments), READ_SCHEMA)
    if stream:
        assert call.arguments == done.arguments
    return call


def responses_follow_up(url: str, call: Any, *, stream: bool) -> None:
    """The call and its output sent back: rendered (a longer output makes a
    longer prompt) and answered."""

    def ask(output: str) -> Any:
        kwargs: Any = {
            "model": model_id(url),
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
            "tools": FUNCTION_TOOLS,
            "max_output_tokens": 8,
        }
        with gpt(url) as client:
            if stream:
                with client.responses.stream(**kwargs) as s:
                    return s.get_final_response()
            return client.responses.create(**kwargs)

    answer = ask("build-host-7")
    assert answer.status in ("completed", "incomplete")
    assert answer.output
    assert answer.usage is not None and answer.usage.output_tokens > 0
    longer = ask("build-host-7 " * 20)
    assert longer.usage is not None
    assert longer.usage.input_tokens > answer.usage.input_tokens + 20
