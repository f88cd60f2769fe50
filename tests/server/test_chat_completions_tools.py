"""Tool calls and thinking through /v1/chat/completions, with the official
openai SDK, on tiny GGUFs with real chat templates.

- Forced calls (a named function, `required`) in five families: the
  zero-weight model writes what the family's grammar lets it, so every call
  must come out in the family's syntax, through its parser, with arguments
  that validate; then the tool result round trip.
- Auto calls: two-turn models (support.ggufs.build_two_turn_gguf) write a
  call on a fresh conversation and an answer once the call is back in the
  prompt, in the hermes and llama3 families; one writes two calls at once.
- Thinking: a model that reasons first gives `reasoning_content`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import jsonschema
import openai
import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState
from support.families.roundtrip import READ as READ_SCHEMA
from support.families.xml import read_file_schema
from support.paths import CACHE, need_fixtures
from support.server import EngyServer

TIMEOUT = 600  # this machine is small and noisy: never timed assertions
XML_SCHEMA = read_file_schema({"type": "string"})
READ = [{"role": "user", "content": "Read /etc/hostname for me."}]


def tools(schema: dict[str, Any]) -> list[Any]:
    return [
        {
            "type": "function",
            "function": {"name": "read_file", "description": "Read a file.", "parameters": schema},
        },
        {
            "type": "function",
            "function": {
                "name": "ls",
                "description": "List a directory.",
                "parameters": {"type": "object", "properties": {"dir": {"type": "string"}}},
            },
        },
    ]


def client(server: EngyServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=TIMEOUT)


def model_id(server: EngyServer) -> str:
    name: str = httpx.get(server.url + "/v1/models", timeout=TIMEOUT).json()["data"][0]["id"]
    return name


def family_of(server: EngyServer) -> str:
    family: str = httpx.get(server.url + "/engy/ps", timeout=TIMEOUT).json()["models"][0]["family"]
    return family


def snapshot(chunks: list[Any]) -> Any:
    """The completion the SDK's own stream state folds from the chunks."""
    state = ChatCompletionStreamState()
    for chunk in chunks:
        state.handle_chunk(chunk)
    return state.current_completion_snapshot


def streamed_calls(chunks: list[Any]) -> dict[int, dict[str, str]]:
    """index -> id, name and the arguments joined, from the tool_calls deltas
    alone; checks each call's first delta carries its id and name."""
    calls: dict[int, dict[str, str]] = {}
    for chunk in chunks:
        for tc in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            if tc.index not in calls:
                assert tc.id and tc.type == "function" and tc.function and tc.function.name
                calls[tc.index] = {"id": tc.id, "name": tc.function.name, "arguments": ""}
            else:
                assert tc.id is None
            calls[tc.index]["arguments"] += (tc.function.arguments if tc.function else "") or ""
    return calls


def ask(server: EngyServer, stream: bool, **kwargs: Any) -> tuple[Any, list[Any]]:
    """(the completion, the chunks when streamed)."""
    kwargs = {"model": model_id(server), **kwargs}
    with client(server) as c:
        if not stream:
            return c.chat.completions.create(**kwargs), []
        chunks = list(
            c.chat.completions.create(**kwargs, stream=True, stream_options={"include_usage": True})
        )
    return snapshot(chunks), chunks


# ---- forced calls, five families --------------------------------------------------


@dataclass(frozen=True)
class Family:
    name: str
    build: dict[str, Any]
    schema: dict[str, Any]
    ctx: str = "8192"


FAMILIES = [
    Family("hermes", {"vocab": "qwen2", "template": "Qwen-Qwen3-0.6B.jinja"}, READ_SCHEMA),
    Family(
        "llama3",
        {"vocab": "llama-bpe", "template": "meta-llama-Llama-3.1-8B-Instruct.jinja"},
        READ_SCHEMA,
        "4096",
    ),
    # The tiny model writes its answer wherever the grammar lets it: these
    # close free-text values (see the families' own tests).
    Family(
        "qwen3-coder",
        {"vocab": "qwen2", "template": "Qwen3-Coder.jinja", "answer": "</parameter>"},
        XML_SCHEMA,
    ),
    Family(
        "glm-4.6",
        {"vocab": "qwen2", "template": "GLM-4.6.jinja", "answer": "</arg_value>Done."},
        XML_SCHEMA,
    ),
    Family(
        "gemma4",
        {"vocab": "gemma-4", "template": "google-gemma-4-31B-it.jinja"},
        READ_SCHEMA,
        "4096",
    ),
]


