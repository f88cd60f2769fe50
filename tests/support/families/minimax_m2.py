"""MiniMax M2 calls (`<minimax:tool_call>` around `<invoke>` elements) and
`<think>` reasoning: the real template it is detected from, rendering
through it, realistic outputs and every bad-output rule, the forced-call
grammar, and a forced call round trip on a tiny GGUF with the real
template."""

from __future__ import annotations

import json
from typing import Any

from engy_local.chat import TextDelta, ThinkingDelta, ToolCallDelta, ToolCallEnd, ToolCallStart
from engy_local.prompt.families.minimax_m2 import MiniMaxM2Parser
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

FAMILY = "minimax-m2"
MINIMAX = "MiniMax-M2.jinja"


def conversation() -> str:
    return prompt(MINIMAX, FAMILY, CONVERSATION)


def block(*invokes: str) -> str:
    return "<minimax:tool_call>\n" + "".join(invokes) + "</minimax:tool_call>"


def invoke(name: str, *params: tuple[str, str]) -> str:
    body = "".join(f'<parameter name="{k}">{v}</parameter>\n' for k, v in params)
    return f'<invoke name="{name}">\n{body}</invoke>\n'


# ---- rendering --------------------------------------------------------------------

CALLS_TURN = (
    "]~b]ai\n<think>\nI will look.\n</think>\n\nLet me look.\n"
    '<minimax:tool_call>\n<invoke name="Bash">\n'
    '<parameter name="command">ls -la</parameter>\n'
    '<parameter name="timeout">30</parameter>\n'
    '<parameter name="options">{"env": {"CI": "1"}, "verbose": false}</parameter>\n'
    '<parameter name="run_in_background">true</parameter>\n'
    "</invoke>\n"
    '<invoke name="Write">\n'
    '<parameter name="file_path">/tmp/a.py</parameter>\n'
    "<parameter name=\"content\">print('<hi>')\n</parameter>\n"
    "</invoke>\n</minimax:tool_call>[e~[\n"
    "]~b]tool\n<response>a.txt b.txt</response>\n<response>written</response>[e~[\n"
    "]~b]ai\n<think>\n"
)
RENDERED = Rendered(
    "an agent conversation",
    conversation,
    starts="]~!b[]~b]system\nSYSTEM-TEXT\n\n# Tools\n",
    contains=(
        '<tool>{"name": "Bash", "description": "Run a command."',
        # Reasoning before the last user turn is dropped, after it kept.
        "]~b]user\nUSER-ONE[e~[\n]~b]ai\nHello.[e~[\n]~b]user\nUSER-TWO[e~[\n",
    ),
    ends=CALLS_TURN,
    absent=("EARLY-THOUGHT",),
)
# The template opens the reasoning itself and has no switch.
THINKING = tuple(
    Rendered(
        f"thinking {thinking}: always on",
        lambda thinking=thinking: prompt(MINIMAX, FAMILY, CONVERSATION[:2], thinking=thinking),
        ends="]~b]ai\n<think>\n",
    )
    for thinking in (None, True, False)
)
PARSE_BACK = ParseBack(
    "the calls turn",
    lambda: [conversation().split("]~b]ai\n")[-2].split("[e~[")[0]],
    FAMILY,
    SCHEMAS,
    (RENDERED_CALLS,),
)


def own_calls() -> list[tuple[Any, str]]:
    turn = conversation().split("Let me look.\n")[1].split("[e~[")[0]
    first, second = turn.split("</invoke>\n<invoke")
    return [
        ([BASH], first + "</invoke>\n</minimax:tool_call>"),
        ([WRITE], "<minimax:tool_call>\n<invoke" + second),
    ]


# ---- parsing ------------------------------------------------------------------------

