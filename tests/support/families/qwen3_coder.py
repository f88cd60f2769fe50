"""Qwen3-Coder XML calls (also Nemotron 3 Nano, StepFun 3.5): the real
templates they are detected from, rendering through the real template,
realistic outputs and every bad-output rule, the forced-call grammar, and a
forced call round trip on a tiny GGUF with the real template."""

from __future__ import annotations

import json
from typing import Any

from engy_local.chat import TextDelta, ToolCallDelta, ToolCallEnd, ToolCallStart
from engy_local.prompt.families.qwen3_coder import Qwen3CoderParser
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

FAMILY = "qwen3-coder"
QWEN3_CODER = "Qwen3-Coder.jinja"


def conversation() -> str:
    return prompt(QWEN3_CODER, FAMILY, CONVERSATION)


# ---- rendering --------------------------------------------------------------------

CALLS_TURN = (
    "<|im_start|>assistant\nLet me look.\n\n"
    "<tool_call>\n<function=Bash>\n"
    "<parameter=command>\nls -la\n</parameter>\n"
    "<parameter=timeout>\n30\n</parameter>\n"
    '<parameter=options>\n{"env": {"CI": "1"}, "verbose": false}\n</parameter>\n'
    "<parameter=run_in_background>\nTrue\n</parameter>\n"
    "</function>\n</tool_call>\n"
    "<tool_call>\n<function=Write>\n"
    "<parameter=file_path>\n/tmp/a.py\n</parameter>\n"
    "<parameter=content>\nprint('<hi>')\n\n</parameter>\n"
    "</function>\n</tool_call><|im_end|>\n"
    "<|im_start|>user\n<tool_response>\na.txt b.txt\n</tool_response>\n"
    "<tool_response>\nwritten\n</tool_response>\n<|im_end|>\n"
    "<|im_start|>assistant\n"
)
RENDERED = Rendered(
    "an agent conversation",
    conversation,
    starts="<|im_start|>system\nSYSTEM-TEXT\n\n# Tools\n",
    contains=("<function>\n<name>Bash</name>\n<description>Run a command.</description>",),
    ends=CALLS_TURN,
    # Qwen3-Coder does not reason: the template drops reasoning everywhere.
    absent=("EARLY-THOUGHT", "I will look."),
)
NO_SWITCH = Rendered(
    "thinking has no switch",
    lambda: prompt(QWEN3_CODER, FAMILY, CONVERSATION[:2], thinking=True),
    same_as=lambda: prompt(QWEN3_CODER, FAMILY, CONVERSATION[:2]),
)
# The template's own writing of a turn gives the calls back (booleans
# written `True` included).
PARSE_BACK = ParseBack(
    "the calls turn",
    lambda: [conversation().split("<|im_start|>assistant\n")[-2].split("<|im_end|>")[0]],
    FAMILY,
    SCHEMAS,
    (RENDERED_CALLS,),
)


def own_calls() -> list[tuple[Any, str]]:
    turn = conversation().split("<|im_start|>assistant\nLet me look.\n\n")[1]
    first, second = turn.split("<|im_end|>")[0].split("</tool_call>\n")
    return [([BASH], first + "</tool_call>"), ([WRITE], second)]


# ---- parsing ------------------------------------------------------------------------

