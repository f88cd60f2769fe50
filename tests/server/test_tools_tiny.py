"""Tool calls end to end on a tiny GGUF with the real Qwen3 template, through
both endpoints, streaming and not: the official anthropic SDK on /v1/messages
and the official openai SDK on /v1/responses.

The tiny model's weights are zero, so what it writes is decided by the
grammar that forced calls run under: every argument it produces must still
validate against the tool's schema. Without a grammar it writes nonsense
text, never a call, which is what `tool_choice: none` must give.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import jsonschema
import openai
import pytest
from support.paths import ANSWER
from support.server import EngyServer

# This machine is small and noisy: generous timeouts, never timed assertions.
TIMEOUT = 300
http = httpx.Client(timeout=TIMEOUT)

# Realistic schemas: a required string, an enum, an integer, a nested object
# with its own required field, an array of strings; no extra keys allowed.
READ_FILE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "Absolute path of the file"},
        "mode": {"type": "string", "enum": ["text", "binary", "lines"]},
        "limit": {"type": "integer", "description": "How many lines at most"},
        "options": {
            "type": "object",
            "properties": {
                "follow_symlinks": {"type": "boolean"},
                "encoding": {"type": "string"},
            },
            "required": ["follow_symlinks"],
            "additionalProperties": False,
        },
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["path", "mode", "limit", "options", "tags"],
    "additionalProperties": False,
}
SEARCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "pattern": {"type": "string"},
        "kind": {"type": "string", "enum": ["regex", "literal"]},
        "paths": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["pattern", "kind"],
}
SCHEMAS = {"read_file": READ_FILE_SCHEMA, "search": SEARCH_SCHEMA}

HELLO = [{"role": "user", "content": "Read /etc/hostname for me."}]
PATCH_GRAMMAR = (
    'start: begin_patch hunk+ end_patch\nbegin_patch: "*** Begin Patch" LF\n'
    'end_patch: "*** End Patch" LF?\nhunk: add_hunk\nadd_hunk: "*** Add File: " filename LF '
    'add_line+\nadd_line: "+" /(.*)/ LF\nfilename: /(.+)/\n%import common.LF\n'
)


@pytest.fixture(scope="module")
def model(tiny_server: EngyServer) -> str:
    models = http.get(tiny_server.url + "/v1/models").json()["data"]
    name: str = models[0]["id"]
    return name


# ---- /v1/messages -------------------------------------------------------------

ANTHROPIC_TOOLS: list[Any] = [
    {"name": "read_file", "description": "Read a file.", "input_schema": READ_FILE_SCHEMA},
    {"name": "search", "description": "Search the code.", "input_schema": SEARCH_SCHEMA},
]


@pytest.fixture(scope="module")
def claude(tiny_server: EngyServer) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(
        base_url=tiny_server.url, api_key="unused", max_retries=0, timeout=TIMEOUT
    ) as client:
        yield client


def _tool_uses(message: Any) -> list[Any]:
    return [b for b in message.content if b.type == "tool_use"]


@pytest.fixture(scope="module")
def forced_message(claude: anthropic.Anthropic, model: str) -> Any:
    """A non-streaming answer under a named tool_choice (reused by the
    tests that replay its call)."""
    return claude.messages.create(
        model=model,
        max_tokens=300,
        messages=HELLO,
        tools=ANTHROPIC_TOOLS,
        tool_choice={"type": "tool", "name": "read_file", "disable_parallel_tool_use": True},
    )


def test_messages_named_tool_choice_gives_valid_tool_use(forced_message: Any) -> None:
    msg = forced_message
    assert msg.stop_reason == "tool_use"
    [call] = _tool_uses(msg)
    assert call.name == "read_file"
    assert call.id
    jsonschema.validate(call.input, READ_FILE_SCHEMA)


def test_messages_named_tool_choice_streams_input_json_delta(
    claude: anthropic.Anthropic, model: str
) -> None:
    with claude.messages.stream(
        model=model,
        max_tokens=300,
        messages=HELLO,
        tools=ANTHROPIC_TOOLS,
        tool_choice={"type": "tool", "name": "read_file", "disable_parallel_tool_use": True},
    ) as stream:
        events = list(stream)
        final = stream.get_final_message()
    starts = [e for e in events if e.type == "content_block_start"]
    assert [s.content_block.type for s in starts] == ["tool_use"]
    index = starts[0].index
    partial = [
        e.delta.partial_json
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    ]
    assert len(partial) > 1  # the input streams as it is generated
    assert all(
        e.index == index for e in events if e.type in ("content_block_delta", "content_block_stop")
    )
    streamed = json.loads("".join(partial))
    jsonschema.validate(streamed, READ_FILE_SCHEMA)
    assert final.stop_reason == "tool_use"
    [call] = _tool_uses(final)
    assert call.name == "read_file"
    assert call.input == streamed


@pytest.mark.parametrize("parallel", [True, False])
def test_messages_tool_choice_any_calls_the_tools(
    claude: anthropic.Anthropic, model: str, parallel: bool
) -> None:
    """One or more calls; exactly one where parallel calls are off."""
    msg = claude.messages.create(
        model=model,
        max_tokens=300,
        messages=HELLO,
        tools=ANTHROPIC_TOOLS,
        tool_choice={"type": "any", "disable_parallel_tool_use": not parallel},
    )
    assert msg.stop_reason == "tool_use"
    calls = _tool_uses(msg)
    assert len(calls) >= 1 if parallel else len(calls) == 1
    for call in calls:
        assert call.name in SCHEMAS
        jsonschema.validate(call.input, SCHEMAS[call.name])


@pytest.mark.parametrize("stream", [False, True])
def test_messages_tool_choice_none_gives_no_tool_use(
    claude: anthropic.Anthropic, model: str, stream: bool
) -> None:
    kwargs: Any = {
        "model": model,
        "max_tokens": 12,
        "messages": HELLO,
        "tools": ANTHROPIC_TOOLS,
        "tool_choice": {"type": "none"},
    }
    if stream:
        with claude.messages.stream(**kwargs) as s:
            msg = s.get_final_message()
    else:
        msg = claude.messages.create(**kwargs)
    assert not _tool_uses(msg)
    assert msg.stop_reason != "tool_use"
    assert [b.type for b in msg.content] == ["text"]


@pytest.mark.parametrize("stream", [False, True])
def test_messages_call_cut_by_max_tokens(
    claude: anthropic.Anthropic, model: str, stream: bool
) -> None:
    # 24 tokens: past the tool's name, well inside its arguments.
    kwargs: Any = {
        "model": model,
        "max_tokens": 24,
        "messages": HELLO,
        "tools": ANTHROPIC_TOOLS,
        "tool_choice": {"type": "tool", "name": "read_file", "disable_parallel_tool_use": True},
    }
    if stream:
        with claude.messages.stream(**kwargs) as s:
            msg = s.get_final_message()
    else:
        msg = claude.messages.create(**kwargs)
    assert msg.stop_reason == "max_tokens"
    [call] = _tool_uses(msg)
    assert call.name == "read_file"
    assert isinstance(call.input, dict)  # what came, closed as an object


def _follow_up(call: Any, result: str) -> list[Any]:
    return [
        *HELLO,
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


@pytest.mark.parametrize("stream", [False, True])
def test_messages_tool_result_renders_and_is_answered(
    claude: anthropic.Anthropic, model: str, forced_message: Any, stream: bool
) -> None:
    [call] = _tool_uses(forced_message)
    messages = _follow_up(call, "build-host-7")
    kwargs: Any = {"model": model, "max_tokens": 8, "messages": messages, "tools": ANTHROPIC_TOOLS}
    if stream:
        with claude.messages.stream(**kwargs) as s:
            answer = s.get_final_message()
    else:
        answer = claude.messages.create(**kwargs)
    assert answer.type == "message" and answer.role == "assistant"
    assert answer.content
    assert answer.stop_reason in ("end_turn", "max_tokens", "tool_use")
    # The tool result is in the prompt: a longer result makes a longer prompt.
    short = claude.messages.count_tokens(model=model, messages=messages, tools=ANTHROPIC_TOOLS)
    longer = _follow_up(call, "build-host-7 " * 20)
    long = claude.messages.count_tokens(model=model, messages=longer, tools=ANTHROPIC_TOOLS)
    assert long.input_tokens > short.input_tokens + 20
    used = answer.usage.input_tokens + (answer.usage.cache_read_input_tokens or 0)
    assert used == short.input_tokens


# ---- /v1/responses ------------------------------------------------------------

FUNCTION_TOOLS: list[Any] = [
    {
        "type": "function",
        "name": "read_file",
        "description": "Read a file.",
        "parameters": READ_FILE_SCHEMA,
        "strict": True,
    },
    {
        "type": "function",
        "name": "search",
        "description": "Search the code.",
        "parameters": SEARCH_SCHEMA,
        "strict": False,
    },
]
APPLY_PATCH: dict[str, Any] = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Use the `apply_patch` tool to edit files.",
    "format": {"type": "grammar", "syntax": "lark", "definition": PATCH_GRAMMAR},
}
# A freeform tool without a grammar: what the tiny models write (an empty
# string, a fixed text) is its whole input. They can write no sentence of
# PATCH_GRAMMAR, which engy holds apply_patch's input to
# (tests/prompt/test_freeform_grammar.py), so they would run to the limit.
WRITE_NOTE: dict[str, Any] = {
    "type": "custom",
    "name": "write_note",
    "description": "Write a note.",
    "format": {"type": "text"},
}


@pytest.fixture(scope="module")
def gpt(tiny_server: EngyServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=tiny_server.url + "/v1", api_key="unused", max_retries=0, timeout=TIMEOUT
    ) as client:
        yield client


def _items(response: Any, kind: str) -> list[Any]:
    return [item for item in response.output if item.type == kind]


@pytest.fixture(scope="module")
def forced_response(gpt: openai.OpenAI, model: str) -> Any:
    """A non-streaming response under a named function tool_choice (reused by
    the tests that replay its call)."""
    return gpt.responses.create(
        model=model,
        input="Read /etc/hostname for me.",
        tools=FUNCTION_TOOLS,
        tool_choice={"type": "function", "name": "read_file"},
        parallel_tool_calls=False,
        max_output_tokens=300,
    )


def test_responses_named_function_gives_valid_function_call(forced_response: Any) -> None:
    r = forced_response
    assert r.status == "completed"
    [call] = _items(r, "function_call")
    assert call.name == "read_file"
    assert call.status == "completed"
    assert call.call_id and call.id and call.id.startswith("fc_")
    jsonschema.validate(json.loads(call.arguments), READ_FILE_SCHEMA)
    assert not _items(r, "message")  # nothing but the call


def test_responses_named_function_streams_arguments(gpt: openai.OpenAI, model: str) -> None:
    with gpt.responses.stream(
        model=model,
        input="Read /etc/hostname for me.",
        tools=FUNCTION_TOOLS,
        tool_choice={"type": "function", "name": "read_file"},
        parallel_tool_calls=False,
        max_output_tokens=300,
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    [done] = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert len(deltas) > 1  # the arguments stream as they are generated
    assert "".join(deltas) == done.arguments
    assert done.name == "read_file"
    jsonschema.validate(json.loads(done.arguments), READ_FILE_SCHEMA)
    [call] = _items(final, "function_call")
    assert call.arguments == done.arguments
    assert call.name == "read_file"
    assert final.status == "completed"


@pytest.mark.parametrize("stream", [False, True])
def test_responses_call_cut_by_max_output_tokens_is_incomplete(
    gpt: openai.OpenAI, model: str, stream: bool
) -> None:
    # 24 tokens: past the function's name, well inside its arguments.
    kwargs: Any = {
        "model": model,
        "input": "Read /etc/hostname for me.",
        "tools": FUNCTION_TOOLS,
        "tool_choice": {"type": "function", "name": "read_file"},
        "parallel_tool_calls": False,
        "max_output_tokens": 24,
    }
    if stream:
        with gpt.responses.stream(**kwargs) as s:
            r = s.get_final_response()
    else:
        r = gpt.responses.create(**kwargs)
    assert r.status == "incomplete"
    assert r.incomplete_details is not None
    assert r.incomplete_details.reason == "max_output_tokens"
    [call] = _items(r, "function_call")
    assert call.status == "incomplete"  # the same, streamed or not
    assert isinstance(json.loads(call.arguments), dict)  # what came, closed


def test_responses_named_custom_tool_gives_custom_tool_call(gpt: openai.OpenAI, model: str) -> None:
    r = gpt.responses.create(
        model=model,
        input="Add hello.txt",
        tools=[*FUNCTION_TOOLS, WRITE_NOTE],
        tool_choice={"type": "custom", "name": "write_note"},
        parallel_tool_calls=False,
        max_output_tokens=300,
    )
    assert r.status == "completed"
    [call] = _items(r, "custom_tool_call")
    assert call.name == "write_note"
    assert call.id and call.id.startswith("ctc_")
    assert isinstance(call.input, str)
    assert not _items(r, "function_call")


def test_responses_named_custom_tool_streams_input(gpt: openai.OpenAI, model: str) -> None:
    with gpt.responses.stream(
        model=model,
        input="Add hello.txt",
        tools=[APPLY_PATCH],
        tool_choice={"type": "custom", "name": "apply_patch"},
        parallel_tool_calls=False,
        max_output_tokens=300,
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert "response.function_call_arguments.delta" not in kinds
    [done] = [e for e in events if e.type == "response.custom_tool_call_input.done"]
    deltas = [e.delta for e in events if e.type == "response.custom_tool_call_input.delta"]
    assert "".join(deltas) == done.input
    [call] = _items(final, "custom_tool_call")
    assert call.input == done.input and call.name == "apply_patch"


def test_responses_custom_tool_input_deltas_carry_the_text(answer_server: EngyServer) -> None:
    # The zero-weight model closes strings at once; the answer model writes
    # its fixed text inside them, so here the input has something to stream.
    model = http.get(answer_server.url + "/v1/models").json()["data"][0]["id"]
    url = answer_server.url + "/v1"
    with (
        openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=TIMEOUT) as client,
        client.responses.stream(
            model=model,
            input="Add hello.txt",
            tools=[WRITE_NOTE],
            tool_choice={"type": "custom", "name": "write_note"},
            parallel_tool_calls=False,
            max_output_tokens=300,
        ) as stream,
    ):
        events = list(stream)
        final = stream.get_final_response()
    deltas = [e.delta for e in events if e.type == "response.custom_tool_call_input.delta"]
    [done] = [e for e in events if e.type == "response.custom_tool_call_input.done"]
    assert deltas
    assert "".join(deltas) == done.input == ANSWER
    [call] = _items(final, "custom_tool_call")
    assert call.input == ANSWER


def _replayed(arguments: str, output: str) -> list[Any]:
    return [
        {"role": "user", "content": "Read /etc/hostname, then add hello.txt."},
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": "read_file",
            "arguments": arguments,
            "status": "completed",
        },
        {"type": "function_call_output", "call_id": "call_1", "output": output},
        {"type": "reasoning", "id": "rs_1", "summary": [], "content": None},
        {
            "type": "custom_tool_call",
            "id": "ctc_1",
            "call_id": "call_2",
            "name": "apply_patch",
            "input": "*** Begin Patch\n*** Add File: hello.txt\n+hello\n*** End Patch\n",
        },
        {
            "type": "custom_tool_call_output",
            "call_id": "call_2",
            "output": [{"type": "input_text", "text": output}],
        },
    ]


@pytest.mark.parametrize("stream", [False, True])
def test_responses_tool_outputs_render_and_are_answered(
    gpt: openai.OpenAI, model: str, forced_response: Any, stream: bool
) -> None:
    [call] = _items(forced_response, "function_call")
    tools = [*FUNCTION_TOOLS, APPLY_PATCH]

    def ask(output: str) -> Any:
        kwargs: Any = {
            "model": model,
            "input": _replayed(call.arguments, output),
            "tools": tools,
            "max_output_tokens": 8,
        }
        if stream:
            with gpt.responses.stream(**kwargs) as s:
                return s.get_final_response()
        return gpt.responses.create(**kwargs)

    answer = ask("build-host-7")
    assert answer.status in ("completed", "incomplete")
    assert answer.output
    assert answer.usage is not None and answer.usage.output_tokens > 0
    # Both outputs are in the prompt: longer outputs make a longer prompt.
    longer = ask("build-host-7 " * 20)
    assert longer.usage is not None
    assert longer.usage.input_tokens > answer.usage.input_tokens + 40


def test_responses_tool_choice_required_calls_a_tool(gpt: openai.OpenAI, model: str) -> None:
    r = gpt.responses.create(
        model=model,
        input="Find TODOs.",
        tools=FUNCTION_TOOLS,
        tool_choice="required",
        parallel_tool_calls=False,
        max_output_tokens=300,
    )
    [call] = _items(r, "function_call")
    assert call.name in SCHEMAS
    jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])
    assert r.tool_choice == "required"


def test_tools_a_launcher_hides_are_not_shown_to_the_model(
    gpt: openai.OpenAI, claude: anthropic.Anthropic, model: str
) -> None:
    """The x-engy-hide header (engy launch sends it with Codex's lean
    profile): the model is not shown read_file or search's optional
    `paths`, so every call under `required` is search without paths, and
    the prompt is shorter by what was left out, in both APIs' counts."""
    hidden = {"x-engy-hide": "read_file, search.paths"}
    kwargs: Any = {
        "model": model,
        "input": "Find TODOs.",
        "tools": FUNCTION_TOOLS,
        "tool_choice": "required",
    }
    r = gpt.responses.create(**kwargs, max_output_tokens=300, extra_headers=hidden)
    calls = _items(r, "function_call")
    assert calls and {c.name for c in calls} == {"search"}, r.output
    for call in calls:
        arguments = json.loads(call.arguments)
        assert "paths" not in arguments
        jsonschema.validate(arguments, SEARCH_SCHEMA)
    counts = [
        http.post(tiny_server_url(gpt) + "/v1/responses/input_tokens", json=kwargs, headers=h)
        for h in ({}, hidden)
    ]
    assert [c.status_code for c in counts] == [200, 200], counts
    whole, shown = (c.json()["input_tokens"] for c in counts)
    assert shown < whole - 40, (whole, shown)
    assert r.usage is not None and r.usage.input_tokens == shown
    messages: Any = {"model": model, "messages": HELLO, "tools": ANTHROPIC_TOOLS}
    counted = [
        claude.messages.count_tokens(**messages, extra_headers=h).input_tokens for h in ({}, hidden)
    ]
    assert counted[1] < counted[0] - 40, counted


