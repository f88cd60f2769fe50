"""What only Gemma 4 does: its thinking switch is the template's own, and
forced calls are written in Gemma's notation rather than JSON. Its data and
the shared tests: support/families/gemma4.py, test_families*.py."""

from __future__ import annotations

from support.families.gemma4 import template
from support.families.roundtrip import READ, SEARCH

from engy_local.chat import ToolSpec
from engy_local.prompt.calls.forced import forced_call_grammar
from engy_local.prompt.families import get
from engy_local.runtime.engine.sampling import check_grammar


def test_thinking_is_the_templates_enable_thinking() -> None:
    assert template().thinking_switch == "enable_thinking"
    assert get("gemma4").thinking is None  # prepare passes enable_thinking itself


def test_forced_calls_write_gemma_notation() -> None:
    schema = {
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "mode": {"enum": ["text", "binary"]},
            "fixed": {"const": {"a": 'x"y', "b": [1]}},
            "odd key": {"type": "integer"},
            "free": {"type": "object"},
        },
        "required": ["path"],
    }
    grammar = forced_call_grammar([ToolSpec("read_file", "", schema)], "gemma4")
    assert check_grammar(grammar)
    rules = dict(line.split(" ::= ", 1) for line in grammar.splitlines())
    assert rules["call"] == '"<|tool_call>call:" (call-0) "<tool_call|>"'
    assert rules["call-0"] == '"read_file" t0-root'
    assert rules["t0-path-kv"] == '"path" t0-space ":" t0-space t0-string'
    assert rules["t0-odd-key-kv"].startswith('"<|\\"|>odd key<|\\"|>" t0-space ":"')
    assert rules["t0-string"] == '"<|\\"|>" t0-char* "<|\\"|>" t0-space'
    assert rules["t0-space"] == '""'
    assert '"<|\\"|>text<|\\"|>"' in rules["t0-mode"]
    assert rules["t0-fixed"] == '"{a:<|\\"|>x\\"y<|\\"|>,b:[1]}"'
    assert '"\\""' not in grammar  # no JSON quote is left anywhere


def test_the_round_trips_schemas_compile_in_gemma_notation() -> None:
    specs = [ToolSpec("read_file", "", READ), ToolSpec("search", "", SEARCH)]
    assert check_grammar(forced_call_grammar(specs, "gemma4"))