# A realistic turn, the prompt having opened the reasoning: reasoning, text,
# then a file written (code with quotes, tags that are not this value's close
# tag, non-ASCII, a trailing newline) and a command with a number and a
# nested object.
CODE = (
    "def render(tag: str) -> str:\n"
    '    """Wrap in <b>, not </invoke> nor <parameter name="x">."""\n'
    '    return f"<{tag}>\\u00e9 \u00e9</{tag}>"\n'
)
OPTIONS = {"env": {"CI": "1", "PATH": "/bin"}, "retries": [1, 2.5], "verbose": True}
REALISTIC = (
    "The user wants the helper, then a test run.\nWrite first.\n</think>\n\n"
    "I'll add the helper, then run the tests.\n"
    '<minimax:tool_call>\n<invoke name="Write">\n'
    '<parameter name="file_path">/src/app/util.py</parameter>\n'
    f'<parameter name="content">{CODE}</parameter>\n'
    "</invoke>\n"
    '<invoke name="Bash">\n'
    '<parameter name="command">pytest -q tests/ && echo "ok"</parameter>\n'
    '<parameter name="timeout">120000</parameter>\n'
    f'<parameter name="options">{json.dumps(OPTIONS)}</parameter>\n'
    "</invoke>\n</minimax:tool_call>"
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
        True,
        Result(text=REALISTIC_TEXT, thinking=REALISTIC_THOUGHT, calls=REALISTIC_CALLS),
    ),
    (
        "reasoning the model opens itself",
        "<think>\n" + REALISTIC,
        False,
        Result(text=REALISTIC_TEXT, thinking=REALISTIC_THOUGHT, calls=REALISTIC_CALLS),
    ),
    (
        "a call with no arguments, and text after the block",
        "ok\n</think>\n\n" + block(invoke("get_goal")) + "\n\nWaiting.",
        True,
        Result(thinking="ok", text="Waiting.", calls=calls(("get_goal", "{}"))),
    ),
    (
        "compact, with no newlines",
        '<minimax:tool_call><invoke name="Bash"><parameter name="command">ls</parameter>'
        "</invoke></minimax:tool_call>",
        False,
        Result(calls=calls(("Bash", LS))),
    ),
    (
        "values are kept as written, whitespace too",
        block(invoke("Write", ("content", "\n  x\n"))),
        False,
        Result(calls=calls(("Write", '{"content": "\\n  x\\n"}'))),
    ),
    (
        "a JSON value whose string holds the close tag",
        block(invoke("Bash", ("options", '{"env": {"X": "</parameter>"}}'))),
        False,
        Result(calls=calls(("Bash", '{"options": {"env": {"X": "</parameter>"}}}'))),
    ),
    (
        "a string that looks like JSON stays a string",
        block(invoke("Write", ("content", "null"), ("file_path", "3"))),
        False,
        Result(calls=calls(("Write", '{"content": "null", "file_path": "3"}'))),
    ),
    (
        "untyped values: JSON when they are JSON, else strings",
        block(invoke("Free", ("n", "0"), ("o", "[true, {}]"), ("t", '"quoted"'), ("u", "[x]"))),
        False,
        Result(calls=calls(("Free", '{"n": 0, "o": [true, {}], "t": "quoted", "u": "[x]"}'))),
    ),
]

