"""The output parsers: realistic model outputs, each fed whole, split at every
offset and character by character, must always give the same text, thinking
and calls; every bad-output rule of `engy_local.prompt.parsing.toolparse` has a row."""

from __future__ import annotations

import json
import random

import pytest
from support.parsing import TOOLS, Result, assert_parses, calls, parse, random_value
from support.paths import FIXTURES

from engy_local.chat import TextDelta, ThinkingDelta, ToolCallDelta, ToolCallEnd, ToolCallStart
from engy_local.prompt.families import detect_family, get, make_parser
from engy_local.prompt.parsing.toolparse import (
    HermesParser,
    JsonScanner,
    PlainParser,
    repair_object,
)

TEMPLATES = FIXTURES / "chat-templates"


WRITE_ARGS = {"file_path": "/tmp/a.py", "content": 'def f():\n    return "}{ </tool_call>"\n\u00e9'}
WRITE_JSON = json.dumps(WRITE_ARGS)

# name, output, thinking flag, expected
GOOD = [
    ("plain text", "Hello, world!", False, Result(text="Hello, world!")),
    (
        "text that only looks like markers",
        "if a < b and <tool> or <tool_cal> then </think> <think>",
        False,
        Result(text="if a < b and <tool> or <tool_cal> then </think> <think>"),
    ),
    ("text keeps its whitespace", "\n  Hi there \n", False, Result(text="\n  Hi there \n")),
    (
        "qwen3 reasoning",
        "<think>\nThe user greets me.\nI answer.\n</think>\n\nHello!",
        False,
        Result(text="Hello!", thinking="The user greets me.\nI answer."),
    ),
    (
        "reasoning opened by the prompt",
        "Short plan.\n</think>\n\nThe answer.",
        True,
        Result(text="The answer.", thinking="Short plan."),
    ),
    (
        "reasoning with leading whitespace",
        "\n \n<think>\nx < y\n</think>\n\ny",
        False,
        Result(text="y", thinking="x < y"),
    ),
    ("empty reasoning", "<think>\n\n</think>\n\nHi", False, Result(text="Hi")),
    (
        "unclosed reasoning",
        "<think>\nstill going </thi",
        False,
        Result(thinking="still going </thi"),
    ),
    ("think after text is text", "Hi <think>x</think>", False, Result(text="Hi <think>x</think>")),
    (
        "one call after reasoning and text",
        "<think>\nI should list the files.\n</think>\n\nLet me look.\n<tool_call>\n"
        '{"name": "Bash", "arguments": {"command": "ls -la", "timeout": 1.5e3}}\n</tool_call>',
        False,
        Result(
            text="Let me look.",
            thinking="I should list the files.",
            calls=calls(("Bash", '{"command": "ls -la", "timeout": 1.5e3}')),
        ),
    ),
    (
        "parallel calls and text after",
        '<tool_call>\n{"name": "Read", "arguments": {"file_path": "/a"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "Write", "arguments": ' + WRITE_JSON + "}\n</tool_call>\n\n"
        "Both done.\n",
        False,
        Result(
            text="Both done.\n",
            calls=calls(("Read", '{"file_path": "/a"}'), ("Write", WRITE_JSON)),
        ),
    ),
    (
        "compact call, parameters key, nested values",
        '<tool_call>{"name":"Bash","parameters":{"a":[1,-0.5,{"b":null}],"c":false,'
        '"d":"\\"\\u00e9\\\\"}}</tool_call>',
        False,
        Result(calls=calls(("Bash", '{"a":[1,-0.5,{"b":null}],"c":false,"d":"\\"\\u00e9\\\\"}'))),
    ),
    (
        "arguments as a JSON string",
        '<tool_call>\n{"name": "Read", "arguments": "{\\"file_path\\": \\"/x\\"}"}\n</tool_call>',
        False,
        Result(calls=calls(("Read", '{"file_path": "/x"}'))),
    ),
    (
        "arguments before the name",
        '<tool_call>\n{"arguments": {"file_path": "/x"}, "name": "Read"}\n</tool_call>',
        False,
        Result(calls=calls(("Read", '{"file_path": "/x"}'))),
    ),
    (
        "other keys and no arguments",
        '<tool_call>\n{"id": 7, "name": "get_goal", "extra": [1, {}]}\n</tool_call>',
        False,
        Result(calls=calls(("get_goal", "{}"))),
    ),
    (
        "call right after reasoning opened by the prompt",
        'ok\n</think>\n\n<tool_call>\n{"name": "get_goal", "arguments": {}}\n</tool_call>',
        True,
        Result(thinking="ok", calls=calls(("get_goal", "{}"))),
    ),
]

