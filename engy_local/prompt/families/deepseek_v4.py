"""DeepSeek V4: V3.2's DSML markup in a `tool_calls` element.

    <｜DSML｜tool_calls>
    <｜DSML｜invoke name="NAME">
    <｜DSML｜parameter name="path" string="true">/a b</｜DSML｜parameter>
    </｜DSML｜invoke>
    </｜DSML｜tool_calls>

Parsing rules and forced calls as in `deepseek_v32`. Thinking is the
template's `thinking` switch (the prompt ends in `<think>` or `</think>`);
while thinking is on the template keeps earlier reasoning whenever tools are
offered or used, and after the last user message (its `drop_thinking`
default); with thinking off it renders none.
"""

# DeepSeek's markers are written in full-width characters on purpose.
# ruff: noqa: RUF002

from __future__ import annotations

from .base import Family
from .deepseek_v32 import DSML, DsmlParser, dsml_tool_rules, thinking


class DeepSeekV4Parser(DsmlParser):
    section_open = (f"<{DSML}tool_calls>",)
    section_close = f"</{DSML}tool_calls>"


FAMILY = Family(
    name="deepseek-v4",
    markers=(DSML, "tool_calls>"),
    parser=DeepSeekV4Parser,
    tool_rules=dsml_tool_rules("tool_calls"),
    priority=60,
    thinking=thinking,
)
