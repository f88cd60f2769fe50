"""/v1/chat/completions end to end: the official openai SDK's
`chat.completions` against a real `engy serve` on the real gemma-3-270m.

gemma-3-270m is a base model: it rarely ends its turn on its own, so short
answers are cut by max_tokens, which several tests want. Its template never
reads `tools`, so its calls are the generic family's (tools described in the
system prompt, a forced call held to the grammar).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import openai
import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState
from support.images import RED, b64, png
from support.server import EngyServer

MODEL = "gemma-3-270m-base"
TIMEOUT = 180  # this machine is small and noisy: never timed assertions
http = httpx.Client(timeout=TIMEOUT)
QUESTION = "Write one short sentence about the sea."
ASK: Any = [{"role": "user", "content": QUESTION}]


@pytest.fixture(scope="module")
def client(gemma_server: EngyServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=gemma_server.url + "/v1", api_key="unused", max_retries=0, timeout=TIMEOUT
    ) as c:
        yield c


def test_non_streaming_completion(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "system", "content": "Be brief."}, *ASK],
        max_tokens=12,
    )
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    assert r.model == MODEL
    [choice] = r.choices
    assert choice.index == 0 and choice.finish_reason in ("stop", "length")
    assert choice.message.role == "assistant"
    assert choice.message.content and choice.message.content.strip()
    assert not choice.message.tool_calls
    usage = r.usage
    assert usage is not None and usage.prompt_tokens > 5
    assert 0 < usage.completion_tokens <= 12
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert usage.prompt_tokens_details is not None
    assert 0 <= (usage.prompt_tokens_details.cached_tokens or 0) <= usage.prompt_tokens


def test_model_is_echoed_as_sent(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(model="google/gemma-3-270m-base", messages=ASK, max_tokens=2)
    assert r.model == "google/gemma-3-270m-base"


def test_streaming_equals_the_non_streaming_text_and_reports_usage(client: openai.OpenAI) -> None:
    kwargs: Any = {"model": MODEL, "messages": ASK, "max_tokens": 8, "temperature": 0}
    whole = client.chat.completions.create(**kwargs)
    chunks = list(
        client.chat.completions.create(
            **kwargs, stream=True, stream_options={"include_usage": True}
        )
    )
    *choices, last = chunks
    assert choices[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in choices)
    assert text == whole.choices[0].message.content
    assert [c.choices[0].finish_reason for c in choices][-1] == "length"
    assert all(c.usage is None for c in choices)
    assert last.choices == [] and last.usage is not None
    assert last.usage.completion_tokens == 8
    assert last.usage.prompt_tokens == whole.usage.prompt_tokens  # type: ignore[union-attr]
    assert len({c.id for c in chunks}) == 1


def snapshot(chunks: Any) -> Any:
    """The completion the SDK's stream state folds from `chunks` (its
    `stream()` helper refuses to hand over one cut by max_tokens)."""
    state = ChatCompletionStreamState()
    for chunk in chunks:
        state.handle_chunk(chunk)
    return state.current_completion_snapshot


def test_the_sdks_stream_state_accumulates(client: openai.OpenAI) -> None:
    chunks = list(
        client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=10, stream=True)
    )
    final = snapshot(chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert final.choices[0].message.content == text
    assert final.choices[0].finish_reason in ("stop", "length")


def test_stream_on_the_wire(gemma_server: EngyServer) -> None:
    body = {"model": MODEL, "messages": ASK, "max_tokens": 3, "stream": True}
    with http.stream("POST", gemma_server.url + "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in r.iter_lines() if line]
    assert not any(line.startswith("event:") for line in lines)  # bare data lines
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[len("data: ") :]) for line in lines[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}
    assert chunks[-1]["choices"][0] == {
        "index": 0,
        "delta": {},
        "logprobs": None,
        "finish_reason": "length",
    }
    assert all("usage" not in c for c in chunks)  # not asked for


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_max_tokens_cuts_the_answer(client: openai.OpenAI, field: str) -> None:
    kwargs: Any = {"model": MODEL, "messages": ASK, "temperature": 0, field: 5}
    r = client.chat.completions.create(**kwargs)
    assert r.choices[0].finish_reason == "length"
    assert r.usage is not None and r.usage.completion_tokens == 5


def test_stop_ends_the_answer(client: openai.OpenAI) -> None:
    free = client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=20, temperature=0)
    text = free.choices[0].message.content or ""
    words = text.split()
    assert len(words) > 2, text
    stop = " " + words[2]  # the third word: the answer stops before it
    r = client.chat.completions.create(
        model=MODEL, messages=ASK, max_tokens=20, temperature=0, stop=[stop, "\n\n\n"]
    )
    assert r.choices[0].finish_reason == "stop"
    content = r.choices[0].message.content or ""
    assert stop not in content and text.startswith(content)


def test_the_same_seed_gives_the_same_answer(client: openai.OpenAI) -> None:
    def ask(seed: int) -> str:
        r = client.chat.completions.create(
            model=MODEL, messages=ASK, max_tokens=16, temperature=1.0, seed=seed
        )
        return r.choices[0].message.content or ""

    first = ask(1234)
    assert ask(1234) == first
    assert any(ask(seed) != first for seed in (1, 2, 3))


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_second_turn_reads_the_first_from_the_cache(client: openai.OpenAI, stream: bool) -> None:
    system = {"role": "system", "content": "You are a helpful assistant. " * 20 + str(stream)}
    first: Any = [system, {"role": "user", "content": "Name a colour."}]

    def ask(messages: Any) -> Any:
        if not stream:
            r = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=4)
            return r.choices[0].message.content, r.usage
        chunks = list(
            client.chat.completions.create(
                model=MODEL,
                messages=messages,
                max_tokens=4,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        return text, chunks[-1].usage

    text, a = ask(first)
    second = [*first, {"role": "assistant", "content": text}, {"role": "user", "content": "More."}]
    _, b = ask(second)
    cached = b.prompt_tokens_details.cached_tokens
    assert cached >= a.prompt_tokens - 2  # the whole first prompt is reused
    assert b.prompt_tokens - cached < 30  # only the new turn was evaluated


PERSON: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 16},
        "age": {"type": "integer"},
        "sea": {"type": "string", "enum": ["calm", "rough"]},
    },
    "required": ["name", "age", "sea"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_response_format_json_schema_gives_valid_json(client: openai.OpenAI, stream: bool) -> None:
    kwargs: Any = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Describe a sailor as JSON."}],
        "max_tokens": 80,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "sailor", "schema": PERSON, "strict": True},
        },
    }
    if stream:
        with client.chat.completions.stream(**kwargs) as s:
            final = s.get_final_completion()
    else:
        final = client.chat.completions.create(**kwargs)
    choice = final.choices[0]
    assert choice.finish_reason == "stop"  # the grammar ended it, not the limit
    jsonschema.validate(json.loads(choice.message.content or ""), PERSON)


def test_response_format_json_object_gives_an_object(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Reply with a JSON object."}],
        max_tokens=60,
        temperature=0,
        response_format={"type": "json_object"},
    )
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(r.choices[0].message.content or ""), dict)
    else:  # cut inside a long string: still the start of an object
        assert (r.choices[0].message.content or "").startswith("{")


# ---- tools (the generic family) -------------------------------------------------------

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"path": {"type": "string", "maxLength": 40}},
    "required": ["path"],
    "additionalProperties": False,
}
TOOLS: Any = [
    {
        "type": "function",
        "function": {"name": "read_file", "description": "Read a file.", "parameters": SCHEMA},
    },
    {
        "type": "function",
        "function": {
            "name": "list_dir",
            "description": "List a directory.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    },
]
READ: Any = [{"role": "user", "content": "Read the file /etc/hostname for me."}]
NAMED: Any = {"type": "function", "function": {"name": "read_file"}}
# A forced call to read_file, one call only: with parallel calls allowed,
# sampled gemma at times wrote call after call until max_tokens (CI, 2026-12-04).
FORCED: Any = {
    "model": MODEL,
    "messages": READ,
    "tools": TOOLS,
    "tool_choice": NAMED,
    "max_tokens": 200,
    "parallel_tool_calls": False,
}


def _call(completion: Any) -> Any:
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.id and call.function.name == "read_file"
    jsonschema.validate(json.loads(call.function.arguments), SCHEMA)
    return call


@pytest.fixture(scope="module")
def forced(client: openai.OpenAI) -> Any:
    return _call(client.chat.completions.create(**FORCED))


def test_forced_call(forced: Any) -> None:
    assert forced.id.startswith("call_")


def test_forced_call_streams_its_arguments(client: openai.OpenAI) -> None:
    chunks = list(client.chat.completions.create(**FORCED, stream=True))
    pieces = [
        tc.function.arguments
        for c in chunks
        for tc in c.choices[0].delta.tool_calls or []
        if tc.function and tc.function.arguments
    ]
    assert len(pieces) > 1  # streamed as generated
    [head] = [tc for c in chunks for tc in c.choices[0].delta.tool_calls or [] if tc.id]
    assert head.index == 0 and head.function and head.function.name == "read_file"
    jsonschema.validate(json.loads("".join(pieces)), SCHEMA)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_the_tool_result_is_answered(client: openai.OpenAI, forced: Any, stream: bool) -> None:
    def conversation(result: str) -> Any:
        call = {
            "id": forced.id,
            "type": "function",
            "function": {"name": forced.function.name, "arguments": forced.function.arguments},
        }
        return [
            *READ,
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": forced.id, "content": result},
        ]

    def ask(result: str) -> Any:
        kwargs: Any = {
            "model": MODEL,
            "messages": conversation(result),
            "tools": TOOLS,
            "max_tokens": 12,
        }
        if stream:
            return snapshot(
                client.chat.completions.create(
                    **kwargs, stream=True, stream_options={"include_usage": True}
                )
            )
        return client.chat.completions.create(**kwargs)

    answer = ask("host-7")
    assert answer.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert answer.usage is not None and answer.usage.completion_tokens > 0
    # The result is in the prompt: a longer one makes a longer prompt.
    longer = ask("host-7 " * 20)
    assert longer.usage is not None
    assert longer.usage.prompt_tokens > answer.usage.prompt_tokens + 20


def test_tool_choice_none_gives_text(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(
        model=MODEL, messages=READ, tools=TOOLS, tool_choice="none", max_tokens=8
    )
    assert not r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason in ("stop", "length")


# ---- refusals -------------------------------------------------------------------------


def test_images_on_a_model_without_a_projector_are_400(client: openai.OpenAI) -> None:
    url = "data:image/png;base64," + b64(png(RED, 8))
    content: Any = [
        {"type": "text", "text": "What colour?"},
        {"type": "image_url", "image_url": {"url": url}},
    ]
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": content}], max_tokens=2
        )
    assert "does not support images" in err.value.message


def test_n_over_one_is_400(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=MODEL, messages=ASK, n=2)
    assert err.value.param == "n" and "n must be 1" in err.value.message


def test_unknown_model_is_404_naming_the_served(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as err:
        client.chat.completions.create(model="test", messages=ASK)
    assert err.value.code == "model_not_found"
    assert (
        "served here: gemma-3-270m-base" in err.value.message and "engy pull" in err.value.message
    )


def test_models_list_has_the_model(client: openai.OpenAI) -> None:
    assert MODEL in [m.id for m in client.models.list()]
