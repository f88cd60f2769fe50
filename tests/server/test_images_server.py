"""Images on /v1/messages end to end: the official anthropic SDK against a
real `engy serve --mmproj` on the tiny model that sees colours (a red image
makes it answer " red", a blue one " blue"; text alone, "Hello from engy.").
So a right answer shows the image reached the model through the server's
scheduler, and a cache read shows the image's tokens were reused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from support.images import BLUE, GREEN, RED, b64, image_block, png
from support.paths import ANSWER
from support.server import EngyServer

COLOURS = (RED, BLUE, GREEN)
SIZES = (29, 30, 31, 32)  # pixels a side: another size is another image, same tokens
LIMIT = max(len(png(c, n)) for c in COLOURS for n in SIZES)  # every test image fits
MAX_IMAGES = 3
IMAGE_TOKENS = 16  # (32 / 8) ** 2 patches
http = httpx.Client(timeout=120)


@pytest.fixture(scope="module")
def server(tiny_vision: tuple[Path, Path]) -> Iterator[EngyServer]:
    model, projector = tiny_vision
    s = EngyServer(
        str(model),
        "--mmproj",
        str(projector),
        "--ctx-size",
        "4096",
        "--max-image-bytes",
        str(LIMIT),
        "--max-images",
        str(MAX_IMAGES),
    )
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server: EngyServer) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0) as c:
        yield c


@pytest.fixture(scope="module")
def model_id(server: EngyServer) -> str:
    return str(http.get(server.url + "/v1/models").json()["data"][0]["id"])


def ask(*content: Any) -> list[dict[str, Any]]:
    return [{"role": "user", "content": list(content)}]


def count(server: EngyServer, model: str, messages: list[dict[str, Any]]) -> int:
    r = http.post(
        server.url + "/v1/messages/count_tokens", json={"model": model, "messages": messages}
    )
    assert r.status_code == 200, r.text
    return int(r.json()["input_tokens"])


def post(server: EngyServer, model: str, messages: list[dict[str, Any]]) -> httpx.Response:
    return http.post(
        server.url + "/v1/messages",
        json={"model": model, "max_tokens": 8, "messages": messages},
    )


def test_models_say_the_model_takes_images(server: EngyServer) -> None:
    (entry,) = http.get(server.url + "/v1/models").json()["data"]
    assert entry["supports_images"] is True
    (loaded,) = http.get(server.url + "/engy/ps").json()["models"]
    assert loaded["images"] is True  # what `engy ps` shows


def test_a_png_is_seen_and_its_tokens_counted(
    client: anthropic.Anthropic, server: EngyServer, model_id: str
) -> None:
    messages = ask(image_block(png(RED)), {"type": "text", "text": "What colour is it?"})
    msg = client.messages.create(model=model_id, max_tokens=8, messages=messages)  # type: ignore[arg-type]
    assert msg.content[0].type == "text" and msg.content[0].text == " red"
    assert msg.stop_reason == "end_turn"
    used = msg.usage.input_tokens + (msg.usage.cache_read_input_tokens or 0)
    assert used == count(server, model_id, messages)
    text_only = count(server, model_id, ask({"type": "text", "text": "What colour is it?"}))
    assert used >= text_only + IMAGE_TOKENS


def test_without_an_image_the_model_answers_as_ever(
    client: anthropic.Anthropic, model_id: str
) -> None:
    msg = client.messages.create(
        model=model_id, max_tokens=16, messages=[{"role": "user", "content": "Hi"}]
    )
    assert msg.content[0].type == "text" and msg.content[0].text == ANSWER


def test_the_next_turn_reads_the_image_from_the_cache(
    client: anthropic.Anthropic, model_id: str
) -> None:
    first_turn = ask(image_block(png(BLUE)), {"type": "text", "text": "Colour, please."})
    first = client.messages.create(model=model_id, max_tokens=8, messages=first_turn)  # type: ignore[arg-type]
    assert first.content[0].type == "text" and first.content[0].text == " blue"
    prompt = first.usage.input_tokens + (first.usage.cache_read_input_tokens or 0)
    second = client.messages.create(
        model=model_id,
        max_tokens=8,
        messages=[  # type: ignore[list-item]
            *first_turn,
            {"role": "assistant", "content": " blue"},
            {"role": "user", "content": "And again?"},
        ],
    )
    assert second.content[0].type == "text" and second.content[0].text == " blue"
    # The whole first prompt, image included, came from the KV cache.
    assert (second.usage.cache_read_input_tokens or 0) >= prompt - 1
    assert (second.usage.cache_read_input_tokens or 0) > IMAGE_TOKENS


def test_streaming_sees_the_image_too(client: anthropic.Anthropic, model_id: str) -> None:
    messages = ask({"type": "text", "text": "Look:"}, image_block(png(RED)))
    with client.messages.stream(model=model_id, max_tokens=8, messages=messages) as stream:  # type: ignore[arg-type]
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed == " red"
    assert final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0) > IMAGE_TOKENS


def test_an_image_in_a_tool_result_is_seen(client: anthropic.Anthropic, model_id: str) -> None:
    messages: list[Any] = [
        {"role": "user", "content": "Take a screenshot."},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "shot", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [{"type": "text", "text": "done:"}, image_block(png(BLUE))],
                }
            ],
        },
    ]
    tools: list[Any] = [{"name": "shot", "description": "screenshot", "input_schema": {}}]
    msg = client.messages.create(model=model_id, max_tokens=8, messages=messages, tools=tools)
    assert msg.content[0].type == "text" and msg.content[0].text == " blue"


def test_two_images_in_one_message_are_seen_in_order(server: EngyServer, model_id: str) -> None:
    text = {"type": "text", "text": "Which?"}
    both = count(server, model_id, ask(image_block(png(GREEN)), image_block(png(RED)), text))
    one = count(server, model_id, ask(image_block(png(RED)), text))
    assert both >= one + IMAGE_TOKENS
    # Images no other test sends, so that no sequence holds them yet.
    green, red, blue = png(GREEN, 30), png(RED, 31), png(BLUE, 29)
    r = post(server, model_id, ask(image_block(green), image_block(red), text))
    assert r.status_code == 200 and r.json()["content"][0]["text"] == " red"
    # Order matters: the same first image is reused from the cache ...
    r = post(server, model_id, ask(image_block(green), image_block(blue), text))
    cached = r.json()["usage"]["cache_read_input_tokens"]
    assert cached >= IMAGE_TOKENS  # the green image, at the same place, was reused
    assert r.json()["content"][0]["text"] == " blue"
    # ... while a prompt that opens with the other image shares no image.
    r = post(server, model_id, ask(image_block(blue), image_block(green), text))
    assert r.json()["usage"]["cache_read_input_tokens"] < IMAGE_TOKENS
    assert r.json()["content"][0]["text"] == " blue"


def error(r: httpx.Response) -> tuple[int, str, str]:
    body = r.json()
    assert body["type"] == "error"
    return r.status_code, body["error"]["type"], body["error"]["message"]


def test_over_the_limits_is_413_and_the_server_goes_on(server: EngyServer, model_id: str) -> None:
    at_limit = png(RED) + b"\0" * (LIMIT - len(png(RED)))
    r = post(server, model_id, ask(image_block(at_limit), {"type": "text", "text": "?"}))
    assert r.status_code == 200, r.text
    over = at_limit + b"\0"
    status, kind, message = error(post(server, model_id, ask(image_block(over))))
    assert (status, kind) == (413, "request_too_large")
    assert "--max-image-bytes" in message
    too_many = ask(*[image_block(png(GREEN))] * (MAX_IMAGES + 1))
    status, kind, message = error(post(server, model_id, too_many))
    assert (status, kind) == (413, "request_too_large")
    assert "--max-images" in message
    r = post(server, model_id, ask(image_block(png(RED)), {"type": "text", "text": "?"}))
    assert r.status_code == 200 and r.json()["content"][0]["text"] == " red"


@pytest.mark.parametrize(
    ("source", "says"),
    [
        ({"type": "url", "url": "https://example.com/a.png"}, "only base64 images"),
        ({"type": "base64", "media_type": "image/png", "data": "not base64!"}, "not valid base64"),
        ({"type": "base64", "media_type": "image/png", "data": b64(b"GIF? no")}, "not a PNG"),
        # A PNG's header with nothing after it: only decoding finds out.
        (
            {"type": "base64", "media_type": "image/png", "data": b64(png(RED)[:40])},
            "messages[0].content[0]: the image could not be decoded",
        ),
    ],
)
def test_bad_images_are_400_naming_the_block(
    server: EngyServer, model_id: str, source: dict[str, Any], says: str
) -> None:
    status, kind, message = error(post(server, model_id, ask({"type": "image", "source": source})))
    assert (status, kind) == (400, "invalid_request_error")
    assert says in message
    assert "messages[0].content[0]" in message
    r = post(server, model_id, ask(image_block(png(BLUE)), {"type": "text", "text": "?"}))
    assert r.status_code == 200 and r.json()["content"][0]["text"] == " blue"


def test_a_text_only_model_refuses_images(answer_server: EngyServer) -> None:
    model = http.get(answer_server.url + "/v1/models").json()["data"][0]
    assert model["supports_images"] is False
    r = post(answer_server, model["id"], ask(image_block(png(RED))))
    status, kind, message = error(r)
    assert (status, kind) == (400, "invalid_request_error")
    assert "does not support images" in message


# ---- /v1/chat/completions: image_url parts with a data URL ---------------------------


def data_url(rgb: tuple[int, int, int], size: int = 32) -> dict[str, Any]:
    return {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64," + b64(png(rgb, size))},
    }


@pytest.mark.parametrize(("colour", "word"), [(RED, " red"), (BLUE, " blue")])
@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_chat_completions_sees_data_url_images(
    server: EngyServer, model_id: str, colour: tuple[int, int, int], word: str, stream: bool
) -> None:
    import openai

    content: Any = [{"type": "text", "text": "What colour?"}, data_url(colour)]
    with openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0) as gpt:
        kwargs: Any = {
            "model": model_id,
            "messages": [{"role": "user", "content": content}],
            "max_tokens": 8,
        }
        if stream:
            chunks = gpt.chat.completions.create(**kwargs, stream=True)
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        else:
            text = gpt.chat.completions.create(**kwargs).choices[0].message.content or ""
    assert text == word


def test_chat_completions_image_limits_and_urls(server: EngyServer, model_id: str) -> None:
    url = server.url + "/v1/chat/completions"

    def status(*parts: Any) -> tuple[int, dict[str, Any]]:
        messages = [{"role": "user", "content": list(parts)}]
        r = http.post(url, json={"model": model_id, "messages": messages, "max_tokens": 2})
        return r.status_code, r.json()

    code, body = status(*[data_url(RED)] * (MAX_IMAGES + 1))
    assert code == 413 and body["error"]["code"] == "request_too_large"
    code, body = status({"type": "image_url", "image_url": {"url": "https://x.example/a.png"}})
    assert code == 400 and body["error"]["param"] == "messages[0].content[0].image_url.url"
    assert "only base64 data URLs" in body["error"]["message"]
