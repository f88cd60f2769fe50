"""Thinking end to end, on a tiny Qwen3-template model that always reasons
briefly and then answers: streaming Messages shows a thinking block unless
thinking is disabled; non-streaming never does; Responses counts reasoning
tokens and returns no reasoning items."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import openai
import pytest
from support.paths import CACHE, need_fixtures
from support.server import EngyServer

THOUGHT = "Let me see"
ANSWER = "Hello from engy."


@pytest.fixture(scope="module")
def server() -> Iterator[EngyServer]:
    need_fixtures()
    from support.ggufs import tiny_gguf_cached

    path = tiny_gguf_cached(
        CACHE / "ggufs",
        vocab="qwen2",
        template="Qwen-Qwen3-0.6B.jinja",
        answer=f"<think>{THOUGHT}</think>{ANSWER}",
    )
    s = EngyServer(str(path), "--ctx-size", "4096")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server: EngyServer) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0, timeout=120) as c:
        yield c


def _model(server: EngyServer) -> str:
    c = anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0)
    return c.models.list().data[0].id


HI = [{"role": "user", "content": "Hi"}]


def _stream_blocks(client: anthropic.Anthropic, model: str, **kw: object) -> list[tuple[str, str]]:
    with client.messages.stream(model=model, max_tokens=50, messages=HI, **kw) as stream:  # type: ignore[arg-type]
        final = stream.get_final_message()
    blocks = []
    for block in final.content:
        if block.type == "thinking":
            assert block.signature, "a thinking block is closed by its signature"
            blocks.append(("thinking", block.thinking))
        elif block.type == "text":
            blocks.append(("text", block.text))
    return blocks


def test_streaming_shows_thinking_then_text(
    client: anthropic.Anthropic, server: EngyServer
) -> None:
    model = _model(server)
    assert _stream_blocks(client, model) == [("thinking", THOUGHT), ("text", ANSWER)]
    enabled = {"type": "enabled", "budget_tokens": 1024}
    assert _stream_blocks(client, model, thinking=enabled) == [
        ("thinking", THOUGHT),
        ("text", ANSWER),
    ]


def test_streaming_hides_thinking_when_disabled(
    client: anthropic.Anthropic, server: EngyServer
) -> None:
    blocks = _stream_blocks(client, _model(server), thinking={"type": "disabled"})
    assert blocks == [("text", ANSWER)]


def test_non_streaming_never_has_thinking_blocks(
    client: anthropic.Anthropic, server: EngyServer
) -> None:
    msg = client.messages.create(
        model=_model(server),
        max_tokens=50,
        messages=HI,
        thinking={"type": "enabled", "budget_tokens": 1024},
    )
    assert [b.type for b in msg.content] == ["text"]
    assert msg.content[0].text == ANSWER  # type: ignore[union-attr]
    assert msg.stop_reason == "end_turn"


def test_thinking_echoed_back_next_turn_is_accepted(
    client: anthropic.Anthropic, server: EngyServer
) -> None:
    model = _model(server)
    history = [
        *HI,
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": THOUGHT, "signature": "anything"},
                {"type": "text", "text": ANSWER},
            ],
        },
        {"role": "user", "content": "Again"},
    ]
    msg = client.messages.create(model=model, max_tokens=50, messages=history)  # type: ignore[arg-type]
    assert msg.content[0].text == ANSWER  # type: ignore[union-attr]


def test_responses_counts_reasoning_tokens_without_reasoning_items(server: EngyServer) -> None:
    c = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=120)
    model = _model(server)
    r = c.responses.create(model=model, input="Hi")
    assert [item.type for item in r.output] == ["message"]
    assert r.output_text == ANSWER
    assert r.usage is not None
    assert r.usage.output_tokens_details.reasoning_tokens >= 3
    assert r.usage.output_tokens > r.usage.output_tokens_details.reasoning_tokens
    with c.responses.stream(model=model, input="Hi") as stream:
        types = {event.type for event in stream}
        final = stream.get_final_response()
    assert not any("reasoning" in t for t in types)
    assert final.output_text == ANSWER
