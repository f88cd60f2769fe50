"""Chat templates: conversion and folding tables (prompt.py), the Jinja
environment (template.py), and every real template in shared/fixtures."""

from __future__ import annotations

import functools
import json
from datetime import datetime
from typing import Any

import pytest
from support.paths import FIXTURES

from engy_local.chat import Image, Message, Text, Thinking, ToolCall, ToolResult, ToolSpec
from engy_local.errors import BadTemplate, InvalidRequest
from engy_local.prompt.render.messages import (
    NO_QUIRKS,
    Quirks,
    mistral_call_id,
    needs_short_call_ids,
    to_template_messages,
    to_template_tools,
)
from engy_local.prompt.render.template import ChatTemplate

FIXTURES = FIXTURES / "chat-templates"
TEMPLATE_NAMES = sorted(p.stem for p in FIXTURES.glob("*.jinja")) if FIXTURES.is_dir() else []
ALL_TEMPLATES: list[Any] = TEMPLATE_NAMES or [
    pytest.param("", marks=pytest.mark.skip(reason=f"no chat template fixtures at {FIXTURES}"))
]


@functools.cache
def fixture(name: str) -> ChatTemplate:
    path = FIXTURES / f"{name}.jinja"
    if not path.is_file():
        pytest.skip(f"chat template fixture {path} is absent")
    return ChatTemplate(path.read_text(encoding="utf-8"), bos_token="<s>", eos_token="</s>")


# ---- small builders ----------------------------------------------------------


def system(text: str) -> Message:
    return Message("system", (Text(text),))


def user(*texts: str) -> Message:
    return Message("user", tuple(Text(t) for t in texts))


def assistant(text: str = "", *calls: ToolCall, thinking: str = "") -> Message:
    parts: tuple[Any, ...] = (Thinking(thinking),) if thinking else ()
    parts += (Text(text),) if text else ()
    return Message("assistant", parts + calls)


def tool(*results: ToolResult) -> Message:
    return Message("tool", results)


CALL = ToolCall("toolu_01", "list_dir", '{"path": "."}')
RESULT = ToolResult("toolu_01", "a.txt b.txt")
T_CALL = {
    "id": "toolu_01",
    "type": "function",
    "function": {"name": "list_dir", "arguments": {"path": "."}},
}
T_RESULT = {
    "role": "tool",
    "tool_call_id": "toolu_01",
    "name": "list_dir",
    "content": "a.txt b.txt",
}


CALL_2 = ToolCall("toolu_02", "list_dir", '{"path": "src"}')
RESULT_2 = ToolResult("toolu_02", "main.py")
T_CALL_2 = {
    **T_CALL,
    "id": "toolu_02",
    "function": {"name": "list_dir", "arguments": {"path": "src"}},
}
T_RESULT_2 = {**T_RESULT, "tool_call_id": "toolu_02", "content": "main.py"}


def u(content: str) -> dict[str, Any]:
    return {"role": "user", "content": content}