@pytest.fixture(scope="module", params=FAMILIES, ids=[f.name for f in FAMILIES])
def forced(request: pytest.FixtureRequest) -> Iterator[tuple[Family, EngyServer]]:
    need_fixtures()
    from support.ggufs import tiny_gguf_cached

    family: Family = request.param
    path = tiny_gguf_cached(CACHE / "ggufs", **family.build)
    server = EngyServer(str(path), "--ctx-size", family.ctx)
    try:
        assert family_of(server) == family.name
        yield family, server
    finally:
        server.stop()


def one_call(completion: Any, schema: dict[str, Any], name: str | None = "read_file") -> Any:
    [choice] = completion.choices
    assert choice.finish_reason == "tool_calls", completion
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    if name is not None:
        assert call.function.name == name
    jsonschema.validate(json.loads(call.function.arguments), schema)
    return call


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_named_function_gives_a_valid_call(forced: tuple[Family, EngyServer], stream: bool) -> None:
    family, server = forced
    completion, chunks = ask(
        server,
        stream,
        messages=READ,
        tools=tools(family.schema),
        tool_choice={"type": "function", "function": {"name": "read_file"}},
        parallel_tool_calls=False,
        max_tokens=400,
    )
    call = one_call(completion, family.schema)
    if stream:
        [seen] = streamed_calls(chunks).values()
        assert seen == {"id": call.id, "name": "read_file", "arguments": call.function.arguments}
        pieces = [c for c in chunks if c.choices and c.choices[0].delta.tool_calls]
        assert len(pieces) > 2  # the arguments stream as they are generated
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


def test_required_calls_one_of_the_tools(forced: tuple[Family, EngyServer]) -> None:
    family, server = forced
    completion, _ = ask(
        server,
        False,
        messages=READ,
        tools=tools(family.schema),
        tool_choice="required",
        parallel_tool_calls=False,
        max_tokens=400,
    )
    call = one_call(completion, {"type": "object"}, name=None)
    assert call.function.name in ("read_file", "ls")


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_the_tool_result_round_trip(forced: tuple[Family, EngyServer], stream: bool) -> None:
    family, server = forced
    first, _ = ask(
        server,
        False,
        messages=READ,
        tools=tools(family.schema),
        tool_choice={"type": "function", "function": {"name": "read_file"}},
        parallel_tool_calls=False,
        max_tokens=400,
    )
    call = one_call(first, family.schema)

    def follow_up(result: str) -> Any:
        messages = [
            *READ,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": "read_file", "arguments": call.function.arguments},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call.id, "content": result},
        ]
        return ask(server, stream, messages=messages, tools=tools(family.schema), max_tokens=8)[0]

    answer = follow_up("build-host-7")
    assert answer.choices[0].message.role == "assistant"
    assert answer.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert answer.usage is not None and answer.usage.completion_tokens > 0
    longer = follow_up("build-host-7 " * 20)  # the result is in the prompt
    assert longer.usage is not None
    assert longer.usage.prompt_tokens > answer.usage.prompt_tokens + 20


# ---- auto calls: two-turn models ---------------------------------------------------

AFTER = "It says build-host-7."


@dataclass(frozen=True)
class TwoTurn:
    name: str
    build: dict[str, Any] = field(default_factory=dict)


TWO_TURN = [
    TwoTurn(
        "hermes",
        {
            "vocab": "qwen2",
            "template": "Qwen-Qwen3-0.6B.jinja",
            "first": '<tool_call>\n{"name": "read_file","arguments":{"path":"/tmp/Zebra.txt"}}'
            "\n</tool_call>",
        },
    ),
    TwoTurn("llama3", {"first": '{"name": "read_file","parameters":{"path":"/tmp/Zebra.txt"}}'}),
]


def two_turn_server(build: dict[str, Any], then: str = AFTER) -> EngyServer:
    need_fixtures()
    from support.ggufs import two_turn_gguf_cached

    path = two_turn_gguf_cached(CACHE / "ggufs", then=then, marker="ebra", **build)
    return EngyServer(str(path), "--ctx-size", "4096")


@pytest.fixture(scope="module", params=TWO_TURN, ids=[t.name for t in TWO_TURN])
def auto(request: pytest.FixtureRequest) -> Iterator[tuple[TwoTurn, EngyServer]]:
    server = two_turn_server(request.param.build)
    try:
        assert family_of(server) == request.param.name
        yield request.param, server
    finally:
        server.stop()


