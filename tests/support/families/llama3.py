"""Llama 3.1 / 3.2 / 3.3 (family "llama3"): the real templates it is
detected from, what they render of tools, calls and results, the calls
they write read back, realistic outputs and every bad-output rule, and a
forced call round trip on a tiny GGUF."""

from __future__ import annotations

import json
from datetime import datetime

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
from engy_local.prompt.families.llama3 import Llama3Parser
from engy_local.prompt.render.template import ChatTemplate
from support.families.prompts import rendered
from support.families.prompts import template as chat_template
from support.families.roundtrip import READ
from support.families.spec import Case, Output, ParseBack, Rendered, RoundTrip, Stream
from support.parsing import Result, calls

FAMILY = "llama3"
LLAMAS = [
    "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "meta-llama-Llama-3.2-3B-Instruct.jinja",
    "meta-llama-Llama-3.3-70B-Instruct.jinja",
]
TOOLS = ("get_weather", "read_file", "Bash")


def template(name: str) -> ChatTemplate:
    return chat_template(name, bos_token="<|begin_of_text|>", now=lambda: datetime(2025, 1, 2))


def label(name: str) -> str:
    return name.removeprefix("meta-llama-").removesuffix("-Instruct.jinja")


# ---- rendering ------------------------------------------------------------------

WEATHER = {"city": "Paris", "days": 3, "units": {"temp": "C"}}
READ_ARGS = {"path": "/etc/hosts", "lines": [1, 2.5]}
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
            ToolCall("call_b", "read_file", json.dumps(READ_ARGS)),
        ),
    ),
    Message("tool", (ToolResult("call_a", "Sunny, 21 C"), ToolResult("call_b", "127.0.0.1 x"))),
    Message("user", (Text("Thanks!"),)),
]


def call_json(name: str, arguments: dict[str, object]) -> str:
    return f'{{"name": "{name}", "parameters": {json.dumps(arguments)}}}'


def turn(role: str, text: str) -> str:
    return f"<|start_header_id|>{role}<|end_header_id|>\n\n{text}<|eot_id|>"


# Two calls in one turn: the templates take one call per assistant turn, so
# each call becomes a turn followed by its own result (ipython role).
RENDERS = tuple(
    Rendered(
        f"a conversation with calls, {label(name)}",
        lambda name=name: rendered(template(name), CONVERSATION, SPECS),
        in_order=(
            "Environment: ipython\n",
            "Be brief.<|eot_id|>",
            'Respond in the format {"name": function name, "parameters": dictionary',
            '"name": "get_weather"',  # the tools, in the first user turn
            "Weather in Paris, and my hosts file?<|eot_id|>",
            turn("assistant", call_json("get_weather", WEATHER)),
            turn("ipython", '"Sunny, 21 C"'),
            turn("assistant", call_json("read_file", READ_ARGS)),
            turn("ipython", '"127.0.0.1 x"'),
            turn("user", "Thanks!"),
        ),
        ends="<|start_header_id|>assistant<|end_header_id|>\n\n",
        absent=("<|python_tag|>",),  # custom tools are called bare
    )
    for name in LLAMAS
)


def call_turns(name: str) -> list[str]:
    text = rendered(template(name), CONVERSATION[:3], SPECS, add_generation_prompt=False)
    head = "<|start_header_id|>assistant<|end_header_id|>\n\n"
    return [t.split("<|eot_id|>")[0] for t in text.split(head)[1:]]


PARSE_BACK = tuple(
    ParseBack(
        f"the calls the template writes, {label(name)}",
        lambda name=name: call_turns(name),
        FAMILY,
        TOOLS,
        ((("get_weather", WEATHER),), (("read_file", READ_ARGS),)),
    )
    for name in LLAMAS
)

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

# name, output, expected
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

STREAMS = (
    Stream(
        "arguments stream",
        lambda: Llama3Parser(tools=["Bash"], thinking=False, new_id=lambda: "toolu_1"),
        [
            ("\n", []),
            ('{"', []),
            ('name": "Ba', []),
            ('sh", "parameters": ', [ToolCallStart(0, "toolu_1", "Bash")]),
            ('{"command', [ToolCallDelta(0, "{")]),
            ('": "ls', [ToolCallDelta(0, '"command": "ls')]),
            (' -la"', [ToolCallDelta(0, ' -la"')]),
            ("}", [ToolCallDelta(0, "}")]),
            ("}", [ToolCallEnd(0, '{"command": "ls -la"}')]),
        ],
    ),
    Stream(
        "text is held only while it may be a call",
        lambda: Llama3Parser(tools=["Bash"], thinking=False, new_id=lambda: "x"),
        [
            ("  ", []),
            ("Hi {", [TextDelta("  Hi {")]),
            (" <|python", []),
            ("_", []),
            ("x", [TextDelta(" <|python_x")]),
        ],
    ),
)

CASE = Case(
    name="llama3",
    family=FAMILY,
    tools=TOOLS,
    detected={
        **dict.fromkeys(LLAMAS, FAMILY),
        "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja": "hermes",
    },
    not_taken=(
        "meetkai-functionary-medium-v3.1.jinja",
        "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja",
    ),
    renders=RENDERS,
    parse_back=PARSE_BACK,
    outputs=tuple(Output(name, output, expected) for name, output, expected in GOOD),
    bad=tuple(Output(name, output, expected) for name, output, expected in BAD),
    untooled=((FAMILY, '{"name": "Bash", "parameters": {}}'),),
    streams=STREAMS,
    round_trips=(RoundTrip(FAMILY, LLAMAS[0], READ, vocab="llama-bpe", ctx_size=4096),),
)
