"""Gemma 4 (family "gemma4"): the real template it is detected from, what
it renders of tools, calls, results and thinking, the calls it writes read
back, realistic outputs in Gemma's notation and every bad-output rule, and a
forced call round trip on a tiny GGUF with the Gemma 4 vocabulary."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from engy_local.chat import (
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
from engy_local.prompt.families.gemma4 import Gemma4Parser
from engy_local.prompt.render.template import ChatTemplate
from support.families.prompts import prepared, rendered, shown
from support.families.prompts import template as chat_template
from support.families.roundtrip import READ
from support.families.spec import Case, Output, ParseBack, Rendered, RoundTrip, Stream
from support.parsing import TOOLS as PARSER_TOOLS
from support.parsing import Result, calls

FAMILY = "gemma4"
GEMMA4 = "google-gemma-4-31B-it.jinja"
TOOLS = ("get_weather", "read_file", "Bash")
Q = '<|"|>'


def template() -> ChatTemplate:
    return chat_template(GEMMA4, bos_token="<bos>")


def render(conversation: Sequence[Message], **kwargs: Any) -> str:
    return rendered(template(), conversation, SPECS, **kwargs)


# ---- rendering ------------------------------------------------------------------

WEATHER = {"city": "Paris", "days": 3}
READ_ARGS = {
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
ASK = Message("user", (Text("Weather in Paris, and my file?"),))
CALLS = Message(
    "assistant",
    (
        Thinking("Two tools to call."),
        ToolCall("call_a", "get_weather", json.dumps(WEATHER)),
        ToolCall("call_b", "read_file", json.dumps(READ_ARGS)),
    ),
)
RESULTS = Message("tool", (ToolResult("call_a", "Sunny, 21 C"), ToolResult("call_b", "x = 1")))
CONVERSATION = [
    Message("system", (Text("Be brief."),)),
    ASK,
    CALLS,
    RESULTS,
    Message("assistant", (Text("Sunny; the file sets x."),)),
    Message("user", (Text("Thanks!"),)),
]
RENDERS = (
    Rendered(
        "a conversation with calls",
        lambda: render(CONVERSATION, enable_thinking=False),
        in_order=(
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
        ),
        ends="<|turn>model\n<|channel>thought\n<channel|>",
        absent=("Two tools to call.",),  # reasoning before the last user turn is dropped
    ),
    Rendered(
        "reasoning beside calls after the last user turn is kept",
        lambda: render([ASK, CALLS, RESULTS], enable_thinking=True),
        starts="<bos><|turn>system\n<|think|>\n",
        in_order=(
            "<|turn>model\n<|channel>thought\nTwo tools to call.\n<channel|><|tool_call>",
            "<tool_response|>",
        ),
        ends="<tool_response|>",  # the model goes on in the same turn after the results
    ),
)
# thinking, whether the call is forced, how the prompt ends. A forced call
# starts at the first token: no thinking first.
SWITCH = [
    (True, False, "<|turn>model\n"),
    (False, False, "<|turn>model\n<|channel>thought\n<channel|>"),
    (None, False, "<|turn>model\n<|channel>thought\n<channel|>"),
    (True, True, "<|turn>model\n<|channel>thought\n<channel|>"),
]
THINKING = (
    Rendered(
        "enable_thinking on",
        lambda: render([ASK], enable_thinking=True),
        contains=("<|think|>",),
        ends="<|turn>model\n",
    ),
    Rendered(
        "enable_thinking off",
        lambda: render([ASK], enable_thinking=False),
        absent=("<|think|>",),
        ends="<|turn>model\n<|channel>thought\n<channel|>",
    ),
    *(
        Rendered(
            f"a request, thinking {thinking}{', forced' if forced else ''}",
            lambda thinking=thinking, forced=forced: prepared(
                template(),
                FAMILY,
                [ASK],
                SPECS,
                tool_choice=ToolChoice("tool", "get_weather") if forced else ToolChoice(),
                thinking=thinking,
            ),
            ends=ending,
            **shown(thinking is True and not forced, "<|think|>"),
        )
        for thinking, forced, ending in SWITCH
    ),
)


def call_blocks() -> list[str]:
    text = render([ASK, CALLS])
    return [text[text.index("<|tool_call>") : text.rindex("<tool_call|>") + len("<tool_call|>")]]


PARSE_BACK = ParseBack(
    "the calls the template writes",
    call_blocks,
    FAMILY,
    TOOLS,
    ((("get_weather", WEATHER), ("read_file", READ_ARGS)),),
    text="",
)

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

# name, output, expected
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

# The exact events for a stream cut at the model's tokens.
STREAM = Stream(
    "arguments stream",
    lambda: Gemma4Parser(tools=["read_file"], thinking=False, new_id=lambda: "toolu_1"),
    [
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
    ],
)

CASE = Case(
    name="gemma4",
    family=FAMILY,
    tools=TOOLS,
    detected={GEMMA4: FAMILY},
    not_taken=("google-gemma-2-2b-it.jinja",),
    renders=RENDERS,
    thinking=THINKING,
    parse_back=(PARSE_BACK,),
    outputs=(
        *(Output(name, output, expected) for name, output, expected in GOOD),
        Output(
            "reasoning opened by the prompt",
            "plan<channel|>Answer.",
            Result(text="Answer.", thinking="plan"),
            thinking=True,
            tools=PARSER_TOOLS,
        ),
    ),
    bad=tuple(Output(name, output, expected) for name, output, expected in BAD),
    untooled=((FAMILY, "<|tool_call>call:Bash{a:1}<tool_call|>"),),
    streams=(STREAM,),
    round_trips=(RoundTrip(FAMILY, GEMMA4, READ, vocab="gemma-4", ctx_size=4096),),
)
