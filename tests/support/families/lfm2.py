"""LFM2 / LFM2.5 Pythonic calls (family "lfm2"): the real templates it is
detected from, the tools, calls and results written through them as text,
the calls read back, realistic outputs and every bad-output rule, the
forced-call grammar, and a forced call round trip on a tiny GGUF."""

from __future__ import annotations

import json
from typing import Any

from engy_local.chat import TextDelta, ToolCall, ToolCallDelta, ToolCallEnd, ToolCallStart
from engy_local.prompt.families.lfm2 import END, START, Lfm2Parser, call_text
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
    BASH_ARGS,
    CONVERSATION,
    RENDERED_CALLS,
    SCHEMAS,
    TOOLS,
    WRITE,
    WRITE_ARGS,
    prompt,
    read_file_schema,
)
from support.grammar import CLIENTS
from support.parsing import Result, calls

FAMILY = "lfm2"
LFM2 = "LFM2-8B-A1B.jinja"
LFM25 = "LFM2.5-Instruct.jinja"
LFM25_MOE = "LFM2.5-8B-A1B.jinja"
TEMPLATES = (LFM2, LFM25, LFM25_MOE)


def conversation(name: str) -> str:
    return prompt(name, FAMILY, CONVERSATION)


# ---- rendering --------------------------------------------------------------------

CALLS_TEXT = (
    f'Let me look.{START}[Bash(command="ls -la", timeout=30, '
    'options={"env": {"CI": "1"}, "verbose": False}, run_in_background=True), '
    f'Write(file_path="/tmp/a.py", content="print(\'<hi>\')\\n")]{END}<|im_end|>\n'
)
RESULTS = {
    LFM2: "<|im_start|>tool\n<|tool_response_start|>a.txt b.txt<|tool_response_end|><|im_end|>\n",
    LFM25: "<|im_start|>tool\na.txt b.txt<|im_end|>\n",
    LFM25_MOE: "<|im_start|>tool\na.txt b.txt<|im_end|>\n",
}
# The templates' own tool lists, after the system prompt on a line of its own.
TOOL_LISTS = {
    LFM2: 'List of tools: <|tool_list_start|>[{"type": "function", "function": {"name": "',
    LFM25: 'List of tools: [{"type": "function", "function": {"name": "',
    LFM25_MOE: 'List of tools: [{"type": "function", "function": {"name": "',
}
RENDERS = tuple(
    Rendered(
        f"an agent conversation, {name}",
        lambda name=name: conversation(name),
        # The tools after the system prompt, on a line of their own.
        starts="<|im_start|>system\nSYSTEM-TEXT\n" + TOOL_LISTS[name],
        in_order=("USER-TWO<|im_end|>\n<|im_start|>assistant\n", CALLS_TEXT, RESULTS[name]),
        ends="<|im_start|>assistant\n",
        absent=("EARLY-THOUGHT", "tool_calls"),
    )
    for name in TEMPLATES
)
# LFM2.5-8B reads reasoning as `thinking` and keeps it after the last user turn.
THINKING = Rendered(
    "reasoning of the turn since the last user message, LFM2.5-8B",
    lambda: conversation(LFM25_MOE),
    contains=("<|im_start|>assistant\n<think>I will look.</think>Let me look." + START,),
)


def call_turn(name: str) -> str:
    return conversation(name).split("<|im_start|>assistant\n")[-2].split("<|im_end|>")[0]


PARSE_BACK = tuple(
    ParseBack(
        f"the calls turn, {name}",
        lambda name=name: [call_turn(name)],
        FAMILY,
        SCHEMAS,
        (RENDERED_CALLS,),
        text="Let me look.",
    )
    for name in TEMPLATES
)


def own_calls() -> list[tuple[Any, str]]:
    turn = call_turn(LFM25)
    bash = call_text(ToolCall("a", "Bash", json.dumps(BASH_ARGS)))
    write = call_text(ToolCall("b", "Write", json.dumps(WRITE_ARGS)))
    assert f"{START}[{bash}, {write}]{END}" in turn
    return [([BASH], f"{START}[{bash}]{END}"), ([WRITE], f"{START}[{write}]{END}")]


# ---- parsing ------------------------------------------------------------------------

CODE = 'def f(tag):\n    """<b>, not <|tool_call>."""\n    return f"<{tag}>\\u00e9 é"\n'
OPTIONS = {"env": {"CI": "1"}, "retries": [1, 2.5], "verbose": True}
REALISTIC = (
    "I'll write the helper, then run the tests."
    f"{START}[Write(file_path='/src/util.py', content={json.dumps(CODE)}), "
    "Bash(command='pytest -q && echo \"ok\"', timeout=120000, "
    "options={'env': {'CI': '1'}, 'retries': [1, 2.5], 'verbose': True})]"
    f"{END}Both started."
)
REALISTIC_CALLS = calls(
    ("Write", json.dumps({"file_path": "/src/util.py", "content": CODE}, ensure_ascii=False)),
    (
        "Bash",
        json.dumps({"command": 'pytest -q && echo "ok"', "timeout": 120000, "options": OPTIONS}),
    ),
)
LS = '{"command": "ls"}'

