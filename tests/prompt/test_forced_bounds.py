"""Grammar conversion of hostile tool schemas is bounded in size and time:
a schema too large to convert, or whose grammar would come out huge (nested
length limits multiply), falls back to "any JSON object"; a grammar that is
still too large is a 400, never a stalled request."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from engy_local.chat import ToolSpec
from engy_local.errors import InvalidRequest
from engy_local.prompt.calls.forced import MAX_GRAMMAR, forced_call_grammar
from engy_local.runtime.engine.sampling import check_grammar


def nest(depth: int, wrap: Any) -> Any:
    schema: Any = {"type": "string"}
    for _ in range(depth):
        schema = wrap(schema)
    return json.loads(json.dumps(schema))  # a tree, as a request body is


def fixed_array(s: Any) -> Any:
    return {"type": "array", "items": s, "minItems": 64, "maxItems": 64}


def two_objects(s: Any) -> Any:
    return {"type": "object", "properties": {"a": s, "b": s}, "required": ["a", "b"]}


def either(s: Any) -> Any:
    return {"anyOf": [s, {"type": "array", "items": s}]}


HOSTILE = [
    ("fixed-length arrays 60 deep", nest(60, fixed_array)),
    ("two objects per level, 14 deep", nest(14, two_objects)),
    ("anyOf per level, 14 deep", nest(14, either)),
    ("an enum of 20,000 long strings", {"enum": [f"value-{i}" * 8 for i in range(20_000)]}),
    ("5,000 required properties", {
        "type": "object",
        "properties": {f"p{i}": {"type": "integer"} for i in range(5000)},
        "required": [f"p{i}" for i in range(5000)],
    }),
]  # fmt: skip


@pytest.mark.parametrize("schema", [c[1] for c in HOSTILE], ids=[c[0] for c in HOSTILE])
@pytest.mark.parametrize("family", ["hermes", "qwen3-coder"])
def test_hostile_schemas_are_bounded(schema: Any, family: str) -> None:
    parameters = {"type": "object", "properties": {"a": schema, "path": {"type": "string"}}}
    started = time.monotonic()
    grammar = forced_call_grammar([ToolSpec("t", "", parameters)], family)
    assert time.monotonic() - started < 20  # seconds, on a slow shared machine
    assert len(grammar) < 300_000
    assert check_grammar(grammar)


def test_a_real_schema_is_still_converted() -> None:
    parameters = {
        "type": "object",
        "properties": {"path": {"type": "string"}, "mode": {"enum": ["text", "lines"]}},
        "required": ["path", "mode"],
    }
    grammar = forced_call_grammar([ToolSpec("read", "", parameters)], "hermes")
    assert '\\"lines\\"' in grammar and "path" in grammar


def test_a_grammar_over_the_limit_is_a_400() -> None:
    # Each tool's grammar is under the per-tool limit; together they are not.
    big = {"type": "object", "properties": {"a": {"enum": [f"{i:04}" * 45 for i in range(1000)]}}}
    tools = [ToolSpec(f"tool_{i}", "", big) for i in range(25)]
    with pytest.raises(InvalidRequest, match=f"over the {MAX_GRAMMAR} limit"):
        forced_call_grammar(tools, "hermes")
