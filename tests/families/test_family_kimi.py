"""What only Kimi does: call ids that name the tool, and K3 opening its
reasoning in the prompt with its own tag. Its data and the shared tests:
support/families/kimi.py, test_families*.py."""

from __future__ import annotations

import pytest
from support.families.framed import LOOP, prompt
from support.families.kimi import SWITCH
from support.families.prompts import source

from engy_local.prompt.families import detect_family, get
from engy_local.prompt.families.kimi_k2 import tool_name


@pytest.mark.parametrize(
    ("call_id", "name"),
    [
        ("functions.Read:0", "Read"),
        (" functions.mcp__fs.read:12 ", "mcp__fs.read"),
        ("Read:3", "Read"),
        ("functions.Read", "Read"),
        ("ns:tool", "ns:tool"),
    ],
)
def test_tool_name_from_call_id(call_id: str, name: str) -> None:
    assert tool_name(call_id) == name


@pytest.mark.parametrize(("template", "thinking", "kept"), [(t, s, k) for t, s, _, k in SWITCH])
def test_k3_opens_its_reasoning_in_the_prompt(
    template: str, thinking: bool | None, kept: bool
) -> None:
    """The engine reads the output as reasoning from the first token exactly
    when the prompt ends with the family's reasoning_start."""
    text = prompt(template, LOOP, thinking=thinking)
    family = get(detect_family(source(template)))
    assert text.rstrip().endswith(family.reasoning_start) == (kept and family.name == "kimi-k3")
