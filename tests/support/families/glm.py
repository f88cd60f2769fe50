"""GLM 4.6 calls (`<arg_key>` / `<arg_value>` pairs) and `<think>`
reasoning (also Spark 2.5, Ling 3.0, Laguna): the real templates they are
detected from, rendering through the real template, realistic outputs and
every bad-output rule, the forced-call grammar, and a forced call round trip
on a tiny GGUF with the real template."""

from __future__ import annotations

import json
from typing import Any

from engy_local.chat import TextDelta, ThinkingDelta, ToolCallDelta, ToolCallEnd, ToolCallStart
from engy_local.prompt.families.glm import GlmParser
from support.families.damage import written
from support.families.grammars import closing_walk
from support.families.spec import (
    Accepts,
    Case,
    Compiles,
    Damage,
    Output,
    OwnCalls,
    ParseBack,
    RandomCalls,
    Rendered,
    RoundTrip,
    Stream,
)
from support.families.xml import (
    BASH,
    CONVERSATION,
    RENDERED_CALLS,
    SCHEMAS,
    TOOLS,
    WRITE,
    prompt,
    read_file_schema,
)
from support.grammar import CLIENTS
from support.parsing import Result, calls

FAMILY = "glm-4.6"
GLM = "GLM-4.6.jinja"


def conversation() -> str:
    return prompt(GLM, FAMILY, CONVERSATION)


# ---- rendering --------------------------------------------------------------------

CALLS_TURN = (
    "<|assistant|>\n<think>I will look.</think>\nLet me look.\n"
    "<tool_call>Bash\n"
    "<arg_key>command</arg_key>\n<arg_value>ls -la</arg_value>\n"
    "<arg_key>timeout</arg_key>\n<arg_value>30</arg_value>\n"
    "<arg_key>options</arg_key>\n"
    '<arg_value>{"env": {"CI": "1"}, "verbose": false}</arg_value>\n'
    "<arg_key>run_in_background</arg_key>\n<arg_value>true</arg_value>\n"
    "</tool_call>\n"
    "<tool_call>Write\n"
    "<arg_key>file_path</arg_key>\n<arg_value>/tmp/a.py</arg_value>\n"
    "<arg_key>content</arg_key>\n<arg_value>print('<hi>')\n</arg_value>\n"
    "</tool_call>"
    "<|observation|>\n<tool_response>\na.txt b.txt\n</tool_response>\n"
    "<tool_response>\nwritten\n</tool_response><|assistant|>"
)
RENDERED = Rendered(
    "an agent conversation",
    conversation,
    starts="[gMASK]<sop><|system|>\n# Tools\n",
    contains=(
        '{"type": "function", "function": {"name": "Bash", "description": "Run a command."',
        # Reasoning before the last user turn is dropped, after it kept.
        "<|user|>\nUSER-ONE<|assistant|>\n<think></think>\nHello.<|user|>\nUSER-TWO",
    ),
    ends=CALLS_TURN,
    absent=("EARLY-THOUGHT",),
)
# The thinking switch is the template's enable_thinking: thinking, how the
# first user turn is written, how the prompt ends.
SWITCH = [
    (None, "USER-ONE<|assistant|>", "<|assistant|>"),
    (True, "USER-ONE<|assistant|>", "<|assistant|>"),
    (False, "USER-ONE/nothink<|assistant|>", "<|assistant|>\n<think></think>"),
]
THINKING = tuple(
    Rendered(
        f"thinking {thinking}",
        lambda thinking=thinking: prompt(GLM, FAMILY, CONVERSATION[:2], thinking=thinking),
        contains=(user_turn,),
        ends=end,
    )
    for thinking, user_turn, end in SWITCH
)
PARSE_BACK = ParseBack(
    "the calls turn",
    lambda: [conversation().split("<|assistant|>")[-2].split("<|observation|>")[0]],
    FAMILY,
    SCHEMAS,
    (RENDERED_CALLS,),
)


def own_calls() -> list[tuple[Any, str]]:
    turn = conversation().split("Let me look.\n")[1].split("<|observation|>")[0]
    first, second = turn.split("</tool_call>\n")
    return [([BASH], first + "</tool_call>"), ([WRITE], second)]


# ---- parsing ------------------------------------------------------------------------

