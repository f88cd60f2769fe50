"""Llama 3.1 / 3.2 / 3.3 (family "llama3"): the real templates render tools,
calls and results; realistic outputs written by us parse the same however
they are split; the templates are detected from their text; and a forced
call makes a round trip through both endpoints on a tiny GGUF."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime

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

from engy_local.chat import (
    Message,
    Text,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolResult,
    ToolSpec,
)
from engy_local.prompt.families import detect_family
from engy_local.prompt.families.llama3 import Llama3Parser
from engy_local.prompt.messages import to_template_messages, to_template_tools
from engy_local.prompt.template import ChatTemplate

TEMPLATES = FIXTURES / "chat-templates"
LLAMAS = [
    "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "meta-llama-Llama-3.2-3B-Instruct.jinja",
    "meta-llama-Llama-3.3-70B-Instruct.jinja",
]
TOOLS = ("get_weather", "read_file", "Bash")


def template(name: str) -> ChatTemplate:
    path = TEMPLATES / name
    if not path.is_file():
        pytest.skip(f"chat template fixture not found: {path}")
    return ChatTemplate(
        path.read_text(), bos_token="<|begin_of_text|>", now=lambda: datetime(2025, 1, 2)
    )


# ---- rendering ------------------------------------------------------------------

WEATHER = {"city": "Paris", "days": 3, "units": {"temp": "C"}}
READ = {"path": "/etc/hosts", "lines": [1, 2.5]}
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


def call_json(name: str, arguments: dict[str, object]) -> str:
    return f'{{"name": "{name}", "parameters": {json.dumps(arguments)}}}'


@pytest.mark.parametrize("name", LLAMAS)
def test_a_conversation_with_calls_renders_as_the_model_expects(name: str) -> None:
    chat = template(name)
    text = chat.render(
        to_template_messages(CONVERSATION, quirks=chat.quirks), tools=to_template_tools(SPECS)
    )
    turn = "<|start_header_id|>{}<|end_header_id|>\n\n{}<|eot_id|>"
    # Two calls in one turn: the templates take one call per assistant turn,
    # so each call becomes a turn followed by its own result (ipython role).
    expected = [
        "Environment: ipython\n",
        "Be brief.<|eot_id|>",
        'Respond in the format {"name": function name, "parameters": dictionary',
        '"name": "get_weather"',  # the tools, in the first user turn
        "Weather in Paris, and my hosts file?<|eot_id|>",
        turn.format("assistant", call_json("get_weather", WEATHER)),
        turn.format("ipython", '"Sunny, 21 C"'),
        turn.format("assistant", call_json("read_file", READ)),
        turn.format("ipython", '"127.0.0.1 x"'),
        turn.format("user", "Thanks!"),
    ]
    at = 0
    for piece in expected:
        found = text.find(piece, at)
        assert found >= 0, f"{piece!r} not after {text[:at][-200:]!r}"
        at = found + len(piece)
    assert text.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")
    assert "<|python_tag|>" not in text  # custom tools are called bare


@pytest.mark.parametrize("name", LLAMAS)
def test_the_parser_reads_the_calls_the_template_writes(name: str) -> None:
    chat = template(name)
    text = chat.render(
        to_template_messages(CONVERSATION[:3], quirks=chat.quirks),
        tools=to_template_tools(SPECS),
        add_generation_prompt=False,
    )
    head = "<|start_header_id|>assistant<|end_header_id|>\n\n"
    turns = [t.split("<|eot_id|>")[0] for t in text.split(head)[1:]]
    got = [parse([t], family="llama3", tools=TOOLS).calls for t in turns]
    assert [[(n, json.loads(a)) for _, n, a in c] for c in got] == [
        [("get_weather", WEATHER)],
        [("read_file", READ)],
    ]


# ---- parsing --------------------------------------------------------------------

TWO_CALLS = (
    '{"name": "get_weather", "parameters": {"city": "São Paulo", "days": 3, '
    '"units": {"temp": "C", "wind": ["km/h", null]}}}; '
    '{"name": "read_file", "parameters": {"path": "/tmp/a \\"b\\".py", "limit": -2.5e3, '
    '"options": {"follow": true, "encoding": {"name": "utf-8"}}}}'
)
EXPECTED_TWO = calls(
    (
        "get_weather",
        '{"city": "São Paulo", "days": 3, "units": {"temp": "C", "wind": ["km/h", null]}}',
    ),
    (
        "read_file",
        '{"path": "/tmp/a \\"b\\".py", "limit": -2.5e3, '
        '"options": {"follow": true, "encoding": {"name": "utf-8"}}}',
    ),
)

UNOFFERED = '{"name": "rm_rf", "parameters": {"path": "/"}}; {"name": "Bash", "parameters": {}}'

# name, output, expected
GOOD = [
    (
        "plain text",
        "The capital of France is Paris.",
        Result(text="The capital of France is Paris."),
    ),
    (
        "text, then two calls after <|python_tag|>, separated by ';'",
        "I'll check both.<|python_tag|>" + TWO_CALLS,
        Result(text="I'll check both.", calls=EXPECTED_TWO),
    ),
    ("two bare calls, the whole answer", TWO_CALLS, Result(calls=EXPECTED_TWO)),
    (
        "bare calls on lines of their own, then text",
        "\n" + TWO_CALLS.replace("; ", "\n") + "\n\nBoth are on their way.",
        Result(text="Both are on their way.", calls=EXPECTED_TWO),
    ),
    (
        "a 'type' key first, and 'arguments' for 'parameters'",
        '{"type": "function", "name": "Bash", "arguments": {"command": "ls -la"}}',
        Result(calls=calls(("Bash", '{"command": "ls -la"}'))),
    ),
    (
        "keys in any order after <|python_tag|>",
        '<|python_tag|>{"parameters": {"command": "pwd"}, "name": "Bash"}<|python_tag|>'
        '{"name": "Bash", "parameters": {}}',
        Result(calls=calls(("Bash", '{"command": "pwd"}'), ("Bash", "{}"))),
    ),
    (
        "a call with no parameters and a raw newline in a string",
        '{"name": "Bash", "parameters": {"command": "echo a\nb"}}',
        Result(calls=calls(("Bash", '{"command": "echo a\\nb"}'))),
    ),
    (
        "reasoning before a call (a distilled reasoning model on this template)",
        '<think>\nThe user wants the weather.\n</think>\n\n{"name": "get_weather", '
        '"parameters": {"city": "Oslo"}}',
        Result(
            thinking="The user wants the weather.", calls=calls(("get_weather", '{"city": "Oslo"}'))
        ),
    ),
]

BAD = [
    (
        "JSON that is not a call is text",
        '{"name": "Ada", "born": 1815}',
        Result(text='{"name": "Ada", "born": 1815}'),
    ),
    (
        "a first key other than name or type is text, released at once",
        '{"parameters": {"city": "Paris"}, "name": "get_weather"}',
        Result(text='{"parameters": {"city": "Paris"}, "name": "get_weather"}'),
    ),
    (
        "a tool that was not offered is text, and so is the rest",
        UNOFFERED,
        Result(text=UNOFFERED),
    ),
    (
        "JSON in the middle of an answer is text",
        'Call it like this: {"name": "Bash", "parameters": {"command": "ls"}}',
        Result(text='Call it like this: {"name": "Bash", "parameters": {"command": "ls"}}'),
    ),
    (
        "a builtin tool after <|python_tag|> is text",
        'Searching. <|python_tag|>brave_search.call(query="Paris weather")',
        Result(text='Searching. <|python_tag|>brave_search.call(query="Paris weather")'),
    ),
    (
        "a name cut off is text",
        '<|python_tag|>{"name": "get_wea',
        Result(text='<|python_tag|>{"name": "get_wea'),
    ),
    (
        "JSON broken after the start is cut back, and the rest is text",
        '{"name": "Bash", "parameters": {"command": "ls", oops}} sorry',
        Result(text="oops}} sorry", calls=calls(("Bash", '{"command": "ls"}'))),
    ),
    (
        "an unclosed call is closed",
        '{"name": "read_file", "parameters": {"path": "/a", "options": {"follow": tr',
        Result(calls=calls(("read_file", '{"path": "/a", "options": {}}'))),
    ),
    (
        "arguments that are not an object",
        '{"name": "Bash", "parameters": [1]}; {"name": "Bash", "parameters": "ls"}',
        Result(calls=calls(("Bash", "{}"), ("Bash", "{}"))),
    ),
    (
        "a stray ';' after the last call is dropped",
        '{"name": "Bash", "parameters": {}};\n',
        Result(calls=calls(("Bash", "{}"))),
    ),
    ("output ending inside a marker", "Hi <|python_ta", Result(text="Hi <|python_ta")),
    ("only whitespace", "\n \n", Result(text="\n \n")),
]


@pytest.mark.parametrize(("output", "expected"), [r[1:] for r in GOOD], ids=[r[0] for r in GOOD])
def test_outputs(output: str, expected: Result) -> None:
    assert_parses(output, expected, family="llama3", tools=TOOLS)


@pytest.mark.parametrize(("output", "expected"), [r[1:] for r in BAD], ids=[r[0] for r in BAD])
def test_bad_outputs(output: str, expected: Result) -> None:
    assert_parses(output, expected, family="llama3", tools=TOOLS)


def test_no_tools_offered_means_calls_are_text() -> None:
    output = '{"name": "Bash", "parameters": {}}'
    assert_parses(output, Result(text=output), family="llama3", tools=())


def test_event_sequence_streams_arguments() -> None:
    """The exact events for a stream cut the way a model's tokens would be."""
    parser = Llama3Parser(tools=["Bash"], thinking=False, new_id=lambda: "toolu_1")
    steps = [
        ("\n", []),
        ('{"', []),
        ('name": "Ba', []),
        ('sh", "parameters": ', [ToolCallStart(0, "toolu_1", "Bash")]),
        ('{"command', [ToolCallDelta(0, "{")]),
        ('": "ls', [ToolCallDelta(0, '"command": "ls')]),
        (' -la"', [ToolCallDelta(0, ' -la"')]),
        ("}", [ToolCallDelta(0, "}")]),
        ("}", [ToolCallEnd(0, '{"command": "ls -la"}')]),
    ]
    for chunk, expected in steps:
        assert parser.feed(chunk) == expected, chunk
    assert parser.finish() == []


