"""The grammar of a forced tool call (tool_choice any / tool): under it the
model can only write one well-formed call, in its family's own syntax, to
one of the tools, with arguments that follow that tool's schema (as far as
schema.py can say it). `json_answer_grammar` is the same for an answer
that must be JSON (a response format): one value following its schema.

Each tool's argument rules get a prefix (`t0-`, `t1-`, ...) so that tools
compose into one grammar without name clashes. Families that write a tag
per parameter build their rules from the whole specs instead (`tool_rules`).
A tool whose rules come out over MAX_TOOL_GRAMMAR characters (nested length
limits multiply) takes any object instead; a whole grammar over MAX_GRAMMAR
characters is an `InvalidRequest`.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...chat import ToolSpec
from ...errors import InvalidRequest
from ...grammar.gbnf import literal, until
from ...grammar.schema import JSON, OBJECT, Notation, arguments_rules, small, value_rules
from ..families import Family, get

MAX_TOOL_GRAMMAR = 256 * 1024
MAX_GRAMMAR = 4 * 1024 * 1024
# Calls one forced answer may hold where the request allows parallel calls.
MAX_CALLS = 16


def forced_call_grammar(
    tools: Sequence[ToolSpec],
    family: Family | str = "hermes",
    *,
    reasoning: bool = False,
    parallel: bool = False,
) -> str:
    """A grammar whose every sentence is one call to one of `tools` in
    `family`'s syntax; `parallel`: one or more calls (up to MAX_CALLS, each
    after at most two whitespace characters). `reasoning=True`: the output
    starts inside a reasoning block the prompt opened, which must end
    (`</think>` or the family's own marker) before the call."""
    chosen = get(family) if isinstance(family, str) else family
    rules = call_rules(tools, chosen)
    start = "call"
    if parallel:
        # Whitespace after the last call too: a token that ends a call and
        # starts the gap (`>\n\n`) must not oblige another call.
        rules["calls"] = f"call ([ \\t\\n]{{0,2}} call){{0,{MAX_CALLS - 1}}} [ \\t\\n]{{0,2}}"
        start = "calls"
    return grammar_text(rules, start, chosen, reasoning, "tools", "the forced call's grammar")


def call_rules(tools: Sequence[ToolSpec], family: Family) -> dict[str, str]:
    """The rules of one call to one of `tools` in `family`'s syntax, under
    the rule name "call" (a ValueError where the family has none, or there
    are no tools)."""
    if family.call_rules is None and family.tool_rules is None:
        raise ValueError(f"no forced-call grammar for tool-call family {family.name!r}")
    first: dict[str, ToolSpec] = {}
    for tool in tools:
        first.setdefault(tool.name, tool)
    specs = list(first.values())
    if not specs:
        raise ValueError("a forced tool call needs at least one tool")
    rules: dict[str, str] = {}
    if family.tool_rules is not None:  # the family writes each parameter itself
        family.tool_rules([_bounded_spec(spec, family) for spec in specs], rules)
    elif family.call_rules is not None:
        roots = [
            bounded_arguments(spec, f"t{i}-", rules, family.notation)
            for i, spec in enumerate(specs)
        ]
        family.call_rules([spec.name for spec in specs], roots, rules)
    return rules


def json_answer_grammar(
    schema: dict[str, object] | None,
    family: Family,
    *,
    reasoning: bool = False,
    may_think: bool = False,
) -> str:
    """A grammar whose every sentence is one JSON value following `schema`
    (None: any object), in plain JSON whatever the family's call notation.
    A schema whose rules come out over MAX_TOOL_GRAMMAR characters takes
    any object instead. `reasoning` as for `forced_call_grammar`;
    `may_think`: a reasoning block the model opens itself may come first."""
    rules: dict[str, str] = {}
    rules["answer"] = bounded_answer(schema, "j-", rules)
    return grammar_text(
        rules,
        "answer",
        family,
        reasoning,
        "response_format",
        "the JSON grammar",
        may_think=may_think,
    )


def bounded_answer(schema: dict[str, object] | None, prefix: str, rules: dict[str, str]) -> str:
    """Adds the rules of one JSON value following `schema` (None: any
    object; any object too where its rules would be over MAX_TOOL_GRAMMAR
    characters); returns the root rule's name."""
    own: dict[str, str] = {}
    root = value_rules(OBJECT if schema is None else schema, prefix, own)
    if _size(own) > MAX_TOOL_GRAMMAR:
        own = {}
        root = value_rules(OBJECT, prefix, own)
    rules.update(own)
    return root


def grammar_text(
    rules: dict[str, str],
    start: str,
    family: Family,
    reasoning: bool,
    param: str,
    what: str,
    *,
    may_think: bool = False,
) -> str:
    """The rules with their root: `start`, after the reasoning block the
    prompt opened when `reasoning`; after a reasoning block the model may
    open itself (or none) when `may_think`."""
    if reasoning:
        rules.update(until(family.reasoning_end, "reasoning"))
        rules["root"] = f"reasoning-0 [ \\t\\n]? [ \\t\\n]? ({start})"
    elif may_think:
        rules.update(until(family.reasoning_end, "reasoning"))
        opening = literal(family.reasoning_start)
        rules["root"] = f"({opening} reasoning-0 [ \\t\\n]? [ \\t\\n]?)? ({start})"
    else:
        rules["root"] = start
    grammar = "\n".join(f"{name} ::= {body}" for name, body in rules.items()) + "\n"
    if len(grammar) > MAX_GRAMMAR:
        raise InvalidRequest(
            f"{param}: {what} would be {len(grammar)} characters, over the {MAX_GRAMMAR} limit",
            param=param,
        )
    return grammar


def _size(rules: dict[str, str]) -> int:
    return sum(len(k) + len(v) + 5 for k, v in rules.items())


def bounded_arguments(
    spec: ToolSpec, prefix: str, rules: dict[str, str], notation: Notation = JSON
) -> str:
    """The rules of one tool's arguments, or of any object when they would
    be too large."""
    own: dict[str, str] = {}
    root = arguments_rules(spec.parameters, prefix, own, notation)
    if _size(own) > MAX_TOOL_GRAMMAR:
        own = {}
        root = arguments_rules(OBJECT, prefix, own, notation)
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
