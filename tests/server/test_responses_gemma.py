"""/v1/responses end to end: the official openai SDK against a real
`engy serve` on the real gemma-3-270m model.

gemma-3-270m is a base model: it rarely ends its turn on its own, so short
answers are cut by `max_output_tokens`, which is what several tests want.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from support.server import EngyServer

MODEL = "gemma-3-270m-base"
# This machine is small and noisy: generous timeouts, never timed assertions
# on single requests.
TIMEOUT = 180
http = httpx.Client(timeout=TIMEOUT)
QUESTION = "Write one short sentence about the sea."


def _client(server: EngyServer, api_key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(
        base_url=server.url + "/v1", api_key=api_key, max_retries=0, timeout=TIMEOUT
    )


@pytest.fixture(scope="module")
def client(gemma_server: EngyServer) -> Iterator[openai.OpenAI]:
    with _client(gemma_server) as c:
        yield c


def test_non_streaming_response(client: openai.OpenAI) -> None:
    r = client.responses.create(
        model=MODEL, instructions="Be brief.", input=QUESTION, max_output_tokens=12
    )
    assert r.object == "response"
    assert r.id.startswith("resp_")
    assert r.model == MODEL
    assert r.status in ("completed", "incomplete")
    assert r.error is None
    [item] = r.output
    assert item.type == "message" and item.role == "assistant"
    [part] = item.content
    assert part.type == "output_text" and part.text.strip()
    assert r.output_text == part.text
    assert r.instructions == "Be brief."
    usage = r.usage
    assert usage is not None
    assert usage.input_tokens > 5
    assert 0 < usage.output_tokens <= 12
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert 0 <= usage.input_tokens_details.cached_tokens <= usage.input_tokens
    assert usage.output_tokens_details.reasoning_tokens == 0


def test_model_is_echoed_as_sent(client: openai.OpenAI) -> None:
    r = client.responses.create(
        model="google/gemma-3-270m-base", input=QUESTION, max_output_tokens=3
    )
    assert r.model == "google/gemma-3-270m-base"


def test_input_items_and_ignored_fields_are_accepted(client: openai.OpenAI) -> None:
    r = client.responses.create(
        model=MODEL,
        input=[
            {"role": "developer", "content": "Answer in English."},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
            {"role": "assistant", "content": [{"type": "output_text", "text": "Hello."}]},
            {"type": "reasoning", "id": "rs_1", "summary": [], "content": None},
            {"role": "user", "content": QUESTION},
        ],
        max_output_tokens=4,
        store=False,
        reasoning={"effort": "high"},
        prompt_cache_key="abc",
        include=["reasoning.encrypted_content"],
        extra_body={"something_new": [1, 2, 3]},
    )
    assert r.output_text


def test_streaming_final_response_equals_streamed_text(client: openai.OpenAI) -> None:
    with client.responses.stream(model=MODEL, input=QUESTION, max_output_tokens=20) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    streamed = "".join(deltas)
    assert streamed.strip()
    assert final.output_text == streamed
    assert final.status in ("completed", "incomplete")
    assert final.usage is not None and final.usage.output_tokens > 0


@pytest.mark.parametrize("stream", [False, True])
def test_small_max_output_tokens_is_incomplete(client: openai.OpenAI, stream: bool) -> None:
    # Greedy: the same prompt always gives the same (uncut) continuation.
    kwargs: Any = {"model": MODEL, "input": QUESTION, "max_output_tokens": 5, "temperature": 0}
    if stream:
        with client.responses.stream(**kwargs) as s:
            r = s.get_final_response()
    else:
        r = client.responses.create(**kwargs)
    assert r.status == "incomplete"
    assert r.incomplete_details is not None
    assert r.incomplete_details.reason == "max_output_tokens"
    assert r.output[-1].status == "incomplete"
    assert r.usage is not None and r.usage.output_tokens == 5
    assert r.max_output_tokens == 5


def test_extending_a_conversation_reports_cached_tokens(client: openai.OpenAI) -> None:
    instructions = "You are a helpful assistant. " * 20
    first: list[Any] = [{"role": "user", "content": "Name a colour."}]
    a = client.responses.create(
        model=MODEL, instructions=instructions, input=first, max_output_tokens=4
    )
    longer = [
        *first,
        {"role": "assistant", "content": a.output_text},
        {"role": "user", "content": "And another one."},
    ]
    b = client.responses.create(
        model=MODEL, instructions=instructions, input=longer, max_output_tokens=4
    )
    assert a.usage is not None and b.usage is not None
    cached = b.usage.input_tokens_details.cached_tokens
    assert cached > 0
    assert cached >= a.usage.input_tokens - 2  # the whole first prompt is reused
    assert b.usage.input_tokens - cached < 30  # only the new tokens were evaluated


def test_unknown_model_is_404(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as err:
        client.responses.create(model="no-such-model", input=QUESTION, max_output_tokens=3)
    assert err.value.code == "model_not_found"
    assert err.value.param == "model"
    assert "no-such-model" in err.value.message


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"max_output_tokens": "ten"}, "max_output_tokens"),
        ({"temperature": "hot"}, "temperature"),
        ({"input": 42}, "input"),
        ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
        ({"tools": [{"type": "function"}]}, "tools[0].name"),
        ({"tool_choice": "sometimes"}, "tool_choice"),
        ({"stream": "yes"}, "stream"),
    ],
)
def test_wrong_types_are_400_naming_the_field(
    client: openai.OpenAI, extra: dict[str, Any], field: str
) -> None:
    body = {"model": MODEL, "input": QUESTION, **extra}
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(**body)
    assert err.value.type == "invalid_request_error"
    assert err.value.param == field
    assert field in err.value.message


def test_missing_input_is_400(gemma_server: EngyServer) -> None:
    r = http.post(gemma_server.url + "/v1/responses", json={"model": MODEL})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "input"
    r = http.post(gemma_server.url + "/v1/responses", content=b"{not json")
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "invalid_request_error"


def test_websocket_upgrade_is_426(gemma_server: EngyServer) -> None:
    headers = {
        "Upgrade": "websocket",
        "Connection": "Upgrade",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version": "13",
    }
    r = http.get(gemma_server.url + "/v1/responses", headers=headers)
    assert r.status_code == 426
    assert r.json()["error"]["type"] == "invalid_request_error"
    # The server still answers over plain HTTP.
    with _client(gemma_server) as client:
        assert client.responses.create(model=MODEL, input=QUESTION, max_output_tokens=2).output


def _events(response: httpx.Response) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) of each SSE event."""
    out: list[tuple[str, dict[str, Any]]] = []
    name = None
    for line in response.iter_lines():
        if line.startswith("event: "):
            name = line[len("event: ") :]
        elif line.startswith("data: "):
            assert name is not None
            out.append((name, json.loads(line[len("data: ") :])))
            name = None
    return out


