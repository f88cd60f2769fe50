"""Gemma 4 (family "gemma4"): the real template renders tools, calls,
results and thinking; the parser reads the calls the template writes, and
realistic outputs written by us parse the same however they are split; the
forced-call grammar writes Gemma's notation; the template is detected from
its text; and a forced call makes a round trip through both endpoints on a
tiny GGUF with the Gemma 4 vocabulary."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from support.family_roundtrip import (
    READ_SCHEMA,
    SEARCH_SCHEMA,
    messages_follow_up,
    messages_forced_call,
    responses_follow_up,
    responses_forced_call,
)
from support.parsing import Result, assert_parses, calls, parse
from support.paths import CACHE, FIXTURES, need_fixtures
from support.server import EngyServer

from engy_local.chat import (
    ChatRequest,
    Message,
    Text,
    Thinking,
    ThinkingDelta,
    ToolCall,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolChoice,
    ToolResult,
    ToolSpec,
)
from engy_local.prompt import prepare
from engy_local.prompt.families import detect_family, get
from engy_local.prompt.families.gemma4 import Gemma4Parser
from engy_local.prompt.forced import forced_call_grammar
from engy_local.prompt.messages import to_template_messages, to_template_tools
from engy_local.prompt.template import ChatTemplate
from engy_local.runtime.sampling import check_grammar

TEMPLATES = FIXTURES / "chat-templates"
GEMMA4 = "google-gemma-4-31B-it.jinja"
TOOLS = ("get_weather", "read_file", "Bash")
Q = '<|"|>'


def template() -> ChatTemplate:
    path = TEMPLATES / GEMMA4
    if not path.is_file():
        pytest.skip(f"chat template fixture not found: {path}")
    return ChatTemplate(path.read_text(), bos_token="<bos>")


def render(conversation: list[Message], **kwargs: Any) -> str:
    chat = template()
    return chat.render(
        to_template_messages(conversation, quirks=chat.quirks),
        tools=to_template_tools(SPECS),
        **kwargs,
    )


# ---- rendering ------------------------------------------------------------------

WEATHER = {"city": "Paris", "days": 3}
READ = {
    "path": '/tmp/a "b".py',
    "code": "if a < b:\n    return {'x': [1]}",
    "scale": -2.5,
    "ok": True,
    "gone": None,
    "options": {"follow": False, "tags": ["a", "b"]},
}
SPECS = [
    ToolSpec(
        "get_weather",
        "Weather for a city.",
        {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    ),
    ToolSpec("read_file", "Read a file.", {"type": "object", "properties": {}}),
]
SPECS_TUPLE = tuple(SPECS)
ASK = Message("user", (Text("Weather in Paris, and my file?"),))
CALLS = Message(
    "assistant",
    (
        Thinking("Two tools to call."),
        ToolCall("call_a", "get_weather", json.dumps(WEATHER)),
        ToolCall("call_b", "read_file", json.dumps(READ)),
    ),
)
RESULTS = Message("tool", (ToolResult("call_a", "Sunny, 21 C"), ToolResult("call_b", "x = 1")))


def assert_in_order(text: str, pieces: list[str]) -> None:
    at = 0
    for piece in pieces:
        found = text.find(piece, at)
        assert found >= 0, f"{piece!r} not after {text[:at][-300:]!r}"
        at = found + len(piece)


def test_a_conversation_with_calls_renders_as_the_model_expects() -> None:
    conversation = [
        Message("system", (Text("Be brief."),)),
        ASK,
        CALLS,
        RESULTS,
        Message("assistant", (Text("Sunny; the file sets x."),)),
        Message("user", (Text("Thanks!"),)),
    ]
    text = render(conversation, enable_thinking=False)
    assert_in_order(
        text,
        [
            "<|turn>system\nBe brief.",
            '<|tool>declaration:get_weather{description:<|"|>Weather for a city.<|"|>',
            "<turn|>\n<|turn>user\nWeather in Paris, and my file?<turn|>\n<|turn>model\n",
            f"<|tool_call>call:get_weather{{city:{Q}Paris{Q},days:3}}<tool_call|>",
            "<|tool_call>call:read_file{",
            f'{Q}/tmp/a "b".py{Q}',
            "}<tool_call|>",
            f"<|tool_response>response:get_weather{{value:{Q}Sunny, 21 C{Q}}}<tool_response|>",
            f"<|tool_response>response:read_file{{value:{Q}x = 1{Q}}}<tool_response|>",
            "Sunny; the file sets x.<turn|>\n<|turn>user\nThanks!<turn|>\n",
        ],
    )
    assert text.endswith("<|turn>model\n<|channel>thought\n<channel|>")
    assert "Two tools to call." not in text  # reasoning before the last user turn is dropped


def test_reasoning_beside_calls_after_the_last_user_turn_is_kept() -> None:
    text = render([ASK, CALLS, RESULTS], enable_thinking=True)
    assert text.startswith("<bos><|turn>system\n<|think|>\n")
    assert_in_order(
        text,
        [
            "<|turn>model\n<|channel>thought\nTwo tools to call.\n<channel|><|tool_call>",
            "<tool_response|>",
        ],
    )
    # The model goes on in the same turn after the results.
    assert text.endswith("<tool_response|>")


def test_thinking_is_the_templates_enable_thinking() -> None:
    assert template().thinking_switch == "enable_thinking"
    assert get("gemma4").thinking is None  # prepare passes enable_thinking itself
    on = render([ASK], enable_thinking=True)
    off = render([ASK], enable_thinking=False)
    assert "<|think|>" in on and on.endswith("<|turn>model\n")
    assert "<|think|>" not in off and off.endswith("<|turn>model\n<|channel>thought\n<channel|>")


@pytest.mark.parametrize(
    ("thinking", "forced", "ending"),
    [
        (True, False, "<|turn>model\n"),
        (False, False, "<|turn>model\n<|channel>thought\n<channel|>"),
        (None, False, "<|turn>model\n<|channel>thought\n<channel|>"),
        # A forced call starts at the first token: no thinking first.
        (True, True, "<|turn>model\n<|channel>thought\n<channel|>"),
    ],
)
def test_a_request_maps_thinking_to_the_switch(
    thinking: bool | None, forced: bool, ending: str
) -> None:
    model = SimpleNamespace(
        path=Path("m.gguf"), template=template(), family=get("gemma4"), projector=None
    )
    choice = ToolChoice("tool", "get_weather") if forced else ToolChoice()
    request = ChatRequest("m", (ASK,), SPECS_TUPLE, tool_choice=choice, thinking=thinking)
    placed, _ = prepare.render(model, request)  # type: ignore[arg-type]
    text = placed.text
    assert text.endswith(ending)
    assert ("<|think|>" in text) == (thinking is True and not forced)


def test_the_parser_reads_the_calls_the_template_writes() -> None:
    text = render([ASK, CALLS])
    blocks = text[text.index("<|tool_call>") : text.rindex("<tool_call|>") + len("<tool_call|>")]
    got = parse([blocks], family="gemma4", tools=TOOLS)
    assert [(name, json.loads(args)) for _, name, args in got.calls] == [
        ("get_weather", WEATHER),
        ("read_file", READ),
    ]
    assert got.text == ""


# ---- parsing --------------------------------------------------------------------

OUTPUT = (
    "<|channel>thought\nThe user wants the weather in São Paulo and a file.\n"
    "I'll call both tools.<channel|>I'll look both up."
    f"<|tool_call>call:get_weather{{city:{Q}São Paulo{Q},days:3,"
    f"units:{{temp:{Q}C{Q},wind:[{Q}km/h{Q},null]}}}}<tool_call|>"
    f"<|tool_call>call:read_file{{limit:-2.5e3,options:{{encoding:{{name:{Q}utf-8{Q}}},"
    f'follow:true}},path:{Q}/tmp/a "b" {{x}}.py{Q}}}<tool_call|>'
)
EXPECTED = Result(
    text="I'll look both up.",
    thinking="The user wants the weather in São Paulo and a file.\nI'll call both tools.",
    calls=calls(
        ("get_weather", '{"city":"São Paulo","days":3,"units":{"temp":"C","wind":["km/h",null]}}'),
        (
            "read_file",
            '{"limit":-2.5e3,"options":{"encoding":{"name":"utf-8"},"follow":true},'
            '"path":"/tmp/a \\"b\\" {x}.py"}',
        ),
    ),
)
CODE = "def f(a, b):\n    return a < b and {'k': \"v\\n\"}\n"

# name, output, expected
GOOD = [
    ("plain text", "Paris is sunny today.", Result(text="Paris is sunny today.")),
    ("reasoning, text and two calls", OUTPUT, EXPECTED),
    (
        "text that only looks like markers",
        "a <|tool> b <|channel c <tool_call|> <channel|> d",
        Result(text="a <|tool> b <|channel c <tool_call|> <channel|> d"),
    ),
    (
        "a string holding code: quotes, braces, backslashes and newlines",
        f"<|tool_call>call:Bash{{command:{Q}{CODE}{Q}}}<tool_call|>",
        Result(calls=calls(("Bash", json.dumps({"command": CODE}, separators=(",", ":"))))),
    ),
    (
        "an empty thought and no arguments",
        "<|channel>thought\n<channel|>\n<|tool_call>call:Bash{}<tool_call|>",
        Result(calls=calls(("Bash", "{}"))),
    ),
    (
        "JSON keys and strings, quoted keys, spaces, Python literals",
        f'<|tool_call>call:Bash{{ "command" : "ls\\n" , {Q}a b{Q}: True, c : None , '
        f"d: [ 1 , 2 ] }}<tool_call|>",
        Result(calls=calls(("Bash", '{"command":"ls\\n","a b":true,"c":null,"d":[1,2]}'))),
    ),
    (
        "thought between calls, text after",
        "<|tool_call>call:Bash{a:1}<tool_call|><|channel>thought\nnext<channel|>"
        "<|tool_call>call:Bash{a:2}<tool_call|>\nDone.",
        Result(
            text="Done.", thinking="next", calls=calls(("Bash", '{"a":1}'), ("Bash", '{"a":2}'))
        ),
    ),
]

BAD = [
    (
        "a tool that was not offered is text",
        f"Sure.<|tool_call>call:rm_rf{{path:{Q}/{Q}}}<tool_call|> After.",
        Result(text=f"Sure.<|tool_call>call:rm_rf{{path:{Q}/{Q}}}<tool_call|> After."),
    ),
    (
        "a head that is not call:NAME{ is text",
        "<|tool_call>Bash(command='ls')<tool_call|>",
        Result(text="<|tool_call>Bash(command='ls')<tool_call|>"),
    ),
    (
        "a block ending before its '{' is text",
        "Hi <|tool_call>call:Bas",
        Result(text="Hi <|tool_call>call:Bas"),
    ),
    (
        "notation broken after the start is cut back and closed",
        f"<|tool_call>call:Bash{{a:{Q}x{Q},]b:1}}<tool_call|>ok",
        Result(text="ok", calls=calls(("Bash", '{"a":"x"}'))),
    ),
    (
        "an unclosed call inside a string",
        f"<|tool_call>call:read_file{{path:{Q}/a,b",
        Result(calls=calls(("read_file", '{"path":"/a,b"}'))),
    ),
    (
        "an unclosed call inside a key",
        f"<|tool_call>call:read_file{{path:{Q}/a{Q},opti",
        Result(calls=calls(("read_file", '{"path":"/a"}'))),
    ),
    (
        "an unclosed call in nested lists, a number cut off",
        "<|tool_call>call:Bash{a:[[1,2],[3",
        Result(calls=calls(("Bash", '{"a":[[1,2],[3]]}'))),
    ),
    (
        "the close tag before the arguments close",
        "<|tool_call>call:Bash{a:{b:1<tool_call|>Then text.",
        Result(text="Then text.", calls=calls(("Bash", '{"a":{"b":1}}'))),
    ),
    (
        "bare words are strings",
        "<|tool_call>call:Bash{command:ls -la,n:+7,m:1.}<tool_call|>",
        Result(calls=calls(("Bash", '{"command":"ls -la","n":7,"m":1.0}'))),
    ),
    (
        "junk after the arguments is dropped; a missing close tag before the next call",
        "<|tool_call>call:Bash{a:1}}junk<|tool_call>call:Bash{a:2}<tool_call|>",
        Result(calls=calls(("Bash", '{"a":1}'), ("Bash", '{"a":2}'))),
    ),
    (
        "an unclosed thought is reasoning to the end",
        "<|channel>thought\nstill thinking <channel",
        Result(thinking="still thinking <channel"),
    ),
    ("output ending inside a marker", "Hello <|tool_ca", Result(text="Hello <|tool_ca")),
    ("a lone open tag", "<|tool_call>", Result(text="<|tool_call>")),
]


@pytest.mark.parametrize(("output", "expected"), [r[1:] for r in GOOD], ids=[r[0] for r in GOOD])
def test_outputs(output: str, expected: Result) -> None:
    assert_parses(output, expected, family="gemma4", tools=TOOLS)


@pytest.mark.parametrize(("output", "expected"), [r[1:] for r in BAD], ids=[r[0] for r in BAD])
def test_bad_outputs(output: str, expected: Result) -> None:
    assert_parses(output, expected, family="gemma4", tools=TOOLS)


def test_no_tools_offered_means_calls_are_text() -> None:
    output = "<|tool_call>call:Bash{a:1}<tool_call|>"
    assert_parses(output, Result(text=output), family="gemma4", tools=())


def test_reasoning_opened_by_the_prompt() -> None:
    assert_parses(
        "plan<channel|>Answer.",
        Result(text="Answer.", thinking="plan"),
        family="gemma4",
        thinking=True,
    )


def test_event_sequence_streams_arguments() -> None:
    """The exact events for a stream cut at the model's tokens."""
    parser = Gemma4Parser(tools=["read_file"], thinking=False, new_id=lambda: "toolu_1")
    steps = [
        ("<|channel>", []),
        ("thought", []),
        ("\nPlan", [ThinkingDelta("Plan")]),
        ("<channel|>", []),
        ("<|tool_call>", []),
        ("call", []),
        (":read_file", []),
        ("{", [ToolCallStart(0, "toolu_1", "read_file"), ToolCallDelta(0, "{")]),
        ("path", []),
        (":", []),
        (Q, [ToolCallDelta(0, '"path":"')]),
        ("/etc", [ToolCallDelta(0, "/etc")]),
        ("/hosts", [ToolCallDelta(0, "/hosts")]),
        (Q, [ToolCallDelta(0, '"')]),
        (",n:", []),
        ("12", []),  # a bare value ends at its delimiter
        ("}", [ToolCallDelta(0, ',"n":12}')]),
        ("<tool_call|>", [ToolCallEnd(0, '{"path":"/etc/hosts","n":12}')]),
    ]
    for chunk, expected in steps:
        assert parser.feed(chunk) == expected, chunk
    assert parser.finish() == []


