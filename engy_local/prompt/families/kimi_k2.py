"""Kimi K2: calls after the answer text, each named by an id
`functions.NAME:INDEX`, arguments as a JSON object.

    <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0<|tool_call_argument_begin|>
    {"a": 1}<|tool_call_end|><|tool_call_begin|>...<|tool_call_end|><|tool_calls_section_end|>

The templates number calls across the whole conversation (Kimi-K2-Instruct)
or within a turn (the first K2 template); results come back as
`## Return of functions.NAME:INDEX`. The K2 Instruct template has no
thinking; later K2 models reason in `<think>` ... `</think>`.

Rules beyond `framed`: the tool's name is the id without its `functions.`
prefix and `:INDEX` suffix (each optional); whitespace around the id and
the arguments is dropped. Forced calls let the model write the index.
"""

from __future__ import annotations

from ...grammar.gbnf import literal
from .base import Family
from .framed import JsonCallsParser

SECTION_BEGIN = "<|tool_calls_section_begin|>"
SECTION_END = "<|tool_calls_section_end|>"
CALL_BEGIN = "<|tool_call_begin|>"
CALL_END = "<|tool_call_end|>"
ARGUMENT_BEGIN = "<|tool_call_argument_begin|>"


def tool_name(call_id: str) -> str:
    """`functions.NAME:INDEX` -> NAME."""
    name = call_id.strip()
    name = name.removeprefix("functions.")
    head, colon, index = name.rpartition(":")
    return head if colon and index.isdigit() else name


class KimiK2Parser(JsonCallsParser):
    section_open = (SECTION_BEGIN,)
    section_close = SECTION_END
    call_open = CALL_BEGIN
    call_close = CALL_END
    head_end = ARGUMENT_BEGIN

    def _name(self, head: str) -> str | None:
        return tool_name(head) or None


def call_rules(names: list[str], roots: list[str], rules: dict[str, str]) -> None:
    """<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:N<|tool_call_argument_begin|>
    ARGS<|tool_call_end|><|tool_calls_section_end|>"""
    index = f'":" [0-9] [0-9]? [0-9]? {literal(ARGUMENT_BEGIN)}'
    for i, (name, root) in enumerate(zip(names, roots, strict=True)):
        rules[f"call-{i}"] = f"{literal('functions.' + name)} {index} {root}"
    alternatives = " | ".join(f"call-{i}" for i in range(len(names)))
    head, tail = literal(SECTION_BEGIN + CALL_BEGIN), literal(CALL_END + SECTION_END)
    rules["call"] = f"{head} ({alternatives}) {tail}"


FAMILY = Family(
    name="kimi-k2",
    markers=(SECTION_BEGIN, ARGUMENT_BEGIN),
    parser=KimiK2Parser,
    call_rules=call_rules,
    priority=60,
)