def test_text_is_held_only_while_it_may_be_a_call() -> None:
    parser = Llama3Parser(tools=["Bash"], thinking=False, new_id=lambda: "x")
    assert parser.feed("  ") == []
    assert parser.feed("Hi {") == [TextDelta("  Hi {")]
    assert parser.feed(" <|python") == []
    assert parser.feed("_") == []
    assert parser.feed("x") == [TextDelta(" <|python_x")]


# ---- detection ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "family"),
    [
        *[(name, "llama3") for name in LLAMAS],
        ("NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", "hermes"),
    ],
)
def test_detected_from_the_template_text(name: str, family: str) -> None:
    path = TEMPLATES / name
    if not path.is_file():
        pytest.skip(f"chat template fixture not found: {path}")
    assert detect_family(path.read_text()) == family


@pytest.mark.parametrize(
    "name",
    ["meetkai-functionary-medium-v3.1.jinja", "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja"],
)
def test_other_llama_based_templates_are_not_llama3(name: str) -> None:
    path = TEMPLATES / name
    if not path.is_file():
        pytest.skip(f"chat template fixture not found: {path}")
    assert detect_family(path.read_text()) != "llama3"


# ---- end to end on a tiny model -------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[EngyServer]:
    need_fixtures()
    from support.ggufs import tiny_gguf_cached

    path = tiny_gguf_cached(CACHE / "ggufs", vocab="llama-bpe", template=LLAMAS[0])
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