# A realistic turn: reasoning, text, then a file written (code with quotes,
# tags that are not this value's close tag, non-ASCII, a trailing newline)
# and a command with a number and a nested object.
CODE = (
    "def render(tag: str) -> str:\n"
    '    """Wrap in <b>, not </arg_key> nor <tool_call>x</tool_call>."""\n'
    '    return f"<{tag}>\\u00e9 \u00e9</{tag}>"\n'
)
OPTIONS = {"env": {"CI": "1", "PATH": "/bin"}, "retries": [1, 2.5], "verbose": True}
REALISTIC = (
    "\n<think>The user wants the helper, then a test run.\nWrite first.</think>\n"
    "I'll add the helper, then run the tests.\n"
    "<tool_call>Write\n"
    "<arg_key>file_path</arg_key>\n<arg_value>/src/app/util.py</arg_value>\n"
    f"<arg_key>content</arg_key>\n<arg_value>{CODE}</arg_value>\n"
    "</tool_call>\n"
    "<tool_call>Bash\n"
    '<arg_key>command</arg_key>\n<arg_value>pytest -q tests/ && echo "ok"</arg_value>\n'
    "<arg_key>timeout</arg_key>\n<arg_value>120000</arg_value>\n"
    f"<arg_key>options</arg_key>\n<arg_value>{json.dumps(OPTIONS)}</arg_value>\n"
    "</tool_call>"
)
REALISTIC_CALLS = calls(
    ("Write", json.dumps({"file_path": "/src/app/util.py", "content": CODE}, ensure_ascii=False)),
    (
        "Bash",
        json.dumps(
            {"command": 'pytest -q tests/ && echo "ok"', "timeout": 120000, "options": OPTIONS}
        ),
    ),
)
REALISTIC_TEXT = "I'll add the helper, then run the tests."
REALISTIC_THOUGHT = "The user wants the helper, then a test run.\nWrite first."
LS = '{"command": "ls"}'

# name, output, thinking flag, expected
GOOD = [
    (
        "reasoning, text and two calls",
        REALISTIC,
        False,
        Result(text=REALISTIC_TEXT, thinking=REALISTIC_THOUGHT, calls=REALISTIC_CALLS),
    ),
    (
        "thinking off: no reasoning, text after the calls",
        "\nChecking.\n<tool_call>Bash\n<arg_key>command</arg_key>\n<arg_value>ls</arg_value>\n"
        "</tool_call>\nStarted.",
        False,
        Result(text="Checking.Started.", calls=calls(("Bash", LS))),
    ),
    (
        "a call with no arguments, with and without a newline",
        "<tool_call>get_goal\n</tool_call><tool_call>get_goal</tool_call>",
        False,
        Result(calls=calls(("get_goal", "{}"), ("get_goal", "{}"))),
    ),
    (
        "compact, with no newlines (Spark 2.5)",
        "<tool_call>Bash<arg_key>command</arg_key><arg_value>ls</arg_value></tool_call>",
        False,
        Result(calls=calls(("Bash", LS))),
    ),
    (
        "values are kept as written, whitespace too",
        "<tool_call>Write\n<arg_key>content</arg_key>\n<arg_value>\n  x\n</arg_value>\n"
        "</tool_call>",
        False,
        Result(calls=calls(("Write", '{"content": "\\n  x\\n"}'))),
    ),
    (
        "a JSON value whose string holds the close tag",
        "<tool_call>Bash\n<arg_key>options</arg_key>\n"
        '<arg_value>{"env": {"X": "</arg_value>"}}</arg_value>\n</tool_call>',
        False,
        Result(calls=calls(("Bash", '{"options": {"env": {"X": "</arg_value>"}}}'))),
    ),
    (
        "a string that looks like JSON stays a string",
        "<tool_call>Write\n<arg_key>content</arg_key>\n<arg_value>[1, 2]</arg_value>\n"
        "<arg_key>file_path</arg_key>\n<arg_value>true</arg_value>\n</tool_call>",
        False,
        Result(calls=calls(("Write", '{"content": "[1, 2]", "file_path": "true"}'))),
    ),
    (
        "untyped values: JSON when they are JSON, else strings",
        "<tool_call>Free\n<arg_key>n</arg_key>\n<arg_value>-4.5e1</arg_value>\n"
        '<arg_key>o</arg_key>\n<arg_value>{"a": [null]}</arg_value>\n'
        "<arg_key>t</arg_key>\n<arg_value>null pointer</arg_value>\n</tool_call>",
        False,
        Result(calls=calls(("Free", '{"n": -45.0, "o": {"a": [null]}, "t": "null pointer"}'))),
    ),
]

