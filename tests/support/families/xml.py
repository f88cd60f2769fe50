"""What the data of the tag-per-parameter families (Qwen3-Coder, GLM 4.6,
MiniMax M2) share: tools with realistic schemas, a conversation to render
through `prepare.render`, and the schema of the tiny model's round trip."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from engy_local.chat import Message, Text, Thinking, ToolCall, ToolResult, ToolSpec
from support.families.prompts import prepared, template

WRITE = ToolSpec(
    "Write",
    "Write a file.",
    {
        "type": "object",
        "properties": {"file_path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["file_path", "content"],
        "additionalProperties": False,
    },
)
BASH = ToolSpec(
    "Bash",
    "Run a command.",
    {
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "The command"},
            "timeout": {"type": "number"},
            "options": {
                "type": "object",
                "properties": {
                    "env": {"type": "object", "additionalProperties": {"type": "string"}},
                    "retries": {"type": "array", "items": {"type": "number"}},
                    "verbose": {"type": "boolean"},
                },
            },
            "run_in_background": {"type": "boolean"},
            "mode": {"type": "string", "enum": ["fast", "safe"]},
        },
        "required": ["command"],
        "additionalProperties": False,
    },
)
GET_GOAL = ToolSpec("get_goal", "The current goal.", {"type": "object", "properties": {}})
FREE = ToolSpec("Free", "Takes anything.", {"type": "object"})
TOOLS = (WRITE, BASH, GET_GOAL, FREE)
# What the parser gets: each offered tool's parameters schema, by name.
SCHEMAS = {t.name: t.parameters for t in TOOLS}


def prompt(name: str, family: str, messages: Sequence[Message], **request: Any) -> str:
    """The prompt `prepare.render` makes with the real template."""
    return prepared(template(name), family, messages, TOOLS, **request)


def read_file_schema(path: dict[str, Any]) -> dict[str, Any]:
    """A realistic schema: a string (as `path` says), an enum, an integer, a
    nested object with its own required field, an array of strings."""
    return {
        "type": "object",
        "properties": {
            "path": {**path, "description": "Absolute path of the file"},
            "mode": {"type": "string", "enum": ["text", "binary", "lines"]},
            "limit": {"type": "integer", "description": "How many lines at most"},
            "options": {
                "type": "object",
                "properties": {
                    "follow_symlinks": {"type": "boolean"},
                    "encoding": {"type": "string"},
                },
                "required": ["follow_symlinks"],
                "additionalProperties": False,
            },
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["path", "mode", "limit", "options", "tags"],
        "additionalProperties": False,
    }


BASH_ARGS = {
    "command": "ls -la",
    "timeout": 30,
    "options": {"env": {"CI": "1"}, "verbose": False},
    "run_in_background": True,
}
WRITE_ARGS = {"file_path": "/tmp/a.py", "content": "print('<hi>')\n"}


def user(text: str) -> Message:
    return Message("user", (Text(text),))


CONVERSATION = (
    Message("system", (Text("SYSTEM-TEXT"),)),
    user("USER-ONE"),
    Message("assistant", (Thinking("EARLY-THOUGHT"), Text("Hello."))),
    user("USER-TWO"),
    Message(
        "assistant",
        (
            Thinking("I will look."),
            Text("Let me look."),
            ToolCall("toolu_1", "Bash", json.dumps(BASH_ARGS)),
            ToolCall("toolu_2", "Write", json.dumps(WRITE_ARGS)),
        ),
    ),
    Message("tool", (ToolResult("toolu_1", "a.txt b.txt"), ToolResult("toolu_2", "written"))),
)
RENDERED_CALLS = (("Bash", BASH_ARGS), ("Write", WRITE_ARGS))
