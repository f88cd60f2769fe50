"""DeepSeek R1, V3.1, V3.2 and V4: detection from the real templates, an
agent conversation rendered through each, realistic outputs parsed the same
whatever their split, every bad-output rule, forced-call grammars, and a
forced call end to end on a tiny GGUF with the V3.1 template."""

# DeepSeek's markers are written in full-width characters on purpose.
# ruff: noqa: RUF001

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from support.framed_families import (
    CONVERSATION,
    LOOP,
    READ_ARGS,
    TOOLS,
    WRITE_ARGS,
    ByteVocab,
    ForcedRoundTrip,
    assert_random_calls_valid,
    byte_vocab,
    captured_tools,
    damaged_outputs,
    parse_one_call,
    prompt,
    template_source,
)
from support.parsing import Result, assert_parses, calls, parse

from engy_local.chat import ToolSpec
from engy_local.prompt.families import detect_family, get
from engy_local.prompt.forced import forced_call_grammar
from engy_local.runtime.sampling import check_grammar

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


# ---- detection -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("template", "family"),
    [
        *[(t, "deepseek-r1") for t in R1_TEMPLATES],
        (V31, "deepseek-v3.1"),
        (V32, "deepseek-v3.2"),
        (V4, "deepseek-v4"),
    ],
)
def test_detected_from_the_template(template: str, family: str) -> None:
    assert detect_family(template_source(template)) == family


def test_no_other_template_is_taken_for_deepseek() -> None:
    from support.framed_families import TEMPLATES

    ours = {*R1_TEMPLATES, V31, V32, V4}
    for path in sorted(TEMPLATES.glob("*.jinja")):
        if path.name not in ours:
            assert not detect_family(path.read_text()).startswith("deepseek"), path.name


def test_catalog_families_exist() -> None:
    from engy_local.models.catalog import load_catalog

    named = {e.family for e in load_catalog().entries.values() if e.family}
    ours = {f for f in named if f.startswith("deepseek")}
    assert ours and all(get(f).name == f for f in ours)


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