BAD = [
    (
        "a tool that was not offered is text",
        'Sure.\n<tool_call>\n{"name": "rm_rf", "arguments": {"p": "/"}}\n</tool_call>\nAfter.',
        Result(
            text='Sure.\n<tool_call>\n{"name": "rm_rf", "arguments": {"p": "/"}}\n</tool_call>'
            "\nAfter."
        ),
    ),
    (
        "JSON broken before the name is text",
        'A <tool_call>\n{"nam: "Bash"}\n</tool_call> B',
        Result(text='A <tool_call>\n{"nam: "Bash"}\n</tool_call> B'),
    ),
    (
        "another syntax inside the tags is text",
        "<tool_call>\n<function=Bash>\n<parameter=command>ls</parameter>\n</function>\n"
        "</tool_call>",
        Result(
            text="<tool_call>\n<function=Bash>\n<parameter=command>ls</parameter>\n</function>\n"
            "</tool_call>"
        ),
    ),
    (
        "a name that is not a string is text",
        '<tool_call>{"name": ["Bash"], "arguments": {}}</tool_call>',
        Result(text='<tool_call>{"name": ["Bash"], "arguments": {}}</tool_call>'),
    ),
    (
        # A forced call cut by the token limit: a call to the tool it starts.
        "an unclosed call before its name is complete is a call to that tool",
        'Hi <tool_call>\n{"name": "Ba',
        Result(text="Hi", calls=calls(("Bash", "{}"))),
    ),
    (
        "an unclosed call cut right after its opening is a call to the first tool",
        "<tool_call>\n{",
        Result(calls=calls((next(iter(TOOLS)), "{}"))),
    ),
    (
        "an unclosed call whose name starts no tool's name is text",
        'Hi <tool_call>\n{"name": "Zq',
        Result(text='Hi <tool_call>\n{"name": "Zq'),
    ),
    (
        "an unclosed call with a complete unknown name is text",
        '<tool_call>\n{"name": "Ba"',
        Result(text='<tool_call>\n{"name": "Ba"'),
    ),
    (
        "an unclosed call with broken JSON before the name is text",
        '<tool_call>\n{"name" x',
        Result(text='<tool_call>\n{"name" x'),
    ),
    (
        "JSON broken after the start is cut back and closed",
        '<tool_call>\n{"name": "Bash", "arguments": {"command": "ls", oops}}\n</tool_call>\nok',
        Result(text="ok", calls=calls(("Bash", '{"command": "ls"}'))),
    ),
    (
        "single quotes break the arguments at once",
        '<tool_call>\n{"name": "Bash", "arguments": {\'command\': \'ls\'}}\n</tool_call>',
        Result(calls=calls(("Bash", "{}"))),
    ),
    (
        "unclosed call inside a string value",
        '<tool_call>\n{"name": "Write", "arguments": {"file_path": "/a", "content": "hel',
        Result(calls=calls(("Write", '{"file_path": "/a", "content": "hel"}'))),
    ),
    (
        "unclosed call inside a key",
        '<tool_call>\n{"name": "Write", "arguments": {"file_path": "/a", "cont',
        Result(calls=calls(("Write", '{"file_path": "/a"}'))),
    ),
    (
        "unclosed call inside a unicode escape",
        '<tool_call>\n{"name": "Write", "arguments": {"content": "x\\u00',
        Result(calls=calls(("Write", '{"content": "x"}'))),
    ),
    (
        "unclosed call after a number and in nested arrays",
        '<tool_call>{"name": "Bash", "arguments": {"a": [[1, 2], [3',
        Result(calls=calls(("Bash", '{"a": [[1, 2], [3]]}'))),
    ),
    (
        "unclosed call after a complete object",
        '<tool_call>{"name": "Bash", "arguments": {"command": "pwd"}}',
        Result(calls=calls(("Bash", '{"command": "pwd"}'))),
    ),
    (
        "arguments that are not an object",
        '<tool_call>{"name": "Bash", "arguments": [1, 2]}</tool_call>'
        '<tool_call>{"name": "Read", "arguments": null}</tool_call>'
        '<tool_call>{"name": "Write", "arguments": "ls -la"}</tool_call>',
        Result(calls=calls(("Bash", "{}"), ("Read", "{}"), ("Write", "{}"))),
    ),
    (
        "string arguments cut off",
        '<tool_call>{"name": "Read", "arguments": "{\\"file_path\\": \\"/x',
        Result(calls=calls(("Read", '{"file_path": "/x"}'))),
    ),
    (
        "raw control characters in strings are escaped",
        '<tool_call>{"name": "Write", "arguments": {"content": "a\nb\tc"}}</tool_call>',
        Result(calls=calls(("Write", '{"content": "a\\nb\\tc"}'))),
    ),
    (
        "junk after the object is dropped",
        '<tool_call>\n{"name": "get_goal", "arguments": {}}}\n</tool_call>',
        Result(calls=calls(("get_goal", "{}"))),
    ),
    (
        "a missing close tag before the next call",
        '<tool_call>\n{"name": "Read", "arguments": {"file_path": "/a"}}\n'
        '<tool_call>\n{"name": "Read", "arguments": {"file_path": "/b"}}\n</tool_call>',
        Result(calls=calls(("Read", '{"file_path": "/a"}'), ("Read", '{"file_path": "/b"}'))),
    ),
    ("output ending inside a marker", "Hello <tool_ca", Result(text="Hello <tool_ca")),
    # Output cut right after the opening tag (a forced call at max_tokens 1).
    ("a lone open tag", "<tool_call>", Result(calls=calls(("Bash", "{}")))),
    ("a lone partial open tag", "<tool_ca", Result(text="<tool_ca")),
]