# name, output, expected
BAD = [
    (
        "a tool that was not offered is text",
        "Sure.\n<tool_call>rm_rf\n<arg_key>path</arg_key>\n<arg_value>/</arg_value>\n"
        "</tool_call>\nAfter.",
        Result(
            text="Sure.\n<tool_call>rm_rf\n<arg_key>path</arg_key>\n<arg_value>/</arg_value>\n"
            "</tool_call>\nAfter."
        ),
    ),
    (
        "hermes JSON inside the tags is text",
        '<tool_call>{"name": "Bash", "arguments": {"command": "ls"}}</tool_call>',
        Result(text='<tool_call>{"name": "Bash", "arguments": {"command": "ls"}}</tool_call>'),
    ),
    ("a lone open tag", "<tool_call>\n", Result(text="<tool_call>\n")),
    (
        "an unclosed call before its name is complete is text",
        "Hi <tool_call>Ba",
        Result(text="Hi <tool_call>Ba"),
    ),
    (
        "text inside a call is dropped",
        "<tool_call>Bash\nSure thing!\n<arg_key>command</arg_key>\n<arg_value>ls</arg_value>\n"
        "oops</tool_call>",
        Result(calls=calls(("Bash", LS))),
    ),
    (
        "a value without its open tag starts at once",
        "<tool_call>Bash\n<arg_key>command</arg_key>ls</arg_value>\n</tool_call>",
        Result(calls=calls(("Bash", LS))),
    ),
    (
        "a next call before the first closed",
        "<tool_call>get_goal\n<tool_call>Bash\n<arg_key>command</arg_key>\n"
        "<arg_value>ls</arg_value>\n</tool_call>",
        Result(calls=calls(("get_goal", "{}"), ("Bash", LS))),
    ),
    (
        "a value without its close tag runs to the end",
        "<tool_call>Bash\n<arg_key>command</arg_key>\n<arg_value>ls\n</tool_call>",
        Result(calls=calls(("Bash", '{"command": "ls\\n</tool_call>"}'))),
    ),
    (
        "unclosed inside a string value",
        "<tool_call>Write\n<arg_key>file_path</arg_key>\n<arg_value>/a</arg_value>\n"
        "<arg_key>content</arg_key>\n<arg_value>hel",
        Result(calls=calls(("Write", '{"file_path": "/a", "content": "hel"}'))),
    ),
    (
        "unclosed inside a key, or before the value's open tag",
        "<tool_call>Write\n<arg_key>file_path</arg_key>\n<arg_value>/a</arg_value>\n"
        "<arg_key>content</arg_key>\n<arg_val",
        Result(calls=calls(("Write", '{"file_path": "/a"}'))),
    ),
    (
        "unclosed after a number, and unfinished JSON",
        "<tool_call>Bash\n<arg_key>timeout</arg_key>\n<arg_value>12</arg_value>\n"
        '<arg_key>options</arg_key>\n<arg_value>{"env": [',
        Result(calls=calls(("Bash", '{"timeout": 12, "options": "{\\"env\\": ["}'))),
    ),
    (
        "a value that is not the schema's JSON is a string",
        "<tool_call>Bash\n<arg_key>timeout</arg_key>\n<arg_value>1O</arg_value>\n</tool_call>",
        Result(calls=calls(("Bash", '{"timeout": "1O"}'))),
    ),
    (
        "a key cut short by the end of the call",
        "<tool_call>Bash\n<arg_key>command</tool_call>",
        Result(calls=calls(("Bash", "{}"))),
    ),
    ("output ending inside a marker", "Hello <tool_ca", Result(text="Hello <tool_ca")),
]

STREAM = Stream(
    "arguments stream",
    lambda: GlmParser(tools=SCHEMAS, thinking=False, new_id=lambda: "toolu_1"),
    [
        ("\n<think>Plan", [ThinkingDelta("Plan")]),
        (".</think>\nOn it.\n", [ThinkingDelta("."), TextDelta("On it.")]),
        ("<tool_call>Ba", []),
        ("sh\n<arg_key>", [ToolCallStart(0, "toolu_1", "Bash")]),
        ("command</arg_key>\n<arg_value>ls", [ToolCallDelta(0, '{"command": "ls')]),
        (" -la</arg_", [ToolCallDelta(0, " -la")]),
        ("value>\n<arg_key>timeout</arg_key>\n<arg_value>1", [ToolCallDelta(0, '"')]),
        ("0</arg_value>\n", [ToolCallDelta(0, ', "timeout": 10')]),
        (
            "</tool_call>",
            [ToolCallDelta(0, "}"), ToolCallEnd(0, '{"command": "ls -la", "timeout": 10}')],
        ),
    ],
)


