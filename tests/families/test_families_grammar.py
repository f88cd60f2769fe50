"""The forced-call grammars of every family that can force a call, over
each family's data (support/families/<family>.py): they compile for real
clients' tools, accept exactly the calls they should, accept the calls the
template writes, and whatever they let a model write is one valid call."""

from __future__ import annotations

import random
from typing import Any

import jsonschema
import pytest
from support.families import CASES
from support.families.grammars import Vocabs, one_call
from support.families.spec import Accepts, Case, Compiles, OwnCalls, RandomCalls
from support.grammar import captured_tools

from engy_local.prompt.calls.forced import forced_call_grammar
from engy_local.runtime.engine.sampling import check_grammar


@pytest.mark.parametrize(
    "row",
    [
        pytest.param(row, id=f"{case.name}-{row.family}-{row.request.split('-first')[0]}")
        for case in CASES
        for row in case.compiles
    ],
)
def test_every_captured_tool_compiles(row: Compiles) -> None:
    tools = captured_tools(row.request)
    for tool in tools:
        grammar = forced_call_grammar([tool], row.family, reasoning=row.reasoning_each)
        assert check_grammar(grammar), tool.name
    assert check_grammar(forced_call_grammar(tools, row.family, reasoning=row.reasoning_all))


def accepts_ids(case: Case) -> list[Any]:
    return [
        pytest.param(row, id=f"{case.name}-{row.family}-{i}-{'yes' if row.ok else 'no'}")
        for i, row in enumerate(case.accepts)
    ]


@pytest.mark.parametrize("row", [p for case in CASES for p in accepts_ids(case)])
def test_grammar_accepts_exactly_the_calls(vocabs: Vocabs, row: Accepts) -> None:
    gbnf = forced_call_grammar(row.tools, row.family, reasoning=row.reasoning)
    assert vocabs.plain.accepts(gbnf, row.text) is row.ok, row.text
    if row.parsed is not None:
        names = [t.name for t in row.tools]
        assert one_call(row.family, row.text, names) == row.parsed


@pytest.mark.parametrize(
    "row", [pytest.param(row, id=case.name) for case in CASES for row in case.own_calls]
)
def test_grammar_accepts_the_templates_own_calls(vocabs: Vocabs, row: OwnCalls) -> None:
    for tools, text in row.calls():
        assert vocabs.plain.accepts(forced_call_grammar(tools, row.family), text), text


@pytest.mark.parametrize(
    "row",
    [
        pytest.param(row, id=f"{case.name}-{row.family}")
        for case in CASES
        for row in case.random_calls
    ],
)
def test_random_calls_the_grammar_allows_are_valid(vocabs: Vocabs, row: RandomCalls) -> None:
    """Whatever the grammar lets a model write parses into exactly one call
    whose arguments follow the tool's schema."""
    gbnf = forced_call_grammar(row.tools, row.family)
    schemas = {t.name: t.parameters for t in row.tools}
    finished = 0
    for seed in row.seeds:
        text = row.walk(vocabs, gbnf, random.Random(seed))
        if text is None:  # the walk did not end within its limit
            continue
        finished += 1
        name, arguments = one_call(row.family, text, row.parse_tools)
        jsonschema.validate(arguments, schemas[name])
    assert finished >= row.min_finished
