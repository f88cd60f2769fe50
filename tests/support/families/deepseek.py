"""DeepSeek R1, V3.1, V3.2 and V4: the real templates they are detected
from, an agent conversation rendered through each, realistic outputs, every
bad-output rule, forced-call grammars, and a forced call end to end on a
tiny GGUF with the V3.1 template."""

# DeepSeek's markers are written in full-width characters on purpose.
# ruff: noqa: RUF001

from __future__ import annotations

import json
from typing import Any

from engy_local.chat import TextDelta, ToolCallDelta, ToolCallEnd, ToolCallStart, ToolSpec
from engy_local.prompt.families import make_parser
from support.families.damage import spliced
from support.families.framed import (
    CONVERSATION,
    LOOP,
    READ_ARGS,
    WRITE_ARGS,
    WRITE_OUT,
    prompt,
    read_file_schema,
)
from support.families.grammars import byte_walk
from support.families.prompts import shown
from support.families.spec import (
    Accepts,
    Case,
    Compiles,
    Damage,
    Output,
    RandomCalls,
    Rendered,
    RoundTrip,
    Stream,
)
from support.parsing import Result, calls

CALLS = "<｜tool▁calls▁begin｜>"
CALLS_END = "<｜tool▁calls▁end｜>"
CALL = "<｜tool▁call▁begin｜>"
CALL_END = "<｜tool▁call▁end｜>"
SEP = "<｜tool▁sep｜>"
EOS = "<｜end▁of▁sentence｜>"
D = "｜DSML｜"

R1_TEMPLATES = [
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
    "llama-cpp-deepseek-r1.jinja",
]
V31 = "deepseek-ai-DeepSeek-V3.1.jinja"
V32 = "deepseek-ai-DeepSeek-V3.2.jinja"
V4 = "deepseek-ai-DeepSeek-V4.jinja"
LABELS = dict(zip([*R1_TEMPLATES, V31, V32, V4], ["R1-Llama", "R1-Qwen", "R1-llama.cpp",
              "V3.1", "V3.2", "V4"], strict=True))  # fmt: skip
FAMILIES = ["deepseek-r1", "deepseek-v3.1", "deepseek-v3.2", "deepseek-v4"]
TOOL_NAMES = ("Bash", "Read", "Write", "get_goal")

# ---- rendering -----------------------------------------------------------------------


def r1_call(name: str, arguments: str) -> str:
    return f"{CALL}function{SEP}{name}\n```json\n{arguments}\n```{CALL_END}"


R1_CALLS = f"{CALLS}{r1_call('Read', READ_ARGS)}\n{r1_call('Write', WRITE_ARGS)}{CALLS_END}{EOS}"
V31_CALLS = (
    f"TEXT-ONE{CALLS}{CALL}Read{SEP}{READ_ARGS}{CALL_END}{CALL}Write{SEP}{WRITE_ARGS}{CALL_END}"
    f"{CALLS_END}{EOS}"
)


def dsml_calls(block: str) -> str:
    def param(key: str, value: str, string: bool) -> str:
        flag = "true" if string else "false"
        return f'<{D}parameter name="{key}" string="{flag}">{value}</{D}parameter>\n'

    return (
        f"TEXT-ONE\n\n<{D}{block}>\n"
        f'<{D}invoke name="Read">\n{param("path", "/etc/hosts", True)}{param("limit", "20", False)}'
        f'</{D}invoke>\n<{D}invoke name="Write">\n{param("path", "/tmp/a.py", True)}'
        f"{param('content', 'x = 1' + chr(10) + 'print(x)', True)}"
        f"{param('options', json.dumps({'mode': 420}), False)}</{D}invoke>\n</{D}{block}>{EOS}"
    )


