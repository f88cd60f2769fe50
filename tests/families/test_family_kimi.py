"""Kimi K2 and K3: detection from the real templates, an agent conversation
rendered through each, realistic outputs parsed the same whatever their
split, every bad-output rule, forced-call grammars, and a forced call end to
end on a tiny GGUF with the K3 template."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from support.framed_families import (
    CONVERSATION,
    LOOP,
    READ_ARGS,
    TEMPLATES,
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
from engy_local.prompt.families.kimi_k2 import tool_name
from engy_local.prompt.forced import forced_call_grammar
from engy_local.runtime.sampling import check_grammar

SECTION = "<|tool_calls_section_begin|>"
SECTION_END = "<|tool_calls_section_end|>"
CALL = "<|tool_call_begin|>"
ARGS = "<|tool_call_argument_begin|>"
CALL_END = "<|tool_call_end|>"
K2_INSTRUCT = "Kimi-K2-Instruct.jinja"
K2_FIRST = "moonshotai-Kimi-K2.jinja"
K3 = "Kimi-K3.jinja"


def tag(name: str, attrs: str = "") -> str:
    return f"<|open|>{name}{attrs}<|sep|>"


def end(name: str) -> str:
    return f"<|close|>{name}<|sep|>"


# ---- detection ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("template", "family"), [(K2_INSTRUCT, "kimi-k2"), (K2_FIRST, "kimi-k2"), (K3, "kimi-k3")]
)
def test_detected_from_the_template(template: str, family: str) -> None:
    assert detect_family(template_source(template)) == family


def test_no_other_template_is_taken_for_kimi() -> None:
    for path in sorted(TEMPLATES.glob("*.jinja")):
        if path.name not in (K2_INSTRUCT, K2_FIRST, K3):
            assert not detect_family(path.read_text()).startswith("kimi"), path.name


@pytest.mark.parametrize(
    ("call_id", "name"),
    [
        ("functions.Read:0", "Read"),
        (" functions.mcp__fs.read:12 ", "mcp__fs.read"),
        ("Read:3", "Read"),
        ("functions.Read", "Read"),
        ("ns:tool", "ns:tool"),
    ],
)
def test_tool_name_from_call_id(call_id: str, name: str) -> None:
    assert tool_name(call_id) == name


def test_catalog_families_exist() -> None:
    from engy_local.models.catalog import load_catalog

    named = {e.family for e in load_catalog().entries.values() if e.family}
    ours = {f for f in named if f.startswith("kimi")}
    assert ours and all(get(f).name == f for f in ours)


# ---- rendering -----------------------------------------------------------------------------

K2_CALLS = (
    f"TEXT-ONE{SECTION}{CALL}functions.Read:0{ARGS}{READ_ARGS}{CALL_END}"
    f"{CALL}functions.Write:1{ARGS}{WRITE_ARGS}{CALL_END}{SECTION_END}<|im_end|>"
)


def k3_argument(key: str, kind: str, value: str) -> str:
    return tag("argument", f' key="{key}" type="{kind}"') + value + end("argument")


K3_CALLS = (
    f"{tag('response')}TEXT-ONE{end('response')}{tag('tools')}"
    f"{tag('call', ' tool=' + chr(34) + 'Read' + chr(34) + ' index=' + chr(34) + '1' + chr(34))}"
    f"{k3_argument('path', 'string', '/etc/hosts')}{k3_argument('limit', 'number', '20')}"
    f"{end('call')}"
    f"{tag('call', ' tool=' + chr(34) + 'Write' + chr(34) + ' index=' + chr(34) + '2' + chr(34))}"
    f"{k3_argument('path', 'string', '/tmp/a.py')}"
    f"{k3_argument('content', 'string', 'x = 1' + chr(10) + 'print(x)')}"
    f"{k3_argument('options', 'object', '{' + chr(34) + 'mode' + chr(34) + ': 420}')}"
    f"{end('call')}{end('tools')}{end('message')}<|end_of_msg|>"
)

RENDERED = [
    (
        K2_INSTRUCT,
        K2_CALLS,
        "<|im_system|>Read<|im_middle|>## Return of functions.Read:0\nRESULT-ONE<|im_end|>"
        "<|im_system|>Write<|im_middle|>## Return of functions.Write:1\nRESULT-TWO<|im_end|>",
    ),
    (
        # The first K2 template names results by the client's call id, and
        # writes a literal backslash-n after it.
        K2_FIRST,
        K2_CALLS,
        "<|im_system|>tool<|im_middle|>## Return of toolu_1\\nRESULT-ONE<|im_end|>"
        "<|im_system|>tool<|im_middle|>## Return of toolu_2\\nRESULT-TWO<|im_end|>",
    ),
    (
        K3,
        K3_CALLS,
        tag("message", ' role="tool" tool="Read" index="1"')
        + f"RESULT-ONE{end('message')}<|end_of_msg|>"
        + tag("message", ' role="tool" tool="Write" index="2"')
        + f"RESULT-TWO{end('message')}<|end_of_msg|>",
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
    assert "SYSTEM-TEXT" in text and "USER-TWO" in text
    # The tools are declared by the template itself, before the conversation.
    assert text.index('"name": "Read"' if "K3" not in template else '"name":"Read"') < text.index(
        "SYSTEM-TEXT"
    )


# template, thinking switch, how the prompt ends, whether earlier reasoning is kept
THINKING = [
    (K2_INSTRUCT, None, "<|im_assistant|>assistant<|im_middle|>", False),
    (K2_FIRST, True, "<|im_assistant|>assistant<|im_middle|>", False),
    (K3, None, tag("message", ' role="assistant"') + tag("think"), True),
    (K3, True, tag("message", ' role="assistant"') + tag("think"), True),
    (K3, False, tag("message", ' role="assistant"') + tag("response"), False),
]


@pytest.mark.parametrize(("template", "thinking", "ending", "kept"), THINKING)
def test_thinking_switch_and_earlier_reasoning(
    template: str, thinking: bool | None, ending: str, kept: bool
) -> None:
    for conversation in (CONVERSATION, LOOP):
        text = prompt(template, conversation, TOOLS, thinking=thinking)
        assert text.endswith(ending)
        assert ("THINK-ONE" in text) == kept
    # K3 opens its reasoning in the prompt with its own tag: the engine
    # reads the output as reasoning from the first token exactly then.
    family = get(detect_family(template_source(template)))
    assert text.rstrip().endswith(family.reasoning_start) == (kept and family.name == "kimi-k3")


# ---- parsing: realistic outputs, split anywhere ---------------------------------------------

WRITE_OUT = '{"path": "/tmp/a.py", "content": "x = {\\"a\\": [1, 2]}\\n", "options": {"mode": 420}}'
PARSED = Result(
    text="Let me look at both.",
    thinking="The user wants the hosts file.\nThen write a.py.",
    calls=calls(("Read", '{"path": "/etc/hosts", "limit": 20}'), ("Write", WRITE_OUT)),
)
K3_OUTPUT = (
    "The user wants the hosts file.\nThen write a.py."
    f"{end('think')}{tag('response')}Let me look at both.{end('response')}{tag('tools')}"
    + tag("call", ' tool="Read" index="1"')
    + k3_argument("path", "string", "/etc/hosts")
    + k3_argument("limit", "number", "20")
    + end("call")
    + tag("call", ' tool="Write" index="2"')
    + k3_argument("path", "string", "/tmp/a.py")
    + k3_argument("content", "string", 'x = {"a": [1, 2]}\n')
    + k3_argument("options", "object", '{"mode": 420}')
    + f"{end('call')}{end('tools')}{end('message')}<|end_of_msg|>"
)
OUTPUTS = [
    (
        "kimi-k2, compact",
        "kimi-k2",
        False,
        "<think>The user wants the hosts file.\nThen write a.py.</think>"
        f"Let me look at both.{SECTION}{CALL}functions.Read:0{ARGS}"
        f'{{"path": "/etc/hosts", "limit": 20}}{CALL_END}{CALL}functions.Write:1{ARGS}{WRITE_OUT}'
        f"{CALL_END}{SECTION_END}",
    ),
    (
        "kimi-k2, one marker a line",
        "kimi-k2",
        True,
        "The user wants the hosts file.\nThen write a.py.\n</think>\n\n"
        f"Let me look at both.\n{SECTION}\n{CALL}\nfunctions.Read:3{ARGS}\n"
        f'{{"path": "/etc/hosts", "limit": 20}}\n{CALL_END}\n{CALL} functions.Write:4 {ARGS}'
        f"{WRITE_OUT}\n{CALL_END}\n{SECTION_END}",
    ),
    ("kimi-k3", "kimi-k3", True, K3_OUTPUT),
    (
        "kimi-k3, a JSON element for the second call's arguments",
        "kimi-k3",
        True,
        K3_OUTPUT.split(tag("call", ' tool="Write" index="2"'))[0]
        + tag("call", ' tool="Write" index="2"')
        + tag("json", ' type="object"')
        + WRITE_OUT
        + end("json")
        + f"{end('call')}{end('tools')}",
    ),
]


@pytest.mark.parametrize(
    ("family", "thinking", "output"), [o[1:] for o in OUTPUTS], ids=[o[0] for o in OUTPUTS]
)
def test_realistic_output_parses_the_same_at_every_split(
    family: str, thinking: bool, output: str
) -> None:
    assert_parses(output, PARSED, family=family, thinking=thinking)


# ---- parsing: bad output -----------------------------------------------------------------

TOOL_NAMES = ("Bash", "Read", "Write", 'say "hi" & go')

BAD = [
    (
        "a tool that was not offered is text",
        "kimi-k2",
        f'Sure.{SECTION}{CALL}functions.rm:0{ARGS}{{"p": "/"}}{CALL_END}{SECTION_END}',
        Result(text=f'Sure.{SECTION}{CALL}functions.rm:0{ARGS}{{"p": "/"}}{CALL_END}{SECTION_END}'),
    ),
    (
        "an id without prefix or index still names the tool",
        "kimi-k2",
        f"{SECTION}{CALL}Read{ARGS}{{}}{CALL_END}{CALL}Bash:7{ARGS}{{}}{CALL_END}{SECTION_END}",
        Result(calls=calls(("Read", "{}"), ("Bash", "{}"))),
    ),
    (
        "JSON broken after the start is cut back and closed",
        "kimi-k2",
        f'{SECTION}{CALL}functions.Read:0{ARGS}{{"path": "/a", "n": tru}}{CALL_END}{SECTION_END}',
        Result(calls=calls(("Read", '{"path": "/a"}'))),
    ),
    (
        "an unclosed call is closed",
        "kimi-k2",
        f'{SECTION}{CALL}functions.Write:0{ARGS}{{"content": "a\nb',
        Result(calls=calls(("Write", '{"content": "a\\nb"}'))),
    ),
    (
        "a head cut off by another marker is text",
        "kimi-k2",
        f"{SECTION}{CALL}functions.Read:0{CALL_END}{SECTION_END}",
        Result(text=f"{SECTION}{CALL}functions.Read:0{CALL_END}{SECTION_END}"),
    ),
    (
        "output ending inside a marker is text",
        "kimi-k2",
        "Hi <|tool_calls_sec",
        Result(text="Hi <|tool_calls_sec"),
    ),
    (
        "K3: a tool that was not offered is text, its tools element with it",
        "kimi-k3",
        f"{tag('tools')}{tag('call', ' tool=' + chr(34) + 'rm' + chr(34))}{end('call')}"
        f"{end('tools')}",
        Result(
            text=f"{tag('tools')}{tag('call', ' tool=' + chr(34) + 'rm' + chr(34))}{end('call')}"
            f"{end('tools')}"
        ),
    ),
    (
        "K3: attributes are unescaped; a value that is not its type's JSON is a string",
        "kimi-k3",
        tag("tools")
        + tag("call", ' tool="say &quot;hi&quot; &amp; go" index="1"')
        + k3_argument("k&quot;", "boolean", "true")
        + k3_argument("n", "number", "many")
        + k3_argument("m", "mystery", "[1]")
        + end("call")
        + end("tools"),
        Result(calls=calls(('say "hi" & go', '{"k\\"": true, "n": "many", "m": [1]}'))),
    ),
    (
        "K3: a JSON element after arguments is dropped",
        "kimi-k3",
        tag("tools")
        + tag("call", ' tool="Read" index="1"')
        + k3_argument("a", "string", "x")
        + tag("json", ' type="object"')
        + '{"b": 1}'
        + end("json")
        + end("call")
        + end("tools"),
        Result(calls=calls(("Read", '{"a": "x"}'))),
    ),
    (
        "K3: the frame's tags are dropped around verbatim text",
        "kimi-k3",
        f"{tag('response')}\n\nHello\n{end('response')}{end('message')}<|end_of_msg|>",
        Result(text="\n\nHello\n"),
    ),
    (
        "K3: an unclosed argument and call are closed",
        "kimi-k3",
        tag("tools") + tag("call", ' tool="Write" index="1"') + tag("argument", ' key="c"')[:-7],
        Result(calls=calls(("Write", "{}"))),
    ),
]


@pytest.mark.parametrize(
    ("family", "output", "expected"), [b[1:] for b in BAD], ids=[b[0] for b in BAD]
)
def test_bad_output(family: str, output: str, expected: Result) -> None:
    assert_parses(output, expected, family=family, tools=TOOL_NAMES)


JUNK = [SECTION, SECTION_END, CALL, CALL_END, ARGS, "<|tool_call", "{", "}", '"', "\n"]
JUNK += ["<|open|>", "<|close|>", "<|sep|>", tag("argument", ' key="z"'), end("argument"), "x"]


@pytest.mark.parametrize("family", ["kimi-k2", "kimi-k3"])
def test_damaged_outputs_never_break_and_split_the_same(family: str) -> None:
    good = [o for _, f, _, o in OUTPUTS if f == family]
    good = [o.split("</think>")[-1].split(end("think"))[-1] for o in good] + ["Plain text. "]
    started = 0
    for output in damaged_outputs(good, JUNK, 150, seed=len(family)):
        whole = parse([output], family=family, tools=TOOL_NAMES)
        assert parse(list(output), family=family, tools=TOOL_NAMES) == whole, output
        cut = len(output) // 3
        assert parse([output[:cut], output[cut:]], family=family, tools=TOOL_NAMES) == whole
        started += bool(whole.calls)
        if not whole.calls and family == "kimi-k2":  # nothing is lost
            assert whole.text == output, output
    assert started > 40


# ---- forced calls ----------------------------------------------------------------------------

SCHEMA_TOOLS = [
    ToolSpec(
        'read "file"',
        "",
        {
            "type": "object",
            "properties": {
                "path": {"type": "string", "maxLength": 30},
                "mode": {"type": "string", "enum": ["text", "lines"]},
                "limit": {"type": "integer"},
                "options": {
                    "type": "object",
                    "properties": {"follow": {"type": "boolean"}},
                    "required": ["follow"],
                },
            },
            "required": ["path", "mode", "options"],
            "additionalProperties": False,
        },
    ),
    ToolSpec("anything", "", {"type": "object"}),
]
WRITTEN = {
    "kimi-k2": (
        f'{SECTION}{CALL}functions.read "file":0{ARGS}'
        f'{{"path": "/a", "mode": "text", "options": {{"follow": true}}}}{CALL_END}{SECTION_END}'
    ),
    "kimi-k3": (
        f"{tag('response')}{end('response')}{tag('tools')}"
        + tag("call", ' tool="read &quot;file&quot;" index="1"')
        + k3_argument("path", "string", "/a")
        + k3_argument("mode", "string", "text")
        + k3_argument("options", "object", '{"follow": true}')
        + f"{end('call')}{end('tools')}"
    ),
}


@pytest.fixture(scope="module")
def vocab() -> Iterator[ByteVocab]:
    yield from byte_vocab([SECTION, SECTION_END, CALL, ARGS, CALL_END, "<|open|>", "<|close|>"])


@pytest.mark.parametrize("family", ["kimi-k2", "kimi-k3"])
def test_forced_grammar_compiles_for_real_tools(family: str) -> None:
    tools = captured_tools("codex-0.171.0-first-turn.json")
    for tool in tools:
        assert check_grammar(forced_call_grammar([tool], family)), tool.name
    assert check_grammar(forced_call_grammar(tools, family, reasoning=True))


@pytest.mark.parametrize("family", list(WRITTEN))
def test_forced_grammar_accepts_the_call_as_the_template_writes_it(
    vocab: ByteVocab, family: str
) -> None:
    gbnf = forced_call_grammar(SCHEMA_TOOLS, family)
    good = WRITTEN[family]
    assert vocab.accepts(gbnf, good)
    name, arguments = parse_one_call(family, good, SCHEMA_TOOLS)
    assert name == 'read "file"' and arguments == {
        "path": "/a",
        "mode": "text",
        "options": {"follow": True},
    }
    for bad in (
        good.replace("file", "fil"),
        good.replace("text", "binary"),
        good.replace("true", '"yes"'),
        good.replace("/a", "/" + "a" * 40),
    ):
        assert not vocab.accepts(gbnf, bad), bad
    thinking = forced_call_grammar(SCHEMA_TOOLS, family, reasoning=True)
    closer = get(family).reasoning_end
    assert vocab.accepts(thinking, "Hm." + closer + good)


@pytest.mark.parametrize("family", ["kimi-k2", "kimi-k3"])
def test_whatever_the_grammar_allows_is_one_valid_call(vocab: ByteVocab, family: str) -> None:
    assert_random_calls_valid(vocab, family, SCHEMA_TOOLS, range(6))


# ---- end to end on a tiny GGUF -----------------------------------------------------------------

# Strings are free text in K3's argument elements; the zero-weight model
# never ends free text (it always prefers `"`), so strings here are bounded.
K3_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "maxLength": 24, "description": "Absolute path of the file"},
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


class TestTinyKimiK3(ForcedRoundTrip):
    template = K3
    schema = K3_SCHEMA
