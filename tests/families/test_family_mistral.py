"""What only Mistral does: its reasoning markers with no thinking switch in
any template, and tool names that are prefixes of others. Its data and the
shared tests: support/families/mistral.py, test_families*.py."""

from __future__ import annotations

import pytest
from support.families.mistral import FAMILIES, template
from support.parsing import Result, assert_parses, calls

from engy_local.prompt.families import get


@pytest.mark.parametrize(("name", "family"), list(FAMILIES.items()))
def test_reasoning_markers_and_no_thinking_switch(name: str, family: str) -> None:
    chosen = get(family)
    assert (chosen.reasoning_start, chosen.reasoning_end) == ("[THINK]", "[/THINK]")
    # No template has a thinking switch: Ministral 3 reasons when its
    # default system prompt (or the client's) asks it to.
    assert chosen.thinking is None and template(name).thinking_switch is None


def test_tool_names_that_are_prefixes_of_others() -> None:
    output = '[TOOL_CALLS]read[ARGS]{"a": 1}[TOOL_CALLS]read_file[ARGS]{"b": 2}'
    expected = Result(calls=calls(("read", '{"a": 1}'), ("read_file", '{"b": 2}')))
    assert_parses(output, expected, family="mistral", tools=("read_file", "read"))