R1_RESULTS = (
    "<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>RESULT-ONE<｜tool▁output▁end｜>\n"
    "<｜tool▁output▁begin｜>RESULT-TWO<｜tool▁output▁end｜><｜tool▁outputs▁end｜>TEXT-TWO"
)
# template, the calls as rendered, the results as rendered
RENDERED = [
    (R1_TEMPLATES[0], f"<｜Assistant｜>TEXT-ONE{EOS}<｜Assistant｜>{R1_CALLS}", R1_RESULTS),
    (R1_TEMPLATES[1], f"<｜Assistant｜>{R1_CALLS}<｜Assistant｜>TEXT-ONE{EOS}", R1_RESULTS),
    (
        R1_TEMPLATES[2],
        f"<｜Assistant｜>TEXT-ONE{EOS}<｜Assistant｜>{R1_CALLS}",
        "<｜tool▁outputs▁begin｜>\n<｜tool▁output▁begin｜>RESULT-ONE<｜tool▁output▁end｜>\n"
        f"<｜tool▁output▁begin｜>RESULT-TWO<｜tool▁output▁end｜><｜tool▁outputs▁end｜>{EOS}",
    ),
    (
        V31,
        f"<｜Assistant｜><think></think>{V31_CALLS}",
        "<｜tool▁output▁begin｜>RESULT-ONE<｜tool▁output▁end｜>"
        f"<｜tool▁output▁begin｜>RESULT-TWO<｜tool▁output▁end｜>TEXT-TWO{EOS}",
    ),
    (
        V32,
        f"<｜Assistant｜></think>{dsml_calls('function_calls')}",
        "\n\n<function_results>\n<result>RESULT-ONE</result>\n<result>RESULT-TWO</result>\n"
        f"</function_results>\n\n</think>TEXT-TWO{EOS}",
    ),
    (
        V4,
        f"<｜Assistant｜></think>{dsml_calls('tool_calls')}",
        "<｜User｜><tool_result>RESULT-ONE</tool_result>\n\n<tool_result>RESULT-TWO</tool_result>"
        f"<｜Assistant｜></think>TEXT-TWO{EOS}",
    ),
]


def head(text: str) -> str:
    """The prompt before the first user message."""
    return text[: text.index("USER-ONE")]


RENDERS = [
    Rendered(
        f"calls and results, {LABELS[t]}",
        lambda t=t: prompt(t, CONVERSATION, thinking=False),
        contains=(rendered_calls, results, "USER-TWO", "SYSTEM-TEXT"),
        orders=(("USER-ONE", rendered_calls, results),),
    )
    for t, rendered_calls, results in RENDERED
] + [
    # These templates show no tool list (llama.cpp's R1 one does, and then
    # gets no tools): the family describes them, with its own call syntax.
    Rendered(
        f"tools described in the system prompt, {LABELS[t]}",
        lambda t=t: head(prompt(t, CONVERSATION, thinking=None)),
        orders=(("SYSTEM-TEXT", "## Tools"),),
        contains=(
            "### Read\nDescription: Read a file.\n\nParameters: {",
            f"{CALLS}{CALL}{'function' if t in R1_TEMPLATES else 'tool_call_name'}{SEP}",
        ),
        counts=(("## Tools", 1),),
        absent=("example_function_name",),
    )
    for t in [*R1_TEMPLATES, V31]
]

# template, thinking switch, how the prompt ends, whether THINK-ONE / THINK-TWO
# (reasoning before the last user message) and the loop's reasoning are kept.
# In a tool-use loop (nothing from the user since the calls), V3.2 keeps the
# reasoning of the turn that made them while thinking.
SWITCH = [
    (V31, True, "<｜Assistant｜><think>", False, False),
    (V31, False, "<｜Assistant｜><think></think>", False, False),
    (V31, None, "<｜Assistant｜><think></think>", False, False),
    (V32, True, "<｜Assistant｜><think>", False, True),
    (V32, False, "<｜Assistant｜><think></think>", False, False),
    (V4, True, "<｜Assistant｜><think>", True, True),
    (V4, False, "<｜Assistant｜></think>", False, False),
    (R1_TEMPLATES[0], None, "<｜Assistant｜><think>\n", False, False),
    (R1_TEMPLATES[1], True, "<｜Assistant｜><think>\n", False, False),
    (R1_TEMPLATES[1], False, "<｜Assistant｜><think>\n</think>", False, False),
    (R1_TEMPLATES[2], None, "<｜Assistant｜><think>\n", False, False),
]


