"""DeepSeek V3.1: calls after the answer text, arguments as a JSON object.

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{"a": 1}<｜tool▁call▁end｜>
    <｜tool▁call▁begin｜>...<｜tool▁call▁end｜><｜tool▁calls▁end｜>

(no whitespace between the markers in the template). Thinking is the
template's `thinking` switch: the prompt ends in `<think>` (on) or
`<think></think>` (off); reasoning from earlier turns is never rendered (the
template drops it).

The template renders calls and results but no tool list: the tools are
described at the end of the system prompt the way DeepSeek's model card
does (`tools_as_text`, which here leaves calls and results to the template).

Rules beyond `framed`: the head is the tool's name, trimmed; a code fence
around the arguments is tolerated.
"""

# DeepSeek's markers are written in full-width characters on purpose.
# ruff: noqa: RUF001, RUF002

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ...chat import Message, Text, ToolSpec
from ...grammar.gbnf import literal
from .base import Family
from .framed import JsonCallsParser

CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
CALLS_END = "<｜tool▁calls▁end｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
CALL_END = "<｜tool▁call▁end｜>"
SEP = "<｜tool▁sep｜>"


class DeepSeekV31Parser(JsonCallsParser):
    section_open = (CALLS_BEGIN,)
    section_close = CALLS_END
    call_open = CALL_BEGIN
    call_close = CALL_END
    head_end = SEP

    def _name(self, head: str) -> str | None:
        return head or None


def call_rules(names: list[str], roots: list[str], rules: dict[str, str]) -> None:
    """<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜><｜tool▁calls▁end｜>"""
    for i, (name, root) in enumerate(zip(names, roots, strict=True)):
        rules[f"call-{i}"] = f"{literal(name + SEP)} {root}"
    alternatives = " | ".join(f"call-{i}" for i in range(len(names)))
    head, tail = literal(CALLS_BEGIN + CALL_BEGIN), literal(CALL_END + CALLS_END)
    rules["call"] = f"{head} ({alternatives}) {tail}"


TOOLS_PROMPT = """\
## Tools
You have access to the following tools:
{tools}
IMPORTANT: ALWAYS adhere to this exact format for tool use:
{syntax}

Where:
- `tool_call_name` must be an exact match to one of the available tools
- `tool_call_arguments` must be valid JSON that strictly follows the tool's Parameters Schema
- For multiple tool calls, chain them directly without separators or spaces"""
SYNTAX = (
    f"{CALLS_BEGIN}{CALL_BEGIN}tool_call_name{SEP}tool_call_arguments{CALL_END}"
    f"{{{{additional_tool_calls}}}}{CALLS_END}"
)


def describe(tools: Sequence[ToolSpec], syntax: str = SYNTAX) -> str:
    """The system-prompt text that describes `tools` and how to call them."""
    entries = "".join(
        f"\n### {t.name}\nDescription: {t.description}\n\n"
        f"Parameters: {json.dumps(t.shown_parameters(), ensure_ascii=False)}\n"
        for t in tools
    )
    return TOOLS_PROMPT.format(tools=entries, syntax=syntax)


def with_tools_described(
    messages: Sequence[Message], tools: Sequence[ToolSpec], syntax: str = SYNTAX
) -> list[Message]:
    """`messages` with a system message describing `tools` after the leading
    system messages (which the prompt joins into one); calls and results
    are left as they are, for the template to render."""
    out = list(messages)
    if tools:
        lead = 0
        while lead < len(out) and out[lead].role == "system":
            lead += 1
        out.insert(lead, Message("system", (Text(describe(tools, syntax)),)))
    return out


def thinking(on: bool) -> dict[str, Any]:
    return {"thinking": on}


# Before R1's family, whose markers add a code fence to these.
FAMILY = Family(
    name="deepseek-v3.1",
    markers=(CALLS_BEGIN, CALL_BEGIN, SEP),
    parser=DeepSeekV31Parser,
    call_rules=call_rules,
    priority=60,
    thinking=thinking,
    tools_as_text=with_tools_described,
)
