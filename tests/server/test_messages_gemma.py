"""/v1/messages end to end: the official anthropic SDK against a real
`engy serve` on the real gemma-3-270m model."""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Iterator

import anthropic
import httpx
import pytest
from support.server import EngyServer

MODEL = "gemma-3-270m-base"
# This machine is small and noisy: generous timeouts, never timed assertions
# on single requests.
http = httpx.Client(timeout=120)
HELLO = [{"role": "user", "content": "Write one short sentence about the sea."}]


@pytest.fixture(scope="module")
def client(gemma_server: EngyServer) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=gemma_server.url, api_key="unused", max_retries=0) as c:
        yield c


def test_startup_lines_name_model_backend_context_and_url(gemma_server: EngyServer) -> None:
    out = gemma_server.output()
    assert "gemma-3-270m" in out
    assert "CPU" in out
    assert "32768 tokens" in out
    assert gemma_server.url in out


def test_non_streaming_message(client: anthropic.Anthropic) -> None:
    msg = client.messages.create(model=MODEL, max_tokens=12, system="Be brief.", messages=HELLO)
    assert msg.type == "message" and msg.role == "assistant"
    assert msg.model == MODEL
    assert msg.content[0].type == "text" and msg.content[0].text.strip()
    assert msg.stop_reason in ("end_turn", "max_tokens")
    assert 0 < msg.usage.output_tokens <= 12
    assert msg.usage.input_tokens + (msg.usage.cache_read_input_tokens or 0) > 5
    assert msg.usage.cache_creation_input_tokens == 0


def test_vendor_prefix_is_ignored_and_model_echoed(client: anthropic.Anthropic) -> None:
    msg = client.messages.create(model="google/gemma-3-270m-base", max_tokens=3, messages=HELLO)
    assert msg.model == "google/gemma-3-270m-base"


def test_streaming_final_message_equals_streamed_text(client: anthropic.Anthropic) -> None:
    with client.messages.stream(model=MODEL, max_tokens=20, messages=HELLO) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed.strip()
    assert final.content[0].type == "text"
    assert final.content[0].text == streamed
    assert final.stop_reason in ("end_turn", "max_tokens")
    assert final.usage.output_tokens > 0


def test_stream_event_sequence_on_the_wire(gemma_server: EngyServer) -> None:
    body = {"model": MODEL, "max_tokens": 5, "stream": True, "messages": HELLO}
    with http.stream("POST", gemma_server.url + "/v1/messages?beta=true", json=body) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in r.iter_lines() if line.startswith("event: ")]
    names = [line[len("event: ") :] for line in lines if line != "event: ping"]
    assert names[0] == "message_start"
    assert names[-2:] == ["message_delta", "message_stop"]
    assert names[1] == "content_block_start" and names[-3] == "content_block_stop"
    assert set(names[2:-3]) == {"content_block_delta"}


def test_count_tokens_equals_input_tokens_of_the_same_request(client: anthropic.Anthropic) -> None:
    messages = [{"role": "user", "content": "Count me exactly, please: one two three."}]
    counted = client.messages.count_tokens(model=MODEL, system="You count.", messages=messages)
    msg = client.messages.create(model=MODEL, max_tokens=2, system="You count.", messages=messages)
    used = msg.usage.input_tokens + (msg.usage.cache_read_input_tokens or 0)
    assert counted.input_tokens == used


def test_extending_a_conversation_reads_the_prefix_from_cache(client: anthropic.Anthropic) -> None:
    system = "You are a helpful assistant. " * 20
    first = [{"role": "user", "content": "Name a colour."}]
    a = client.messages.create(model=MODEL, max_tokens=4, system=system, messages=first)
    longer = [
        *first,
        {"role": "assistant", "content": a.content[0].text},
        {"role": "user", "content": "And another one."},
    ]
    b = client.messages.create(model=MODEL, max_tokens=4, system=system, messages=longer)
    prompt_a = a.usage.input_tokens + (a.usage.cache_read_input_tokens or 0)
    cached = b.usage.cache_read_input_tokens or 0
    assert cached >= prompt_a - 2  # the whole first prompt is reused
    # Only the new tokens were evaluated.
    assert b.usage.input_tokens < 30
    assert (
        b.usage.input_tokens + cached
        == client.messages.count_tokens(model=MODEL, system=system, messages=longer).input_tokens
    )


