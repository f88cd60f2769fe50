"""An answer held to a JSON format (structured outputs): the model is told
the format, and the grammar holds it to it.

Told: a grammar alone makes a small model fill the shape with whatever it
was going to say (Ollama's `format`, ollama#8162). Where the request does
not already say the schema, a system line does: after the request's own
leading system text (a new system message where there is none), so a
conversation that asks for the same format on every turn keeps one prompt
prefix. A request says it when any of its texts holds the schema as JSON
(compact, with spaces, or indented by 2 or 4); a request for any object
(json_object) says it when a text says JSON.

Held: without tools, or with tool_choice none, the answer is one JSON value
(`forced.json_answer_grammar`). With tools under auto the model may still
call: the answer is either calls (in the family's syntax, or as the JSON
objects small models write, as autocall.py reads them) or the JSON value;
no free text stands before a call. With a forced call (any, tool) the
answer is the call and the format does not apply. A request that asks for
thinking thinks first: the grammar lets a reasoning block come before the
JSON (prepare.thinks_first); otherwise thinking is off under a format.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ...chat import JsonOutput, Message, Text, ToolResult


def format_hint(output: JsonOutput) -> str:
    """The system line that says the format."""
    if output.schema is None:
        return "Answer with one JSON object and nothing else."
    schema = json.dumps(output.schema, ensure_ascii=False)
    return f"Answer with one JSON value that follows this JSON Schema, and nothing else:\n{schema}"


def says_schema(messages: Sequence[Message], schema: dict[str, Any]) -> bool:
    """Whether a text of `messages` already holds `schema` as JSON."""
    forms = {
        json.dumps(schema, ensure_ascii=False, separators=(",", ":")),
        json.dumps(schema, ensure_ascii=False),
        json.dumps(schema, ensure_ascii=False, indent=2),
        json.dumps(schema, ensure_ascii=False, indent=4),
    }
    for message in messages:
        for part in message.parts:
            text = part.text if isinstance(part, Text) else None
            if isinstance(part, ToolResult):
                text = part.content
            if text and any(form in text for form in forms):
                return True
    return False


def _says_json(messages: Sequence[Message]) -> bool:
    return any(
        isinstance(part, Text) and "json" in part.text.lower()
        for message in messages
        for part in message.parts
    )


def told(messages: Sequence[Message], output: JsonOutput | None) -> tuple[Message, ...]:
    """`messages` with the format's system line added where they do not
    say it already (unchanged without a format). Any object (json_object)
    is said where a text says JSON, as the hosted API requires it to."""
    if output is None:
        return tuple(messages)
    if output.schema is None and _says_json(messages):
        return tuple(messages)
    if output.schema is not None and says_schema(messages, output.schema):
        return tuple(messages)
    lead = 0
    while lead < len(messages) and messages[lead].role == "system":
        lead += 1
    line = Message("system", (Text(format_hint(output)),))
    return (*messages[:lead], line, *messages[lead:])
