"""Mistral (Nemo, Small 3.2, Devstral, Ministral 3 reasoning): the real
templates it is detected from, rendering through them, realistic outputs in
each variant's format (bad and damaged ones: mistral_bad.py), streamed
events, the forced-call grammars, and a forced call round trip on tiny
GGUFs built with the real Nemo and Ministral 3 templates."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from engy_local.chat import (
    Message,
    Text,
    TextDelta,
    Thinking,
    ThinkingDelta,
    ToolCall,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolResult,
    ToolSpec,
)
from engy_local.prompt.families.mistral import MistralParser
from engy_local.prompt.render.messages import mistral_call_id, to_template_tools
from engy_local.prompt.render.template import ChatTemplate
from support.families.grammars import sentence_walk
from support.families.mistral_bad import BAD, NAMES, damaged
from support.families.prompts import rendered, shown
from support.families.prompts import template as chat_template
from support.families.spec import (
    Accepts,
    Case,
    Damage,
    Output,
    ParseBack,
    RandomCalls,
    Rendered,
    RoundTrip,
    Stream,
)
from support.parsing import Result, calls

NEMO = "mistralai-Mistral-Nemo-Instruct-2407"
SMALL = "Mistral-Small-3.2-24B-Instruct-2506"
DEVSTRAL = "unsloth-mistral-Devstral-Small-2507"
MINISTRAL = "mistralai-Ministral-3-14B-Reasoning-2512"
FAMILIES = {NEMO: "mistral-nemo", SMALL: "mistral", DEVSTRAL: "mistral", MINISTRAL: "mistral"}


def template(name: str) -> ChatTemplate:
    return chat_template(f"{name}.jinja", bos_token="<s>", eos_token="</s>")


# ---- rendering through the real templates ----------------------------------------

READ_ARGS = '{"path": "/etc/hostname", "limit": 20}'
SEARCH_ARGS = '{"pattern": "TODO", "options": {"regex": false, "paths": ["src", "tests"]}}'
TOOLS = [
    ToolSpec(
        "read_file",
        "Read a file.",
        {
            "type": "object",
            "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["path"],
        },
    ),
    ToolSpec("search", "Search the code.", {"type": "object", "properties": {}}),
]
CONVERSATION = [
    Message("system", (Text("SYSTEM-TEXT"),)),
    Message("user", (Text("USER-ONE: hostname and TODOs?"),)),
    Message(
        "assistant",
        (
            Thinking("REASONING-ONE"),
            Text("Let me look."),
            ToolCall("toolu_01", "read_file", READ_ARGS),
            ToolCall("toolu_02", "search", SEARCH_ARGS),
        ),
    ),
    Message("tool", (ToolResult("toolu_01", "build-host-7"), ToolResult("toolu_02", "a.py:1"))),
]
FOLLOW_UP = [
    Message("assistant", (Text("It is build-host-7."),)),
    Message("user", (Text("USER-TWO: thanks"),)),
]
ID1, ID2 = mistral_call_id("toolu_01"), mistral_call_id("toolu_02")
TOOLS_JSON = json.dumps(to_template_tools(TOOLS))

# What each template must show of the conversation, in this order. Nemo and
# Small 3.2 drop the text beside calls, and only Ministral 3 keeps earlier
# reasoning (given to it as a `thinking` chunk), where the model wrote it.
RENDERED = {
    NEMO: [
        "[INST]SYSTEM-TEXT\n\nUSER-ONE: hostname and TODOs?[/INST]",
        f'[TOOL_CALLS][{{"name": "read_file", "arguments": {READ_ARGS}, "id": "{ID1}"}}, '
        f'{{"name": "search", "arguments": {SEARCH_ARGS}, "id": "{ID2}"}}]</s>',
        f'[TOOL_RESULTS]{{"content": build-host-7, "call_id": "{ID1}"}}[/TOOL_RESULTS]'
        f'[TOOL_RESULTS]{{"content": a.py:1, "call_id": "{ID2}"}}[/TOOL_RESULTS]',
    ],
    SMALL: [
        "[SYSTEM_PROMPT]SYSTEM-TEXT[/SYSTEM_PROMPT]",
        "[INST]USER-ONE: hostname and TODOs?[/INST]",
        f"[TOOL_CALLS]read_file[CALL_ID]{ID1}[ARGS]{READ_ARGS}"
        f"[TOOL_CALLS]search[CALL_ID]{ID2}[ARGS]{SEARCH_ARGS}</s>",
        f"[TOOL_RESULTS]{ID1}[TOOL_CONTENT]build-host-7[/TOOL_RESULTS]"
        f"[TOOL_RESULTS]{ID2}[TOOL_CONTENT]a.py:1[/TOOL_RESULTS]",
    ],
    **{
        name: [
            "[SYSTEM_PROMPT]SYSTEM-TEXT[/SYSTEM_PROMPT]",
            "[INST]USER-ONE: hostname and TODOs?[/INST]",
            f"{thinking}Let me look.[TOOL_CALLS]read_file[ARGS]{READ_ARGS}"
            f"[TOOL_CALLS]search[ARGS]{SEARCH_ARGS}</s>",
            "[TOOL_RESULTS]build-host-7[/TOOL_RESULTS][TOOL_RESULTS]a.py:1[/TOOL_RESULTS]",
        ]
        for name, thinking in ((DEVSTRAL, ""), (MINISTRAL, "[THINK]REASONING-ONE[/THINK]"))
    },
}


def render(name: str, conversation: Sequence[Message]) -> str:
    return rendered(template(name), conversation, TOOLS, add_generation_prompt=True)


RENDERS = (
    # The agent loop's prompt: it ends with the results, where the model
    # writes next, and the tools are listed before the last user turn.
    *(
        Rendered(
            f"agent turn, {name}",
            lambda name=name: render(name, CONVERSATION),
            in_order=tuple(RENDERED[name]),
            ends="[/TOOL_RESULTS]",
            counts=(("[AVAILABLE_TOOLS]", 1),),
            contains=() if name == NEMO else (TOOLS_JSON,),  # Nemo writes the list itself
            orders=(("[AVAILABLE_TOOLS]", "USER-ONE"),),
        )
        for name in RENDERED
    ),
    *(
        Rendered(
            f"agent turn keeps reasoning only on Ministral, {name}",
            lambda name=name: render(name, CONVERSATION),
            **shown(name == MINISTRAL, "REASONING-ONE"),
        )
        for name in RENDERED
    ),
    *(
        Rendered(
            f"follow-up turn, {name}",
            lambda name=name: render(name, CONVERSATION + FOLLOW_UP),
            in_order=(
                *RENDERED[name],
                "It is build-host-7.</s>",
                "[INST]USER-TWO: thanks[/INST]",
            ),
            ends="[/INST]",
            orders=(("[AVAILABLE_TOOLS]", "USER-TWO"),),
        )
        for name in RENDERED
    ),
    # Nemo, Small 3.2 and Ministral raise on a user turn right after tool
    # results; the text is folded into the last result instead.
    *(
        Rendered(
            f"user text after results joins the last result, {name}",
            lambda name=name: render(name, [*CONVERSATION, Message("user", (Text("USER-AFTER"),))]),
            contains=("USER-AFTER",),
            ends=("[/TOOL_RESULTS]", "USER-AFTER[/INST]"),
        )
        for name in RENDERED
    ),
    # A turn that is only reasoning (cut off by max_tokens) would make the
    # template raise as an empty turn; as a chunk it renders.
    Rendered(
        "Ministral keeps reasoning where the model wrote it",
        lambda: render(
            MINISTRAL,
            [
                Message("user", (Text("u1"),)),
                Message("assistant", (Thinking("half a thought"),)),
                Message("user", (Text("u2"),)),
                Message("assistant", (Thinking("plan"), Text("The answer."))),
                Message("user", (Text("u3"),)),
            ],
        ),
        in_order=(
            "[INST]u1[/INST][THINK]half a thought[/THINK]</s>",
            "[INST]u2[/INST][THINK]plan[/THINK]The answer.</s>",
            "[INST]u3[/INST]",
        ),
    ),
)


def history_calls(name: str) -> list[str]:
    """The history form of the calls, as the template writes them."""
    prompt = render(name, CONVERSATION)
    start = prompt.index("[TOOL_CALLS]")
    return [prompt[start : prompt.index("</s>", start)]]


PARSE_BACK = tuple(
    ParseBack(
        f"the calls, {name}",
        lambda name=name: history_calls(name),
        FAMILIES[name],
        NAMES,
        ((("read_file", json.loads(READ_ARGS)), ("search", json.loads(SEARCH_ARGS))),),
        exact=Result(calls=calls(("read_file", READ_ARGS), ("search", SEARCH_ARGS))),
    )
    for name in RENDERED
)

# ---- the parser on outputs written in each variant's format --------------------------

WRITE = json.dumps({"content": 'x = "[TOOL_CALLS]a[ARGS]{}"\n\u00e9', "n": -1.5e-3})
BOTH = calls(("read_file", READ_ARGS), ("search", SEARCH_ARGS))

# name, family, output, expected
# name, family, output, expected
GOOD = [
    (
        "nemo parallel calls",
        "mistral-nemo",
        f'[TOOL_CALLS][{{"name": "read_file", "arguments": {READ_ARGS}, "id": "a1B2c3D4e"}}, '
        f'{{"name": "search", "arguments": {SEARCH_ARGS}, "id": "Zz9Yy8Xx7"}}]',
        Result(calls=BOTH),
    ),
    (
        "nemo text, a spaced list, keys in another order",
        "mistral-nemo",
        "I will check.\n[TOOL_CALLS] [\n"
        f'  {{"id": "a1B2c3D4e", "arguments": {READ_ARGS}, "name": "read_file"}},\n'
        f'  {{"name": "search", "id": "Zz9Yy8Xx7", "arguments": {SEARCH_ARGS}}}\n]\n',
        Result(text="I will check.", calls=BOTH),
    ),
    (
        "nemo single object, string-encoded arguments",
        "mistral-nemo",
        '[TOOL_CALLS]{"name": "read_file", "arguments": "{\\"path\\": \\"/x\\"}"}',
        Result(calls=calls(("read_file", '{"path": "/x"}'))),
    ),
    ("nemo plain answer", "mistral-nemo", "It is 42.", Result(text="It is 42.")),
    (
        "small 3.2 calls with ids",
        "mistral",
        f"I'll check both.[TOOL_CALLS]read_file[CALL_ID]a1B2c3D4e[ARGS]{READ_ARGS}"
        f"[TOOL_CALLS]search[CALL_ID]Zz9Yy8Xx7[ARGS]{SEARCH_ARGS}",
        Result(text="I'll check both.", calls=BOTH),
    ),
    (
        "devstral calls and text after",
        "mistral",
        f"I'll check both.\n\n[TOOL_CALLS]read_file[ARGS]{READ_ARGS}\n"
        f"[TOOL_CALLS]search[ARGS]{SEARCH_ARGS}\n\nBoth running.",
        Result(text="I'll check both.Both running.", calls=BOTH),
    ),
    (
        "ministral reasoning, text and calls",
        "mistral",
        "[THINK]The user wants the hostname and the TODOs.\nBoth at once.[/THINK]"
        f"Checking both.[TOOL_CALLS]read_file[ARGS]{READ_ARGS}"
        f"[TOOL_CALLS]search[ARGS]{SEARCH_ARGS}",
        Result(
            text="Checking both.",
            thinking="The user wants the hostname and the TODOs.\nBoth at once.",
            calls=BOTH,
        ),
    ),
    (
        "ministral reasoning then an answer",
        "mistral",
        "[THINK]\nSimple arithmetic.\n[/THINK]\n\nThe answer is **42**.",
        Result(text="The answer is **42**.", thinking="Simple arithmetic."),
    ),
    (
        "a marker inside reasoning is reasoning",
        "mistral",
        "[THINK]I could write [TOOL_CALLS]read_file[ARGS]{} here.[/THINK]"
        '[TOOL_CALLS]read_file[ARGS]{"path": "/x"}',
        Result(
            thinking="I could write [TOOL_CALLS]read_file[ARGS]{} here.",
            calls=calls(("read_file", '{"path": "/x"}')),
        ),
    ),
    (
        "text that only looks like markers",
        "mistral",
        "Use a[i], [TOOL], [TOOL_CALL] and [THINK] [/THINK] freely.",
        Result(text="Use a[i], [TOOL], [TOOL_CALL] and [THINK] [/THINK] freely."),
    ),
    (
        "strings holding markers, escapes and control characters",
        "mistral",
        f"[TOOL_CALLS]get_time[ARGS]{WRITE}",
        Result(calls=calls(("get_time", WRITE))),
    ),
    (
        "compact v11 call without [ARGS], no arguments",
        "mistral",
        '[TOOL_CALLS]read_file{"path": "/a"}[TOOL_CALLS]get_time[ARGS]{}',
        Result(calls=calls(("read_file", '{"path": "/a"}'), ("get_time", "{}"))),
    ),
]

# Either family's parser reads either syntax.
OUTPUTS = tuple(
    Output(f"{name} ({family})", output, expected, family=family)
    for name, written_for, output, expected in GOOD
    for family in (written_for, "mistral" if written_for == "mistral-nemo" else "mistral-nemo")
)

# The exact events for streams cut the way a model's tokens would be.
STREAMS = (
    Stream(
        "arguments stream",
        lambda: MistralParser(tools=["search"], thinking=False, new_id=lambda: "toolu_1"),
        [
            ("[THINK]", []),
            ("Plan", [ThinkingDelta("Plan")]),
            (".[/TH", [ThinkingDelta(".")]),
            ("INK]Running", [TextDelta("Running")]),
            (" it.\n", [TextDelta(" it.")]),
            ("[TOOL_CALLS]", []),
            ("sea", []),
            ("rch[AR", []),
            ("GS]", [ToolCallStart(0, "toolu_1", "search")]),
            ('{"pattern', [ToolCallDelta(0, "{")]),
            ('": "TO', [ToolCallDelta(0, '"pattern": "TO')]),
            ('DO", "n": 1', [ToolCallDelta(0, 'DO", "n": 1')]),
            ("}", [ToolCallDelta(0, "}"), ToolCallEnd(0, '{"pattern": "TODO", "n": 1}')]),
            ("\n", []),
        ],
    ),
    Stream(
        "a Nemo list streams each call",
        lambda: MistralParser(tools=["search"], thinking=False, new_id=lambda: "toolu_1"),
        [
            ('[TOOL_CALLS][{"name": "sea', []),
            (
                'rch", "arguments": {"q": "a',
                [ToolCallStart(0, "toolu_1", "search"), ToolCallDelta(0, '{"q": "a')],
            ),
            ('b"}, "id": "a1B2c3D4e"}', [ToolCallDelta(0, 'b"}'), ToolCallEnd(0, '{"q": "ab"}')]),
            ("]", []),
        ],
    ),
    Stream(
        "text is held only while it may be a marker",
        lambda: MistralParser(tools=["search"], thinking=False, new_id=lambda: "x"),
        [
            ("Hello", [TextDelta("Hello")]),
            (" [TOOL", []),
            ("S] ", [TextDelta(" [TOOLS]")]),
            ("[", []),  # and the space before it, which a call drops
        ],
        finish=[TextDelta(" [")],
    ),
)

# ---- forced-call grammars ---------------------------------------------------------

BASH = ToolSpec(
    "Bash",
    "Run a command",
    {
        "type": "object",
        "properties": {
            "command": {"type": "string"},
            "env": {"type": "object", "properties": {"HOME": {"type": "string"}}},
            "timeout": {"type": "number"},
        },
        "required": ["command"],
        "additionalProperties": False,
    },
)
FREE = ToolSpec("Free", "", {"type": "object"})


def nemo(name: str, args: str, call_id: str = "a1B2c3D4e") -> str:
    return f'[TOOL_CALLS][{{"name": "{name}", "arguments": {args}, "id": "{call_id}"}}]'


# family, text, whether the grammar for [BASH, FREE] accepts it
GRAMMAR = [
    ("mistral", '[TOOL_CALLS]Bash[ARGS]{"command": "ls -la"}', True),
    ("mistral", '[TOOL_CALLS]Bash[ARGS]{"command": "ls", "env": {"HOME": "/"}}', True),
    ("mistral", "[TOOL_CALLS]Free[ARGS]{}", True),
    ("mistral", "[TOOL_CALLS]Bash[ARGS]{}", False),  # command is required
    ("mistral", '[TOOL_CALLS]Bash[CALL_ID]a1B2c3D4e[ARGS]{"command": "ls"}', False),
    ("mistral", '[TOOL_CALLS]Write[ARGS]{"command": "ls"}', False),
    ("mistral", 'Sure.[TOOL_CALLS]Bash[ARGS]{"command": "ls"}', False),
    ("mistral", "[TOOL_CALLS]Free[ARGS]{}[TOOL_CALLS]Free[ARGS]{}", False),
    ("mistral", nemo("Bash", '{"command": "ls"}'), False),
    ("mistral-nemo", nemo("Bash", '{"command": "ls", "timeout": 1.5}'), True),
    ("mistral-nemo", nemo("Free", "{}", "000000000"), True),
    ("mistral-nemo", nemo("Bash", '{"command": "ls"}', "a1B2c3D4"), False),
    ("mistral-nemo", nemo("Bash", '{"command": "ls"}', "a1B2c3D4_"), False),
    ("mistral-nemo", '[TOOL_CALLS][{"name": "Bash", "arguments": {"command": "ls"}}]', False),
    ("mistral-nemo", '[TOOL_CALLS]Bash[ARGS]{"command": "ls"}', False),
]

# ---- end to end on tiny GGUFs with the real templates -----------------------------
# The llama-spm vocabulary has Mistral's <s> and </s>; the [TOOL_CALLS] /
# [THINK] markers are plain text in it.

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "limit": {"type": "integer"},
        "options": {
            "type": "object",
            "properties": {"follow": {"type": "boolean"}, "encoding": {"type": "string"}},
            "required": ["follow"],
            "additionalProperties": False,
        },
        "mode": {"type": "string", "enum": ["text", "lines"]},
    },
    "required": ["path", "limit", "options", "mode"],
    "additionalProperties": False,
}

CASE = Case(
    name="mistral",
    family="mistral",
    tools=NAMES,
    detected={f"{name}.jinja": family for name, family in FAMILIES.items()},
    renders=RENDERS,
    parse_back=PARSE_BACK,
    outputs=OUTPUTS,
    bad=tuple(Output(name, output, expected) for name, output, expected in BAD),
    untooled=(
        ("mistral", "x [TOOL_CALLS]get_time[ARGS]{}"),
        ("mistral", 'x [TOOL_CALLS][{"name": "get_time"}]'),
    ),
    streams=STREAMS,
    damage=(
        Damage(
            "mistral",
            damaged,
            NAMES,
            min_started=100,
            keeps_text=lambda output: not output.lstrip().startswith("[THINK]"),
        ),
    ),
    accepts=tuple(Accepts(family, [BASH, FREE], text, ok) for family, text, ok in GRAMMAR),
    random_calls=tuple(
        RandomCalls(family, [BASH, FREE], ["Bash", "Free"], range(6), sentence_walk, 0)
        for family in ("mistral", "mistral-nemo")
    ),
    round_trips=tuple(
        RoundTrip(label, f"{name}.jinja", SCHEMA, vocab="llama-spm")
        for label, name in (("nemo", NEMO), ("ministral", MINISTRAL))
    ),
)
