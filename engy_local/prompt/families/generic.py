"""Generic: tool calls for templates that cannot render tools at all (Gemma
2 and 3, Phi 3.5, ...), chosen when a template has no known family's markers
and never reads `tools`.

The template gets no `tools`; the conversation is rewritten instead
(`as_text`):
- the tools are described at the end of the system prompt (after the
  client's own, or as one): name, description and JSON Schema parameters,
  one JSON object a line, with an instruction to call one by writing
  `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`;
- earlier calls become that same text in the assistant's content, in place,
  their arguments byte for byte;
- each tool result is wrapped in `<tool_response>` ... `</tool_response>` and
  stays a tool message: a template with a tool role renders it its way, and
  for one without, the prompt quirks make it user text.

Output is parsed, and calls forced, exactly as for hermes (see
`engy_local.prompt.parsing.toolparse` for the rules on bad output).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace

from ...chat import Message, Part, Text, ToolCall, ToolResult, ToolSpec
from ..parsing.toolparse import HermesParser
from .base import Family
from .hermes import call_rules

INSTRUCTIONS = """\
# Tools

You can call tools to help with the request. Each tool is described by one JSON \
object below: its name, what it does, and its parameters as a JSON Schema.

<tools>
{tools}
</tools>

To call a tool, write a JSON object with its name and arguments between \
<tool_call> and </tool_call> tags, like this:
<tool_call>
{{"name": "tool_name", "arguments": {{"argument_name": "value"}}}}
</tool_call>
Write one block for each call. The result of each call comes back between \
<tool_response> and </tool_response> tags."""


def describe(tools: Sequence[ToolSpec]) -> str:
    """The system-prompt text that describes `tools`."""
    lines = (
        json.dumps(
            {"name": t.name, "description": t.description, "parameters": t.shown_parameters()},
            ensure_ascii=False,
        )
        for t in tools
    )
    return INSTRUCTIONS.format(tools="\n".join(lines))


def call_text(call: ToolCall) -> str:
    name = json.dumps(call.name, ensure_ascii=False)
    arguments = call.arguments if call.arguments.strip() else "{}"
    return f'<tool_call>\n{{"name": {name}, "arguments": {arguments}}}\n</tool_call>'


def result_text(result: ToolResult) -> str:
    return f"<tool_response>\n{result.content}\n</tool_response>"


def as_text(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> list[Message]:
    """`messages` with the tools described, calls as text, results wrapped."""
    names = {p.id: p.name for m in messages for p in m.parts if isinstance(p, ToolCall)}
    out = [Message(m.role, tuple(_as_text(p, names) for p in m.parts)) for m in messages]
    if tools:
        lead = 0
        while lead < len(out) and out[lead].role == "system":
            lead += 1
        out.insert(lead, Message("system", (Text(describe(tools)),)))
    return out


def _as_text(part: Part, names: dict[str, str]) -> Part:
    if isinstance(part, ToolCall):
        return Text(call_text(part))
    if isinstance(part, ToolResult):
        # The name, while the call that gives it is still a call.
        name = part.name if part.name is not None else names.get(part.call_id)
        return replace(part, content=result_text(part), name=name)
    return part


FAMILY = Family(
    name="generic",
    markers=(),
    parser=HermesParser,
    call_rules=call_rules,
    tools_as_text=as_text,
)