def a(content: str = "", **fields: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": content, **fields}


# ---- folding and conversion: tables -------------------------------------------

FOLDING = [
    ("claude code: system after user", [user("u1"), system("s")], [u("u1\n\ns")]),
    (
        "claude code: system reminder mid agent loop",
        [user("u1"), system("s"), assistant("", CALL), tool(RESULT), user("u2")],
        [u("u1\n\ns"), a(tool_calls=[T_CALL]), T_RESULT, u("u2")],
    ),
    (
        "codex: developer messages then two user messages",
        [system("d1"), system("d2"), user("u1"), user("u2")],
        [{"role": "system", "content": "d1\n\nd2"}, u("u1\n\nu2")],
    ),
    (
        "system after assistant joins the next user",
        [user("u1"), assistant("a1"), system("s"), user("u2")],
        [u("u1"), a("a1"), u("s\n\nu2")],
    ),
    (
        "system at the end stands as a user turn",
        [user("u1"), assistant("a1"), system("s")],
        [u("u1"), a("a1"), u("s")],
    ),
    (
        "system between a call and its results waits after them",
        [user("u1"), assistant("", CALL), system("s"), tool(RESULT), user("u2")],
        [u("u1"), a(tool_calls=[T_CALL]), T_RESULT, u("s\n\nu2")],
    ),
    (
        "system before an assistant turn stays in place",
        [user("u1"), assistant("a1"), system("s"), assistant("a2")],
        [u("u1"), a("a1"), u("s"), a("a2")],
    ),
    ("empty system text is dropped", [user("u1"), assistant("a1"), system("")], [u("u1"), a("a1")]),
]


@pytest.mark.parametrize(
    ("conversation", "expected"), [c[1:] for c in FOLDING], ids=[c[0] for c in FOLDING]
)
def test_folding(conversation: list[Message], expected: list[dict[str, Any]]) -> None:
    assert to_template_messages(conversation) == expected


CONVERSION = [
    ("text blocks join with a blank line", user("a", "b"), [u("a\n\nb")]),
    (
        "images are dropped",
        Message("user", (Text("look"), Image("image/png", "AAAA"))),
        [u("look")],
    ),
    (
        "thinking becomes reasoning_content",
        assistant("hi", thinking="hmm"),
        [a("hi", reasoning_content="hmm")],
    ),
    (
        "JSON that is not an object stays text; broken JSON is the object it started",
        assistant(
            "",
            ToolCall("c", "f", "[1, 2]"),
            ToolCall("d", "g", "{oops"),
            ToolCall("e", "h", '{"a": "b'),
        ),
        [
            a(
                tool_calls=[
                    {
                        "id": "c",
                        "type": "function",
                        "function": {"name": "f", "arguments": "[1, 2]"},
                    },
                    {"id": "d", "type": "function", "function": {"name": "g", "arguments": {}}},
                    {
                        "id": "e",
                        "type": "function",
                        "function": {"name": "h", "arguments": {"a": "b"}},
                    },
                ]
            )
        ],
    ),
    (
        "empty arguments are an empty object",
        assistant("", ToolCall("c", "f", "")),
        [
            a(
                tool_calls=[
                    {"id": "c", "type": "function", "function": {"name": "f", "arguments": {}}}
                ]
            )
        ],
    ),
    (
        "one tool message per result; the name comes from the result when given",
        tool(ToolResult("x", "1", name="named"), ToolResult("y", "2", is_error=True)),
        [
            {"role": "tool", "tool_call_id": "x", "name": "named", "content": "1"},
            {"role": "tool", "tool_call_id": "y", "name": "", "content": "2"},
        ],
    ),
]


@pytest.mark.parametrize(
    ("message", "expected"), [c[1:] for c in CONVERSION], ids=[c[0] for c in CONVERSION]
)
def test_conversion(message: Message, expected: list[dict[str, Any]]) -> None:
    assert to_template_messages([message]) == expected


def test_argument_key_order_is_kept() -> None:
    call = ToolCall("c", "f", '{"b": 1, "a": 2}')
    [message] = to_template_messages([assistant("", call)])
    assert list(message["tool_calls"][0]["function"]["arguments"]) == ["b", "a"]


QUIRK_RESHAPES = [
    (
        "no system role: system opens the first user turn",
        Quirks(no_system_role=True),
        [system("s"), user("u1")],
        [u("s\n\nu1")],
    ),
    (
        "no tool role: results become user text",
        Quirks(no_tool_role=True),
        [user("u1"), assistant("", CALL), tool(RESULT), user("u2")],
        [u("u1"), a(tool_calls=[T_CALL]), u("a.txt b.txt\n\nu2")],
    ),
    (
        "no user after tool: the text joins the last result",
        Quirks(no_user_after_tool=True),
        [user("u1"), assistant("", CALL), tool(RESULT), system("s"), user("u2")],
        [u("u1"), a(tool_calls=[T_CALL]), {**T_RESULT, "content": "a.txt b.txt\n\ns\n\nu2"}],
    ),
    (
        "text arguments are kept byte for byte",
        Quirks(text_arguments=True),
        [assistant("", ToolCall("c", "f", '{"x":1}'))],
        [
            a(
                tool_calls=[
                    {
                        "id": "c",
                        "type": "function",
                        "function": {"name": "f", "arguments": '{"x":1}'},
                    }
                ]
            )
        ],
    ),
    (
        "reasoning under the key the template reads",
        Quirks(reasoning_key="thinking"),
        [assistant("a", thinking="t")],
        [a("a", thinking="t")],
    ),
    (
        "text beside calls joins the reasoning",
        Quirks(call_text_in_reasoning=True),
        [assistant("a", CALL, thinking="t"), tool(RESULT), assistant("b", thinking="t2")],
        [
            a(tool_calls=[T_CALL], reasoning_content="t\n\na"),
            T_RESULT,
            a("b", reasoning_content="t2"),
        ],
    ),
    (
        "one call per turn, each followed by its result",
        Quirks(one_call_per_turn=True),
        [
            assistant("a", CALL, CALL_2, thinking="t"),
            tool(RESULT_2, ToolResult("other", "x"), RESULT),
            user("u"),
        ],
        [
            a("a", tool_calls=[T_CALL], reasoning_content="t"),
            T_RESULT,
            a(tool_calls=[T_CALL_2]),
            T_RESULT_2,
            {"role": "tool", "tool_call_id": "other", "name": "", "content": "x"},
            u("u"),
        ],
    ),
    (
        "one call per turn keeps null content null",
        Quirks(one_call_per_turn=True, null_call_content=True),
        [assistant("", CALL, CALL_2), tool(RESULT, RESULT_2)],
        [a(None, tool_calls=[T_CALL]), T_RESULT, a(None, tool_calls=[T_CALL_2]), T_RESULT_2],
    ),
    (
        "reasoning as a thinking chunk before the text",
        Quirks(reasoning_chunks=True),
        [assistant("a", CALL, thinking="t"), tool(RESULT), assistant("", CALL, thinking="t2")],
        [
            a(
                [{"type": "thinking", "thinking": "t"}, {"type": "text", "text": "a"}],
                tool_calls=[T_CALL],
            ),
            T_RESULT,
            a([{"type": "thinking", "thinking": "t2"}], tool_calls=[T_CALL]),
        ],
    ),
    (
        "short call ids rename the call and its result alike",
        Quirks(short_call_ids=True),
        [assistant("", CALL), tool(RESULT)],
        [
            a(tool_calls=[{**T_CALL, "id": mistral_call_id("toolu_01")}]),
            {**T_RESULT, "tool_call_id": mistral_call_id("toolu_01")},
        ],
    ),
]


@pytest.mark.parametrize(
    ("quirks", "conversation", "expected"),
    [c[1:] for c in QUIRK_RESHAPES],
    ids=[c[0] for c in QUIRK_RESHAPES],
)
def test_quirk_reshapes(
    quirks: Quirks, conversation: list[Message], expected: list[dict[str, Any]]
) -> None:
    assert to_template_messages(conversation, quirks=quirks) == expected


def test_call_ids_callback_wins() -> None:
    out = to_template_messages([assistant("", CALL), tool(RESULT)], call_ids=str.upper)
    assert out[0]["tool_calls"][0]["id"] == out[1]["tool_call_id"] == "TOOLU_01"


def test_tools() -> None:
    spec = ToolSpec("f", "does f", {"type": "object", "properties": {}})
    assert to_template_tools([spec]) == [
        {
            "type": "function",
            "function": {"name": "f", "description": "does f", "parameters": spec.parameters},
        }
    ]


@pytest.mark.parametrize("call_id", ["toolu_01ABCdef", "call_abc", "", "x" * 200, "ünï"])
def test_mistral_call_id(call_id: str) -> None:
    short = mistral_call_id(call_id)
    assert len(short) == 9 and short.isascii() and short.isalnum()
    assert mistral_call_id(call_id) == short
    assert mistral_call_id(call_id + "2") != short


def test_mistral_call_id_keeps_valid_ids() -> None:
    assert mistral_call_id("aB3dE6gH9") == "aB3dE6gH9"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("mistralai-Mistral-Nemo-Instruct-2407", True),
        ("Mistral-Small-3.2-24B-Instruct-2506", True),
        ("Qwen-Qwen3-0.6B", False),
    ],
)
def test_needs_short_call_ids(name: str, expected: bool) -> None:
    assert needs_short_call_ids(fixture(name).source) is expected