THINKING = [
    row
    for t, thinking, end, earlier, loop in SWITCH
    for row in (
        Rendered(
            f"{LABELS[t]}, thinking {thinking}",
            lambda t=t, thinking=thinking: prompt(t, CONVERSATION, thinking=thinking),
            ends=end,
            **shown(earlier, "THINK-ONE", "THINK-TWO"),
        ),
        Rendered(
            f"{LABELS[t]}, thinking {thinking}, in a loop",
            lambda t=t, thinking=thinking: prompt(t, LOOP, thinking=thinking),
            **shown(loop, "THINK-ONE"),
        ),
    )
]

# ---- parsing: realistic outputs ------------------------------------------------------------

PARSED = Result(
    text="Let me look at both.",
    thinking="The user wants the hosts file.\nThen write a.py.",
    calls=calls(("Read", '{"path": "/etc/hosts", "limit": 20}'), ("Write", WRITE_OUT)),
)
REASONING = "The user wants the hosts file.\nThen write a.py.\n</think>\n\n"


def dsml_output(block: str) -> str:
    return (
        f"{REASONING}Let me look at both.\n\n<{D}{block}>\n"
        f'<{D}invoke name="Read">\n'
        f'<{D}parameter name="path" string="true">/etc/hosts</{D}parameter>\n'
        f'<{D}parameter name="limit" string="false">20</{D}parameter>\n</{D}invoke>\n'
        f'<{D}invoke name="Write">\n'
        f'<{D}parameter name="path" string="true">/tmp/a.py</{D}parameter>\n'
        f'<{D}parameter name="content" string="true">x = {{"a": [1, 2]}}\n</{D}parameter>\n'
        f'<{D}parameter name="options" string="false">{{"mode": 420}}</{D}parameter>\n'
        f"</{D}invoke>\n</{D}{block}>"
    )


OUTPUTS = {
    "deepseek-v3.1": (
        f"{REASONING}Let me look at both.{CALLS}{CALL}Read{SEP}"
        f'{{"path": "/etc/hosts", "limit": 20}}{CALL_END}{CALL}Write{SEP}{WRITE_OUT}{CALL_END}'
        f"{CALLS_END}"
    ),
    "deepseek-r1": (
        f"{REASONING}Let me look at both.\n{CALLS}{CALL}function{SEP}Read\n```json\n"
        f'{{"path": "/etc/hosts", "limit": 20}}\n```{CALL_END}\n{CALL}function{SEP}Write\n'
        f"```json\n{WRITE_OUT}\n```{CALL_END}{CALLS_END}"
    ),
    "deepseek-v3.2": dsml_output("function_calls"),
    "deepseek-v4": dsml_output("tool_calls"),
}
# The outputs without their reasoning.
ANSWERS = {family: output.split("</think>\n\n")[1] for family, output in OUTPUTS.items()}


TEXT_HELD = Stream(
    "text is held only while it may be a marker",
    lambda: make_parser("deepseek-v3.1", tools=["Read"], thinking=False, new_id=lambda: "id"),
    [
        ("Hi <｜tool", [TextDelta("Hi")]),
        ("▁calls▁", []),
        ("end｜>!", [TextDelta(" <｜tool▁calls▁end｜>!")]),
        (f"{CALLS}{CALL}Re", []),
        (f"ad{SEP}", [ToolCallStart(0, "id", "Read")]),
        ('{"path": "/et', [ToolCallDelta(0, '{"path": "/et')]),
        ('c"', [ToolCallDelta(0, 'c"')]),
        (", ", []),
        (f"}}{CALL_END}<", [ToolCallDelta(0, "}"), ToolCallEnd(0, '{"path": "/etc"}')]),
    ],
)


# ---- parsing: bad output ---------------------------------------------------------------