def test_stream_event_order_on_the_wire(gemma_server: EngyServer) -> None:
    body = {
        "model": MODEL,
        "input": QUESTION,
        "max_output_tokens": 6,
        "temperature": 0,  # greedy: always the same uncut answer
        "stream": True,
    }
    with http.stream("POST", gemma_server.url + "/v1/responses", json=body) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        events = _events(r)
    for name, data in events:
        assert data["type"] == name
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
    names = [n for n, _ in events]
    # wire-protocols.md B6; repeated in_progress events before the first item
    # are keep-alives, which clients ignore.
    assert names[:2] == ["response.created", "response.in_progress"]
    first_item = names.index("response.output_item.added")
    assert set(names[2:first_item]) <= {"response.in_progress"}
    body_names = names[first_item:]
    assert body_names[:2] == ["response.output_item.added", "response.content_part.added"]
    assert body_names[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert set(body_names[2:-4]) == {"response.output_text.delta"}

    data = [d for _, d in events]
    created = data[0]["response"]
    assert created["status"] == "in_progress" and created["output"] == []
    assert created["model"] == MODEL and created["usage"] is None
    item_id = data[names.index("response.output_item.added")]["item"]["id"]
    deltas = [d for d in data if d["type"] == "response.output_text.delta"]
    assert all(d["item_id"] == item_id and d["output_index"] == 0 for d in deltas)
    text = "".join(d["delta"] for d in deltas)
    done = next(d for d in data if d["type"] == "response.output_text.done")
    assert done["text"] == text
    completed = data[-1]["response"]
    assert completed["id"] == created["id"]
    assert completed["status"] == "incomplete"  # 6 tokens cut the base model short
    assert completed["incomplete_details"] == {"reason": "max_output_tokens"}
    [item] = completed["output"]
    assert item["id"] == item_id and item["content"][0]["text"] == text
    assert completed["usage"]["output_tokens"] == 6


# ---- servers of their own ---------------------------------------------------


@pytest.fixture(scope="module")
def small_server(gemma_path: Path) -> Iterator[EngyServer]:
    server = EngyServer(str(gemma_path), "--api-key", "sekret", "--ctx-size", "256")
    yield server
    server.stop()


def test_api_key_required_when_set(small_server: EngyServer) -> None:
    with _client(small_server, "wrong") as bad, pytest.raises(openai.AuthenticationError) as err:
        bad.responses.create(model=MODEL, input=QUESTION, max_output_tokens=2)
    assert err.value.type == "authentication_error"
    url = small_server.url + "/v1/responses"
    body = {"model": MODEL, "input": QUESTION, "max_output_tokens": 2}
    assert http.post(url, json=body).status_code == 401
    # The SDK sends the key as Authorization: Bearer.
    with _client(small_server, "sekret") as good:
        assert good.responses.create(model=MODEL, input=QUESTION, max_output_tokens=2).output
    r = http.post(url, json=body, headers={"x-api-key": "sekret"})
    assert r.status_code == 200, r.text
    r = http.post(url, json=body, headers={"x-api-key": "wrong"})
    assert r.status_code == 401


@pytest.fixture(scope="module")
def small_client(small_server: EngyServer) -> Iterator[openai.OpenAI]:
    with _client(small_server, "sekret") as c:
        yield c


def test_prompt_plus_max_output_tokens_over_the_window_is_400(
    small_server: EngyServer, small_client: openai.OpenAI
) -> None:
    client = small_client
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model=MODEL, input=QUESTION, max_output_tokens=250)
    assert err.value.code == "context_length_exceeded"
    assert "256" in err.value.message
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model=MODEL, input="word " * 400, max_output_tokens=5)
    assert err.value.code == "context_length_exceeded"
    # Without max_output_tokens the answer may use the rest of the window
    # (a prompt near the window's size keeps that short).
    near = "word " * 220
    counted = http.post(
        small_server.url + "/v1/messages/count_tokens",
        json={"model": MODEL, "messages": [{"role": "user", "content": near}]},
        headers={"x-api-key": "sekret"},
    ).json()["input_tokens"]
    assert 200 < counted < 250
    r = client.responses.create(model=MODEL, input=near, temperature=0)
    assert r.usage is not None and r.usage.input_tokens == counted
    assert r.usage.output_tokens == 256 - counted
    assert r.status == "incomplete"


def test_server_output_cap_applies_without_max_output_tokens(gemma_path: Path) -> None:
    server = EngyServer(str(gemma_path), "--max-output-tokens", "4")
    try:
        with _client(server) as client:
            r = client.responses.create(model=MODEL, input=QUESTION, temperature=0)
            assert r.status == "incomplete"
            assert r.incomplete_details is not None
            assert r.incomplete_details.reason == "max_output_tokens"
            assert r.usage is not None and r.usage.output_tokens == 4
            # A larger request is capped too.
            r = client.responses.create(
                model=MODEL, input=QUESTION, temperature=0, max_output_tokens=100
            )
            assert r.status == "incomplete"
            assert r.usage is not None and r.usage.output_tokens == 4
        # The same cap on /v1/messages, reported as max_tokens.
        body = {
            "model": MODEL,
            "max_tokens": 100,
            "temperature": 0,
            "messages": [{"role": "user", "content": QUESTION}],
        }
        msg = http.post(server.url + "/v1/messages", json=body).json()
        assert msg["stop_reason"] == "max_tokens"
        assert msg["usage"]["output_tokens"] == 4
    finally:
        server.stop()
