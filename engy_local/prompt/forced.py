"""The grammar of a forced tool call (tool_choice any / tool): under it the
model can only write one well-formed call, in its family's own syntax, to
one of the tools, with arguments that follow that tool's schema (as far as
schema.py can say it).

Each tool's argument rules get a prefix (`t0-`, `t1-`, ...) so that tools
compose into one grammar without name clashes. Families that write a tag
per parameter build their rules from the whole specs instead (`tool_rules`).
A tool whose rules come out over MAX_TOOL_GRAMMAR characters (nested length
limits multiply) takes any object instead; a whole grammar over MAX_GRAMMAR
characters is an `InvalidRequest`.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..chat import ToolSpec
from ..errors import InvalidRequest
from .families import Family, get
from .gbnf import until
from .schema import OBJECT, arguments_rules, small

MAX_TOOL_GRAMMAR = 256 * 1024
MAX_GRAMMAR = 4 * 1024 * 1024


def forced_call_grammar(
    tools: Sequence[ToolSpec], family: Family | str = "hermes", *, reasoning: bool = False
) -> str:
    """A grammar whose every sentence is one call to one of `tools` in
    `family`'s syntax. `reasoning=True`: the output starts inside a reasoning
    block the prompt opened, which must end (`</think>` or the family's own
    marker) before the call."""
    chosen = get(family) if isinstance(family, str) else family
    if chosen.call_rules is None and chosen.tool_rules is None:
        raise ValueError(f"no forced-call grammar for tool-call family {chosen.name!r}")
    first: dict[str, ToolSpec] = {}
    for tool in tools:
        first.setdefault(tool.name, tool)
    specs = list(first.values())
    if not specs:
        raise ValueError("a forced tool call needs at least one tool")
    rules: dict[str, str] = {}
    if chosen.tool_rules is not None:  # the family writes each parameter itself
        chosen.tool_rules([_bounded_spec(spec, chosen) for spec in specs], rules)
    elif chosen.call_rules is not None:
        roots = [_bounded_arguments(spec, f"t{i}-", rules, chosen) for i, spec in enumerate(specs)]
        chosen.call_rules([spec.name for spec in specs], roots, rules)
    if reasoning:
        rules.update(until(chosen.reasoning_end, "reasoning"))
        rules["root"] = "reasoning-0 [ \\t\\n]? [ \\t\\n]? call"
    else:
        rules["root"] = "call"
    grammar = "\n".join(f"{name} ::= {body}" for name, body in rules.items()) + "\n"
    if len(grammar) > MAX_GRAMMAR:
        raise InvalidRequest(
            f"tools: the forced call's grammar would be {len(grammar)} characters, "
            f"over the {MAX_GRAMMAR} limit",
            param="tools",
        )
    return grammar


def _size(rules: dict[str, str]) -> int:
    return sum(len(k) + len(v) + 5 for k, v in rules.items())


def _bounded_arguments(spec: ToolSpec, prefix: str, rules: dict[str, str], family: Family) -> str:
    """The rules of one tool's arguments, or of any object when they would
    be too large."""
    own: dict[str, str] = {}
    root = arguments_rules(spec.parameters, prefix, own, family.notation)
    if _size(own) > MAX_TOOL_GRAMMAR:
        own = {}
        root = arguments_rules(OBJECT, prefix, own, family.notation)
    rules.update(own)
    return root


def _bounded_spec(spec: ToolSpec, family: Family) -> ToolSpec:
    """`spec`, or, when its parameters are too large to convert or their
    rules come out too large, the same tool taking any object."""
    assert family.tool_rules is not None
    if small(spec.parameters):
        scratch: dict[str, str] = {}
        family.tool_rules([spec], scratch)
        if _size(scratch) <= MAX_TOOL_GRAMMAR:
            return spec
    return ToolSpec(spec.name, spec.description, dict(OBJECT))