# name, family, output, expected; the rules are in families/framed.py and the modules
BAD = [
    (
        "a tool that was not offered is text, its section with it",
        "deepseek-v3.1",
        f'Sure. {CALLS}{CALL}rm{SEP}{{"p": "/"}}{CALL_END}{CALLS_END} Done.',
        Result(text=f'Sure. {CALLS}{CALL}rm{SEP}{{"p": "/"}}{CALL_END}{CALLS_END} Done.'),
    ),
    (
        "an unknown call beside a good one: only its own text",
        "deepseek-v3.1",
        f"{CALLS} {CALL}rm{SEP}{{}}{CALL_END}\n{CALL}Read{SEP}{{}}{CALL_END}{CALLS_END}",
        Result(text=f"{CALLS} {CALL}rm{SEP}{{}}{CALL_END}", calls=calls(("Read", "{}"))),
    ),
    (
        "JSON broken after the start is cut back and closed, the rest dropped",
        "deepseek-v3.1",
        f'{CALLS}{CALL}Read{SEP}{{"path": "/a", oops}} junk{CALL_END}{CALLS_END}\nok',
        Result(text="ok", calls=calls(("Read", '{"path": "/a"}'))),
    ),
    (
        "arguments that are not an object; a JSON string holding one",
        "deepseek-v3.1",
        f'{CALLS}{CALL}Read{SEP}[1, 2]{CALL_END}{CALL}Bash{SEP}"{{\\"c\\": 1}}"{CALL_END}'
        f"{CALL}Write{SEP}{CALL_END}{CALLS_END}",
        Result(calls=calls(("Read", "{}"), ("Bash", '{"c": 1}'), ("Write", "{}"))),
    ),
    (
        "an unclosed call is closed",
        "deepseek-v3.1",
        f'{CALLS}{CALL}Write{SEP}{{"path": "/a", "content": "hel',
        Result(calls=calls(("Write", '{"path": "/a", "content": "hel"}'))),
    ),
    (
        "a missing call close before the next call",
        "deepseek-v3.1",
        f'{CALLS}{CALL}Read{SEP}{{"a": 1}}{CALL}Bash{SEP}{{"b": 2}}{CALL_END}{CALLS_END}',
        Result(calls=calls(("Read", '{"a": 1}'), ("Bash", '{"b": 2}'))),
    ),
    (
        "a head with no separator is text",
        "deepseek-v3.1",
        f"{CALLS}{CALL}Read{CALL_END}{CALLS_END}",
        Result(text=f"{CALLS}{CALL}Read{CALL_END}{CALLS_END}"),
    ),
    (
        "a head too long to be one is text",
        "deepseek-v3.1",
        f"{CALLS}{CALL}{'x' * 600}{CALL_END}",
        Result(text=f"{CALLS}{CALL}{'x' * 600}{CALL_END}"),
    ),
    (
        "text after a call, in the section, ends it",
        "deepseek-v3.1",
        f"{CALLS}{CALL}Read{SEP}{{}}{CALL_END} and more",
        Result(text="and more", calls=calls(("Read", "{}"))),
    ),
    (
        "markers inside a JSON string are the string's",
        "deepseek-v3.1",
        f'{CALL}Write{SEP}{{"content": "a\nb{CALL_END}"}}{CALL_END}',
        Result(calls=calls(("Write", '{"content": "a\\nb' + CALL_END + '"}'))),
    ),
    (
        "a lone section marker, or one cut off, is text",
        "deepseek-v3.1",
        f"Hello {CALLS} and <｜tool▁ca",
        Result(text=f"Hello {CALLS} and <｜tool▁ca"),
    ),
    (
        "after a call, a cut-off section close is dropped",
        "deepseek-v3.1",
        f"{CALLS}{CALL}Read{SEP}{{}}{CALL_END}<｜tool▁ca",
        Result(calls=calls(("Read", "{}"))),
    ),
    (
        "R1: the section marker's known misspellings, no fence, a name with spaces after",
        "deepseek-r1",
        f'<｜tool calls begin｜>{CALL}function{SEP}Read  \n{{"a": 1}}{CALL_END}{CALLS_END}',
        Result(calls=calls(("Read", '{"a": 1}'))),
    ),
    (
        "R1: a head without a name is text",
        "deepseek-r1",
        f"{CALLS}{CALL}function{SEP}\n```json\n{{}}\n```{CALL_END}{CALLS_END}",
        Result(text=f"{CALLS}{CALL}function{SEP}\n```json\n{{}}\n```{CALL_END}{CALLS_END}"),
    ),
    (
        "DSML: a tool that was not offered is text",
        "deepseek-v3.2",
        f'Hi\n\n<{D}function_calls>\n<{D}invoke name="rm">\n</{D}invoke>\n</{D}function_calls>',
        Result(
            text=f'Hi\n\n<{D}function_calls>\n<{D}invoke name="rm">\n</{D}invoke>\n'
            f"</{D}function_calls>"
        ),
    ),
    (
        "DSML: a non-string value that is not JSON is a string",
        "deepseek-v3.2",
        f'<{D}function_calls>\n<{D}invoke name="Read">\n'
        f'<{D}parameter name="limit" string="false">twenty</{D}parameter>\n'
        f'<{D}parameter name="n" string="false">NaN</{D}parameter>\n</{D}invoke>\n'
        f"</{D}function_calls>",
        Result(calls=calls(("Read", '{"limit": "twenty", "n": "NaN"}'))),
    ),
    (
        "DSML: an unclosed value ends at the next parameter or the call's end",
        "deepseek-v3.2",
        f'<{D}function_calls>\n<{D}invoke name="Read">\n<{D}parameter name="a" string="true">one'
        f'<{D}parameter name="b" string="true">two</{D}invoke>\n</{D}function_calls>',
        Result(calls=calls(("Read", '{"a": "one", "b": "two"}'))),
    ),
    (
        "DSML: an unclosed call is closed, its open value as it stands",
        "deepseek-v4",
        f'<{D}tool_calls>\n<{D}invoke name="Read">\n<{D}parameter name="a" string="true">x <{D}par',
        Result(calls=calls(("Read", f'{{"a": "x <{D}par"}}'))),
    ),
    (
        "DSML: a nameless parameter and text between parameters are dropped",
        "deepseek-v3.2",
        f'<{D}function_calls>\n<{D}invoke name="Read">\n<{D}parameter string="true">x'
        f'</{D}parameter>\njunk\n<{D}parameter name="b" string="false">[1, 2]</{D}parameter>\n'
        f"</{D}invoke>\n</{D}function_calls>",
        Result(calls=calls(("Read", '{"b": [1, 2]}'))),
    ),
    (
        "DSML: a bare JSON object as the body, and a second body dropped",
        "deepseek-v3.2",
        f'<{D}function_calls>\n<{D}invoke name="Read">\n{{"path": "/a", "n": 2}}\n'
        f'<{D}parameter name="b" string="true">x</{D}parameter>\n</{D}invoke>\n'
        f"</{D}function_calls>",
        Result(calls=calls(("Read", '{"path": "/a", "n": 2}'))),
    ),
    (
        "DSML: an invoke without a name is text",
        "deepseek-v4",
        f"<{D}tool_calls>\n<{D}invoke>\n</{D}invoke>\n</{D}tool_calls>",
        Result(text=f"<{D}tool_calls>\n<{D}invoke>\n</{D}invoke>\n</{D}tool_calls>"),
    ),
]

