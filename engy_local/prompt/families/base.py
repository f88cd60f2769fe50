"""What a tool-call family is (see the package's docstring for each field)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ...chat import Message, ToolSpec
from ...grammar.schema import JSON, Notation
from ..parsing.toolparse import ParserFactory

# (tool names, the rule name of each tool's arguments object, rules so far)
# -> adds a rule "call" matching one call in the family's syntax.
CallRules = Callable[[list[str], list[str], dict[str, str]], None]
# (the tools, rules so far) -> adds a rule "call" (see schema.value_rules).
ToolRules = Callable[[list[ToolSpec], dict[str, str]], None]


@dataclass(frozen=True)
class Family:
    name: str
    markers: tuple[str, ...]
    parser: ParserFactory
    call_rules: CallRules | None = None
    tool_rules: ToolRules | None = None
    priority: int = 100
    thinking: Callable[[bool], dict[str, Any]] | None = None
    reasoning_start: str = "<think>"
    reasoning_end: str = "</think>"
    tools_as_text: Callable[[Sequence[Message], Sequence[ToolSpec]], list[Message]] | None = None
    # With tools_as_text: the template still lists the tools itself (it
    # writes only their list well, not the calls).
    template_lists_tools: bool = False
    # How values are written in the family's forced-call arguments.
    notation: Notation = JSON
    # Markers around a call that is a JSON object {"name", "arguments"}
    # (Hermes' <tool_call> ... </tool_call>): under tool_choice auto the
    # object inside may be written as freely as JSON allows (autocall.py).
    json_call: tuple[str, str] | None = None
    # The model's answer is several messages, each opened with the template's
    # turn marker (Harmony's <|start|>assistant): that marker does not end it.
    answer_spans_turns: bool = False