# name, output, thinking flag, expected
GOOD = [
    (
        "text, two calls, text",
        REALISTIC,
        False,
        Result(
            text="I'll write the helper, then run the tests.Both started.", calls=REALISTIC_CALLS
        ),
    ),
    (
        "reasoning first (LFM2.5 thinking models)",
        f'<think>\nThe user wants a listing.\n</think>\n\n{START}[Bash(command="ls")]{END}',
        False,
        Result(thinking="The user wants a listing.", calls=calls(("Bash", LS))),
    ),
    (
        "reasoning opened by the prompt",
        f"List it.\n</think>\n{START}[Bash(command='ls')]{END}",
        True,
        Result(thinking="List it.", calls=calls(("Bash", LS))),
    ),
    (
        "a call with no arguments",
        f"{START}[get_goal()]{END}",
        False,
        Result(calls=calls(("get_goal", "{}"))),
    ),
    (
        "Python's literals: triple quotes, escapes, words, tuples, numbers",
        f"{START}[Free(s='''a\n\"b\"''', e='\\t\\x41\\u00e9\\N', w=None, t=(1, -2.5e3,), "
        f"h=0x1F, u=1_000, d={{1: 'x', 'k': [True, False]}}, bare=Paris)]{END}",
        False,
        Result(
            calls=calls(
                (
                    "Free",
                    '{"s": "a\\n\\"b\\"", "e": "\\tAé\\\\N", "w": null, "t": [1, -2.5e3], '
                    '"h": 31, "u": 1000, "d": {"1": "x", "k": [true, false]}, "bare": "Paris"}',
                ),
            )
        ),
    ),
    (
        "whitespace and newlines between tokens, a trailing comma",
        f"{START}[\n  Bash(\n    command = 'ls',\n  ),\n  get_goal()\n]{END}",
        False,
        Result(calls=calls(("Bash", LS), ("get_goal", "{}"))),
    ),
    (
        "no brackets around the calls",
        f"{START}Bash(command='ls'){END}",
        False,
        Result(calls=calls(("Bash", LS))),
    ),
    (
        "two sections",
        f"{START}[Bash(command='ls')]{END}\nthen\n{START}[get_goal()]{END}",
        False,
        Result(text="then", calls=calls(("Bash", LS), ("get_goal", "{}"))),
    ),
]

# name, output, expected
BAD = [
    (
        "a tool that was not offered is text",
        f"Sure. {START}[rm_rf(path='/')]{END} After.",
        Result(text=f"Sure. {START}[rm_rf(path='/')]{END} After."),
    ),
    (
        "an unknown tool first makes the section text",
        f"{START}[nope(), get_goal()]{END}",
        Result(text=f"{START}[nope(), get_goal()]{END}"),
    ),
    (
        "an unknown tool after a call is text from its name on",
        f"{START}[get_goal(), nope(x=1)]{END}",
        Result(text=f"nope(x=1)]{END}", calls=calls(("get_goal", "{}"))),
    ),
    (
        "JSON calls are text",
        f'{START}[{{"name": "Bash", "arguments": {{"command": "ls"}}}}]{END}',
        Result(text=f'{START}[{{"name": "Bash", "arguments": {{"command": "ls"}}}}]{END}'),
    ),
    ("an empty section is text", f"A {START}[]{END} B", Result(text=f"A {START}[]{END} B")),
    ("a lone start marker", START, Result(text=START)),
    (
        "a name cut off is text",
        f"Hi {START}[Ba",
        Result(text=f"Hi {START}[Ba"),
    ),
    (
        "a name too long to be one is text",
        f"{START}[{'x' * 300}()]{END}",
        Result(text=f"{START}[{'x' * 300}()]{END}"),
    ),
    (
        "a positional argument ends the arguments; the section is dropped",
        f"{START}[Bash(command='ls', 'x')]{END} ok",
        Result(text="ok", calls=calls(("Bash", LS))),
    ),
    (
        "a nested call ends the arguments (its name was a bare value)",
        f"{START}[Bash(timeout=int('3'), command='ls')]{END}",
        Result(calls=calls(("Bash", '{"timeout": "int"}'))),
    ),
    (
        "the end marker inside a string closes the call",
        f"{START}[Write(file_path='/a', content='hel{END}Done.",
        Result(text="Done.", calls=calls(("Write", '{"file_path": "/a", "content": "hel"}'))),
    ),
    (
        "a start marker inside a call opens the next section",
        f"{START}[Bash(command='ls'{START}[get_goal()]{END}",
        Result(calls=calls(("Bash", LS), ("get_goal", "{}"))),
    ),
    (
        "unclosed inside a string",
        f"{START}[Write(file_path='/a', content='hel",
        Result(calls=calls(("Write", '{"file_path": "/a", "content": "hel"}'))),
    ),
    (
        "unclosed inside a key",
        f"{START}[Write(file_path='/a', cont",
        Result(calls=calls(("Write", '{"file_path": "/a"}'))),
    ),
    (
        "unclosed after a bare value, and in a dict",
        f"{START}[Bash(timeout=12, options={{'env': {{'A",
        Result(calls=calls(("Bash", '{"timeout": 12, "options": {"env": {}}}'))),
    ),
    (
        "a mismatched bracket is cut back",
        f"{START}[Bash(command='ls', options={{'retries': [1, 2}})]{END}",
        Result(calls=calls(("Bash", '{"command": "ls", "options": {"retries": [1, 2]}}'))),
    ),
    (
        "no end marker: what follows the list is text",
        f"{START}[get_goal()] All set.",
        Result(text="All set.", calls=calls(("get_goal", "{}"))),
    ),
    (
        "junk after a call is dropped up to the end marker",
        f"{START}[get_goal() oops]{END}Done.",
        Result(text="Done.", calls=calls(("get_goal", "{}"))),
    ),
    ("output ending inside a marker", "Hello <|tool_call_st", Result(text="Hello <|tool_call_st")),
    (
        "output ending inside the end marker",
        f"{START}[get_goal()]<|tool_call_e",
        Result(text="<|tool_call_e", calls=calls(("get_goal", "{}"))),
    ),
]

