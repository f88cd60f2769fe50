"""Calls small models write outside their family's syntax under tool_choice
auto (a ```json fence, a bare JSON object or list naming an offered tool)
are read as calls, at every split of the output; anything else stays text,
and nothing is lost."""

from __future__ import annotations

import json

import pytest
from support.parsing import Result, assert_parses, calls

BMI = '{"name": "Bash", "arguments": {"command": "ls -la", "timeout": 20}}'
BMI_ARGS = '{"command": "ls -la", "timeout": 20}'
PRETTY = '{\n  "name": "Read",\n  "arguments": {\n    "file_path": "/a.py"\n  }\n}'

ROWS = [
    # the forms small models write
    (f"```json\n{BMI}\n```", Result(calls=calls(("Bash", BMI_ARGS)))),
    (BMI, Result(calls=calls(("Bash", BMI_ARGS)))),
    (
        f"I'll run it.\n\n```json\n{BMI}\n```",
        Result("I'll run it.", calls=calls(("Bash", BMI_ARGS))),
    ),
    (f"```\n{PRETTY}\n```", Result(calls=calls(("Read", '{"file_path": "/a.py"}')))),
    (
        '[{"name": "Read", "arguments": {"file_path": "a"}}, '
        '{"name": "Bash", "parameters": {"command": "b"}}]',
        Result(calls=calls(("Read", '{"file_path": "a"}'), ("Bash", '{"command": "b"}'))),
    ),
    (
        f"```json\n{BMI}\n{BMI}\n```",
        Result(calls=calls(("Bash", BMI_ARGS), ("Bash", BMI_ARGS))),
    ),
    # one after another, as Llama 3.2 writes them
    (
        '{"name": "Read", "parameters": {"file_path": "a"}};{"name": "Bash", "parameters": {}}',
        Result(calls=calls(("Read", '{"file_path": "a"}'), ("Bash", "{}"))),
    ),
    # a name as the model spelled it: the offered one comes out
    ('{"name": "get.goal", "arguments": {}}', Result(calls=calls(("get_goal", "{}")))),
    # arguments given as a JSON string
    (
        '{"name": "Bash", "arguments": "{\\"command\\": \\"pwd\\"}"}',
        Result(calls=calls(("Bash", '{"command": "pwd"}'))),
    ),
    # the family's own calls beside them, numbered in one sequence
    (
        f'<tool_call>\n{{"name": "Read", "arguments": {{}}}}\n</tool_call>\n{BMI}',
        Result(calls=calls(("Read", "{}"), ("Bash", BMI_ARGS))),
    ),
    # text: JSON that is not a call to an offered tool, braces in prose
    ('```json\n{"name": "rm_rf", "arguments": {}}\n```', None),
    ('{"name": "Bash2", "arguments": {}}', None),
    ('Use {"key": 1} or [1, 2] in the config; {name} too.', None),
    ("```python\nprint('{')\n```", None),
    ("[", None),
    # cut by the token limit after the name: a call, arguments repaired
    ('```json\n{"name": "Bash", "arguments": {"command": "ls', None),
]


@pytest.mark.parametrize(("output", "expected"), ROWS, ids=[r[0][:40] for r in ROWS])
def test_loose_calls(output: str, expected: Result | None) -> None:
    if expected is None and output.endswith('"ls'):
        expected = Result(calls=calls(("Bash", '{"command": "ls"}')))
    elif expected is None:
        expected = Result(text=output)
    assert_parses(output, expected, loose=True)


def test_without_the_wrapper_a_fenced_call_is_text() -> None:
    text = f"```json\n{BMI}\n```"
    assert_parses(text, Result(text=text))


def test_text_after_a_loose_call_is_text() -> None:
    assert_parses(f"{BMI}\n\nDone.", Result("Done.", calls=calls(("Bash", BMI_ARGS))), loose=True)


def test_every_value_survives() -> None:
    arguments = {"command": 'echo "}{" \\n \u00e9', "n": [1, 2.5, None], "o": {"a": True}}
    call = json.dumps({"name": "Bash", "arguments": arguments}, ensure_ascii=False)
    got = calls(("Bash", json.dumps(arguments, ensure_ascii=False)))
    assert_parses(f"```json\n{call}\n```", Result(calls=got), loose=True)


def test_each_call_of_a_run_goes_out_once_complete() -> None:
    """Calls one after another (a small model looping on a call) each go
    out when their object closes, not when the run ends; a run cut by the
    token limit keeps the calls before the cut one."""
    from engy_local.chat import ToolCallEnd
    from engy_local.prompt.parsing.loosecalls import LooseCallParser
    from engy_local.prompt.parsing.toolparse import HermesParser

    second = '{"name": "Read", "arguments": {"file_path": "b"}}'
    parser = LooseCallParser(
        HermesParser(tools=["Bash", "Read"], thinking=False, new_id=lambda: "id"),
        ["Bash", "Read"],
        lambda: "id",
    )
    ended = []
    for c in f"{BMI}\n{second}\n{BMI[:-17]}":
        ended += [e.arguments for e in parser.feed(c) if isinstance(e, ToolCallEnd)]
        if c == "}" and len(ended) == 1:
            assert ended == [BMI_ARGS]  # out before the next call is written
    assert ended == [BMI_ARGS, '{"file_path": "b"}']
    final = [e for e in parser.finish() if isinstance(e, ToolCallEnd)]
    assert [e.arguments for e in final] == ['{"command": "ls -la"}']


