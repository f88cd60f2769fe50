"""Hermes / Qwen: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`."""

from __future__ import annotations

import json

from ...grammar.gbnf import literal
from ..parsing.toolparse import HermesParser
from .base import Family


def call_rules(names: list[str], roots: list[str], rules: dict[str, str]) -> None:
    """<tool_call>\\n{"name": "NAME", "arguments": ARGS}\\n</tool_call>"""
    for i, (name, root) in enumerate(zip(names, roots, strict=True)):
        quoted = json.dumps(name, ensure_ascii=False)[1:-1]
        rules[f"call-{i}"] = literal(quoted + '", "arguments": ') + " " + root
    alternatives = " | ".join(f"call-{i}" for i in range(len(names)))
    head, tail = literal('<tool_call>\n{"name": "'), literal("}\n</tool_call>")
    rules["call"] = f"{head} ({alternatives}) {tail}"


# After the more specific families that also use <tool_call> (Qwen3-Coder).
FAMILY = Family(
    name="hermes",
    markers=("<tool_call>",),
    parser=HermesParser,
    call_rules=call_rules,
    priority=90,
    json_call=("<tool_call>", "</tool_call>"),
)
