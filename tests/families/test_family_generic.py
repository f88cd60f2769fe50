"""The generic family, for templates that cannot render tools: the tools as
system-prompt text (an exact table), calls and results as text, detection,
the parser, and forced calls end to end on the real gemma-3-270m default
model through both endpoints."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anthropic
import jsonschema
import openai
import pytest
from support.parsing import Result, assert_parses, calls
from support.paths import FIXTURES
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
from engy_local.models.catalog import load_catalog
from engy_local.prompt.families import detect_family, get
from engy_local.prompt.families.generic import as_text, describe
from engy_local.prompt.forced import forced_call_grammar
from engy_local.prompt.prepare import render
from engy_local.prompt.template import ChatTemplate
from engy_local.runtime.sampling import check_grammar

TEMPLATES = FIXTURES / "chat-templates"


def fixture_source(name: str) -> str:
    path = TEMPLATES / name
    if not path.is_file():
        pytest.skip(f"chat template fixture not found: {path}")
    return path.read_text()


def gemma3_source() -> str:
    source = load_catalog().entries["gemma-3-270m"].chat_template
    assert source
    return source


READ = ToolSpec(
    "read_file",
    "Read a file.",
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)
NOTE = ToolSpec("note", "Écrire une note.", {})

# ---- the system prompt ---------------------------------------------------------------

DESCRIBED = [
    (
        "one tool",
        [READ],
        "# Tools\n\n"
        "You can call tools to help with the request. Each tool is described by one JSON "
        "object below: its name, what it does, and its parameters as a JSON Schema.\n\n"
        "<tools>\n"
        '{"name": "read_file", "description": "Read a file.", "parameters": {"type": "object", '
        '"properties": {"path": {"type": "string"}}, "required": ["path"]}}\n'
        "</tools>\n\n"
        "To call a tool, write a JSON object with its name and arguments between <tool_call> "
        "and </tool_call> tags, like this:\n"
        "<tool_call>\n"
        '{"name": "tool_name", "arguments": {"argument_name": "value"}}\n'
        "</tool_call>\n"
        "Write one block for each call. The result of each call comes back between "
        "<tool_response> and </tool_response> tags.",
    ),
    (
        "two tools, one a line, text as written",
        [READ, NOTE],
        "# Tools\n\n"
        "You can call tools to help with the request. Each tool is described by one JSON "
        "object below: its name, what it does, and its parameters as a JSON Schema.\n\n"
        "<tools>\n"
        '{"name": "read_file", "description": "Read a file.", "parameters": {"type": "object", '
        '"properties": {"path": {"type": "string"}}, "required": ["path"]}}\n'
        '{"name": "note", "description": "Écrire une note.", "parameters": {}}\n'
        "</tools>\n\n"
        "To call a tool, write a JSON object with its name and arguments between <tool_call> "
        "and </tool_call> tags, like this:\n"
        "<tool_call>\n"
        '{"name": "tool_name", "arguments": {"argument_name": "value"}}\n'
        "</tool_call>\n"
        "Write one block for each call. The result of each call comes back between "
        "<tool_response> and </tool_response> tags.",
    ),
]


@pytest.mark.parametrize(
    ("tools", "expected"), [d[1:] for d in DESCRIBED], ids=[d[0] for d in DESCRIBED]
)
def test_tools_described(tools: list[ToolSpec], expected: str) -> None:
    assert describe(tools) == expected


def sys_(text: str) -> Message:
    return Message("system", (Text(text),))


def user(text: str) -> Message:
    return Message("user", (Text(text),))


CALL = ToolCall("toolu_1", "read_file", '{"path": "/etc/hostname"}')
CALL_TEXT = (
    '<tool_call>\n{"name": "read_file", "arguments": {"path": "/etc/hostname"}}\n</tool_call>'
)
TOOLS_TEXT = describe([READ])

REWRITES = [
    (
        "no tools, no calls: unchanged",
        [sys_("s"), user("u")],
        [],
        [sys_("s"), user("u")],
    ),
    (
        "tools after the leading system messages",
        [sys_("s1"), sys_("s2"), user("u"), sys_("late")],
        [READ],
        [sys_("s1"), sys_("s2"), sys_(TOOLS_TEXT), user("u"), sys_("late")],
    ),
    (
        "tools as the system prompt when there is none",
        [user("u")],
        [READ],
        [sys_(TOOLS_TEXT), user("u")],
    ),
    (
        "calls become text in place, results are wrapped",
        [
            user("u"),
            Message("assistant", (Thinking("t"), Text("Reading."), CALL, ToolCall("c2", "x", ""))),
            Message("tool", (ToolResult("toolu_1", "host-7"), ToolResult("c2", "ok", True))),
        ],
        [],
        [
            user("u"),
            Message(
                "assistant",
                (
                    Thinking("t"),
                    Text("Reading."),
                    Text(CALL_TEXT),
                    Text('<tool_call>\n{"name": "x", "arguments": {}}\n</tool_call>'),
                ),
            ),
            Message(
                "tool",
                (
                    ToolResult(
                        "toolu_1", "<tool_response>\nhost-7\n</tool_response>", name="read_file"
                    ),
                    ToolResult("c2", "<tool_response>\nok\n</tool_response>", True, "x"),
                ),
            ),
        ],
    ),
]


@pytest.mark.parametrize(
    ("messages", "tools", "expected"), [r[1:] for r in REWRITES], ids=[r[0] for r in REWRITES]
)
def test_conversation_as_text(
    messages: list[Message], tools: list[ToolSpec], expected: list[Message]
) -> None:
    assert as_text(messages, tools) == expected


# ---- detection and rendering ----------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "family"),
    [
        (lambda: fixture_source("google-gemma-2-2b-it.jinja"), "generic"),
        (lambda: fixture_source("microsoft-Phi-3.5-mini-instruct.jinja"), "generic"),
        (gemma3_source, "generic"),
        (lambda: fixture_source("Qwen-Qwen3-0.6B.jinja"), "hermes"),
        # Renders tools, in no syntax known here: the plain family.
        (lambda: "{{ tools | tojson }}{% for m in messages %}{{ m.content }}{% endfor %}", "none"),
    ],
    ids=["gemma-2", "phi-3.5", "gemma-3-270m", "qwen3", "unknown tool syntax"],
)
def test_detection(source: Any, family: str) -> None:
    assert detect_family(source()) == family


def test_the_none_family_stays_for_an_explicit_override() -> None:
    assert get("none").tools_as_text is None
    assert get("generic").call_rules is get("hermes").call_rules


def prompt(source: str, messages: tuple[Message, ...], **kwargs: Any) -> str:
    model = SimpleNamespace(
        path=Path("m.gguf"),
        template=ChatTemplate(source, bos_token="<bos>"),
        family=get("generic"),
        projector=None,  # a text-only model
    )
    request = ChatRequest(model="m", messages=messages, tools=(READ,), **kwargs)
    return render(model, request)[0].text  # type: ignore[arg-type]


CONVERSATION = (
    sys_("Be brief."),
    user("Read /etc/hostname."),
    Message("assistant", (CALL,)),
    Message("tool", (ToolResult("toolu_1", "host-7"),)),
)


def test_gemma3_prompt() -> None:
    assert prompt(gemma3_source(), CONVERSATION) == (
        "<bos><start_of_turn>user\n"
        f"Be brief.\n\n{TOOLS_TEXT}\n\nRead /etc/hostname.<end_of_turn>\n"
        f"<start_of_turn>model\n{CALL_TEXT}<end_of_turn>\n"
        "<start_of_turn>user\nResult of read_file:\n"
        "<tool_response>\nhost-7\n</tool_response><end_of_turn>\n"
        "<start_of_turn>model\n"
    )


def test_gemma2_prompt_results_are_user_text() -> None:
    text = prompt(fixture_source("google-gemma-2-2b-it.jinja"), CONVERSATION)
    assert text == (
        "<bos><start_of_turn>user\n"
        f"Be brief.\n\n{TOOLS_TEXT}\n\nRead /etc/hostname.<end_of_turn>\n"
        f"<start_of_turn>model\n{CALL_TEXT}<end_of_turn>\n"
        "<start_of_turn>user\n<tool_response>\nhost-7\n</tool_response><end_of_turn>\n"
        "<start_of_turn>model\n"
    )


def test_phi35_prompt() -> None:
    text = prompt(fixture_source("microsoft-Phi-3.5-mini-instruct.jinja"), CONVERSATION)
    assert f"<|system|>\nBe brief.\n\n{TOOLS_TEXT}<|end|>" in text
    assert f"<|assistant|>\n{CALL_TEXT}<|end|>" in text
    assert "<|user|>\n<tool_response>\nhost-7\n</tool_response><|end|>" in text


def test_tool_choice_none_describes_no_tools() -> None:
    text = prompt(gemma3_source(), CONVERSATION, tool_choice=ToolChoice("none"))
    assert "# Tools" not in text and CALL_TEXT in text


def test_forced_call_grammar() -> None:
    gbnf = forced_call_grammar([READ], "generic")
    assert check_grammar(gbnf) and '"<tool_call>\\n{\\"name\\": \\""' in gbnf


def test_parser_round_trip() -> None:
    output = (
        "Let me read it.\n" + CALL_TEXT + "\n"
        '<tool_call>\n{"name": "note", "arguments": {"text": "a\\nb", "n": [1, 2.5]}}\n'
        "</tool_call>"
    )
    expected = Result(
        text="Let me read it.",
        calls=calls(
            ("read_file", '{"path": "/etc/hostname"}'),
            ("note", '{"text": "a\\nb", "n": [1, 2.5]}'),
        ),
    )
    assert_parses(output, expected, family="generic", tools=("read_file", "note"))


# ---- end to end on the real gemma-3-270m ------------------------------------------------

TIMEOUT = 600
# Bounded: left to itself, the 270M model runs a path on to any token limit
# ("/etc/hostname/my_hostname.mydomain.com/my_hostname..."); the forced-call
# grammar keeps a string within maxLength, so the call always completes.
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"path": {"type": "string", "maxLength": 48}},
    "required": ["path"],
}
ANTHROPIC_TOOLS: list[Any] = [
    {"name": "read_file", "description": "Read a file.", "input_schema": SCHEMA},
    {
        "name": "list_dir",
        "description": "List a directory.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
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
ASK = "Read the file /etc/hostname for me."


@pytest.fixture(scope="module")
def claude(gemma_server: EngyServer) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(
        base_url=gemma_server.url, api_key="x", max_retries=0, timeout=TIMEOUT
    ) as client:
        yield client


@pytest.fixture(scope="module")
def gpt(gemma_server: EngyServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=gemma_server.url + "/v1", api_key="x", max_retries=0, timeout=TIMEOUT
    ) as client:
        yield client


MESSAGES_FORCED: Any = {
    "model": "gemma-3-270m",
    "max_tokens": 200,
    "messages": [{"role": "user", "content": ASK}],
    "tools": ANTHROPIC_TOOLS,
    "tool_choice": {"type": "tool", "name": "read_file"},
}


def _tool_use(message: Any) -> Any:
    assert message.stop_reason == "tool_use"
    [call] = [b for b in message.content if b.type == "tool_use"]
    assert call.name == "read_file"
    jsonschema.validate(call.input, SCHEMA)
    return call


@pytest.fixture(scope="module")
def forced_call(claude: anthropic.Anthropic) -> Any:
    return _tool_use(claude.messages.create(**MESSAGES_FORCED))


def test_messages_forced_call(forced_call: Any) -> None:
    assert forced_call.id


def test_messages_forced_call_streams(claude: anthropic.Anthropic) -> None:
    with claude.messages.stream(**MESSAGES_FORCED) as stream:
        events = list(stream)
        final = stream.get_final_message()
    call = _tool_use(final)
    partial = [
        e.delta.partial_json
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    ]
    assert partial and json.loads("".join(partial)) == call.input


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_messages_follow_up_is_answered(
    claude: anthropic.Anthropic, forced_call: Any, stream: bool
) -> None:
    kwargs: Any = {
        "model": "gemma-3-270m",
        "max_tokens": 24,
        "tools": ANTHROPIC_TOOLS,
        "messages": [
            {"role": "user", "content": ASK},
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": forced_call.id,
                        "name": forced_call.name,
                        "input": forced_call.input,
                    }
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": forced_call.id, "content": "host-7"}
                ],
            },
        ],
    }
    if stream:
        with claude.messages.stream(**kwargs) as s:
            answer = s.get_final_message()
    else:
        answer = claude.messages.create(**kwargs)
    assert answer.content
    assert answer.stop_reason in ("end_turn", "max_tokens", "tool_use")
    count = claude.messages.count_tokens(
        model="gemma-3-270m", messages=kwargs["messages"], tools=ANTHROPIC_TOOLS
    )
    assert answer.usage.input_tokens + (answer.usage.cache_read_input_tokens or 0) == (
        count.input_tokens
    )


RESPONSES_FORCED: Any = {
    "model": "gemma-3-270m",
    "input": ASK,
    "tools": FUNCTION_TOOLS,
    "tool_choice": {"type": "function", "name": "read_file"},
    "max_output_tokens": 200,
}


def _function_call(response: Any) -> Any:
    assert response.status == "completed"
    [call] = [item for item in response.output if item.type == "function_call"]
    assert call.name == "read_file"
    jsonschema.validate(json.loads(call.arguments), SCHEMA)
    return call


@pytest.fixture(scope="module")
def forced_function_call(gpt: openai.OpenAI) -> Any:
    return _function_call(gpt.responses.create(**RESPONSES_FORCED))


def test_responses_forced_call(forced_function_call: Any) -> None:
    assert forced_function_call.call_id


def test_responses_forced_call_streams(gpt: openai.OpenAI) -> None:
    with gpt.responses.stream(**RESPONSES_FORCED) as stream:
        events = list(stream)
        final = stream.get_final_response()
    call = _function_call(final)
    deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert deltas and "".join(deltas) == call.arguments


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_responses_follow_up_is_answered(
    gpt: openai.OpenAI, forced_function_call: Any, stream: bool
) -> None:
    call = forced_function_call
    kwargs: Any = {
        "model": "gemma-3-270m",
        "tools": FUNCTION_TOOLS,
        "max_output_tokens": 24,
        "input": [
            {"role": "user", "content": ASK},
            {
                "type": "function_call",
                "call_id": call.call_id,
                "name": call.name,
                "arguments": call.arguments,
            },
            {"type": "function_call_output", "call_id": call.call_id, "output": "host-7"},
        ],
    }
    if stream:
        with gpt.responses.stream(**kwargs) as s:
            answer = s.get_final_response()
    else:
        answer = gpt.responses.create(**kwargs)
    assert answer.status in ("completed", "incomplete")
    assert answer.output
    assert answer.usage is not None and answer.usage.output_tokens > 0
