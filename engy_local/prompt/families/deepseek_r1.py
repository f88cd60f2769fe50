"""DeepSeek R1 (and V3-0324, and the R1 distills' templates): a typed head,
the tool's name on its own line, the arguments in a ```json fence.

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
    ```json
    {"a": 1}
    ```<｜tool▁call▁end｜>
    <｜tool▁call▁begin｜>...<｜tool▁call▁end｜><｜tool▁calls▁end｜>

The prompt opens the reasoning itself (`<｜Assistant｜><think>\\n`), so the
output starts inside it; the templates drop earlier reasoning (they keep
what follows `</think>` in an answer), and only the distill-Qwen template
has a switch (`enable_thinking`). The tools are described at the end of the
system prompt as for V3.1, with this syntax (R1's own templates show no
tool list; llama.cpp's R1 template, which does, then gets none).

Rules beyond `framed`: the name runs from `<｜tool▁sep｜>` to the end of its
line (the type before it is ignored); the fence is optional. The spellings
of the section marker that R1 is known to write in its place
(`<｜tool_calls_begin｜>`, `<｜tool calls begin｜>`, `<｜tool\\_calls\\_begin｜>`,
`<｜tool▁calls｜>`) open a section too.
"""

# DeepSeek's markers are written in full-width characters on purpose.
# ruff: noqa: RUF001, RUF002

from __future__ import annotations

import re
from collections.abc import Sequence

from ...chat import Message, ToolSpec
from ...grammar.gbnf import literal
from .base import Family
from .deepseek_v31 import CALL_BEGIN, CALL_END, CALLS_BEGIN, CALLS_END, SEP, with_tools_described
from .framed import JsonCallsParser

_ALIASES = (
    "<｜tool_calls_begin｜>",
    "<｜tool calls begin｜>",
    "<｜tool\\_calls\\_begin｜>",
    "<｜tool▁calls｜>",
)
_NAME = re.compile(r"[ \t]*[^\s`{]*")


class DeepSeekR1Parser(JsonCallsParser):
    section_open = (CALLS_BEGIN, *_ALIASES)
    section_close = CALLS_END
    call_open = CALL_BEGIN
    call_close = CALL_END
    head_end = SEP

    def _split_head(self, buf: str, final: bool) -> tuple[str, int] | None:
        at = buf.find(SEP)
        if at < 0:
            return (buf, len(buf)) if final else None
        start = at + len(SEP)
        match = _NAME.match(buf, start)
        assert match is not None  # the pattern matches the empty string
        if match.end() == len(buf) and not final:
            return None  # the name may go on
        return buf[: match.end()], match.end()

    def _name(self, head: str) -> str | None:
        _, sep, name = head.partition(SEP)
        return name.strip() or None if sep else None


def call_rules(names: list[str], roots: list[str], rules: dict[str, str]) -> None:
    """...function<｜tool▁sep｜>NAME\\n```json\\nARGS\\n```<｜tool▁call▁end｜>..."""
    for i, (name, root) in enumerate(zip(names, roots, strict=True)):
        rules[f"call-{i}"] = f"{literal(name + chr(10) + '```json' + chr(10))} {root}"
    alternatives = " | ".join(f"call-{i}" for i in range(len(names)))
    head = literal(CALLS_BEGIN + CALL_BEGIN + "function" + SEP)
    tail = literal("\n```" + CALL_END + CALLS_END)
    rules["call"] = f"{head} ({alternatives}) {tail}"


SYNTAX = (
    f"{CALLS_BEGIN}{CALL_BEGIN}function{SEP}tool_call_name\n```json\ntool_call_arguments\n```"
    f"{CALL_END}{{{{additional_tool_calls}}}}{CALLS_END}"
)


def tools_as_text(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> list[Message]:
    return with_tools_described(messages, tools, SYNTAX)


FAMILY = Family(
    name="deepseek-r1",
    markers=(CALLS_BEGIN, SEP, "```json"),
    parser=DeepSeekR1Parser,
    call_rules=call_rules,
    priority=50,
    tools_as_text=tools_as_text,
)