def write(name: str, args: dict[str, Any]) -> str:
    """One call the way the template writes it."""
    params = "".join(
        f"<arg_key>{k}</arg_key>\n"
        f"<arg_value>{v if isinstance(v, str) else json.dumps(v)}</arg_value>\n"
        for k, v in args.items()
    )
    return f"<tool_call>{name}\n{params}</tool_call>\n"


PIECES = ["<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>",
          "</arg_value>", "<think>", "</think>", "\n", "<", '"', "{"]  # fmt: skip

# ---- forced calls -------------------------------------------------------------------


def call(name: str, *params: tuple[str, str]) -> str:
    body = "".join(f"<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>\n" for k, v in params)
    return f"<tool_call>{name}\n{body}</tool_call>"


# text, whether the grammar accepts it
GRAMMAR = [
    (call("Bash", ("command", "ls -la")), True),
    ("\n" + call("Bash", ("command", 'a "quoted" <b> </tool_call>\n\nline')), True),
    (call("Bash", ("command", "ls"), ("timeout", "1.5"), ("mode", "safe")), True),
    (call("Bash", ("command", "ls"), ("run_in_background", "false")), True),
    (call("Write", ("file_path", "/a"), ("content", "")), True),
    (call("get_goal"), True),
    (call("Free", ("anything", "goes here")), True),
    (call("Bash"), False),  # command is required
    (call("Bash", ("timeout", "1"), ("command", "ls")), False),  # the schema's order
    (call("Bash", ("command", "ls"), ("extra", "1")), False),  # no other keys
    (call("Bash", ("command", "ls"), ("mode", "slow")), False),  # not in the enum
    (call("Bash", ("command", "ls"), ("run_in_background", "True")), False),  # not JSON
    (call("Read", ("path", "/a")), False),  # not offered
    ("Sure! " + call("get_goal"), False),
    (call("get_goal") + "\n" + call("get_goal"), False),
]

CASE = Case(
    name="glm",
    family=FAMILY,
    tools=SCHEMAS,
    detected={
        GLM: FAMILY,
        "Spark2.5.jinja": FAMILY,
        "inclusionai-ling-3.0-flash.jinja": FAMILY,
        "poolside-Laguna-XS.2.jinja": FAMILY,
    },
    not_taken=("Qwen-Qwen3-0.6B.jinja", "Qwen3-Coder.jinja"),
    renders=(RENDERED,),
    thinking=THINKING,
    parse_back=(PARSE_BACK,),
    outputs=tuple(
        Output(name, output, expected, thinking=thinking)
        for name, output, thinking, expected in GOOD
    ),
    bad=tuple(Output(name, output, expected) for name, output, expected in BAD),
    untooled=((FAMILY, "x <tool_call>get_goal\n</tool_call>"),),
    streams=(STREAM,),
    damage=(
        Damage(
            FAMILY,
            lambda: written(FAMILY, write, SCHEMAS, PIECES),
            SCHEMAS,
            min_started=100,
            keeps_text=lambda output: "<think>" not in output,
            lead_dropped=True,
        ),
    ),
    compiles=tuple(Compiles(FAMILY, request) for request in CLIENTS),
    accepts=tuple(Accepts(FAMILY, TOOLS, text, ok) for text, ok in GRAMMAR),
    own_calls=(OwnCalls(FAMILY, own_calls),),
    random_calls=(
        RandomCalls(
            FAMILY,
            TOOLS,
            SCHEMAS,
            range(8),
            closing_walk(("</arg_value>", "</arg_key>", '"', "}", "]")),
            min_finished=8,
        ),
    ),
    # The tiny model writes its answer wherever the grammar lets it: here the
    # value's close tag, so that free-text values end, then a word, so that an
    # answer is not empty when the prompt ends in that tag's last token (`>`).
    round_trips=(
        RoundTrip(
            FAMILY,
            GLM,
            read_file_schema({"type": "string"}),
            answer="</arg_value>Done.",
            answer_is_text=True,
        ),
    ),
)