def test_a_malformed_hide_header_is_refused_in_the_api_s_format(
    gpt: openai.OpenAI, claude: anthropic.Anthropic, model: str
) -> None:
    with pytest.raises(openai.BadRequestError, match="x-engy-hide") as caught:
        gpt.responses.create(
            model=model,
            input="Find TODOs.",
            tools=FUNCTION_TOOLS,
            max_output_tokens=4,
            extra_headers={"x-engy-hide": "read file"},
        )
    assert caught.value.body["param"] == "x-engy-hide"  # type: ignore[index]
    with pytest.raises(anthropic.BadRequestError, match="x-engy-hide"):
        claude.messages.create(
            model=model,
            max_tokens=4,
            messages=HELLO,
            extra_headers={"x-engy-hide": "read_file.a.b"},
        )
    # And the server goes on serving.
    ok = gpt.responses.create(model=model, input="Hi", max_output_tokens=4)
    assert ok.status in ("completed", "incomplete")


def tiny_server_url(client: openai.OpenAI) -> str:
    return str(client.base_url).rstrip("/").removesuffix("/v1")


@pytest.mark.parametrize("choice", ["auto", "required"])
def test_responses_no_parallel_calls_gives_at_most_one(
    gpt: openai.OpenAI, model: str, choice: str
) -> None:
    r = gpt.responses.create(
        model=model,
        input="Find TODOs.",
        tools=FUNCTION_TOOLS,
        tool_choice=choice,  # type: ignore[arg-type]
        parallel_tool_calls=False,
        max_output_tokens=300 if choice == "required" else 16,
    )
    assert len(_items(r, "function_call")) <= 1
    assert r.parallel_tool_calls is False
    if choice == "required":
        assert len(_items(r, "function_call")) == 1


@pytest.mark.parametrize("stream", [False, True])
def test_responses_tool_choice_none_gives_no_call(
    gpt: openai.OpenAI, model: str, stream: bool
) -> None:
    kwargs: Any = {
        "model": model,
        "input": "Read /etc/hostname for me.",
        "tools": [*FUNCTION_TOOLS, APPLY_PATCH],
        "tool_choice": "none",
        "max_output_tokens": 12,
    }
    if stream:
        with gpt.responses.stream(**kwargs) as s:
            r = s.get_final_response()
    else:
        r = gpt.responses.create(**kwargs)
    assert [item.type for item in r.output] == ["message"]