# Codex's tools, as schemas: a "name" no tool can have is read by its arguments.
CODEX = {
    "exec_command": {
        "type": "object",
        "properties": {"cmd": {"type": "string"}, "workdir": {"type": "string"}},
        "required": ["cmd"],
    },
    "write_stdin": {
        "type": "object",
        "properties": {"session_id": {"type": "integer"}, "chars": {"type": "string"}},
        "required": ["session_id"],
    },
    "view_image": {"type": "object", "properties": {"path": {"type": "string"}}},
    "open_file": {"type": "object", "properties": {"path": {"type": "string"}}},
}
ECHO = '{"name": "echo Zebra > proof.txt", "arguments": {"cmd": "echo Zebra > proof.txt"}}'
ECHO_ARGS = '{"cmd": "echo Zebra > proof.txt"}'

STRAY = [
    # what Qwen2.5-Coder-0.5B wrote under Codex: the command as the name
    (f"```json\n{ECHO}\n```", Result(calls=calls(("exec_command", ECHO_ARGS)))),
    (f"Sure.\n{ECHO}", Result("Sure.", calls=calls(("exec_command", ECHO_ARGS)))),
    # arguments that fit no tool, or two: text as written
    ('```json\n{"name": "cat a.txt", "arguments": {"text": "hi"}}\n```', None),
    # a name with a "." is a tool's, spelled so: not offered, text
    ('```json\n{"name": "proof.txt", "arguments": {"cmd": "ls"}}\n```', None),
    # JSON in an answer, with a "name" that is a person's
    ('```json\n{"name": "Ada Lovelace", "born": 1815}\n```', None),
    ('{"name": "cat a.txt", "arguments": {"path": "a.txt"}}', None),
    ('{"name": "ls -la", "arguments": {}}', None),
    # a name a tool could have names one that was not offered: text
    ('```json\n{"name": "run_shell", "arguments": {"cmd": "ls"}}\n```', None),
    # JSON in prose with a "name"
    ('Use {"name": "Ada Lovelace", "born": 1815} here.', None),
    # cut by the token limit before it is whole: text
    ('```json\n{"name": "echo hi", "arguments": {"cmd": "ec', None),
    # a stray that is text, then a call
    (
        '{"name": "a b", "x": 1}\n{"name": "exec_command", "arguments": {"cmd": "ls"}}',
        Result('{"name": "a b", "x": 1}', calls=calls(("exec_command", '{"cmd": "ls"}'))),
    ),
]


@pytest.mark.parametrize(("output", "expected"), STRAY, ids=[r[0][:40] for r in STRAY])
def test_a_name_no_tool_can_have_is_read_by_its_arguments(
    output: str, expected: Result | None
) -> None:
    assert_parses(output, expected or Result(text=output), loose=True, tools=CODEX)


# Qwen3-Coder's tags, as Qwen2.5-Coder-1.5B wrote them after Qwen Code's
# prompt (whose examples show them): a call to an offered tool.
TAG = "<function=Bash>\n<parameter=command>\nls -la\n</parameter>\n<parameter=timeout>\n20\n</parameter>\n</function>"  # noqa: E501

TAGGED = [
    (TAG, Result(calls=calls(("Bash", BMI_ARGS)))),
    (
        f"I'll list it.\n{TAG}\n\nDone.",
        Result("I'll list it.Done.", calls=calls(("Bash", BMI_ARGS))),
    ),
    # in its block, or with only the block's close after it
    (f"<tool_call>\n{TAG}\n</tool_call>", Result(calls=calls(("Bash", BMI_ARGS)))),
    (f"{TAG}\n</tool_call>", Result(calls=calls(("Bash", BMI_ARGS)))),
    (f"{TAG}\n{TAG}", Result(calls=calls(("Bash", BMI_ARGS), ("Bash", BMI_ARGS)))),
    # a value with tags and newlines of its own
    (
        "<function=Write>\n<parameter=file_path>\na.html\n</parameter>\n"
        "<parameter=content>\n<p>\n hi\n</p>\n</parameter>\n</function>",
        Result(calls=calls(("Write", '{"file_path": "a.html", "content": "<p>\\n hi\\n</p>"}'))),
    ),
    # a value holding the call's close tag: the call closes after it
    (
        "<function=Write>\n<parameter=content>\nx</function>y\n</parameter>\n</function>",
        Result(calls=calls(("Write", '{"content": "x</function>y"}'))),
    ),
    # Llama 3.1's form: the arguments as a JSON object
    (
        '<function=Read>{"file_path": "a.py"}</function>',
        Result(calls=calls(("Read", '{"file_path": "a.py"}'))),
    ),
    # cut by the token limit: a call with what it has
    (
        "<function=Bash>\n<parameter=command>\nls",
        Result(calls=calls(("Bash", '{"command": "ls"}'))),
    ),
    # text: a tool that was not offered, tags in prose, a head never finished
    ("<function=rm_rf>\n<parameter=path>\n/\n</parameter>\n</function>", None),
    ("Use <div> and a < b, or <function=> here.", None),
    ("It ends <function=Ba", None),
]


@pytest.mark.parametrize(("output", "expected"), TAGGED, ids=[r[0][:40] for r in TAGGED])
def test_qwen3_coder_s_tags_to_an_offered_tool_are_a_call(
    output: str, expected: Result | None
) -> None:
    assert_parses(output, expected or Result(text=output), loose=True)
