"""What the DeepSeek and Kimi data share: an agent conversation, rendered
the way the engine renders it for a model with the template."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engy_local.chat import Message, Text, Thinking, ToolCall, ToolResult, ToolSpec
from engy_local.prompt.families import detect
from support.families.prompts import prepared, template

# Reasoning, text and two calls with string, number and nested arguments;
# both results; an answer; the next question.
TOOLS = (
    ToolSpec(
        "Read",
        "Read a file.",
        {
            "type": "object",
            "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["path"],
        },
    ),
    ToolSpec(
        "Write",
        "Write a file.",
        {
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "content": {"type": "string"},
                "options": {"type": "object"},
            },
        },
    ),
)
READ_ARGS = '{"path": "/etc/hosts", "limit": 20}'
WRITE_ARGS = '{"path": "/tmp/a.py", "content": "x = 1\\nprint(x)", "options": {"mode": 420}}'
CONVERSATION = [
    Message("system", (Text("SYSTEM-TEXT"),)),
    Message("user", (Text("USER-ONE"),)),
    Message(
        "assistant",
        (
            Thinking("THINK-ONE"),
            Text("TEXT-ONE"),
            ToolCall("toolu_1", "Read", READ_ARGS),
            ToolCall("toolu_2", "Write", WRITE_ARGS),
        ),
    ),
    Message("tool", (ToolResult("toolu_1", "RESULT-ONE"), ToolResult("toolu_2", "RESULT-TWO"))),
    Message("assistant", (Thinking("THINK-TWO"), Text("TEXT-TWO"))),
    Message("user", (Text("USER-TWO"),)),
]
# The same loop before its answer: the last message is the tool results.
LOOP = CONVERSATION[:4]
# The realistic outputs' calls, as the parser gives them.
WRITE_OUT = '{"path": "/tmp/a.py", "content": "x = {\\"a\\": [1, 2]}\\n", "options": {"mode": 420}}'


def prompt(name: str, messages: Sequence[Message], thinking: bool | None) -> str:
    """The prompt the engine renders for a model with this template."""
    chat = template(name, bos_token="<BOS>", eos_token="<EOS>")
    return prepared(chat, detect(chat.source), messages, TOOLS, thinking=thinking)


def read_file_schema(path: dict[str, Any]) -> dict[str, Any]:
    """The tiny model's forced call: a string (as `path` says), an enum, an
    integer, a nested object with its own required field, an array of
    strings, nothing else."""
    return {
        "type": "object",
        "properties": {
            "path": {**path, "description": "Absolute path of the file"},
            "mode": {"type": "string", "enum": ["text", "binary", "lines"]},
            "limit": {"type": "integer"},
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