JUNK = [CALLS, CALLS_END, CALL, CALL_END, SEP, f"<{D}", f"</{D}parameter>", "<｜tool", "{", "}",
        '"', "\n", " ", "```json", "x", "\\", f"<{D}invoke", "</think>", '"true">']  # fmt: skip

# ---- forced calls --------------------------------------------------------------------------

SCHEMA_TOOLS = [
    ToolSpec(
        "read_file",
        "",
        {
            "type": "object",
            "properties": {
                "path": {"type": "string", "maxLength": 30},
                "mode": {"type": "string", "enum": ["text", 'say "hi"']},
                "limit": {"type": "integer"},
                "options": {
                    "type": "object",
                    "properties": {"follow": {"type": "boolean"}},
                    "required": ["follow"],
                },
                "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
            },
            "required": ["path", "mode", "options"],
            "additionalProperties": False,
        },
    ),
    ToolSpec("anything", "", {"type": "object"}),
]
# family, a call as the template writes it (to read_file with the schema
# above), what it parses into
WRITTEN = [
    (
        "deepseek-r1",
        f"{CALLS}{CALL}function{SEP}read_file\n```json\n"
        '{"path": "/a", "mode": "text", "options": {"follow": true}}\n```'
        f"{CALL_END}{CALLS_END}",
        {"path": "/a", "mode": "text", "options": {"follow": True}},
    ),
    (
        "deepseek-v3.1",
        f"{CALLS}{CALL}read_file{SEP}"
        f'{{"path": "/a", "mode": "text", "options": {{"follow": true}}}}{CALL_END}{CALLS_END}',
        {"path": "/a", "mode": "text", "options": {"follow": True}},
    ),
    (
        "deepseek-v3.2",
        f'\n\n<{D}function_calls>\n<{D}invoke name="read_file">\n'
        f'<{D}parameter name="path" string="true">/a</{D}parameter>\n'
        f'<{D}parameter name="mode" string="true">say "hi"</{D}parameter>\n'
        f'<{D}parameter name="options" string="false">{{"follow": true}}</{D}parameter>\n'
        f"</{D}invoke>\n</{D}function_calls>",
        {"path": "/a", "mode": 'say "hi"', "options": {"follow": True}},
    ),
]


