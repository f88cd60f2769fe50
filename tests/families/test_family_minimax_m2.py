"""MiniMax M2 calls (`<minimax:tool_call>` around `<invoke>` elements) and
`<think>` reasoning: detection, rendering through the real template, the
parser on realistic outputs split at every offset and on every bad-output
rule, the forced-call grammar, and a forced call round trip on a tiny GGUF
with the real template through both endpoints."""

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
from engy_local.prompt.families.minimax_m2 import MiniMaxM2Parser
from engy_local.prompt.forced import forced_call_grammar
from engy_local.runtime.sampling import check_grammar

FAMILY = "minimax-m2"
MINIMAX = "MiniMax-M2.jinja"

# ---- detection ------------------------------------------------------------------


def test_detected_from_the_template() -> None:
    assert detect_family(template(MINIMAX).source) == FAMILY


@pytest.mark.parametrize("name", ["MiniMax-M1.jinja", "Qwen3-Coder.jinja", "GLM-4.6.jinja"])
def test_other_templates_are_not_taken(name: str) -> None:
    assert detect_family(template(name).source) != FAMILY


# ---- rendering --------------------------------------------------------------------


def test_conversation_renders_the_way_the_template_expects() -> None:
    text = prompt(MINIMAX, FAMILY, CONVERSATION)
    assert text.startswith("]~!b[]~b]system\nSYSTEM-TEXT\n\n# Tools\n")
    assert '<tool>{"name": "Bash", "description": "Run a command."' in text
    # Reasoning before the last user turn is dropped, after it kept.
    assert "]~b]user\nUSER-ONE[e~[\n]~b]ai\nHello.[e~[\n]~b]user\nUSER-TWO[e~[\n" in text
    calls_turn = (
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
    assert text.endswith(calls_turn)
    assert "EARLY-THOUGHT" not in text


def test_rendered_calls_parse_back_to_the_same_arguments() -> None:
    text = prompt(MINIMAX, FAMILY, CONVERSATION)
    turn = text.split("]~b]ai\n")[-2].split("[e~[")[0]
    assert parsed_calls(FAMILY, turn) == RENDERED_CALLS


@pytest.mark.parametrize("thinking", [None, True, False])
def test_thinking_is_always_on(thinking: bool | None) -> None:
    """The template opens the reasoning itself and has no switch."""
    assert prompt(MINIMAX, FAMILY, CONVERSATION[:2], thinking=thinking).endswith(
        "]~b]ai\n<think>\n"
    )


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


def block(*invokes: str) -> str:
    return "<minimax:tool_call>\n" + "".join(invokes) + "</minimax:tool_call>"


def invoke(name: str, *params: tuple[str, str]) -> str:
    body = "".join(f'<parameter name="{k}">{v}</parameter>\n' for k, v in params)
    return f'<invoke name="{name}">\n{body}</invoke>\n'


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


@pytest.mark.parametrize(
    ("output", "thinking", "expected"), [r[1:] for r in GOOD], ids=[r[0] for r in GOOD]
)
def test_outputs(output: str, thinking: bool, expected: Result) -> None:
    assert_parses(output, expected, family=FAMILY, tools=SCHEMAS, thinking=thinking)


@pytest.mark.parametrize(("output", "expected"), [r[1:] for r in BAD], ids=[r[0] for r in BAD])
def test_bad_outputs(output: str, expected: Result) -> None:
    assert_parses(output, expected, family=FAMILY, tools=SCHEMAS)


def test_no_tools_offered_means_calls_are_text() -> None:
    output = "x " + block(invoke("get_goal"))
    assert_parses(output, Result(text=output), family=FAMILY, tools=())


def test_event_sequence_streams_arguments() -> None:
    parser = MiniMaxM2Parser(tools=SCHEMAS, thinking=True, new_id=lambda: "toolu_1")
    steps: list[tuple[str, list[Any]]] = [
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
    ]
    for chunk, expected in steps:
        assert parser.feed(chunk) == expected, chunk
    assert parser.finish() == []


def written(name: str, args: dict[str, Any]) -> str:
    """One call the way the template writes it (one block per call here)."""
    values = {k: v if isinstance(v, str) else json.dumps(v) for k, v in args.items()}
    return block(invoke(name, *values.items())) + "\n"


def test_damaged_outputs_never_break_and_split_the_same() -> None:
    pieces = ["<minimax:tool_call>", "</minimax:tool_call>", '<invoke name="', "</invoke>",
              '<parameter name="', "</parameter>", '">', "<think>", "</think>", "\n", "<",
              '"']  # fmt: skip
    check_random_outputs(FAMILY, written, pieces)


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
        assert check_grammar(forced_call_grammar([tool], FAMILY, reasoning=True)), tool.name
    assert check_grammar(forced_call_grammar(tools, FAMILY, reasoning=True))


@pytest.mark.parametrize(
    ("text", "ok"),
    [
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
    ],
)
def test_grammar_accepts_exactly_the_calls(vocab: Vocab, text: str, ok: bool) -> None:
    assert vocab.accepts(forced_call_grammar(TOOLS, FAMILY), text) is ok


def test_reasoning_comes_first(vocab: Vocab) -> None:
    """The prompt opens the reasoning: a forced call comes after it ends."""
    gbnf = forced_call_grammar(TOOLS, FAMILY, reasoning=True)
    body = block(invoke("get_goal"))
    assert vocab.accepts(gbnf, "I should check the goal.\n</think>\n\n" + body)
    assert not vocab.accepts(gbnf, body)


def test_grammar_accepts_the_templates_own_calls(vocab: Vocab) -> None:
    text = prompt(MINIMAX, FAMILY, CONVERSATION)
    turn = text.split("Let me look.\n")[1].split("[e~[")[0]
    first, second = turn.split("</invoke>\n<invoke")
    end = "</minimax:tool_call>"
    assert vocab.accepts(forced_call_grammar([BASH], FAMILY), first + "</invoke>\n" + end)
    start = "<minimax:tool_call>\n<invoke"
    assert vocab.accepts(forced_call_grammar([WRITE], FAMILY), start + second)


@pytest.mark.parametrize("seed", range(8))
def test_random_calls_the_grammar_allows_are_valid(vocab: Vocab, seed: int) -> None:
    check_random_calls(vocab, FAMILY, ("</parameter>", '">', '"', "}", "]"), seed)


# ---- a tiny model with the real template ---------------------------------------------

# The tiny model writes its answer wherever the grammar lets it. The prompt
# opens the reasoning, so the answer closes it (a forced call follows). Its
# free-text values would repeat the answer for ever, so the schema bounds the
# one string parameter (which the grammar then keeps to one line without `<`).
TINY_ANSWER = "</think>Done."
SCHEMA = read_file_schema({"type": "string", "maxLength": 24})


@pytest.fixture(scope="module")
def server() -> Iterator[EngyServer]:
    need_fixtures()
    from support.ggufs import tiny_gguf_cached

    path = tiny_gguf_cached(CACHE / "ggufs", vocab="qwen2", template=MINIMAX, answer=TINY_ANSWER)
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