# A realistic turn: text, then a file written (code with quotes, tags that are
# not this value's close tag, non-ASCII, a trailing newline) and a command
# with a number and a nested object.
CODE = (
    "def render(tag: str) -> str:\n"
    '    """Wrap in <b>, not </function> nor <parameter=x>."""\n'
    '    return f"<{tag}>\\u00e9 \u00e9</{tag}>"\n'
)
OPTIONS = {"env": {"CI": "1", "PATH": "/bin"}, "retries": [1, 2.5], "verbose": True}
REALISTIC = (
    "I'll add the helper, then run the tests.\n\n"
    "<tool_call>\n<function=Write>\n"
    "<parameter=file_path>\n/src/app/util.py\n</parameter>\n"
    f"<parameter=content>\n{CODE}\n</parameter>\n"
    "</function>\n</tool_call>\n"
    "<tool_call>\n<function=Bash>\n"
    '<parameter=command>\npytest -q tests/ && echo "ok"\n</parameter>\n'
    "<parameter=timeout>\n120000\n</parameter>\n"
    f"<parameter=options>\n{json.dumps(OPTIONS, indent=2)}\n</parameter>\n"
    "</function>\n</tool_call>"
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
LS = '{"command": "ls"}'

# name, output, thinking flag, expected
GOOD = [
    (
        "text and two calls",
        REALISTIC,
        False,
        Result(text="I'll add the helper, then run the tests.", calls=REALISTIC_CALLS),
    ),
    (
        "reasoning first (Nemotron 3 Nano, StepFun 3.5)",
        "<think>\nThe user wants tests run.\n</think>\n\n" + REALISTIC + "\n\nBoth started.",
        False,
        Result(
            text="I'll add the helper, then run the tests.Both started.",
            thinking="The user wants tests run.",
            calls=REALISTIC_CALLS,
        ),
    ),
    (
        "reasoning opened by the prompt",
        "Run it.\n</think>\n\n<tool_call>\n<function=Bash>\n<parameter=command>\nls\n"
        "</parameter>\n</function>\n</tool_call>",
        True,
        Result(thinking="Run it.", calls=calls(("Bash", LS))),
    ),
    (
        "a call with no parameters",
        "<tool_call>\n<function=get_goal>\n</function>\n</tool_call>",
        False,
        Result(calls=calls(("get_goal", "{}"))),
    ),
    (
        "compact, with no newlines",
        "<tool_call><function=Bash><parameter=command>ls</parameter></function></tool_call>",
        False,
        Result(calls=calls(("Bash", LS))),
    ),
    (
        "one newline inside each end is layout, the rest is the value's",
        "<tool_call>\n<function=Write>\n<parameter=content>\n\n  x\n\n</parameter>\n"
        "</function>\n</tool_call>",
        False,
        Result(calls=calls(("Write", '{"content": "\\n  x\\n"}'))),
    ),
    (
        "a JSON value whose string holds the close tag",
        "<tool_call>\n<function=Bash>\n<parameter=options>\n"
        '{"env": {"X": "</parameter>"}}\n</parameter>\n</function>\n</tool_call>',
        False,
        Result(calls=calls(("Bash", '{"options": {"env": {"X": "</parameter>"}}}'))),
    ),
    (
        "Python literals where the schema wants JSON",
        "<tool_call>\n<function=Bash>\n<parameter=run_in_background>\nTrue\n</parameter>\n"
        "<parameter=options>\nNone\n</parameter>\n</function>\n</tool_call>",
        False,
        Result(calls=calls(("Bash", '{"run_in_background": true, "options": null}'))),
    ),
    (
        "a string that looks like JSON stays a string",
        '<tool_call>\n<function=Write>\n<parameter=content>\n{"a": 1}\n</parameter>\n'
        "<parameter=file_path>\n42\n</parameter>\n</function>\n</tool_call>",
        False,
        Result(calls=calls(("Write", '{"content": "{\\"a\\": 1}", "file_path": "42"}'))),
    ),
    (
        "untyped values: JSON when they are JSON, else strings",
        "<tool_call>\n<function=Free>\n<parameter=n>\n42\n</parameter>\n"
        '<parameter=o>\n[1, {"a": null}]\n</parameter>\n<parameter=t>\n12 monkeys\n'
        "</parameter>\n<parameter=f>\nFalsehood\n</parameter>\n</function>\n</tool_call>",
        False,
        Result(
            calls=calls(
                ("Free", '{"n": 42, "o": [1, {"a": null}], "t": "12 monkeys", "f": "Falsehood"}')
            )
        ),
    ),
    (
        "two functions in one block",
        "<tool_call>\n<function=get_goal>\n</function>\n<function=Bash>\n"
        "<parameter=command>\nls\n</parameter>\n</function>\n</tool_call>",
        False,
        Result(calls=calls(("get_goal", "{}"), ("Bash", LS))),
    ),
]

# Without schemas (`tools` as bare names) a value is JSON when it is JSON.
NAMES_ONLY = Output(
    "names only: every value read as JSON or string",
    "<tool_call>\n<function=Write>\n<parameter=file_path>\n42\n</parameter>\n"
    "<parameter=content>\nx = 1\n</parameter>\n</function>\n</tool_call>",
    Result(calls=calls(("Write", '{"file_path": 42, "content": "x = 1"}'))),
    tools=[t.name for t in TOOLS],
)

# name, output, expected
BAD = [
    (
        "a tool that was not offered is text",
        "Sure.\n<tool_call>\n<function=rm_rf>\n<parameter=path>\n/\n</parameter>\n"
        "</function>\n</tool_call>\nAfter.",
        Result(
            text="Sure.\n<tool_call>\n<function=rm_rf>\n<parameter=path>\n/\n</parameter>\n"
            "</function>\n</tool_call>\nAfter."
        ),
    ),
    (
        "an unknown tool beside a known one",
        "<tool_call>\n<function=nope>\n</function>\n<function=get_goal>\n</function>\n</tool_call>",
        Result(
            text="<tool_call>\n<function=nope>\n</function>",
            calls=calls(("get_goal", "{}")),
        ),
    ),
    (
        "hermes JSON inside the tags is text",
        '<tool_call>\n{"name": "Bash", "arguments": {"command": "ls"}}\n</tool_call>',
        Result(text='<tool_call>\n{"name": "Bash", "arguments": {"command": "ls"}}\n</tool_call>'),
    ),
    ("a lone open tag", "<tool_call>", Result(text="<tool_call>")),
    (
        "an empty block",
        "A <tool_call>\n</tool_call> B",
        Result(text="A <tool_call>\n</tool_call> B"),
    ),
    (
        "an unclosed call before its name is complete is text",
        "Hi <tool_call>\n<function=Ba",
        Result(text="Hi <tool_call>\n<function=Ba"),
    ),
    (
        "a name that never ends is text",
        "<tool_call>\n<function=Bash\n<parameter=command>\nls\n</parameter>\n</function>\n"
        "</tool_call>",
        Result(
            text="<tool_call>\n<function=Bash\n<parameter=command>\nls\n</parameter>\n"
            "</function>\n</tool_call>"
        ),
    ),
    (
        "a name too long to be one is text",
        "<tool_call>\n<function=" + "x" * 300 + ">\n</function>\n</tool_call>",
        Result(text="<tool_call>\n<function=" + "x" * 300 + ">\n</function>\n</tool_call>"),
    ),
    (
        "a key too long to be one is dropped",
        "<tool_call>\n<function=Bash>\n<parameter=" + "k" * 300 + ">\nv\n</parameter>\n"
        "<parameter=command>\nls\n</parameter>\n</function>\n</tool_call>",
        Result(calls=calls(("Bash", LS))),
    ),
    (
        "text inside a call is dropped",
        "<tool_call>\n<function=Bash>\nSure thing!\n<parameter=command>\nls\n</parameter>\n"
        "oops</function>\n</tool_call>",
        Result(calls=calls(("Bash", LS))),
    ),
    (
        "a missing function close tag",
        "<tool_call>\n<function=Bash>\n<parameter=command>\nls\n</parameter>\n</tool_call>ok",
        Result(text="ok", calls=calls(("Bash", LS))),
    ),
    (
        "a next function before the first closed",
        "<tool_call>\n<function=get_goal>\n<function=Bash>\n<parameter=command>\nls\n"
        "</parameter>\n</function>\n</tool_call>",
        Result(calls=calls(("get_goal", "{}"), ("Bash", LS))),
    ),
    (
        "a value without its close tag runs to the end",
        "<tool_call>\n<function=Bash>\n<parameter=command>\nls\n</function>\n</tool_call>",
        Result(calls=calls(("Bash", '{"command": "ls\\n</function>\\n</tool_call>"}'))),
    ),
    (
        "unclosed inside a string value",
        "<tool_call>\n<function=Write>\n<parameter=file_path>\n/a\n</parameter>\n"
        "<parameter=content>\nhel",
        Result(calls=calls(("Write", '{"file_path": "/a", "content": "hel"}'))),
    ),
    (
        "unclosed inside a key",
        "<tool_call>\n<function=Write>\n<parameter=file_path>\n/a\n</parameter>\n<parameter=cont",
        Result(calls=calls(("Write", '{"file_path": "/a"}'))),
    ),
    (
        "unclosed after a number, and unfinished JSON",
        "<tool_call>\n<function=Bash>\n<parameter=timeout>\n12\n</parameter>\n"
        '<parameter=options>\n{"env": {',
        Result(calls=calls(("Bash", '{"timeout": 12, "options": "{\\"env\\": {"}'))),
    ),
    (
        "a value that is not the schema's JSON is a string",
        "<tool_call>\n<function=Bash>\n<parameter=timeout>\nsoon\n</parameter>\n"
        "<parameter=options>\n{'a': 1}\n</parameter>\n</function>\n</tool_call>",
        Result(calls=calls(("Bash", '{"timeout": "soon", "options": "{\'a\': 1}"}'))),
    ),
    (
        "text after a call, inside the block",
        "<tool_call>\n<function=get_goal>\n</function>\nAll set.",
        Result(text="All set.", calls=calls(("get_goal", "{}"))),
    ),
    (
        "a key cut short by the end of the call",
        "<tool_call>\n<function=Bash>\n<parameter=command</function>\n</tool_call>",
        Result(calls=calls(("Bash", "{}"))),
    ),
    (
        "a repeated key is sent again",
        "<tool_call><function=Bash><parameter=command>a</parameter>"
        "<parameter=command>b</parameter></function></tool_call>",
        Result(calls=calls(("Bash", '{"command": "a", "command": "b"}'))),
    ),
    ("output ending inside a marker", "Hello <tool_ca", Result(text="Hello <tool_ca")),
    (
        "output ending inside the block's close tag",
        "<tool_call>\n<function=get_goal>\n</function>\n</tool_",
        Result(text="</tool_", calls=calls(("get_goal", "{}"))),
    ),
]

# Strings stream as they are generated; JSON values go out whole.
STREAM = Stream(
    "arguments stream",
    lambda: Qwen3CoderParser(tools=SCHEMAS, thinking=False, new_id=lambda: "toolu_1"),
    [
        ("Running", [TextDelta("Running")]),
        (" it.\n\n<tool", [TextDelta(" it.")]),
        ("_call>\n<function=Ba", []),
        ("sh>\n", [ToolCallStart(0, "toolu_1", "Bash")]),
        ("<parameter=command>\nls", [ToolCallDelta(0, '{"command": "ls')]),
        (" -la\n", [ToolCallDelta(0, " -la")]),
        ("</param", []),
        ("eter>\n<parameter=timeout>\n1", [ToolCallDelta(0, '"')]),
        ("0\n</parameter>\n", [ToolCallDelta(0, ', "timeout": 10')]),
        (
            "</function>",
            [ToolCallDelta(0, "}"), ToolCallEnd(0, '{"command": "ls -la", "timeout": 10}')],
        ),
        ("\n</tool_call>", []),
    ],
)


def write(name: str, args: dict[str, Any]) -> str:
    """One call the way the template writes it."""
    params = "".join(
        f"<parameter={k}>\n{v if isinstance(v, str) else json.dumps(v)}\n</parameter>\n"
        for k, v in args.items()
    )
    return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>\n"


PIECES = ["<tool_call>", "</tool_call>", "<function=", "</function>", "<parameter=",
          "</parameter>", "<think>", "</think>", ">", "\n", "<", '"', "{"]  # fmt: skip

# ---- forced calls -------------------------------------------------------------------


def call(name: str, *params: tuple[str, str]) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params)
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


