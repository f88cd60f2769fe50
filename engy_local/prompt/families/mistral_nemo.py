"""Mistral Nemo (and Mistral 7B v0.3, Small 2409 / 2501): a JSON list of
calls, `[TOOL_CALLS][{"name": ..., "arguments": {...}, "id": "a1b2c3d4e"}]`.
The parser is the Mistral one (mistral.py), which reads both syntaxes."""

from __future__ import annotations

import json

from ...grammar.gbnf import literal
from .base import Family
from .mistral import OPEN, MistralParser


def call_rules(names: list[str], roots: list[str], rules: dict[str, str]) -> None:
    """[TOOL_CALLS][{"name": "NAME", "arguments": ARGS, "id": "ID"}], with
    the 9-alphanumeric id the template writes after the arguments."""
    for i, (name, root) in enumerate(zip(names, roots, strict=True)):
        quoted = json.dumps(name, ensure_ascii=False)[1:-1]
        rules[f"call-{i}"] = literal(quoted + '", "arguments": ') + " " + root
    alternatives = " | ".join(f"call-{i}" for i in range(len(names)))
    rules["call-id"] = " ".join(["[a-zA-Z0-9]"] * 9)
    head, after = literal(OPEN + '[{"name": "'), literal(', "id": "')
    rules["call"] = f"{head} ({alternatives}) {after} call-id " + literal('"}]')


# After "mistral": this family's one marker is in every Mistral template.
FAMILY = Family(
    name="mistral-nemo",
    markers=(OPEN,),
    parser=MistralParser,
    call_rules=call_rules,
    priority=50,
    reasoning_start="[THINK]",
    reasoning_end="[/THINK]",
)
