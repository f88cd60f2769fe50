"""Image blocks of /v1/messages, parsed (protocols/images.py): base64
sources in user turns and tool results, in order; url sources, bad data and
unknown types are 400 naming the block; the size and count limits are 413."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from support.images import BLUE, RED, b64, image_block, png

from engy_local.chat import Image, Text, ToolResult
from engy_local.errors import InvalidRequest, RequestTooLarge
from engy_local.protocols import anthropic, responses
from engy_local.protocols.images import ImageLimits, image_format


def body(*content: Any, **extra: Any) -> dict[str, Any]:
    return {
        "model": "m",
        "max_tokens": 8,
        "messages": [{"role": "user", "content": list(content)}],
        **extra,
    }


def parse(b: dict[str, Any], limits: ImageLimits | None = None) -> anthropic.Parsed:
    return anthropic.parse_request(b, images=limits)


def test_images_stand_where_they_were_sent() -> None:
    parsed = parse(
        body(
            {"type": "text", "text": "compare"},
            image_block(png(RED)),
            {"type": "text", "text": "with"},
            image_block(png(BLUE)),
        )
    )
    (message,) = parsed.chat.messages
    kinds = [type(p).__name__ for p in message.parts]
    assert kinds == ["Text", "Image", "Text", "Image"]
    red, blue = (p for p in message.parts if isinstance(p, Image))
    assert base64.b64decode(red.data) == png(RED)
    assert base64.b64decode(blue.data) == png(BLUE)
    assert red.where == "messages[0].content[1]"


def test_an_image_inside_a_tool_result_keeps_its_place() -> None:
    b = {
        "model": "m",
        "max_tokens": 8,
        "messages": [
            {"role": "user", "content": "take a screenshot"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "shot", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": [
                            {"type": "text", "text": "before"},
                            image_block(png(RED)),
                            {"type": "text", "text": "after"},
                        ],
                    }
                ],
            },
        ],
    }
    result = parse(b).chat.messages[-1].parts[0]
    assert isinstance(result, ToolResult)
    assert result.content == "before\nafter"
    assert [type(p) for p in result.parts] == [Text, Image, Text]
    assert result.parts[1].where == "messages[2].content[0].content[1]"  # type: ignore[union-attr]


def test_a_text_only_tool_result_is_as_before() -> None:
    b = body(
        {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "x"}]}
    )
    (result,) = parse(b).chat.messages[0].parts
    assert result == ToolResult("t1", "x")


@pytest.mark.parametrize(
    ("block", "says"),
    [
        (
            {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
            "messages[0].content[0].source: only base64 images are supported, not 'url'",
        ),
        (
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "*"}},
            "messages[0].content[0].source.data: not valid base64",
        ),
        (
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": b64(b"hello!")},
            },
            "messages[0].content[0].source.data: not a PNG, JPEG, GIF or WebP image",
        ),
        (
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/bmp", "data": b64(png(RED))},
            },
            "messages[0].content[0].source.media_type: expected one of",
        ),
    ],
)
def test_bad_image_blocks_are_400_naming_the_block(block: dict[str, Any], says: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse(body(block))
    assert caught.value.status == 400
    assert caught.value.message.startswith(says)


def test_one_byte_over_the_size_limit_is_413() -> None:
    data = png(RED)
    limits = ImageLimits(max_image_bytes=len(data))
    parse(body(image_block(data)), limits)  # exactly at the limit: fine
    with pytest.raises(RequestTooLarge) as caught:
        parse(body(image_block(data + b"\0")), limits)
    assert caught.value.status == 413
    assert "--max-image-bytes" in caught.value.message
    status, err, _ = anthropic.error_body(caught.value)
    assert (status, err["error"]["type"]) == (413, "request_too_large")


def test_one_image_over_the_count_limit_is_413_counting_every_turn() -> None:
    limits = ImageLimits(max_images=2)
    two = {
        "model": "m",
        "max_tokens": 8,
        "messages": [
            {"role": "user", "content": [image_block(png(RED))]},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": [image_block(png(BLUE))]},
        ],
    }
    parse(two, limits)
    three = {**two, "messages": [*two["messages"], {"role": "assistant", "content": "ok"}]}
    three["messages"].append({"role": "user", "content": [image_block(png(RED))]})
    with pytest.raises(RequestTooLarge, match="3 images, over the limit of 2"):
        parse(three, limits)
    # count_tokens has the same limits
    with pytest.raises(RequestTooLarge):
        anthropic.parse_request(three, counting=True, images=limits)


def test_media_types_are_told_by_their_bytes() -> None:
    assert image_format(png(RED)) == "image/png"
    assert image_format(b"\xff\xd8\xff\xe0....") == "image/jpeg"
    assert image_format(b"GIF89a....") == "image/gif"
    assert image_format(b"RIFF\0\0\0\0WEBPVP8 ") == "image/webp"
    assert image_format(b"BM....") is None


def test_responses_input_images_are_dropped_never_an_error() -> None:
    parsed = responses.parse_request(
        {
            "model": "m",
            "input": [
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "what is this?"},
                        {
                            "type": "input_image",
                            "image_url": "data:image/png;base64," + b64(png(RED)),
                        },
                    ],
                }
            ],
        }
    )
    (message,) = parsed.chat.messages
    assert message.parts == (Text("what is this?"),)