def accepts(family: str, good: str, arguments: dict[str, Any]) -> list[Accepts]:
    """The call as written is accepted, and read back; a tool not offered,
    a value outside the enum, a wrong type, a string too long or text after
    the call are not; reasoning may come first where the grammar allows it."""
    bad = [
        good.replace("read_file", "write_file"),
        good.replace("text", "binary").replace('say "hi"', "binary"),
        good.replace("true", '"yes"'),
        good.replace("/a", "/" + "a" * 40) if family == "deepseek-v3.2" else good + "x",
    ]
    return [
        Accepts(family, SCHEMA_TOOLS, good, True, parsed=("read_file", arguments)),
        *[Accepts(family, SCHEMA_TOOLS, text, False) for text in bad],
        Accepts(family, SCHEMA_TOOLS, "Hm.</think>" + good, True, reasoning=True),
    ]


NAMES = [t.name for t in SCHEMA_TOOLS]
MARKERS = (CALLS, CALLS_END, CALL, CALL_END, SEP, f"<{D}", f"</{D}", "```json")

# ---- end to end on a tiny GGUF -------------------------------------------------------------

DETECTED = {t: "deepseek-r1" for t in R1_TEMPLATES}
DETECTED |= {V31: "deepseek-v3.1", V32: "deepseek-v3.2", V4: "deepseek-v4"}

CASE = Case(
    name="deepseek",
    family="deepseek-v3.1",
    tools=TOOL_NAMES,
    detected=DETECTED,
    prefix="deepseek",
    no_other=True,
    catalog_prefix="deepseek",
    renders=tuple(RENDERS),
    thinking=tuple(THINKING),
    outputs=tuple(
        Output(family, output, PARSED, family=family, thinking=True)
        for family, output in OUTPUTS.items()
    ),
    bad=tuple(Output(name, output, expected, family=f) for name, f, output, expected in BAD),
    untooled=tuple((f, ANSWERS[f]) for f in ["deepseek-r1", "deepseek-v3.1", "deepseek-v3.2"]),
    streams=(TEXT_HELD,),
    damage=tuple(
        Damage(
            family,
            lambda f=family: spliced([ANSWERS[f], "Plain text. "], JUNK, 150, len(f)),
            TOOL_NAMES,
            min_started=40,
        )
        for family in FAMILIES
    ),
    compiles=tuple(
        Compiles(f, "claude-code-2.1.332-first-turn.json", reasoning_all=True) for f in FAMILIES
    ),
    accepts=tuple(row for family, good, args in WRITTEN for row in accepts(family, good, args)),
    random_calls=tuple(
        RandomCalls(f, SCHEMA_TOOLS, NAMES, range(6), byte_walk(MARKERS), min_finished=3)
        for f in FAMILIES
    ),
    round_trips=(RoundTrip("deepseek-v3.1", V31, read_file_schema({"type": "string"})),),
)