# ---- the Jinja environment -------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "variables", "expected"),
    [
        ("{{ x | tojson }}", {"x": {"a": "<é>"}}, '{"a": "<é>"}'),
        ("{{ x | tojson(ensure_ascii=True) }}", {"x": "é"}, '"\\u00e9"'),
        ("{{ x | tojson(indent=2) }}", {"x": [1]}, "[\n  1\n]"),
        (
            "{{ x | tojson(separators=(',', ':'), sort_keys=true) }}",
            {"x": {"b": 1, "a": 2}},
            '{"a":2,"b":1}',
        ),
        ("{{ x | map(attribute='n') | tojson }}", {"x": [{"n": 1}]}, "[1]"),
        ("{{ ('{\"a\": 1}' | from_json).a }}", {}, "1"),
        ("{% set ns = namespace(q=[]) %}{% set _ = ns.q.append(1) %}{{ ns.q.pop(0) }}", {}, "1"),
        (
            "{% for i in range(3) %}{% if i == 1 %}{% break %}{% endif %}{{ i }}{% endfor %}",
            {},
            "0",
        ),
        ("{% generation %}kept{% endgeneration %}", {}, "kept"),
        ("{{ strftime_now('%Y-%m-%d') }}", {}, "2025-01-02"),
        ("{{ 'a' + missing + 'b' }}", {}, "ab"),
        ("{{ '  x '.strip() ~ 'a,b'.split(',')[1] ~ 'x'.upper() }}", {}, "xbX"),
        ("{{ bos_token }}{{ messages | length }}{{ add_generation_prompt }}", {}, "<s>0True"),
        ("{{ tools is defined }}", {}, "False"),
        ("{{ enable_thinking }}", {"enable_thinking": False}, "False"),
    ],
)
def test_environment(source: str, variables: dict[str, Any], expected: str) -> None:
    template = ChatTemplate(source, bos_token="<s>", now=lambda: datetime(2025, 1, 2, 3, 4))
    assert template.render([], **variables) == expected


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("{{ raise_exception('roles must alternate') }}", "chat template: roles must alternate"),
        ("{{ messages[0].content }}", "chat template: UndefinedError: "),
        ("{% set d = {} %}{% set _ = d.update({'a': 1}) %}", "chat template: SecurityError: "),
        ("{{ 1 + 'a' }}", "chat template: TypeError: "),
    ],
)
def test_template_errors_are_invalid_requests(source: str, message: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        ChatTemplate(source).render([])
    assert caught.value.message.startswith(message)
    assert caught.value.status == 400


def test_bad_source_fails_at_load() -> None:
    with pytest.raises(BadTemplate, match=r"chat template does not compile: line 1: "):
        ChatTemplate("{% if x %}never closed")


def test_fixture_raise_exception_is_invalid_request() -> None:
    with pytest.raises(InvalidRequest, match=r"^chat template: System role not supported$"):
        fixture("google-gemma-2-2b-it").render([{"role": "system", "content": "s"}])


def test_card_variables() -> None:
    template = ChatTemplate(
        "{{ datetime }}|{{ functions }}", now=lambda: datetime(2025, 1, 2, 3, 4)
    )
    tools = to_template_tools([ToolSpec("f", "d", {})])
    assert template.render([], tools=tools) == "2025-01-02|" + json.dumps(
        [{"name": "f", "description": "d", "parameters": {}}], indent=4
    )


@pytest.mark.parametrize(
    ("name", "tools", "switch"),
    [
        ("Qwen-Qwen3-0.6B", True, "enable_thinking"),
        ("deepseek-ai-DeepSeek-V3.1", False, "enable_thinking"),  # reads `thinking`, falls back
        ("Kimi-K3", True, "thinking"),
        ("ibm-granite-granite-3.3-2B-Instruct", True, "thinking"),
        ("Cohere2MoE", True, "reasoning"),
        ("Qwen-Qwen2.5-7B-Instruct", True, None),
        ("microsoft-Phi-3.5-mini-instruct", False, None),
    ],
)
def test_capabilities(name: str, tools: bool, switch: str | None) -> None:
    template = fixture(name)
    assert (template.supports_tools, template.thinking_switch) == (tools, switch)


# Templates that cannot take some shape, as the probes find them; every
# template not listed here takes everything (checked for Qwen3 below).
QUIRKS = {
    # Raises on a system message and alternates user/model only.
    "google-gemma-2-2b-it": Quirks(no_system_role=True, no_tool_role=True),
    # Renders the system prompt only inside the last user turn, which an
    # agent conversation ending in tool results does not have.
    "mistralai-Mistral-Nemo-Instruct-2407": Quirks(
        no_system_role=True, no_user_after_tool=True, short_call_ids=True
    ),
    "Mistral-Small-3.2-24B-Instruct-2506": Quirks(no_user_after_tool=True, short_call_ids=True),
    "mistralai-Ministral-3-14B-Reasoning-2512": Quirks(
        no_user_after_tool=True, reasoning_chunks=True
    ),
    "meetkai-functionary-medium-v3.2": Quirks(text_arguments=True),
    # Calls render only in a turn without text, and (DeepSeek R1's own
    # template) only when its content is null and its arguments are text.
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": Quirks(
        text_arguments=True, calls_apart=True, null_call_content=True
    ),
    "llama-cpp-deepseek-r1": Quirks(calls_apart=True),
    "microsoft-Phi-3.5-mini-instruct": Quirks(no_tool_role=True),
    "llama-cpp-rwkv-world": Quirks(no_tool_role=True),
    "Qwen-Qwen3-0.6B": NO_QUIRKS,
    # Reads `thinking`, refuses it beside text on a call, renders one call a turn.
    "openai-gpt-oss-120b": Quirks(
        reasoning_key="thinking", call_text_in_reasoning=True, one_call_per_turn=True
    ),
    "LFM2.5-8B-A1B": Quirks(reasoning_key="thinking"),
}


