"""GLM 4.5 / 4.6: `<tool_call>NAME` then `<arg_key>KEY</arg_key>` and
`<arg_value>VALUE</arg_value>` per argument, one call per `<tool_call>`
(see `xmlcalls`), and `<think>` reasoning.

Thinking: the template reads `enable_thinking` (off: `/nothink` on the user
turn and an empty `<think></think>` after the generation prompt), so the
plain switch serves. Reasoning of turns before the last user message is
dropped by the template; after it (tool-call rounds) it is kept. The answer
starts after a newline the template writes (`\n<think>...`, or with thinking
off `<think></think>` in the prompt and `\n` before the text): whitespace
before it is dropped."""

from __future__ import annotations

from ...chat import Event
from .base import Family
from .xmlcalls import XmlCallParser, XmlFormat, make_tool_rules

FORMAT = XmlFormat(
    block_open="<tool_call>",
    block_close="",
    call_open="",
    name_end="",  # the name ends at a newline (or the first tag)
    key_open="<arg_key>",
    key_end="</arg_key>",
    value_open="<arg_value>",
    value_close="</arg_value>",
    call_close="</tool_call>",
    trim_newline=False,
    python_words=False,
    grammar_head="<tool_call>",
    grammar_after_name="\n",
    grammar_value_sep="</arg_key>\n<arg_value>",
)


class GlmParser(XmlCallParser):
    """<tool_call>NAME\\n<arg_key>KEY</arg_key>\\n<arg_value>VALUE</arg_value>\\n
    </tool_call>"""

    fmt = FORMAT

    def _start(self, out: list[Event], final: bool) -> bool:
        going = super()._start(out, final)
        if self._mode == "text":  # the template writes a newline before the answer
            self._mode = "gap"
        return going


# Before hermes (90): the template also holds `<tool_call>`.
FAMILY = Family(
    name="glm-4.6",
    markers=("<tool_call>", "<arg_key>", "<arg_value>"),
    parser=GlmParser,
    tool_rules=make_tool_rules(FORMAT),
    priority=80,
)
