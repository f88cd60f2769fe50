"""MiniMax M2: `<minimax:tool_call>` around one or more
`<invoke name="NAME">` with one `<parameter name="KEY">` per argument (see
`xmlcalls`), and `<think>` reasoning.

Thinking is always on: the template opens `<think>` in the generation prompt
and has no switch, so `thinking` off cannot be honoured (a forced call lets
the reasoning end first). Reasoning of turns before the last user message is
dropped by the template; after it (tool-call rounds) it is kept."""

from __future__ import annotations

from .base import Family
from .xmlcalls import XmlCallParser, XmlFormat, make_tool_rules

FORMAT = XmlFormat(
    block_open="<minimax:tool_call>",
    block_close="</minimax:tool_call>",
    call_open='<invoke name="',
    name_end='">',
    key_open='<parameter name="',
    key_end='">',
    value_open="",
    value_close="</parameter>",
    call_close="</invoke>",
    trim_newline=False,
    python_words=False,
    grammar_head='<minimax:tool_call>\n<invoke name="',
    grammar_after_name='">\n',
    grammar_value_sep='">',
)


class MiniMaxM2Parser(XmlCallParser):
    """<minimax:tool_call>\\n<invoke name="NAME">\\n<parameter name="KEY">VALUE
    </parameter>\\n</invoke>\\n</minimax:tool_call>"""

    fmt = FORMAT


FAMILY = Family(
    name="minimax-m2",
    markers=("<minimax:tool_call>", "<invoke name="),
    parser=MiniMaxM2Parser,
    tool_rules=make_tool_rules(FORMAT),
    priority=80,
)