# name, output, expected
BAD = [
    (
        "a tool that was not offered is text",
        "Sure.\n" + block(invoke("rm_rf", ("path", "/"))) + "\nAfter.",
        Result(text="Sure.\n" + block(invoke("rm_rf", ("path", "/"))) + "\nAfter."),
    ),
    (
        "an unknown tool beside a known one",
        block(invoke("nope"), invoke("get_goal")),
        Result(
            text='<minimax:tool_call>\n<invoke name="nope">\n</invoke>',
            calls=calls(("get_goal", "{}")),
        ),
    ),
    (
        "hermes JSON inside the block is text",
        '<minimax:tool_call>\n{"name": "Bash", "arguments": {}}\n</minimax:tool_call>',
        Result(text='<minimax:tool_call>\n{"name": "Bash", "arguments": {}}\n</minimax:tool_call>'),
    ),
    ("a lone open tag", "<minimax:tool_call>", Result(text="<minimax:tool_call>")),
    (
        "an empty block",
        "A <minimax:tool_call>\n</minimax:tool_call> B",
        Result(text="A <minimax:tool_call>\n</minimax:tool_call> B"),
    ),
    (
        "an unclosed call before its name is complete is text",
        'Hi <minimax:tool_call>\n<invoke name="Ba',
        Result(text='Hi <minimax:tool_call>\n<invoke name="Ba'),
    ),
    (
        "a name without its quotes is text",
        "<minimax:tool_call>\n<invoke name=Bash>\n</invoke>\n</minimax:tool_call>",
        Result(text="<minimax:tool_call>\n<invoke name=Bash>\n</invoke>\n</minimax:tool_call>"),
    ),
    (
        "text inside a call is dropped",
        '<minimax:tool_call>\n<invoke name="Bash">\nSure!\n'
        '<parameter name="command">ls</parameter>\noops</invoke>\n</minimax:tool_call>',
        Result(calls=calls(("Bash", LS))),
    ),
    (
        "a missing invoke close tag",
        '<minimax:tool_call>\n<invoke name="Bash">\n<parameter name="command">ls</parameter>\n'
        "</minimax:tool_call>ok",
        Result(text="ok", calls=calls(("Bash", LS))),
    ),
    (
        "a next invoke before the first closed",
        '<minimax:tool_call>\n<invoke name="get_goal">\n'
        + invoke("Bash", ("command", "ls"))
        + "</minimax:tool_call>",
        Result(calls=calls(("get_goal", "{}"), ("Bash", LS))),
    ),
    (
        "a value without its close tag runs to the end",
        '<minimax:tool_call>\n<invoke name="Bash">\n<parameter name="command">ls\n</invoke>',
        Result(calls=calls(("Bash", '{"command": "ls\\n</invoke>"}'))),
    ),
    (
        "unclosed inside a string value",
        '<minimax:tool_call>\n<invoke name="Write">\n<parameter name="file_path">/a</parameter>\n'
        '<parameter name="content">hel',
        Result(calls=calls(("Write", '{"file_path": "/a", "content": "hel"}'))),
    ),
    (
        "unclosed inside a key",
        '<minimax:tool_call>\n<invoke name="Write">\n<parameter name="file_path">/a</parameter>\n'
        '<parameter name="cont',
        Result(calls=calls(("Write", '{"file_path": "/a"}'))),
    ),
    (
        "unclosed after a number, and unfinished JSON",
        '<minimax:tool_call>\n<invoke name="Bash">\n<parameter name="timeout">12</parameter>\n'
        '<parameter name="options">{"env": {"A": "b',
        Result(calls=calls(("Bash", '{"timeout": 12, "options": "{\\"env\\": {\\"A\\": \\"b"}'))),
    ),
    (
        "a value that is not the schema's JSON is a string",
        block(invoke("Bash", ("command", "ls"), ("run_in_background", "yes"))),
        Result(calls=calls(("Bash", '{"command": "ls", "run_in_background": "yes"}'))),
    ),
    (
        "text after a call, inside the block",
        '<minimax:tool_call>\n<invoke name="get_goal">\n</invoke>\nAll set.',
        Result(text="All set.", calls=calls(("get_goal", "{}"))),
    ),
    ("output ending inside a marker", "Hello <minimax:tool", Result(text="Hello <minimax:tool")),
]

STREAM = Stream(
    "arguments stream",
    lambda: MiniMaxM2Parser(tools=SCHEMAS, thinking=True, new_id=lambda: "toolu_1"),
    [
        ("Plan", [ThinkingDelta("Plan")]),
        (".\n</think>\n\nOn it.\n<mini", [ThinkingDelta("."), TextDelta("On it.")]),
        ('max:tool_call>\n<invoke name="Ba', []),
        ('sh">\n', [ToolCallStart(0, "toolu_1", "Bash")]),
        ('<parameter name="command">ls', [ToolCallDelta(0, '{"command": "ls')]),
        (" -la</para", [ToolCallDelta(0, " -la")]),
        ('meter>\n<parameter name="timeout">1', [ToolCallDelta(0, '"')]),
        ("0</parameter>\n", [ToolCallDelta(0, ', "timeout": 10')]),
        (
            "</invoke>",
            [ToolCallDelta(0, "}"), ToolCallEnd(0, '{"command": "ls -la", "timeout": 10}')],
        ),
        ("\n</minimax:tool_call>", []),
    ],
)


