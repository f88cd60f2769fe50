"""DeepSeek V3.2: DSML markup, one parameter element per argument.

    <｜DSML｜function_calls>
    <｜DSML｜invoke name="NAME">
    <｜DSML｜parameter name="path" string="true">/a b</｜DSML｜parameter>
    <｜DSML｜parameter name="limit" string="false">20</｜DSML｜parameter>
    </｜DSML｜invoke>
    </｜DSML｜function_calls>

after the answer text and a blank line. String values are written as they
are (no escaping), the others as JSON. Thinking is the template's `thinking`
switch (the prompt ends in `<think>` or `<think></think>`); the template
keeps the reasoning of the turns after the last user message while thinking
is on (a tool-use loop) and drops the rest.

Rules beyond `framed` and `MarkupCallsParser`: `string="true"` marks a
string value, anything else a JSON one; a call body may instead hold one
bare JSON object (a form other DeepSeek servers accept). Forced calls are
written as the template writes calls, one parameter element per property of
the tool's schema (see `elements.element_call_rules`).
"""

# DeepSeek's markers are written in full-width characters on purpose.
# ruff: noqa: RUF001, RUF002

from __future__ import annotations

from typing import Any

from ...chat import ToolSpec
from ...grammar.gbnf import literal
from .base import Family, ToolRules
from .elements import ElementLayout, element_call_rules
from .framed import MarkupCallsParser

DSML = "｜DSML｜"


class DsmlParser(MarkupCallsParser):
    """DSML calls, in a function_calls (V3.2) or tool_calls (V4) element."""

    call_open = f"<{DSML}invoke"
    call_close = f"</{DSML}invoke>"
    head_end = ">"
    param_open = f"<{DSML}parameter"
    param_close = f"</{DSML}parameter>"
    param_head_end = ">"
    json_open = "{"

    def _is_string(self, attrs: dict[str, str]) -> bool:
        return attrs.get("string") == "true"


class DeepSeekV32Parser(DsmlParser):
    section_open = (f"<{DSML}function_calls>",)
    section_close = f"</{DSML}function_calls>"


def dsml_tool_rules(block: str) -> ToolRules:
    """Forced calls in the template's own layout, inside a `block` element."""
    layout = ElementLayout(
        call_head=lambda name: f'<{DSML}invoke name="{name}">\n',
        key_open=f'<{DSML}parameter name="',
        key_close=lambda kind: f'" string="{"true" if kind == "string" else "false"}">',
        value_close=f"</{DSML}parameter>",
        after_value="\n",
        call_close=f"</{DSML}invoke>\n",
    )

    def tool_rules(tools: list[ToolSpec], rules: dict[str, str]) -> None:
        alternatives = element_call_rules(tools, rules, layout)
        head, tail = literal(f"\n\n<{DSML}{block}>\n"), literal(f"</{DSML}{block}>")
        rules["call"] = f"{head} ({alternatives}) {tail}"

    return tool_rules


def thinking(on: bool) -> dict[str, Any]:
    return {"thinking": on}


FAMILY = Family(
    name="deepseek-v3.2",
    markers=(DSML, "function_calls>"),
    parser=DeepSeekV32Parser,
    tool_rules=dsml_tool_rules("function_calls"),
    priority=60,
    thinking=thinking,
)