def test_models_list_and_probes(client: anthropic.Anthropic, gemma_server: EngyServer) -> None:
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL]
    for path in ("/", "/api/hello"):
        assert http.head(gemma_server.url + path).status_code == 200


def test_unknown_model_is_404(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.NotFoundError) as err:
        client.messages.create(model="no-such-model", max_tokens=5, messages=HELLO)
    assert err.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"max_tokens": "ten", "messages": HELLO}, "max_tokens"),
        ({"max_tokens": 5}, "messages"),
        ({"max_tokens": 5, "messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
        ({"max_tokens": 5, "messages": HELLO, "temperature": "hot"}, "temperature"),
        ({"max_tokens": 5, "messages": HELLO, "tool_choice": {"type": "maybe"}}, "tool_choice"),
    ],
)
def test_bad_fields_are_400_naming_the_field(
    gemma_server: EngyServer, body: dict, field: str
) -> None:
    r = http.post(gemma_server.url + "/v1/messages", json={"model": MODEL, **body})
    assert r.status_code == 400
    error = r.json()
    assert error["type"] == "error"
    assert error["error"]["type"] == "invalid_request_error"
    assert field in error["error"]["message"]


def test_unknown_fields_and_headers_are_ignored(gemma_server: EngyServer) -> None:
    body = {
        "model": MODEL,
        "max_tokens": 3,
        "messages": HELLO,
        "context_management": {"edits": []},
        "output_config": {"effort": "high"},
        "metadata": {"user_id": '{"device_id":"x"}'},
        "something_new": [1, 2, 3],
    }
    headers = {"anthropic-beta": "made-up-beta-2099", "x-app": "cli"}
    r = http.post(gemma_server.url + "/v1/messages?beta=true", json=body, headers=headers)
    assert r.status_code == 200, r.text


def test_malformed_json_is_400(gemma_server: EngyServer) -> None:
    r = http.post(gemma_server.url + "/v1/messages", content=b"{not json")
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "invalid_request_error"


def test_images_are_refused_by_a_text_only_model(client: anthropic.Anthropic) -> None:
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"0" * 20).decode()
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}}
    with pytest.raises(anthropic.BadRequestError) as err:
        client.messages.create(
            model=MODEL,
            max_tokens=5,
            messages=[{"role": "user", "content": [image, {"type": "text", "text": "What?"}]}],
        )
    assert "does not support images" in str(err.value)
    url_image = {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}
    with pytest.raises(anthropic.BadRequestError) as err:
        client.messages.create(
            model=MODEL, max_tokens=5, messages=[{"role": "user", "content": [url_image]}]
        )
    assert "base64" in str(err.value)


def test_oversized_body_is_413(gemma_server: EngyServer) -> None:
    big = "x" * (33 * 1024 * 1024)
    body = {"model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": big}]}
    r = http.post(gemma_server.url + "/v1/messages", json=body, timeout=60)
    assert r.status_code == 413
    assert r.json()["error"]["type"] == "request_too_large"
    assert http.head(gemma_server.url + "/").status_code == 200


def test_disconnect_mid_stream_frees_the_model(gemma_server: EngyServer) -> None:
    # gemma-3-270m is a base model: it does not end its turn on its own.
    long = {"model": MODEL, "max_tokens": 8000, "stream": True, "messages": HELLO}
    with http.stream("POST", gemma_server.url + "/v1/messages", json=long) as r:
        deltas = 0
        for line in r.iter_lines():
            deltas += line.startswith("event: content_block_delta")
            if deltas >= 3:
                break
    started = time.monotonic()
    client = anthropic.Anthropic(base_url=gemma_server.url, api_key="x", max_retries=0)
    msg = client.messages.create(model=MODEL, max_tokens=3, messages=HELLO)
    assert msg.usage.output_tokens <= 3
    # The abandoned 8000-token answer would take minutes on this model.
    assert time.monotonic() - started < 60