# text, whether the grammar accepts it
GRAMMAR = [
    (call("Bash", ("command", "ls -la")), True),
    ("\n" + call("Bash", ("command", 'a "quoted" <b> </function>\n\nline')), True),
    (call("Bash", ("command", "ls"), ("timeout", "1.5"), ("mode", "safe")), True),
    (
        call("Bash", ("command", "ls"), ("options", '{"env": {"A": "b"}, "verbose": true}')),
        True,
    ),
    (call("Write", ("file_path", "/a"), ("content", "")), True),
    (call("get_goal"), True),
    (call("Free", ("anything", "goes here")), True),
    (call("Bash"), False),  # command is required
    (call("Bash", ("timeout", "1"), ("command", "ls")), False),  # the schema's order
    (call("Bash", ("command", "ls"), ("extra", "1")), False),  # no other keys
    (call("Bash", ("command", "ls"), ("mode", "slow")), False),  # not in the enum
    (call("Bash", ("command", "ls"), ("timeout", "soon")), False),  # not a number
    (call("Write", ("file_path", "/a")), False),
    (call("Read", ("path", "/a")), False),  # not offered
    ("Sure! " + call("get_goal"), False),
    (call("get_goal") + "\n" + call("get_goal"), False),
]

CASE = Case(
    name="qwen3-coder",
    family=FAMILY,
    tools=SCHEMAS,
    detected={
        QWEN3_CODER: FAMILY,
        "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja": FAMILY,
        "StepFun3.5-Flash.jinja": FAMILY,
    },
    not_taken=(
        "Qwen-Qwen3-0.6B.jinja",  # <tool_call> JSON: hermes
        "meetkai-functionary-medium-v3.1.jinja",  # <function= alone
        "ByteDance-Seed-OSS.jinja",  # <seed:tool_call>
        "GLM-4.6.jinja",
    ),
    renders=(RENDERED,),
    thinking=(NO_SWITCH,),
    parse_back=(PARSE_BACK,),
    outputs=(
        *(
            Output(name, output, expected, thinking=thinking)
            for name, output, thinking, expected in GOOD
        ),
        NAMES_ONLY,
    ),
    bad=tuple(Output(name, output, expected) for name, output, expected in BAD),
    untooled=((FAMILY, "x <tool_call>\n<function=Bash>\n</function>\n</tool_call>"),),
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
    compiles=tuple(Compiles(FAMILY, request) for request in CLIENTS),
    accepts=tuple(Accepts(FAMILY, TOOLS, text, ok) for text, ok in GRAMMAR),
    own_calls=(OwnCalls(FAMILY, own_calls),),
    random_calls=(
        RandomCalls(
            FAMILY,
            TOOLS,
            SCHEMAS,
            range(8),
            closing_walk(("</parameter>", '"', "}", "]", ">")),
            min_finished=8,
        ),
    ),
    # The tiny model writes its answer wherever the grammar lets it: here the
    # value's close tag, so that free-text values end.
    round_trips=(
        RoundTrip(
            FAMILY,
            QWEN3_CODER,
            read_file_schema({"type": "string"}),
            answer="</parameter>",
            answer_is_text=True,
        ),
    ),
)
