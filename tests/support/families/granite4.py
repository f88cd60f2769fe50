"""Granite 4.0 / 4.1: the Hermes format exactly, so family "hermes".

The templates ask for and render `<tool_call>\\n{"name": ..., "arguments":
...}\\n</tool_call>`, one block per call, a newline between the text and the
first call and between calls, and no reasoning. Here: what the real
templates render of tools, calls and results, the turn they write read
back, a realistic Granite output, detection, and a forced call round trip on
a tiny GGUF with the Granite 4.0 template."""

from __future__ import annotations

import json

from engy_local.chat import Message, Text, ToolCall, ToolResult, ToolSpec
from support.families.prompts import rendered, template
from support.families.roundtrip import READ
from support.families.spec import Case, Output, ParseBack, Rendered, RoundTrip
from support.parsing import Result, calls

GRANITES = ["ibm-granite-granite-4.0.jinja", "ibm-granite-granite-4.1.jinja"]
TOOLS = ("get_weather", "read_file")

WEATHER = {"city": "Paris", "days": 3}
READ_ARGS = {"path": "/etc/hosts", "options": {"follow": True}}
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


def block(name: str, arguments: dict[str, object]) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {json.dumps(arguments)}}}\n</tool_call>'


def role(name: str) -> str:
    return f"<|start_of_role|>{name}<|end_of_role|>"


RENDERS = tuple(
    Rendered(
        f"a conversation with calls, {name.removesuffix('.jinja')}",
        lambda name=name: rendered(template(name), CONVERSATION, SPECS),
        in_order=(
            role("system") + "Be brief.\n\nYou are a helpful assistant with access",
            '<tools>\n{"type": "function", "function": {"name": "get_weather"',
            role("user") + "Weather in Paris, and my hosts file?<|end_of_text|>\n",
            role("assistant") + "Looking both up.\n" + block("get_weather", WEATHER) + "\n",
            block("read_file", READ_ARGS) + "<|end_of_text|>\n",
            role("user") + "\n<tool_response>\nSunny, 21 C\n</tool_response>"
            "\n<tool_response>\n127.0.0.1 x\n</tool_response><|end_of_text|>\n",
            role("user") + "Thanks!<|end_of_text|>\n",
        ),
        ends=role("assistant"),
    )
    for name in GRANITES
)


def calls_turn(name: str) -> list[str]:
    chat = template(name)
    text = rendered(chat, CONVERSATION[:3], SPECS, add_generation_prompt=False)
    return [text.split(role("assistant"))[1].split("<|end_of_text|>")[0]]


PARSE_BACK = tuple(
    ParseBack(
        f"the calls turn, {name.removesuffix('.jinja')}",
        lambda name=name: calls_turn(name),
        "hermes",
        TOOLS,
        ((("get_weather", WEATHER), ("read_file", READ_ARGS)),),
        text="Looking both up.",
    )
    for name in GRANITES
)

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
UNOFFERED = 'Sure.\n<tool_call>\n{"name": "send_mail", "arguments": {}}\n</tool_call>'

CASE = Case(
    name="granite4",
    family="hermes",
    tools=TOOLS,
    detected=dict.fromkeys(GRANITES, "hermes"),
    # Granite 3.3 has its own <|tool_call|> list format and thinking switch.
    not_taken=("ibm-granite-granite-3.3-2B-Instruct.jinja",),
    renders=RENDERS,
    parse_back=PARSE_BACK,
    outputs=(Output("a Granite output", OUTPUT, EXPECTED),),
    bad=(Output("a call to a tool not offered is text", UNOFFERED, Result(text=UNOFFERED)),),
    # The Llama 3 vocabulary has Granite's end token, <|end_of_text|>.
    round_trips=(
        RoundTrip(
            "granite-4.0",
            GRANITES[0],
            READ,
            vocab="llama-bpe",
            end_token="<|end_of_text|>",
            ctx_size=4096,
        ),
    ),
)