def _api_key_server(gemma_path: object) -> EngyServer:
    return EngyServer(str(gemma_path), "--api-key", "sekret", "--ctx-size", "256")


@pytest.fixture(scope="module")
def small_server(gemma_path: object) -> object:
    server = _api_key_server(gemma_path)
    yield server
    server.stop()


def test_api_key_required_when_set(small_server: EngyServer) -> None:
    bad = anthropic.Anthropic(base_url=small_server.url, api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError):
        bad.messages.create(model=MODEL, max_tokens=3, messages=HELLO)
    r = http.post(small_server.url + "/v1/messages", json={"model": MODEL, "messages": HELLO})
    assert r.status_code == 401
    assert r.json()["error"]["type"] == "authentication_error"
    good = anthropic.Anthropic(base_url=small_server.url, api_key="sekret", max_retries=0)
    assert good.messages.create(model=MODEL, max_tokens=2, messages=HELLO).content
    bearer = anthropic.Anthropic(base_url=small_server.url, auth_token="sekret", max_retries=0)
    assert bearer.messages.create(model=MODEL, max_tokens=2, messages=HELLO).content


def test_prompt_too_long_is_400_with_the_contract_text(small_server: EngyServer) -> None:
    client = anthropic.Anthropic(base_url=small_server.url, api_key="sekret", max_retries=0)
    long = [{"role": "user", "content": "word " * 400}]
    with pytest.raises(anthropic.BadRequestError) as err:
        client.messages.create(model=MODEL, max_tokens=5, messages=long)
    message = err.value.body["error"]["message"]  # type: ignore[index]
    assert message.startswith("prompt is too long: ")
    assert message.endswith(" tokens > 256 maximum")
    n = int(message.split()[4])
    assert n > 256


def test_max_tokens_over_the_window_is_reduced_to_fit(small_server: EngyServer) -> None:
    client = anthropic.Anthropic(base_url=small_server.url, api_key="sekret", max_retries=0)
    # (The SDK insists on streaming for a max_tokens this large.)
    with client.messages.stream(model=MODEL, max_tokens=100000, messages=HELLO) as stream:
        msg = stream.get_final_message()
    used = msg.usage.input_tokens + (msg.usage.cache_read_input_tokens or 0)
    assert used + msg.usage.output_tokens <= 256
    assert msg.stop_reason in ("end_turn", "max_tokens")


def test_full_queue_is_429_and_the_server_keeps_serving(gemma_path: object) -> None:
    # One sequence, one place in the queue: a third request is turned away.
    server = EngyServer(str(gemma_path), "--queue-size", "1", "--parallel", "1")
    try:
        long = {"model": MODEL, "max_tokens": 4000, "stream": True, "messages": HELLO}
        stop = threading.Event()
        seen: list[int] = []

        def hold() -> None:
            with http.stream("POST", server.url + "/v1/messages", json=long, timeout=300) as r:
                seen.append(r.status_code)
                for _ in r.iter_lines():
                    if stop.is_set():
                        break

        holders = [threading.Thread(target=hold) for _ in range(2)]
        for t in holders:  # one generating, one waiting in the queue
            t.start()
            time.sleep(1.0)
        r = http.post(server.url + "/v1/messages", json={**long, "stream": False})
        assert r.status_code == 429
        assert r.json()["error"]["type"] == "rate_limit_error"
        assert int(r.headers["retry-after"]) >= 1
        stop.set()
        for t in holders:
            t.join(timeout=120)
        assert seen == [200, 200]
        client = anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0)
        assert client.messages.create(model=MODEL, max_tokens=2, messages=HELLO).content
    finally:
        server.stop()


def test_ctrl_c_stops_cleanly(gemma_path: object) -> None:
    server = EngyServer(str(gemma_path))
    assert server.stop() == 0
    assert "engy stopped" in server.output()
