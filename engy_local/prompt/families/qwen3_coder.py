"""Qwen3-Coder: `<tool_call>` around `<function=NAME>` with one
`<parameter=KEY>` tag per argument (see `xmlcalls`). The same syntax serves
the templates that copied it (Nemotron 3 Nano, StepFun 3.5), with `<think>`
reasoning where they have it. Qwen3-Coder itself does not reason."""

from __future__ import annotations

from .base import Family
from .xmlcalls import XmlCallParser, XmlFormat, make_tool_rules

FORMAT = XmlFormat(
    block_open="<tool_call>",
    block_close="</tool_call>",
    call_open="<function=",
    name_end=">",
    key_open="<parameter=",
    key_end=">",
    value_open="",
    value_close="</parameter>",
    call_close="</function>",
    trim_newline=True,
    python_words=True,
    grammar_head="<tool_call>\n<function=",
    grammar_after_name=">\n",
    grammar_value_sep=">\n",
)


class Qwen3CoderParser(XmlCallParser):
    """<tool_call>\\n<function=NAME>\\n<parameter=KEY>\\nVALUE\\n</parameter>\\n
    </function>\\n</tool_call>"""

    fmt = FORMAT


# Before hermes (90): the template also holds `<tool_call>`.
FAMILY = Family(
    name="qwen3-coder",
    markers=("<tool_call>", "<function=", "<parameter="),
    parser=Qwen3CoderParser,
    tool_rules=make_tool_rules(FORMAT),
    priority=80,
)
