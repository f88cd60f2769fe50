"""Granite 4.0 / 4.1: the Hermes format exactly, so family "hermes".

The templates ask for and render `<tool_call>\\n{"name": ..., "arguments":
...}\\n</tool_call>`, one block per call, a newline between the text and the
first call and between calls, and no reasoning. Here: the real templates
render tools, calls and results; the hermes parser reads what they write
and a realistic Granite output split at every offset; both are detected as
hermes; and a forced call makes a round trip through both endpoints on a
tiny GGUF with the Granite 4.0 template."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from support.family_roundtrip import (
    messages_follow_up,
    messages_forced_call,
    responses_follow_up,
    responses_forced_call,
)
from support.parsing import Result, assert_parses, calls, parse
from support.paths import CACHE, FIXTURES, need_fixtures
from support.server import EngyServer

from engy_local.chat import Message, Text, ToolCall, ToolResult, ToolSpec
from engy_local.prompt.families import detect_family
from engy_local.prompt.messages import to_template_messages, to_template_tools
from engy_local.prompt.template import ChatTemplate

TEMPLATES = FIXTURES / "chat-templates"
GRANITES = ["ibm-granite-granite-4.0.jinja", "ibm-granite-granite-4.1.jinja"]
TOOLS = ("get_weather", "read_file")


def template(name: str) -> ChatTemplate:
    path = TEMPLATES / name
    if not path.is_file():
        pytest.skip(f"chat template fixture not found: {path}")
    return ChatTemplate(path.read_text())


WEATHER = {"city": "Paris", "days": 3}
READ = {"path": "/etc/hosts", "options": {"follow": True}}
SPECS = [
    ToolSpec("get_weather", "Weather for a city.", {"type": "object", "properties": {}}),
    ToolSpec("read_file", "Read a file.", {"type": "object", "properties": {}}),
]
CONVERSATION = [
    Message("system", (Text("Be brief."),)),
    Message("user", (Text("Weather in Paris, and my hosts file?"),)),
    Message(
        "assistant",
        (
            Text("Looking both up."),
            ToolCall("call_a", "get_weather", json.dumps(WEATHER)),
            ToolCall("call_b", "read_file", json.dumps(READ)),
        ),
    ),
    Message("tool", (ToolResult("call_a", "Sunny, 21 C"), ToolResult("call_b", "127.0.0.1 x"))),
    Message("user", (Text("Thanks!"),)),
]


def block(name: str, arguments: dict[str, object]) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {json.dumps(arguments)}}}\n</tool_call>'


@pytest.mark.parametrize("name", GRANITES)
def test_a_conversation_with_calls_renders_as_the_model_expects(name: str) -> None:
    chat = template(name)
    text = chat.render(
        to_template_messages(CONVERSATION, quirks=chat.quirks), tools=to_template_tools(SPECS)
    )
    role = "<|start_of_role|>{}<|end_of_role|>"
    expected = [
        role.format("system") + "Be brief.\n\nYou are a helpful assistant with access",
        '<tools>\n{"type": "function", "function": {"name": "get_weather"',
        role.format("user") + "Weather in Paris, and my hosts file?<|end_of_text|>\n",
        role.format("assistant") + "Looking both up.\n" + block("get_weather", WEATHER) + "\n",
        block("read_file", READ) + "<|end_of_text|>\n",
        role.format("user") + "\n<tool_response>\nSunny, 21 C\n</tool_response>"
        "\n<tool_response>\n127.0.0.1 x\n</tool_response><|end_of_text|>\n",
        role.format("user") + "Thanks!<|end_of_text|>\n",
    ]
    at = 0
    for piece in expected:
        found = text.find(piece, at)
        assert found >= 0, f"{piece!r} not after {text[:at][-300:]!r}"
        at = found + len(piece)
    assert text.endswith(role.format("assistant"))


@pytest.mark.parametrize("name", GRANITES)
def test_the_parser_reads_the_turn_the_template_writes(name: str) -> None:
    chat = template(name)
    text = chat.render(
        to_template_messages(CONVERSATION[:3], quirks=chat.quirks),
        tools=to_template_tools(SPECS),
        add_generation_prompt=False,
    )
    head = "<|start_of_role|>assistant<|end_of_role|>"
    turn = text.split(head)[1].split("<|end_of_text|>")[0]
    got = parse([turn], family="hermes", tools=TOOLS)
    assert got.text == "Looking both up."
    assert [(n, json.loads(a)) for _, n, a in got.calls] == [
        ("get_weather", WEATHER),
        ("read_file", READ),
    ]


OUTPUT = (
    "I'll check the weather and read the file.\n"
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "São Paulo", "days": 3, '
    '"units": {"temp": "C"}}}\n</tool_call>\n'
    '<tool_call>\n{"name": "read_file", "arguments": {"path": "/tmp/a.py", "limit": 2.5, '
    '"options": {"follow": true, "tags": ["x", null]}}}\n</tool_call>'
)
EXPECTED = Result(
    text="I'll check the weather and read the file.",
    calls=calls(
        ("get_weather", '{"city": "São Paulo", "days": 3, "units": {"temp": "C"}}'),
        (
            "read_file",
            '{"path": "/tmp/a.py", "limit": 2.5, "options": {"follow": true, "tags": ["x", null]}}',
        ),
    ),
)


def test_a_granite_output_parses_the_same_however_split() -> None:
    assert_parses(OUTPUT, EXPECTED, family="hermes", tools=TOOLS)


def test_a_call_to_a_tool_not_offered_is_text() -> None:
    output = 'Sure.\n<tool_call>\n{"name": "send_mail", "arguments": {}}\n</tool_call>'
    assert_parses(output, Result(text=output), family="hermes", tools=TOOLS)


@pytest.mark.parametrize("name", GRANITES)
def test_detected_as_hermes(name: str) -> None:
    assert detect_family(template(name).source) == "hermes"


def test_granite_3_is_not_detected_as_hermes() -> None:
    # Granite 3.3 has its own <|tool_call|> list format and thinking switch.
    path = TEMPLATES / "ibm-granite-granite-3.3-2B-Instruct.jinja"
    if not path.is_file():
        pytest.skip(f"chat template fixture not found: {path}")
    assert detect_family(path.read_text()) != "hermes"


# ---- end to end on a tiny model -------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[EngyServer]:
    need_fixtures()
    from support.ggufs import tiny_gguf_cached

    # The Llama 3 vocabulary has Granite's end token, <|end_of_text|>.
    path = tiny_gguf_cached(
        CACHE / "ggufs", vocab="llama-bpe", template=GRANITES[0], end_token="<|end_of_text|>"
    )
    engy = EngyServer(str(path), "--ctx-size", "4096")
    yield engy
    engy.stop()


@pytest.mark.parametrize("stream", [False, True])
def test_messages_forced_call_round_trip(server: EngyServer, stream: bool) -> None:
    call = messages_forced_call(server.url, stream=stream)
    messages_follow_up(server.url, call, stream=stream)


@pytest.mark.parametrize("stream", [False, True])
def test_responses_forced_call_round_trip(server: EngyServer, stream: bool) -> None:
    call = responses_forced_call(server.url, stream=stream)
    responses_follow_up(server.url, call, stream=stream)