# Strings stream as they are generated; other values go out whole.
STREAM = Stream(
    "arguments stream",
    lambda: Lfm2Parser(tools=SCHEMAS, thinking=False, new_id=lambda: "toolu_1"),
    [
        ("Running", [TextDelta("Running")]),
        (" it. <|tool_call", [TextDelta(" it.")]),
        ("_start|>[Ba", []),
        ("sh(", [ToolCallStart(0, "toolu_1", "Bash")]),
        ("command='ls", [ToolCallDelta(0, '{"command": "ls')]),
        (" -la', time", [ToolCallDelta(0, ' -la"')]),
        ("out=1", []),
        (
            "0)",
            [
                ToolCallDelta(0, ', "timeout": 10}'),
                ToolCallEnd(0, '{"command": "ls -la", "timeout": 10}'),
            ],
        ),
        (f"]{END}", []),
    ],
)


def write(name: str, args: dict[str, Any]) -> str:
    """One call the way the family writes earlier calls."""
    return f"{START}[{call_text(ToolCall('x', name, json.dumps(args)))}]{END}"


PIECES = [START, END, "[", "]", "(", ")", "=", ",", "'", '"', "\\", "<think>", "</think>",
          "{", "}", "\n", "<"]  # fmt: skip

# ---- forced calls -------------------------------------------------------------------


def call(name: str, arguments: str = "") -> str:
    return f"{START}[{name}({arguments})]{END}"


# text, whether the grammar accepts it
GRAMMAR = [
    (call("Bash", 'command="ls -la"'), True),
    (call("Bash", 'command="a \\"q\\" <b>\\n", timeout=1.5, mode="safe"'), True),
    (call("Bash", 'command="ls", options={"env": {"A": "b"}, "verbose": True}'), True),
    (call("Bash", 'command="ls", run_in_background=False'), True),
    (call("Write", 'file_path="/a", content=""'), True),
    (call("get_goal"), True),
    (call("Free", 'anything="goes", n=[1, None]'), True),
    (call("Free"), True),
    (call("Bash"), False),  # command is required
    (call("Bash", 'command="ls", options={"verbose": true}'), False),  # Python's words
    (call("Bash", 'timeout=1, command="ls"'), False),  # the schema's order
    (call("Bash", 'command="ls", extra=1'), False),  # no other keys
    (call("Bash", 'command="ls", mode="slow"'), False),  # not in the enum
    (call("Bash", "command='ls'"), False),  # strings in double quotes
    (call("Write", 'file_path="/a"'), False),
    (call("Read", 'path="/a"'), False),  # not offered
    ("Sure! " + call("get_goal"), False),
    (f"{START}[get_goal(), get_goal()]{END}", False),
]

CASE = Case(
    name="lfm2",
    family=FAMILY,
    tools=SCHEMAS,
    detected=dict.fromkeys(TEMPLATES, FAMILY),
    no_other=True,
    catalog_prefix=FAMILY,
    renders=RENDERS,
    thinking=(THINKING,),
    parse_back=PARSE_BACK,
    outputs=tuple(
        Output(name, output, expected, thinking=thinking)
        for name, output, thinking, expected in GOOD
    ),
    bad=tuple(Output(name, output, expected) for name, output, expected in BAD),
    untooled=((FAMILY, f"x {START}[Bash(command='ls')]{END}"),),
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
            FAMILY, TOOLS, SCHEMAS, range(8), closing_walk(('"', ")", "}", "]")), min_finished=8
        ),
    ),
    round_trips=(RoundTrip(FAMILY, LFM25, read_file_schema({"type": "string", "maxLength": 24})),),
)