@pytest.mark.parametrize(
    ("output", "thinking", "expected"),
    [row[1:] for row in GOOD],
    ids=[row[0] for row in GOOD],
)
def test_outputs(output: str, thinking: bool, expected: Result) -> None:
    assert_parses(output, expected, thinking=thinking)


@pytest.mark.parametrize(("output", "expected"), [row[1:] for row in BAD], ids=[r[0] for r in BAD])
def test_bad_outputs(output: str, expected: Result) -> None:
    assert_parses(output, expected)


def test_no_tools_offered_means_calls_are_text() -> None:
    output = 'x <tool_call>{"name": "Bash", "arguments": {}}</tool_call>'
    assert_parses(output, Result(text=output), tools=())


def test_plain_family_passes_calls_through_as_text() -> None:
    output = '<think>\nhmm\n</think>\n\n<tool_call>{"name": "Bash"}</tool_call>\n'
    expected = Result(thinking="hmm", text='<tool_call>{"name": "Bash"}</tool_call>\n')
    assert_parses(output, expected, family="none")


def test_event_sequence_streams_arguments() -> None:
    """The exact events for a stream cut the way a model's tokens would be."""
    parser = HermesParser(tools=["Bash"], thinking=False, new_id=lambda: "toolu_1")
    steps = [
        ("<think>", []),
        ("\nPlan", [ThinkingDelta("Plan")]),
        (".\n", [ThinkingDelta(".")]),
        ("</think>\n\nRunning", [TextDelta("Running")]),
        (" it.\n", [TextDelta(" it.")]),
        ("<tool_call>\n", []),
        ('{"name": "Ba', []),
        ('sh", "arguments": ', [ToolCallStart(0, "toolu_1", "Bash")]),
        ('{"command', [ToolCallDelta(0, "{")]),
        ('": "ls', [ToolCallDelta(0, '"command": "ls')]),
        (' -la"', [ToolCallDelta(0, ' -la"')]),
        (", ", []),
        ('"timeout": 10', [ToolCallDelta(0, ', "timeout": 10')]),
        ("}}\n</tool", [ToolCallDelta(0, "}")]),
        ("_call>", [ToolCallEnd(0, '{"command": "ls -la", "timeout": 10}')]),
        ("\n", []),
    ]
    for chunk, expected in steps:
        assert parser.feed(chunk) == expected, chunk
    assert parser.finish() == []


def test_text_is_held_only_while_it_may_be_a_marker() -> None:
    parser = HermesParser(tools=["Bash"], thinking=False, new_id=lambda: "x")
    assert parser.feed("Hello") == [TextDelta("Hello")]
    assert parser.feed(" <tool") == []
    assert parser.feed("tip> ") == [TextDelta(" <tooltip>")]
    assert parser.feed("<") == []
    assert parser.finish() == [TextDelta(" <")]


def test_repair_at_every_cut() -> None:
    """A call cut off anywhere still ends with valid arguments, a prefix of the
    real ones (modulo closing), and the text before it is never lost."""
    output = (
        'Text.\n<tool_call>\n{"name": "Write", "arguments": '
        + json.dumps({"a": [1, 2.5, -3e2, True, None], "b": {"c": 'x"y\u00e9\n'}, "d": ""})
        + "}\n</tool_call>"
    )
    for cut in range(len(output) + 1):
        result = parse([output[:cut]])
        assert result.text.startswith("Text.") or cut < 5
        for _, _, args in result.calls:
            assert isinstance(json.loads(args), dict)