PATH_SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_auto_call_then_the_answer_from_the_cache(
    auto: tuple[TwoTurn, EngyServer], stream: bool
) -> None:
    _, server = auto
    offered = tools(PATH_SCHEMA)
    first, chunks = ask(server, stream, messages=READ, tools=offered, max_tokens=200)
    call = one_call(first, PATH_SCHEMA)
    assert json.loads(call.function.arguments) == {"path": "/tmp/Zebra.txt"}
    assert first.choices[0].message.content is None  # nothing but the call
    if stream:
        [seen] = streamed_calls(chunks).values()
        assert seen["arguments"] == call.function.arguments
        assert not any(c.choices and c.choices[0].delta.content for c in chunks)
    second, _ = ask(
        server,
        stream,
        messages=[
            *READ,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": "read_file", "arguments": call.function.arguments},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call.id, "content": "build-host-7"},
        ],
        tools=offered,
        max_tokens=200,
    )
    [choice] = second.choices
    assert choice.message.content == AFTER and choice.finish_reason == "stop"
    assert not choice.message.tool_calls
    # The first turn's prompt is read from the KV cache, not evaluated again.
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached >= first.usage.prompt_tokens - 4, (cached, first.usage)


@pytest.fixture(scope="module")
def parallel() -> Iterator[EngyServer]:
    first = '{"name": "read_file","parameters":{"path":"/tmp/Zebra.txt"}};{"name":"ls"}'
    server = two_turn_server({"first": first}, then="Both came back.")
    yield server
    server.stop()


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_parallel_calls(parallel: EngyServer, stream: bool) -> None:
    completion, chunks = ask(
        parallel, stream, messages=READ, tools=tools(PATH_SCHEMA), max_tokens=200
    )
    [choice] = completion.choices
    assert choice.finish_reason == "tool_calls"
    calls = [(c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls]
    assert calls == [("read_file", {"path": "/tmp/Zebra.txt"}), ("ls", {})]
    assert len({c.id for c in choice.message.tool_calls}) == 2
    if stream:
        seen = streamed_calls(chunks)
        assert sorted(seen) == [0, 1]
        assert [seen[i]["name"] for i in (0, 1)] == ["read_file", "ls"]


def test_parallel_tool_calls_false_gives_one_call(parallel: EngyServer) -> None:
    completion, _ = ask(
        parallel,
        False,
        messages=READ,
        tools=tools(PATH_SCHEMA),
        parallel_tool_calls=False,
        max_tokens=200,
    )
    [call] = completion.choices[0].message.tool_calls
    assert call.function.name == "read_file"


def test_tool_choice_none_offers_no_tool(parallel: EngyServer) -> None:
    completion, _ = ask(
        parallel, False, messages=READ, tools=tools(PATH_SCHEMA), tool_choice="none", max_tokens=40
    )
    assert not completion.choices[0].message.tool_calls  # the call is text now, if anything


# ---- thinking ---------------------------------------------------------------------

THOUGHT, ANSWER = "Let me see", "Hello from engy."


@pytest.fixture(scope="module")
def thinker() -> Iterator[EngyServer]:
    need_fixtures()
    from support.ggufs import tiny_gguf_cached

    path = tiny_gguf_cached(
        CACHE / "ggufs",
        vocab="qwen2",
        template="Qwen-Qwen3-0.6B.jinja",
        answer=f"<think>{THOUGHT}</think>{ANSWER}",
    )
    server = EngyServer(str(path), "--ctx-size", "4096")
    yield server
    server.stop()


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_reasoning_content(thinker: EngyServer, stream: bool) -> None:
    completion, chunks = ask(thinker, stream, messages=[{"role": "user", "content": "Hi"}])
    message = completion.choices[0].message
    assert message.content == ANSWER
    assert getattr(message, "reasoning_content", None) == THOUGHT
    assert completion.usage.completion_tokens_details.reasoning_tokens > 0
    if stream:
        reasoning = [
            getattr(c.choices[0].delta, "reasoning_content", None) for c in chunks if c.choices
        ]
        assert "".join(r for r in reasoning if r) == THOUGHT
        # all reasoning comes before the first text
        kinds = [
            "r" if getattr(c.choices[0].delta, "reasoning_content", None) else "t"
            for c in chunks
            if c.choices
            and (
                c.choices[0].delta.content or getattr(c.choices[0].delta, "reasoning_content", None)
            )
        ]
        assert kinds == sorted(kinds)


def test_reasoning_is_replayed_from_reasoning_content(thinker: EngyServer) -> None:
    """An earlier turn's reasoning_content reaches the template (Qwen3 keeps
    it for the turns after the last user message)."""
    base = [{"role": "user", "content": "Hi"}]

    def prompt_tokens(reasoning: str) -> int:
        messages = [
            *base,
            {"role": "assistant", "content": ANSWER, "reasoning_content": reasoning},
            {"role": "tool", "tool_call_id": "c", "content": "x"},
        ]
        completion, _ = ask(thinker, False, messages=messages, max_tokens=1)
        tokens: int = completion.usage.prompt_tokens
        return tokens

    assert prompt_tokens("a long chain of thought " * 10) > prompt_tokens("short") + 20
