"""gpt-oss (harmony channels): detection, rendering through the real
template, the parser on realistic outputs split at every offset and on every
bad-output rule, and a forced call round trip on a tiny GGUF with the real
template through both endpoints."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anthropic
import httpx
import jsonschema
import openai
import pytest
from support.parsing import Result, assert_parses, calls
from support.paths import CACHE, FIXTURES, need_fixtures
from support.server import EngyServer

from engy_local.chat import (
    ChatRequest,
    Message,
    Text,
    Thinking,
    ToolCall,
    ToolChoice,
    ToolResult,
    ToolSpec,
)
from engy_local.prompt.families import detect_family, get
from engy_local.prompt.forced import forced_call_grammar
from engy_local.prompt.prepare import render
from engy_local.prompt.template import ChatTemplate
from engy_local.runtime.sampling import check_grammar

TEMPLATES = FIXTURES / "chat-templates"
GPT_OSS = "openai-gpt-oss-120b.jinja"


def template(name: str = GPT_OSS) -> ChatTemplate:
    path = TEMPLATES / name
    if not path.is_file():
        pytest.skip(f"chat template fixture not found: {path}")
    return ChatTemplate(path.read_text())


# ---- detection ------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", [GPT_OSS, "llm-jp-llm-jp-4.1-8b-thinking.jinja"], ids=["gpt-oss", "llm-jp"]
)
def test_detected_from_the_template(name: str) -> None:
    assert detect_family(template(name).source) == "gpt-oss"


def test_gemma4_channel_is_not_harmony() -> None:
    assert detect_family(template("google-gemma-4-31B-it.jinja").source) != "gpt-oss"


# ---- rendering --------------------------------------------------------------------

LIST_DIR = ToolSpec(
    "list_dir",
    "List a directory.",
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)
READ = ToolSpec(
    "read_file",
    "Read a file.",
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)


def user(text: str) -> Message:
    return Message("user", (Text(text),))


CONVERSATION = (
    Message("system", (Text("SYSTEM-TEXT"),)),
    user("USER-ONE"),
    Message(
        "assistant",
        (
            Thinking("I will list."),
            Text("Let me look."),
            ToolCall("toolu_1", "list_dir", '{"path": "."}'),
        ),
    ),
    Message("tool", (ToolResult("toolu_1", "a.txt b.txt"),)),
    Message(
        "assistant",
        (
            Thinking("Read both."),
            ToolCall("toolu_2", "read_file", '{"path": "a.txt"}'),
            ToolCall("toolu_3", "read_file", '{"path": "b.txt"}'),
        ),
    ),
    Message("tool", (ToolResult("toolu_2", "AAA"), ToolResult("toolu_3", "BBB"))),
)


def fake_model(name: str = GPT_OSS) -> Any:
    """What `prepare.render` reads of a model, with the real template."""
    chat = template(name)
    return SimpleNamespace(
        path=Path("tiny.gguf"), template=chat, family=get("gpt-oss"), projector=None
    )


def prompt(messages: tuple[Message, ...], **kwargs: Any) -> str:
    request = ChatRequest(model="m", messages=messages, tools=(LIST_DIR, READ), **kwargs)
    placed, _ = render(fake_model(), request)
    return placed.text


def test_quirks_of_the_template() -> None:
    quirks = template().quirks
    assert quirks.reasoning_key == "thinking"
    assert quirks.call_text_in_reasoning and quirks.one_call_per_turn


def test_conversation_renders_the_way_the_template_expects() -> None:
    text = prompt(CONVERSATION)
    assert "<|start|>developer<|message|># Instructions\n\nSYSTEM-TEXT\n\n# Tools" in text
    assert "type list_dir = (_: {\npath: string,\n}) => any;" in text
    # Earlier reasoning and text beside a call are its analysis, then the call.
    first = (
        "<|start|>user<|message|>USER-ONE<|end|>"
        "<|start|>assistant<|channel|>analysis<|message|>I will list.\n\nLet me look.<|end|>"
        "<|start|>assistant to=functions.list_dir<|channel|>commentary json<|message|>"
        '{"path": "."}<|call|>'
        '<|start|>functions.list_dir to=assistant<|channel|>commentary<|message|>"a.txt b.txt"'
        "<|end|>"
    )
    assert first in text
    # Two calls in one turn: one call per turn, each answered by its result.
    second = (
        "<|start|>assistant<|channel|>analysis<|message|>Read both.<|end|>"
        "<|start|>assistant to=functions.read_file<|channel|>commentary json<|message|>"
        '{"path": "a.txt"}<|call|>'
        '<|start|>functions.read_file to=assistant<|channel|>commentary<|message|>"AAA"<|end|>'
        "<|start|>assistant to=functions.read_file<|channel|>commentary json<|message|>"
        '{"path": "b.txt"}<|call|>'
        '<|start|>functions.read_file to=assistant<|channel|>commentary<|message|>"BBB"<|end|>'
    )
    assert second in text
    assert text.endswith("<|start|>assistant")


def test_reasoning_is_dropped_once_a_final_answer_follows() -> None:
    done = (*CONVERSATION, Message("assistant", (Text("Both read."),)), user("USER-TWO"))
    text = prompt(done)
    assert "I will list." not in text and "Read both." not in text
    assert "<|start|>assistant<|channel|>final<|message|>Both read.<|end|>" in text


@pytest.mark.parametrize(("thinking", "effort"), [(None, "medium"), (True, "high"), (False, "low")])
def test_thinking_is_the_reasoning_effort(thinking: bool | None, effort: str) -> None:
    text = prompt((user("Hi"),), thinking=thinking)
    assert f"\nReasoning: {effort}\n" in text


def test_a_forced_call_reasons_low() -> None:
    choice = ToolChoice("tool", "read_file")
    text = prompt((user("Hi"),), thinking=True, tool_choice=choice)
    assert "\nReasoning: low\n" in text


def test_forced_call_grammar() -> None:
    gbnf = forced_call_grammar([LIST_DIR, READ], "gpt-oss")
    assert check_grammar(gbnf)
    assert '"<|channel|>commentary to=functions." (call-0 | call-1)' in gbnf
    assert 'call-1 ::= "read_file <|constrain|>json<|message|>" t1-root' in gbnf


# ---- the parser -------------------------------------------------------------------

TOOLS = ("Bash", "Read", "Write", "get_goal")
NESTED = {
    "file_path": "/tmp/a.py",
    "content": 'def f():\n    return "}{ <|en" + "d|>"\n\u00e9',
    "mode": 420,
    "options": {"backup": True, "tags": ["x", {"y": None}], "ratio": -0.5e-3},
}
NESTED_JSON = json.dumps(NESTED)

# name, output, expected
GOOD = [
    (
        "reasoning then the answer",
        "<|channel|>analysis<|message|>The user greets me. I answer briefly.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Hello! How can I help?<|return|>",
        Result(thinking="The user greets me. I answer briefly.", text="Hello! How can I help?"),
    ),
    (
        "end-of-generation markers are not fed",
        "<|channel|>analysis<|message|>Short.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Done.",
        Result(thinking="Short.", text="Done."),
    ),
    (
        "text keeps its whitespace, markdown and lookalikes",
        "<|channel|>final<|message|>\n  Use `<|end` or a <b>tag</b>:\n\n- one\n",
        Result(text="\n  Use `<|end` or a <b>tag</b>:\n\n- one\n"),
    ),
    (
        "reasoning then two calls with string, number and nested arguments",
        "<|channel|>analysis<|message|>I need to read the file, then write it back.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.Read <|constrain|>json"
        '<|message|>{"file_path": "/tmp/a.py", "limit": 20}<|call|>'
        "<|start|>assistant<|channel|>commentary to=functions.Write <|constrain|>json"
        "<|message|>" + NESTED_JSON + "<|call|>",
        Result(
            thinking="I need to read the file, then write it back.",
            calls=calls(
                ("Read", '{"file_path": "/tmp/a.py", "limit": 20}'), ("Write", NESTED_JSON)
            ),
        ),
    ),
    (
        "the recipient in the role, as the template writes calls",
        "<|channel|>analysis<|message|>List it.<|end|>"
        "<|start|>assistant to=functions.Bash<|channel|>commentary json"
        '<|message|>{"command": "ls -la"}<|call|>',
        Result(thinking="List it.", calls=calls(("Bash", '{"command": "ls -la"}'))),
    ),
    (
        "the recipient right after the prompt's role",
        ' to=functions.Bash<|channel|>commentary <|constrain|> json<|message|>{"command":"pwd"}',
        Result(calls=calls(("Bash", '{"command":"pwd"}'))),
    ),
    (
        "a preamble before the call is text",
        "<|channel|>analysis<|message|>Check first.<|end|>"
        "<|start|>assistant<|channel|>commentary<|message|>Let me check the goal.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.get_goal <|constrain|>json"
        "<|message|>{}<|call|>",
        Result(
            thinking="Check first.", text="Let me check the goal.", calls=calls(("get_goal", "{}"))
        ),
    ),
    (
        "a call on the analysis channel, an empty body, whitespace between messages",
        "<|channel|>analysis to=functions.get_goal code<|message|><|call|>\n"
        '<|start|>assistant<|channel|>commentary to=functions.Read json<|message|> {"file_path":'
        ' "/b"} <|call|>',
        Result(calls=calls(("get_goal", "{}"), ("Read", '{"file_path": "/b"}'))),
    ),
    (
        "a final answer with a content type",
        '<|channel|>final <|constrain|>json<|message|>{"ok": true}',
        Result(text='{"ok": true}'),
    ),
    (
        "a missing end marker before the next header",
        "<|channel|>analysis<|message|>hmm<|start|>assistant<|channel|>final<|message|>Hi"
        "<|channel|>final<|message|>!",
        Result(thinking="hmm", text="Hi!"),
    ),
]

BAD = [
    ("output without any header is text", "Hello there <|", Result(text="Hello there <|")),
    (
        "an unclosed analysis is thinking to the end",
        "<|channel|>analysis<|message|>Still thinking about <|en",
        Result(thinking="Still thinking about <|en"),
    ),
    (
        "an unclosed header is text",
        "<|channel|>final<|message|>Hi<|end|><|start|>assistant<|channel|>analy",
        Result(text="Hi<|start|>assistant<|channel|>analy"),
    ),
    (
        "a lone role at the end is dropped",
        "<|channel|>final<|message|>Hi<|end|><|start|>assistant",
        Result(text="Hi"),
    ),
    (
        "a header cut by an end marker is text, and so is its message",
        "<|channel|>final<|end|>Hi",
        Result(text="<|channel|>finalHi"),
    ),
    (
        "a malformed header is text with its body",
        '<|channel|>commentary to=functions.Bash {"x"}<|message|>{}<|call|>',
        Result(text='<|channel|>commentary to=functions.Bash {"x"}<|message|>{}'),
    ),
    (
        "a header past 256 characters is text",
        "<|channel|>" + "a" * 300 + "<|message|>x",
        Result(text="<|channel|>" + "a" * 300 + "<|message|>x"),
    ),
    (
        "a tool that was not offered is text",
        "<|channel|>analysis<|message|>Delete it.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.rm_rf <|constrain|>json"
        '<|message|>{"p": "/"}<|call|>',
        Result(
            thinking="Delete it.",
            text="<|start|>assistant<|channel|>commentary to=functions.rm_rf <|constrain|>json"
            '<|message|>{"p": "/"}',
        ),
    ),
    (
        "a built-in tool is text",
        "<|channel|>analysis to=python code<|message|>print(1)<|call|>",
        Result(text="<|channel|>analysis to=python code<|message|>print(1)"),
    ),
    (
        "arguments that are not an object are text",
        '<|channel|>commentary to=functions.Bash json<|message|> ["ls"]<|call|>',
        Result(text='<|channel|>commentary to=functions.Bash json<|message|> ["ls"]'),
    ),
    (
        "broken JSON is cut back and closed, the rest dropped",
        '<|channel|>commentary to=functions.Bash json<|message|>{"command": "ls", oops}<|call|>'
        "<|start|>assistant<|channel|>final<|message|>ok",
        Result(text="ok", calls=calls(("Bash", '{"command": "ls"}'))),
    ),
    (
        "an unclosed call inside a string is closed",
        "<|channel|>commentary to=functions.Write json<|message|>"
        '{"file_path": "/a", "content": "he',
        Result(calls=calls(("Write", '{"file_path": "/a", "content": "he"}'))),
    ),
    (
        "an end marker inside a string ends the call",
        '<|channel|>commentary to=functions.Bash json<|message|>{"command": "echo <|end|>',
        Result(calls=calls(("Bash", '{"command": "echo "}'))),
    ),
    (
        "text after the object is dropped",
        "<|channel|>commentary to=functions.get_goal json<|message|>{}} and more<|call|>",
        Result(calls=calls(("get_goal", "{}"))),
    ),
    (
        "raw control characters in strings are escaped",
        '<|channel|>commentary to=functions.Write json<|message|>{"content": "a\nb\tc"}',
        Result(calls=calls(("Write", '{"content": "a\\nb\\tc"}'))),
    ),
    (
        "text after an end marker without a header is text",
        "<|channel|>final<|message|>Hi.<|end|>\n\nAnd more.",
        Result(text="Hi.And more."),
    ),
]


@pytest.mark.parametrize(("output", "expected"), [r[1:] for r in GOOD], ids=[r[0] for r in GOOD])
def test_outputs(output: str, expected: Result) -> None:
    assert_parses(output, expected, family="gpt-oss", tools=TOOLS)


@pytest.mark.parametrize(("output", "expected"), [r[1:] for r in BAD], ids=[r[0] for r in BAD])
def test_bad_outputs(output: str, expected: Result) -> None:
    assert_parses(output, expected, family="gpt-oss", tools=TOOLS)


def test_no_tools_offered_means_calls_are_text() -> None:
    output = '<|channel|>commentary to=functions.Bash json<|message|>{"command": "ls"}'
    assert_parses(output, Result(text=output), family="gpt-oss", tools=())


def test_arguments_stream_as_generated() -> None:
    from engy_local.chat import ToolCallDelta, ToolCallEnd, ToolCallStart
    from engy_local.prompt.families import make_parser

    parser = make_parser("gpt-oss", tools=TOOLS, thinking=False, new_id=lambda: "call_0")
    pieces = [
        "<|channel|>commentary to=functions.Bash",
        " <|constrain|>json<|message|>",
        '{"command": ',
        '"ls <',
        '-la"}',
    ]
    events = [parser.feed(p) for p in pieces]
    assert events[0] == [] and events[1] == []
    # Deltas run up to where the object could be closed.
    assert events[2] == [ToolCallStart(0, "call_0", "Bash"), ToolCallDelta(0, "{")]
    assert events[3] == [ToolCallDelta(0, '"command": "ls ')]  # "<" may start a marker
    assert events[4] == [ToolCallDelta(0, '<-la"}'), ToolCallEnd(0, '{"command": "ls <-la"}')]
    assert parser.finish() == []


# ---- end to end on a tiny GGUF ------------------------------------------------------

TIMEOUT = 300
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "limit": {"type": "integer"},
        "options": {
            "type": "object",
            "properties": {"encoding": {"type": "string"}},
            "required": ["encoding"],
        },
    },
    "required": ["path", "limit", "options"],
    "additionalProperties": False,
}
ANTHROPIC_TOOLS: list[Any] = [
    {"name": "read_file", "description": "Read a file.", "input_schema": SCHEMA},
    {"name": "list_dir", "description": "List a directory.", "input_schema": LIST_DIR.parameters},
]
FUNCTION_TOOLS: list[Any] = [
    {
        "type": "function",
        "name": t["name"],
        "description": t["description"],
        "parameters": t["input_schema"],
    }
    for t in ANTHROPIC_TOOLS
]
HELLO = [{"role": "user", "content": "Read /etc/hostname for me."}]


@pytest.fixture(scope="module")
def server() -> Iterator[EngyServer]:
    need_fixtures()
    from support.ggufs import tiny_gguf_cached

    path = tiny_gguf_cached(CACHE / "ggufs", vocab="qwen2", template=GPT_OSS)
    s = EngyServer(str(path), "--ctx-size", "8192")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def model(server: EngyServer) -> str:
    name: str = httpx.get(server.url + "/v1/models", timeout=TIMEOUT).json()["data"][0]["id"]
    return name


@pytest.fixture(scope="module")
def claude(server: EngyServer) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(
        base_url=server.url, api_key="x", max_retries=0, timeout=TIMEOUT
    ) as client:
        yield client


@pytest.fixture(scope="module")
def gpt(server: EngyServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=TIMEOUT
    ) as client:
        yield client


def _forced_message(claude: anthropic.Anthropic, model: str, stream: bool) -> Any:
    kwargs: Any = {
        "model": model,
        "max_tokens": 300,
        "messages": HELLO,
        "tools": ANTHROPIC_TOOLS,
        "tool_choice": {"type": "tool", "name": "read_file"},
    }
    if not stream:
        return claude.messages.create(**kwargs)
    with claude.messages.stream(**kwargs) as s:
        events = list(s)
        final = s.get_final_message()
    partial = [
        e.delta.partial_json
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    ]
    assert len(partial) > 1  # the input streams as it is generated
    [call] = [b for b in final.content if b.type == "tool_use"]
    assert json.loads("".join(partial)) == call.input
    return final


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_messages_forced_call_round_trip(
    claude: anthropic.Anthropic, model: str, stream: bool
) -> None:
    msg = _forced_message(claude, model, stream)
    assert msg.stop_reason == "tool_use"
    [call] = [b for b in msg.content if b.type == "tool_use"]
    assert call.name == "read_file"
    jsonschema.validate(call.input, SCHEMA)
    follow_up: Any = [
        *HELLO,
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": call.id, "name": call.name, "input": call.input}
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "host-7"}],
        },
    ]
    kwargs: Any = {"model": model, "max_tokens": 8, "messages": follow_up, "tools": ANTHROPIC_TOOLS}
    if stream:
        with claude.messages.stream(**kwargs) as s:
            answer = s.get_final_message()
    else:
        answer = claude.messages.create(**kwargs)
    assert answer.content and answer.stop_reason in ("end_turn", "max_tokens")
    count = claude.messages.count_tokens(model=model, messages=follow_up, tools=ANTHROPIC_TOOLS)
    assert answer.usage.input_tokens + (answer.usage.cache_read_input_tokens or 0) == (
        count.input_tokens
    )


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_responses_forced_call_round_trip(gpt: openai.OpenAI, model: str, stream: bool) -> None:
    kwargs: Any = {
        "model": model,
        "input": "Read /etc/hostname for me.",
        "tools": FUNCTION_TOOLS,
        "tool_choice": {"type": "function", "name": "read_file"},
        "max_output_tokens": 300,
    }
    if stream:
        with gpt.responses.stream(**kwargs) as s:
            events = list(s)
            r = s.get_final_response()
        deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
        [done] = [e for e in events if e.type == "response.function_call_arguments.done"]
        assert len(deltas) > 1 and "".join(deltas) == done.arguments
    else:
        r = gpt.responses.create(**kwargs)
    [call] = [item for item in r.output if item.type == "function_call"]
    assert call.name == "read_file" and r.status == "completed"
    jsonschema.validate(json.loads(call.arguments), SCHEMA)
    follow_up: Any = [
        {"role": "user", "content": "Read /etc/hostname for me."},
        {
            "type": "function_call",
            "call_id": call.call_id,
            "name": call.name,
            "arguments": call.arguments,
        },
        {"type": "function_call_output", "call_id": call.call_id, "output": "host-7"},
    ]
    answer_kwargs: Any = {
        "model": model,
        "input": follow_up,
        "tools": FUNCTION_TOOLS,
        "max_output_tokens": 8,
    }
    if stream:
        with gpt.responses.stream(**answer_kwargs) as s:
            answer = s.get_final_response()
    else:
        answer = gpt.responses.create(**answer_kwargs)
    assert answer.status in ("completed", "incomplete")
    assert [item.type for item in answer.output] == ["message"]


def test_the_result_is_in_the_prompt(gpt: openai.OpenAI, model: str) -> None:
    def usage(output: str) -> int:
        r = gpt.responses.create(
            model=model,
            input=[
                {"role": "user", "content": "Read it."},
                {
                    "type": "function_call",
                    "call_id": "c1",
                    "name": "list_dir",
                    "arguments": '{"path": "."}',
                },
                {"type": "function_call_output", "call_id": "c1", "output": output},
            ],
            tools=FUNCTION_TOOLS,
            max_output_tokens=1,
        )
        assert r.usage is not None
        return r.usage.input_tokens

    assert usage("host-7 " * 20) > usage("host-7") + 20
