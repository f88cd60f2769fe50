"""GLM 4.6 calls (`<arg_key>` / `<arg_value>` pairs) and `<think>`
reasoning: detection, rendering through the real template, the parser on
realistic outputs split at every offset and on every bad-output rule, the
forced-call grammar, and a forced call round trip on a tiny GGUF with the
real template through both endpoints."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import llama_cpp
import openai
import pytest
from support.grammar import CLIENTS, FIXTURES, Vocab, captured_tools
from support.parsing import Result, assert_parses, calls
from support.paths import CACHE, need_fixtures
from support.server import EngyServer
from support.xmlcalls_cases import (
    BASH,
    CONVERSATION,
    RENDERED_CALLS,
    SCHEMAS,
    TIMEOUT,
    TOOLS,
    WRITE,
    check_random_calls,
    check_random_outputs,
    messages_round_trip,
    parsed_calls,
    prompt,
    read_file_schema,
    responses_round_trip,
    template,
)

from engy_local.chat import TextDelta, ThinkingDelta, ToolCallDelta, ToolCallEnd, ToolCallStart
from engy_local.prompt.families import detect_family
from engy_local.prompt.families.glm import GlmParser
from engy_local.prompt.forced import forced_call_grammar
from engy_local.runtime.sampling import check_grammar

FAMILY = "glm-4.6"
GLM = "GLM-4.6.jinja"

# ---- detection ------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [GLM, "Spark2.5.jinja", "inclusionai-ling-3.0-flash.jinja", "poolside-Laguna-XS.2.jinja"],
)
def test_detected_from_the_template(name: str) -> None:
    assert detect_family(template(name).source) == FAMILY


@pytest.mark.parametrize("name", ["Qwen-Qwen3-0.6B.jinja", "Qwen3-Coder.jinja"])
def test_other_tool_call_templates_are_not_taken(name: str) -> None:
    assert detect_family(template(name).source) != FAMILY


# ---- rendering --------------------------------------------------------------------


def test_conversation_renders_the_way_the_template_expects() -> None:
    text = prompt(GLM, FAMILY, CONVERSATION)
    assert text.startswith("[gMASK]<sop><|system|>\n# Tools\n")
    assert (
        '{"type": "function", "function": {"name": "Bash", "description": "Run a command."' in text
    )
    # Reasoning before the last user turn is dropped, after it kept.
    assert "<|user|>\nUSER-ONE<|assistant|>\n<think></think>\nHello.<|user|>\nUSER-TWO" in text
    calls_turn = (
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
    assert text.endswith(calls_turn)
    assert "EARLY-THOUGHT" not in text


def test_rendered_calls_parse_back_to_the_same_arguments() -> None:
    text = prompt(GLM, FAMILY, CONVERSATION)
    turn = text.split("<|assistant|>")[-2].split("<|observation|>")[0]
    assert parsed_calls(FAMILY, turn) == RENDERED_CALLS


@pytest.mark.parametrize(
    ("thinking", "user_turn", "end"),
    [
        (None, "USER-ONE<|assistant|>", "<|assistant|>"),
        (True, "USER-ONE<|assistant|>", "<|assistant|>"),
        (False, "USER-ONE/nothink<|assistant|>", "<|assistant|>\n<think></think>"),
    ],
)
def test_thinking_is_enable_thinking(thinking: bool | None, user_turn: str, end: str) -> None:
    text = prompt(GLM, FAMILY, CONVERSATION[:2], thinking=thinking)
    assert user_turn in text and text.endswith(end)


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


@pytest.mark.parametrize(
    ("output", "thinking", "expected"), [r[1:] for r in GOOD], ids=[r[0] for r in GOOD]
)
def test_outputs(output: str, thinking: bool, expected: Result) -> None:
    assert_parses(output, expected, family=FAMILY, tools=SCHEMAS, thinking=thinking)


@pytest.mark.parametrize(("output", "expected"), [r[1:] for r in BAD], ids=[r[0] for r in BAD])
def test_bad_outputs(output: str, expected: Result) -> None:
    assert_parses(output, expected, family=FAMILY, tools=SCHEMAS)


def test_no_tools_offered_means_calls_are_text() -> None:
    output = "x <tool_call>get_goal\n</tool_call>"
    assert_parses(output, Result(text=output), family=FAMILY, tools=())


def test_event_sequence_streams_arguments() -> None:
    parser = GlmParser(tools=SCHEMAS, thinking=False, new_id=lambda: "toolu_1")
    steps: list[tuple[str, list[Any]]] = [
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
    ]
    for chunk, expected in steps:
        assert parser.feed(chunk) == expected, chunk
    assert parser.finish() == []


def written(name: str, args: dict[str, Any]) -> str:
    """One call the way the template writes it."""
    params = "".join(
        f"<arg_key>{k}</arg_key>\n"
        f"<arg_value>{v if isinstance(v, str) else json.dumps(v)}</arg_value>\n"
        for k, v in args.items()
    )
    return f"<tool_call>{name}\n{params}</tool_call>\n"


def test_damaged_outputs_never_break_and_split_the_same() -> None:
    pieces = ["<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>",
              "</arg_value>", "<think>", "</think>", "\n", "<", '"', "{"]  # fmt: skip
    check_random_outputs(FAMILY, written, pieces, lead_dropped=True)


# ---- forced calls -------------------------------------------------------------------


@pytest.fixture(scope="module")
def vocab() -> Iterator[Vocab]:
    path = FIXTURES / "vocab" / "ggml-vocab-qwen2.gguf"
    if not path.is_file():
        pytest.skip(f"vocab fixture not found: {path}")
    v = Vocab(path)
    yield v
    llama_cpp.llama_model_free(v.model)


@pytest.mark.parametrize("request_file", CLIENTS)
def test_every_captured_tool_compiles(request_file: str) -> None:
    tools = captured_tools(request_file)
    for tool in tools:
        assert check_grammar(forced_call_grammar([tool], FAMILY)), tool.name
    assert check_grammar(forced_call_grammar(tools, FAMILY))


def call(name: str, *params: tuple[str, str]) -> str:
    body = "".join(f"<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>\n" for k, v in params)
    return f"<tool_call>{name}\n{body}</tool_call>"


@pytest.mark.parametrize(
    ("text", "ok"),
    [
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
    ],
)
def test_grammar_accepts_exactly_the_calls(vocab: Vocab, text: str, ok: bool) -> None:
    assert vocab.accepts(forced_call_grammar(TOOLS, FAMILY), text) is ok


def test_grammar_accepts_the_templates_own_calls(vocab: Vocab) -> None:
    text = prompt(GLM, FAMILY, CONVERSATION)
    turn = text.split("Let me look.\n")[1].split("<|observation|>")[0]
    first, second = turn.split("</tool_call>\n")
    assert vocab.accepts(forced_call_grammar([BASH], FAMILY), first + "</tool_call>")
    assert vocab.accepts(forced_call_grammar([WRITE], FAMILY), second)


@pytest.mark.parametrize("seed", range(8))
def test_random_calls_the_grammar_allows_are_valid(vocab: Vocab, seed: int) -> None:
    check_random_calls(vocab, FAMILY, ("</arg_value>", "</arg_key>", '"', "}", "]"), seed)


# ---- a tiny model with the real template ---------------------------------------------

# The tiny model writes its answer wherever the grammar lets it: here the
# value's close tag, so that free-text values end, then a word, so that an
# answer is not empty when the prompt ends in that tag's last token (`>`).
TINY_ANSWER = "</arg_value>Done."
SCHEMA = read_file_schema({"type": "string"})


@pytest.fixture(scope="module")
def server() -> Iterator[EngyServer]:
    need_fixtures()
    from support.ggufs import tiny_gguf_cached

    path = tiny_gguf_cached(CACHE / "ggufs", vocab="qwen2", template=GLM, answer=TINY_ANSWER)
    s = EngyServer(str(path), "--ctx-size", "8192")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def model(server: EngyServer) -> str:
    name: str = httpx.get(server.url + "/v1/models", timeout=TIMEOUT).json()["data"][0]["id"]
    return name


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_messages_forced_call_round_trip(server: EngyServer, model: str, stream: bool) -> None:
    with anthropic.Anthropic(
        base_url=server.url, api_key="x", max_retries=0, timeout=TIMEOUT
    ) as claude:
        messages_round_trip(claude, model, SCHEMA, stream)


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_responses_forced_call_round_trip(server: EngyServer, model: str, stream: bool) -> None:
    with openai.OpenAI(
        base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=TIMEOUT
    ) as gpt:
        responses_round_trip(gpt, model, SCHEMA, stream)
