"""What only the generic family does: the exact text that describes the
tools, a conversation rewritten as text, detection of templates that are
no fixture file, and its grammar. Its data and the shared tests:
support/families/generic.py, test_families*.py."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from support.families.generic import (
    CALL,
    CALL_TEXT,
    NOTE,
    READ,
    TOOLS_TEXT,
    gemma3_source,
    sys_,
    user,
)

from engy_local.chat import Message, Text, Thinking, ToolCall, ToolResult, ToolSpec
from engy_local.prompt.calls.forced import forced_call_grammar
from engy_local.prompt.families import detect_family, get
from engy_local.prompt.families.generic import as_text, describe
from engy_local.runtime.engine.sampling import check_grammar

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


# ---- a conversation as text --------------------------------------------------------------

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


# ---- detection and the grammar -------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "family"),
    [
        (gemma3_source, "generic"),
        # Renders tools, in no syntax known here: the plain family.
        (lambda: "{{ tools | tojson }}{% for m in messages %}{{ m.content }}{% endfor %}", "none"),
    ],
    ids=["gemma-3-270m", "unknown tool syntax"],
)
def test_detection(source: Callable[[], str], family: str) -> None:
    assert detect_family(source()) == family


def test_the_none_family_stays_for_an_explicit_override() -> None:
    assert get("none").tools_as_text is None
    assert get("generic").call_rules is get("hermes").call_rules


def test_forced_call_grammar() -> None:
    gbnf = forced_call_grammar([READ], "generic")
    assert check_grammar(gbnf) and '"<tool_call>\\n{\\"name\\": \\""' in gbnf