# ---- forced calls ---------------------------------------------------------------


def test_forced_calls_write_gemma_notation() -> None:
    schema = {
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "mode": {"enum": ["text", "binary"]},
            "fixed": {"const": {"a": 'x"y', "b": [1]}},
            "odd key": {"type": "integer"},
            "free": {"type": "object"},
        },
        "required": ["path"],
    }
    grammar = forced_call_grammar([ToolSpec("read_file", "", schema)], "gemma4")
    assert check_grammar(grammar)
    rules = dict(line.split(" ::= ", 1) for line in grammar.splitlines())
    assert rules["call"] == '"<|tool_call>call:" (call-0) "<tool_call|>"'
    assert rules["call-0"] == '"read_file" t0-root'
    assert rules["t0-path-kv"] == '"path" t0-space ":" t0-space t0-string'
    assert rules["t0-odd-key-kv"].startswith('"<|\\"|>odd key<|\\"|>" t0-space ":"')
    assert rules["t0-string"] == '"<|\\"|>" t0-char* "<|\\"|>" t0-space'
    assert rules["t0-space"] == '""'
    assert '"<|\\"|>text<|\\"|>"' in rules["t0-mode"]
    assert rules["t0-fixed"] == '"{a:<|\\"|>x\\"y<|\\"|>,b:[1]}"'
    assert '"\\""' not in grammar  # no JSON quote is left anywhere


# ---- detection ------------------------------------------------------------------


def test_detected_from_the_template_text() -> None:
    assert detect_family(template().source) == "gemma4"
    gemma2 = TEMPLATES / "google-gemma-2-2b-it.jinja"
    if gemma2.is_file():
        assert detect_family(gemma2.read_text()) != "gemma4"


# ---- end to end on a tiny model -------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[EngyServer]:
    need_fixtures()
    from support.ggufs import tiny_gguf_cached

    path = tiny_gguf_cached(CACHE / "ggufs", vocab="gemma-4", template=GEMMA4)
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


def test_both_schemas_compile_in_gemma_notation() -> None:
    specs = [ToolSpec("read_file", "", READ_SCHEMA), ToolSpec("search", "", SEARCH_SCHEMA)]
    assert check_grammar(forced_call_grammar(specs, "gemma4"))