@pytest.mark.parametrize(("name", "quirks"), QUIRKS.items(), ids=list(QUIRKS))
def test_probed_quirks(name: str, quirks: Quirks) -> None:
    assert fixture(name).quirks == quirks


# ---- every real template ----------------------------------------------------------

AGENT_CONVERSATION = [
    system("SYSTEM-TEXT: you are a coding agent."),
    user("USER-ONE: list the files."),
    assistant(
        "Let me look.", ToolCall("toolu_01A", "list_dir", '{"path": "."}'), thinking="I will list."
    ),
    tool(ToolResult("toolu_01A", "TOOL-RESULT: a.txt b.txt")),
    user("USER-TWO: thanks, now read a.txt."),
]
AGENT_TOOLS = [
    ToolSpec(
        "list_dir",
        "List a directory.",
        {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    )
]
EXPECTED_TEXTS = ["SYSTEM-TEXT", "USER-ONE", "TOOL-RESULT", "USER-TWO"]


def render(template: ChatTemplate, conversation: list[Message], **kwargs: Any) -> str:
    messages = to_template_messages(conversation, quirks=template.quirks)
    return template.render(messages, **kwargs)


@pytest.mark.parametrize("name", ALL_TEMPLATES)
def test_agent_conversation_renders(name: str) -> None:
    template = fixture(name)
    prompt = render(template, AGENT_CONVERSATION, tools=to_template_tools(AGENT_TOOLS))
    # No template drops any of these once its quirks are reshaped (see QUIRKS).
    for text in EXPECTED_TEXTS:
        assert text in prompt, f"{name} dropped {text}"


@pytest.mark.parametrize("name", ALL_TEMPLATES)
def test_renders_without_tools_and_with_the_thinking_switch(name: str) -> None:
    template = fixture(name)
    switches = (
        [{}]
        if template.thinking_switch is None
        else [
            {template.thinking_switch: True},
            {template.thinking_switch: False},
        ]
    )
    for extra in switches:
        prompt = render(template, AGENT_CONVERSATION[:2], **extra)
        assert "SYSTEM-TEXT" in prompt and "USER-ONE" in prompt


MID_SYSTEM_CONVERSATION = [
    system("SYSTEM-TEXT"),
    user("USER-ONE"),
    assistant("a1"),
    system("MID-SYSTEM"),
    user("USER-TWO"),
]


def test_mid_conversation_system_through_qwen3() -> None:
    template = fixture("Qwen-Qwen3-0.6B")
    prompt = render(template, MID_SYSTEM_CONVERSATION, tools=to_template_tools(AGENT_TOOLS))
    # In place, as user text: the system turn at the top stays the only one.
    assert "<|im_start|>user\nMID-SYSTEM\n\nUSER-TWO<|im_end|>" in prompt
    assert prompt.count("<|im_start|>system") == 1


@pytest.mark.parametrize(
    ("name", "error"),
    [
        (
            "mistralai-Ministral-3-14B-Reasoning-2512",
            "Only user, assistant and tool roles are supported",
        ),
        ("Apertus-8B-Instruct", "Invalid message role"),
        ("Mistral-Small-3.2-24B-Instruct-2506", "After the optional system message"),
    ],
)
def test_unfolded_mid_system_is_rejected(name: str, error: str) -> None:
    # Why folding exists: strict templates refuse a system message past the first.
    messages = [
        {"role": "system", "content": "s"},
        u("u1"),
        a("a1"),
        {"role": "system", "content": "s2"},
        u("u2"),
    ]
    with pytest.raises(InvalidRequest, match=f"^chat template: {error}"):
        fixture(name).render(messages)


@pytest.mark.parametrize("name", ALL_TEMPLATES)
def test_mid_conversation_system_renders(name: str) -> None:
    prompt = render(fixture(name), MID_SYSTEM_CONVERSATION)
    for text in ["SYSTEM-TEXT", "USER-ONE", "MID-SYSTEM", "USER-TWO"]:
        assert text in prompt, f"{name} dropped {text}"


def test_prompt_prefix_is_stable_across_turns() -> None:
    # The KV cache is reused only if turn N's prompt is a prefix of turn N+1's.
    template = fixture("Qwen-Qwen2.5-7B-Instruct")
    turns = [
        [system("s"), user("u1"), system("reminder")],
        [assistant("", CALL), tool(RESULT)],
        [assistant("a2")],
        [user("u3")],
    ]
    conversation: list[Message] = []
    previous = ""
    for turn in turns:
        conversation += turn
        prompt = render(template, conversation, add_generation_prompt=False)
        assert prompt.startswith(previous)
        previous = prompt


# ---- the turn marker: a model that writes it has begun another turn ------------


@pytest.mark.parametrize(
    ("name", "marker"),
    [
        ("Qwen-Qwen2.5-7B-Instruct", "<|im_start|>"),
        ("google-gemma-2-2b-it", "<start_of_turn>"),
        ("meta-llama-Llama-3.1-8B-Instruct", "<|start_header_id|>"),
        ("ibm-granite-granite-3.3-2B-Instruct", "<|start_of_role|>"),
        ("openai-gpt-oss-120b", "<|start|>"),  # its family keeps it: answers span turns
        # No marker before both the user's and the assistant's turn.
        ("mistralai-Mistral-Nemo-Instruct-2407", ""),
        ("microsoft-Phi-3.5-mini-instruct", ""),
        ("deepseek-ai-DeepSeek-V3.1", ""),
    ],
)
def test_turn_marker(name: str, marker: str) -> None:
    assert fixture(name).turn_marker == marker