PIECES = [
    "<tool_call>", "</tool_call>", "<think>", "</think>", "<tool_", "\n", " ", "{", "}",
    "[", "]", '"name"', '"arguments"', ":", ",", '"a\\"', "1", "-", "x", "\\u12", "<",
]  # fmt: skip


def random_output(rng: random.Random) -> str:
    """A plausible output, then damaged a little."""
    parts = []
    if rng.random() < 0.3:
        parts.append("<think>\nplan " + rng.choice(["a", "<b", "</thi"]) + "\n</think>\n\n")
    for _ in range(rng.randrange(4)):
        if rng.random() < 0.4:
            parts.append(rng.choice(["Sure.", "a < b\n", " ok "]))
        else:
            args = json.dumps(random_value(rng) if rng.random() < 0.2 else {"x": random_value(rng)})
            name = rng.choice([*TOOLS, "nope"])
            key = rng.choice(["arguments", "parameters"])
            parts.append(f'<tool_call>\n{{"name": "{name}", "{key}": {args}}}\n</tool_call>\n')
    output = "".join(parts)
    for _ in range(rng.randrange(4)):
        at, kind = rng.randint(0, len(output)), rng.random()
        if kind < 0.4:
            output = output[:at] + output[at + rng.randint(1, 5) :]
        elif kind < 0.8:
            output = output[:at] + rng.choice(PIECES) + output[at:]
        else:
            output = output[:at]
    return output


def test_random_outputs_never_break_and_split_the_same() -> None:
    rng = random.Random(4)
    started = 0
    for _ in range(500):
        output = random_output(rng)
        whole = parse([output])
        started += bool(whole.calls)
        assert parse(list(output)) == whole, output
        cut = rng.randint(0, len(output))
        assert parse([output[:cut], output[cut:]]) == whole, output
        if not whole.calls and "<think>" not in output:  # nothing may be lost
            assert whole.text == output, output
    assert started > 100


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1}', '{"a": 1}'),
        ('  {"a": 1} trailing', '{"a": 1}'),
        ('{"a": [1, {"b": "c', '{"a": [1, {"b": "c"}]}'),
        ('{"a": tru', "{}"),
        ('{"a": 1, "b": tru', '{"a": 1}'),
        ('{"a": 1,', '{"a": 1}'),
        ('{"a": 1.', '{"a": 1}'),
        ('{"a": "x\\', '{"a": "x"}'),
        ("[1]", "{}"),
        ("", "{}"),
        ("not json", "{}"),
    ],
)
def test_repair_object(text: str, expected: str) -> None:
    assert repair_object(text) == expected


@pytest.mark.parametrize(
    "text",
    ['{"a": [1, 2.5e-3, -0, true, false, null, "\\u00e9\\n"], "b": {}}', "[]", '"s"', "0"],
)
def test_json_scanner_accepts_valid_json(text: str) -> None:
    scanner = JsonScanner()
    for c in text:
        assert scanner.feed(c) == c
    assert scanner.done or scanner.closer() == ""


@pytest.mark.parametrize("text", ['{"a" 1}', "{,}", "[1,]", "01", '"\\x"', "tru ", "{'a': 1}"])
def test_json_scanner_rejects_invalid_json(text: str) -> None:
    scanner = JsonScanner()
    assert any(scanner.feed(c) is None for c in text) or not scanner.done


@pytest.mark.parametrize(
    ("template", "family"),
    [
        ("Qwen-Qwen3-0.6B.jinja", "hermes"),
        ("Qwen-Qwen2.5-7B-Instruct.jinja", "hermes"),
        ("NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", "hermes"),
        ("meta-llama-Llama-3.1-8B-Instruct.jinja", "llama3"),
        ("google-gemma-2-2b-it.jinja", "generic"),
    ],
)
def test_detect_family(template: str, family: str) -> None:
    path = TEMPLATES / template
    if not path.is_file():
        pytest.skip(f"chat template fixture not found: {path}")
    assert detect_family(path.read_text()) == family


def test_registry() -> None:
    assert get("hermes").parser is HermesParser and get("none").parser is PlainParser
    with pytest.raises(ValueError, match="unknown tool-call family"):
        make_parser("nope", tools=(), thinking=False, new_id=lambda: "x")