def write(name: str, args: dict[str, Any]) -> str:
    """One call the way the template writes it (one block per call here)."""
    values = {k: v if isinstance(v, str) else json.dumps(v) for k, v in args.items()}
    return block(invoke(name, *values.items())) + "\n"


PIECES = ["<minimax:tool_call>", "</minimax:tool_call>", '<invoke name="', "</invoke>",
          '<parameter name="', "</parameter>", '">', "<think>", "</think>", "\n", "<",
          '"']  # fmt: skip

# ---- forced calls -------------------------------------------------------------------

# text, whether the grammar accepts it
GRAMMAR = [
    (block(invoke("Bash", ("command", "ls -la"))), True),
    ("\n" + block(invoke("Bash", ("command", 'a "q" <b> </invoke>\n\nline'))), True),
    (block(invoke("Bash", ("command", "ls"), ("timeout", "1.5"), ("mode", "safe"))), True),
    (block(invoke("Bash", ("command", "ls"), ("options", '{"verbose": true}'))), True),
    (block(invoke("Write", ("file_path", "/a"), ("content", ""))), True),
    (block(invoke("get_goal")), True),
    (block(invoke("Free", ("anything", "goes here"))), True),
    (block(invoke("Bash")), False),  # command is required
    (block(invoke("Bash", ("timeout", "1"), ("command", "ls"))), False),  # the schema's order
    (block(invoke("Bash", ("command", "ls"), ("extra", "1"))), False),  # no other keys
    (block(invoke("Bash", ("command", "ls"), ("mode", "slow"))), False),  # not in the enum
    (block(invoke("Read", ("path", "/a"))), False),  # not offered
    (block(invoke("get_goal"), invoke("get_goal")), False),  # one call
    ("Sure! " + block(invoke("get_goal")), False),
]

# The prompt opens the reasoning: a forced call comes after it ends.
REASONING_FIRST = [
    ("I should check the goal.\n</think>\n\n" + block(invoke("get_goal")), True),
    (block(invoke("get_goal")), False),
]

CASE = Case(
    name="minimax-m2",
    family=FAMILY,
    tools=SCHEMAS,
    detected={MINIMAX: FAMILY},
    not_taken=("MiniMax-M1.jinja", "Qwen3-Coder.jinja", "GLM-4.6.jinja"),
    renders=(RENDERED,),
    thinking=THINKING,
    parse_back=(PARSE_BACK,),
    outputs=tuple(
        Output(name, output, expected, thinking=thinking)
        for name, output, thinking, expected in GOOD
    ),
    bad=tuple(Output(name, output, expected) for name, output, expected in BAD),
    untooled=((FAMILY, "x " + block(invoke("get_goal"))),),
    streams=(STREAM,),
    damage=(
        Damage(
            FAMILY,
            lambda: written(FAMILY, write, SCHEMAS, PIECES),
            SCHEMAS,
            min_started=100,
            keeps_text=lambda output: "<think>" not in output,
        ),
    ),
    compiles=tuple(
        Compiles(FAMILY, request, reasoning_each=True, reasoning_all=True) for request in CLIENTS
    ),
    accepts=(
        *(Accepts(FAMILY, TOOLS, text, ok) for text, ok in GRAMMAR),
        *(Accepts(FAMILY, TOOLS, text, ok, reasoning=True) for text, ok in REASONING_FIRST),
    ),
    own_calls=(OwnCalls(FAMILY, own_calls),),
    random_calls=(
        RandomCalls(
            FAMILY,
            TOOLS,
            SCHEMAS,
            range(8),
            closing_walk(("</parameter>", '">', '"', "}", "]")),
            min_finished=8,
        ),
    ),
    # The tiny model writes its answer wherever the grammar lets it. The prompt
    # opens the reasoning, so the answer closes it (a forced call follows). Its
    # free-text values would repeat the answer for ever, so the schema bounds
    # the one string parameter (which the grammar then keeps to one line
    # without `<`).
    round_trips=(
        RoundTrip(
            FAMILY,
            MINIMAX,
            read_file_schema({"type": "string", "maxLength": 24}),
            answer="</think>Done.",
            answer_is_text=True,
        ),
    ),
)
