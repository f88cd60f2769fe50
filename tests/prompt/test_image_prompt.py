"""Where images go in a rendered prompt (engine/images.py), on real chat
templates: the template's own image placeholder where it has one, the
media marker where the image stands otherwise, and the images' bytes in the
order their markers have."""

from __future__ import annotations

import base64

import pytest
from support.images import BLUE, GREEN, RED, png
from support.paths import FIXTURES

from engy_local.chat import Image, Message, Text, ToolCall, ToolResult
from engy_local.prompt.render.images import image_placeholder, place_images
from engy_local.prompt.render.messages import ImageSlots, to_template_messages
from engy_local.prompt.render.template import ChatTemplate

FIXTURES = FIXTURES / "chat-templates"
MARKER = "<__media__>"


def template(name: str) -> ChatTemplate:
    path = FIXTURES / f"{name}.jinja"
    if not path.is_file():
        pytest.skip(f"chat template fixture {path} is absent")
    return ChatTemplate(path.read_text(encoding="utf-8"), bos_token="<s>", eos_token="</s>")


def image(rgb: tuple[int, int, int], where: str = "") -> Image:
    return Image("image/png", base64.b64encode(png(rgb)).decode(), where=where)


def place(t: ChatTemplate, conversation: list[Message]) -> tuple[str, list[bytes]]:
    def render(slots: ImageSlots | None) -> str:
        messages = to_template_messages(conversation, quirks=t.quirks, images=slots)
        return t.render(messages, add_generation_prompt=True)

    placed = place_images(conversation, render, image_placeholder(t), MARKER)
    return placed.text, placed.images


@pytest.mark.parametrize(
    ("name", "placeholder"),
    [
        ("google-gemma-4-31B-it", "<|image|>"),
        ("mistralai-Ministral-3-14B-Reasoning-2512", "[IMG]"),
        # Its placeholder shares "<|" with what follows it: the whole token is found.
        ("Cohere2MoE", "<|IMG_PATCH|>"),
        ("Qwen-Qwen3-0.6B", None),  # a text model's template: no placeholder
        ("meta-llama-Llama-3.1-8B-Instruct", None),
    ],
)
def test_the_placeholder_a_template_writes_for_an_image(name: str, placeholder: str | None) -> None:
    assert image_placeholder(template(name)) == placeholder


def test_the_templates_placeholder_becomes_the_marker() -> None:
    t = template("google-gemma-4-31B-it")
    text, images = place(t, [Message("user", (Text("What is"), image(RED), Text("this?")))])
    assert "<|image|>" not in text
    assert text.count(MARKER) == 1
    before, after = text.split(MARKER)
    assert before.endswith("What is") and after.startswith("this?")
    assert images == [png(RED)]


def test_without_a_placeholder_the_marker_stands_where_the_image_does() -> None:
    t = template("Qwen-Qwen3-0.6B")
    conversation = [Message("user", (Text("first"), image(RED), Text("then"), image(BLUE)))]
    text, images = place(t, conversation)
    assert f"first\n\n{MARKER}\n\nthen\n\n{MARKER}" in text
    assert images == [png(RED), png(BLUE)]


def test_images_of_user_turns_and_tool_results_come_in_prompt_order() -> None:
    call = ToolCall("call_1", "screenshot", "{}")
    conversation = [
        Message("user", (image(RED), Text("Look at this, then take a screenshot."))),
        Message("assistant", (call,)),
        Message(
            "tool",
            (
                ToolResult(
                    "call_1",
                    "here it is",
                    name="screenshot",
                    parts=(Text("here it is"), image(GREEN)),
                ),
            ),
        ),
        Message("user", (Text("And this one?"), image(BLUE))),
    ]
    for name in ("Qwen-Qwen3-0.6B", "google-gemma-4-31B-it"):
        text, images = place(template(name), conversation)
        assert text.count(MARKER) == 3, name
        assert images == [png(RED), png(GREEN), png(BLUE)], name
        assert "here it is\n" + MARKER in text, name


def test_the_same_conversation_renders_the_same_prompt() -> None:
    # The sentinels differ per render; what comes out must not.
    t = template("google-gemma-4-31B-it")
    conversation = [Message("user", (image(RED), Text("what?")))]
    assert place(t, conversation) == place(t, conversation)


def test_a_marker_typed_as_text_is_not_an_image() -> None:
    t = template("Qwen-Qwen3-0.6B")
    text, images = place(t, [Message("user", (Text(f"what is {MARKER}?"), image(RED)))])
    assert text.count(MARKER) == 1
    assert images == [png(RED)]


def test_without_images_nothing_changes() -> None:
    t = template("Qwen-Qwen3-0.6B")
    conversation = [Message("user", (Text("hi"),))]
    text, images = place(t, conversation)
    assert images == []
    assert text == t.render(to_template_messages(conversation), add_generation_prompt=True)