# template, the calls as rendered, the results as rendered
RENDERED = [
    (
        "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja",
        f"<｜Assistant｜>TEXT-ONE{EOS}<｜Assistant｜>{R1_CALLS}",
        "<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>RESULT-ONE<｜tool▁output▁end｜>\n"
        "<｜tool▁output▁begin｜>RESULT-TWO<｜tool▁output▁end｜><｜tool▁outputs▁end｜>TEXT-TWO",
    ),
    (
        "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
        f"<｜Assistant｜>{R1_CALLS}<｜Assistant｜>TEXT-ONE{EOS}",
        "<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>RESULT-ONE<｜tool▁output▁end｜>\n"
        "<｜tool▁output▁begin｜>RESULT-TWO<｜tool▁output▁end｜><｜tool▁outputs▁end｜>TEXT-TWO",
    ),
    (
        "llama-cpp-deepseek-r1.jinja",
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


@pytest.mark.parametrize(("template", "rendered_calls", "results"), RENDERED)
def test_agent_conversation_renders_calls_and_results(
    template: str, rendered_calls: str, results: str
) -> None:
    text = prompt(template, CONVERSATION, TOOLS, thinking=False)
    assert rendered_calls in text
    assert results in text
    assert text.index("USER-ONE") < text.index(rendered_calls) < text.index(results)
    assert "USER-TWO" in text and "SYSTEM-TEXT" in text


@pytest.mark.parametrize("template", [*R1_TEMPLATES, V31])
def test_tools_are_described_in_the_system_prompt(template: str) -> None:
    """These templates show no tool list (llama.cpp's R1 one does, and then
    gets no tools): the family describes them, with its own call syntax."""
    text = prompt(template, CONVERSATION, TOOLS, thinking=None)
    head = text[: text.index("USER-ONE")]
    assert head.index("SYSTEM-TEXT") < head.index("## Tools")
    assert "### Read\nDescription: Read a file.\n\nParameters: {" in head
    syntax = "function" + SEP if template in R1_TEMPLATES else "tool_call_name" + SEP
    assert f"{CALLS}{CALL}{syntax}" in head
    assert head.count("## Tools") == 1 and "example_function_name" not in head


# template, thinking switch, how the prompt ends, whether THINK-ONE / THINK-TWO
# (reasoning before the last user message) and the loop's reasoning are kept
THINKING = [
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


@pytest.mark.parametrize(("template", "thinking", "end", "earlier", "loop"), THINKING)
def test_thinking_switch_and_earlier_reasoning(
    template: str, thinking: bool | None, end: str, earlier: bool, loop: bool
) -> None:
    text = prompt(template, CONVERSATION, TOOLS, thinking=thinking)
    assert text.endswith(end)
    assert ("THINK-ONE" in text) == earlier and ("THINK-TWO" in text) == earlier
    # In a tool-use loop (nothing from the user since the calls), V3.2 keeps
    # the reasoning of the turn that made them while thinking.
    in_loop = prompt(template, LOOP, TOOLS, thinking=thinking)
    assert ("THINK-ONE" in in_loop) == loop


# ---- parsing: realistic outputs, split anywhere ------------------------------------------

WRITE_OUT = '{"path": "/tmp/a.py", "content": "x = {\\"a\\": [1, 2]}\\n", "options": {"mode": 420}}'
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


OUTPUTS = [
    (
        "deepseek-v3.1",
        f"{REASONING}Let me look at both.{CALLS}{CALL}Read{SEP}"
        f'{{"path": "/etc/hosts", "limit": 20}}{CALL_END}{CALL}Write{SEP}{WRITE_OUT}{CALL_END}'
        f"{CALLS_END}",
    ),
    (
        "deepseek-r1",
        f"{REASONING}Let me look at both.\n{CALLS}{CALL}function{SEP}Read\n```json\n"
        f'{{"path": "/etc/hosts", "limit": 20}}\n```{CALL_END}\n{CALL}function{SEP}Write\n'
        f"```json\n{WRITE_OUT}\n```{CALL_END}{CALLS_END}",
    ),
    ("deepseek-v3.2", dsml_output("function_calls")),
    ("deepseek-v4", dsml_output("tool_calls")),
]


@pytest.mark.parametrize(("family", "output"), OUTPUTS, ids=[o[0] for o in OUTPUTS])
def test_realistic_output_parses_the_same_at_every_split(family: str, output: str) -> None:
    assert_parses(output, PARSED, family=family, thinking=True)


def test_text_is_held_only_while_it_may_be_a_marker() -> None:
    from engy_local.chat import TextDelta, ToolCallDelta, ToolCallEnd, ToolCallStart
    from engy_local.prompt.families import make_parser

    parser = make_parser("deepseek-v3.1", tools=["Read"], thinking=False, new_id=lambda: "id")
    assert parser.feed("Hi <｜tool") == [TextDelta("Hi")]
    assert parser.feed("▁calls▁") == []
    assert parser.feed("end｜>!") == [TextDelta(" <｜tool▁calls▁end｜>!")]
    assert parser.feed(f"{CALLS}{CALL}Re") == []
    assert parser.feed(f"ad{SEP}") == [ToolCallStart(0, "id", "Read")]
    assert parser.feed('{"path": "/et') == [ToolCallDelta(0, '{"path": "/et')]
    assert parser.feed('c"') == [ToolCallDelta(0, 'c"')]
    assert parser.feed(", ") == []
    assert parser.feed(f"}}{CALL_END}<") == [
        ToolCallDelta(0, "}"),
        ToolCallEnd(0, '{"path": "/etc"}'),
    ]
    assert parser.finish() == []


# ---- parsing: bad output ---------------------------------------------------------------

TOOL_NAMES = ("Bash", "Read", "Write", "get_goal")

# family, output, expected; the rules are in families/framed.py and the modules
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


@pytest.mark.parametrize(
    ("family", "output", "expected"), [b[1:] for b in BAD], ids=[b[0] for b in BAD]
)
def test_bad_output(family: str, output: str, expected: Result) -> None:
    assert_parses(output, expected, family=family, tools=TOOL_NAMES)


@pytest.mark.parametrize("family", ["deepseek-r1", "deepseek-v3.1", "deepseek-v3.2"])
def test_no_tools_offered_means_calls_are_text(family: str) -> None:
    output = dict(OUTPUTS)[family].split("</think>\n\n")[1]
    assert_parses(output, Result(text=output), family=family, tools=())


JUNK = [
    CALLS,
    CALLS_END,
    CALL,
    CALL_END,
    SEP,
    f"<{D}",
    f"</{D}parameter>",
    "<｜tool",
    "{",
    "}",
    '"',
]
JUNK += ["\n", " ", "```json", "x", "\\", f"<{D}invoke", "</think>", '"true">']


@pytest.mark.parametrize("family", [f for f, _ in OUTPUTS])
def test_damaged_outputs_never_break_and_split_the_same(family: str) -> None:
    good = [o.split("</think>\n\n")[1] for f, o in OUTPUTS if f == family] + ["Plain text. "]
    started = 0
    for output in damaged_outputs(good, JUNK, 150, seed=len(family)):
        whole = parse([output], family=family, tools=TOOL_NAMES)
        assert parse(list(output), family=family, tools=TOOL_NAMES) == whole, output
        cut = len(output) // 3
        assert parse([output[:cut], output[cut:]], family=family, tools=TOOL_NAMES) == whole
        started += bool(whole.calls)
        if not whole.calls:  # nothing is lost
            assert whole.text == output, output
    assert started > 40


# ---- forced calls --------------------------------------------------------------------------

FAMILIES = ["deepseek-r1", "deepseek-v3.1", "deepseek-v3.2", "deepseek-v4"]
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


@pytest.fixture(scope="module")
def vocab() -> Iterator[ByteVocab]:
    yield from byte_vocab([CALLS, CALLS_END, CALL, CALL_END, SEP, f"<{D}", f"</{D}", "```json"])


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("request_file", ["claude-code-2.1.332-first-turn.json"])
def test_forced_grammar_compiles_for_real_tools(family: str, request_file: str) -> None:
    tools = captured_tools(request_file)
    for tool in tools:
        assert check_grammar(forced_call_grammar([tool], family)), tool.name
    assert check_grammar(forced_call_grammar(tools, family, reasoning=True))


# family, a call as the template writes it (to read_file with the schema above)
WRITTEN = {
    "deepseek-r1": (
        f"{CALLS}{CALL}function{SEP}read_file\n```json\n"
        '{"path": "/a", "mode": "text", "options": {"follow": true}}\n```'
        f"{CALL_END}{CALLS_END}"
    ),
    "deepseek-v3.1": (
        f"{CALLS}{CALL}read_file{SEP}"
        f'{{"path": "/a", "mode": "text", "options": {{"follow": true}}}}{CALL_END}{CALLS_END}'
    ),
    "deepseek-v3.2": (
        f'\n\n<{D}function_calls>\n<{D}invoke name="read_file">\n'
        f'<{D}parameter name="path" string="true">/a</{D}parameter>\n'
        f'<{D}parameter name="mode" string="true">say "hi"</{D}parameter>\n'
        f'<{D}parameter name="options" string="false">{{"follow": true}}</{D}parameter>\n'
        f"</{D}invoke>\n</{D}function_calls>"
    ),
}


@pytest.mark.parametrize("family", list(WRITTEN))
def test_forced_grammar_accepts_the_call_as_the_template_writes_it(
    vocab: ByteVocab, family: str
) -> None:
    gbnf = forced_call_grammar(SCHEMA_TOOLS, family)
    good = WRITTEN[family]
    assert vocab.accepts(gbnf, good)
    name, arguments = parse_one_call(family, good, SCHEMA_TOOLS)
    assert name == "read_file" and arguments["options"] == {"follow": True}
    for bad in (
        good.replace("read_file", "write_file"),
        good.replace("text", "binary").replace('say "hi"', "binary"),
        good.replace("true", '"yes"'),
        good.replace("/a", "/" + "a" * 40) if family == "deepseek-v3.2" else good + "x",
    ):
        assert not vocab.accepts(gbnf, bad), bad
    assert vocab.accepts(
        forced_call_grammar(SCHEMA_TOOLS, family, reasoning=True), "Hm.</think>" + good
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_whatever_the_grammar_allows_is_one_valid_call(vocab: ByteVocab, family: str) -> None:
    assert_random_calls_valid(vocab, family, SCHEMA_TOOLS, range(6))


# ---- end to end on a tiny GGUF -------------------------------------------------------------

REALISTIC_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "Absolute path of the file"},
        "mode": {"type": "string", "enum": ["text", "binary", "lines"]},
        "limit": {"type": "integer"},
        "options": {
            "type": "object",
            "properties": {"follow_symlinks": {"type": "boolean"}, "encoding": {"type": "string"}},
            "required": ["follow_symlinks"],
            "additionalProperties": False,
        },
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["path", "mode", "limit", "options", "tags"],
    "additionalProperties": False,
}


class TestTinyDeepSeekV31(ForcedRoundTrip):
    template = V31
    schema = REALISTIC_SCHEMA
