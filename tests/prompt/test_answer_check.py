"""What the grammar cannot hold of a schema (a gap) is named, refused under
strict, and checked once the answer ends: a value that breaks it is a
BrokenAnswer (each API's server error), never a success."""

from __future__ import annotations

import json
from typing import Any

import pytest

from engy_local.chat import ChatRequest, JsonOutput, Message, Text, ToolSpec
from engy_local.errors import BrokenAnswer, InvalidRequest
from engy_local.grammar.answercheck import answer_check
from engy_local.grammar.schema import gaps
from engy_local.prompt.parsing.assemble import AnswerAssembler
from engy_local.prompt.parsing.toolparse import HermesParser
from engy_local.prompt.prepare import refuse_gaps

# keyword, schema, the gap it names, a value that validates, one that breaks it
GAPS: list[tuple[str, dict[str, Any], str, Any, Any]] = [
    ("uniqueItems", {"type": "array", "items": {"type": "integer"}, "uniqueItems": True},
     "uniqueItems", [1, 2], [1, 1]),
    ("multipleOf", {"type": "integer", "multipleOf": 5}, "multipleOf", 10, 7),
    ("not", {"type": "integer", "not": {"const": 3}}, "not", 4, 3),
    ("minProperties with optional keys",
     {"type": "object", "properties": {"a": {"type": "integer"}}, "minProperties": 1},
     "minProperties", {"a": 1}, {}),
    ("dependentRequired",
     {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
      "dependentRequired": {"a": ["b"]}}, "dependentRequired", {"a": 1, "b": 2}, {"a": 1}),
    ("overlapping oneOf", {"oneOf": [{"type": "integer"}, {"type": "number"}]},
     "oneOf", 1.5, 1),
    ("a fractional bound on a number", {"type": "number", "minimum": 0.5},
     "minimum/maximum with a fraction", 0.75, 0.25),
    ("a length past the grammar's limit", {"type": "string", "maxLength": 600},
     "maxLength over 512", "x", "x" * 601),
    ("a length beside a pattern", {"type": "string", "pattern": "^a+$", "maxLength": 3},
     "maxLength beside pattern", "aa", "aaaa"),
    ("an unknown format", {"type": "string", "format": "ipv6"}, "format ipv6", "::1", "nope"),
    ("propertyNames", {"type": "object", "propertyNames": {"maxLength": 2}},
     "propertyNames", {"ab": 1}, {"abc": 1}),
]  # fmt: skip

HELD: list[tuple[str, dict[str, Any]]] = [
    ("integer bounds", {"type": "integer", "minimum": 3, "maximum": 319}),
    ("exclusive bounds", {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 9}),
    ("integral bounds on a number", {"type": "number", "exclusiveMinimum": 0, "maximum": 1}),
    ("pattern", {"type": "string", "pattern": "^[A-Z]{3}$"}),
    ("lengths", {"type": "string", "minLength": 2, "maxLength": 200}),
    ("formats", {"type": "array", "prefixItems": [
        {"type": "string", "format": f} for f in ("date", "time", "date-time", "uuid", "email")
    ]}),
    ("minProperties the required keys meet", {
        "type": "object", "properties": {"a": {}, "b": {}}, "required": ["a"],
        "minProperties": 1}),
    ("disjoint oneOf", {"oneOf": [{"type": "string"}, {"type": "integer"}]}),
    ("uniqueItems false", {"type": "array", "uniqueItems": False}),
    ("annotations and unknown keywords", {
        "type": "string", "title": "t", "description": "d", "examples": ["x"], "x-kind": 1,
        "deprecated": False, "$comment": "c"}),
    ("recursion", {"$defs": {"n": {"type": "object", "properties": {
        "k": {"type": "array", "items": {"$ref": "#/$defs/n"}}}}}, "$ref": "#/$defs/n"}),
]  # fmt: skip


@pytest.mark.parametrize(
    ("schema", "named", "good", "bad"), [c[1:] for c in GAPS], ids=[c[0] for c in GAPS]
)
def test_a_gap_is_named_and_a_value_that_breaks_it_is_caught(
    schema: dict[str, Any], named: str, good: Any, bad: Any
) -> None:
    found = gaps(schema)
    assert any(g.startswith(named) for g in found), found
    check = answer_check({}, schema)
    assert check is not None
    check.answer(json.dumps(good))
    with pytest.raises(BrokenAnswer, match="does not follow its schema"):
        check.answer(json.dumps(bad))


@pytest.mark.parametrize("schema", [c[1] for c in HELD], ids=[c[0] for c in HELD])
def test_what_the_grammar_holds_has_no_gap_and_no_check(schema: dict[str, Any]) -> None:
    assert gaps(schema) == []
    assert answer_check({"t": schema}, schema) is None  # nothing left to check


def _call(assembler: AnswerAssembler, arguments: str) -> None:
    text = f'<tool_call>\n{{"name": "tag", "arguments": {arguments}}}\n</tool_call>'
    assembler.feed(text)


def test_a_call_that_breaks_its_tool_schema_ends_as_broken() -> None:
    schema = {
        "type": "object",
        "properties": {"tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}},
        "required": ["tags"],
    }
    check = answer_check({"tag": schema}, None)
    parser = HermesParser(tools={"tag": schema}, thinking=False, new_id=lambda: "call_1")
    ok = AnswerAssembler(parser, single_call=True, check=check)
    _call(ok, '{"tags": ["a", "b"]}')
    assert ok.called
    parser = HermesParser(tools={"tag": schema}, thinking=False, new_id=lambda: "call_2")
    broken = AnswerAssembler(parser, single_call=True, check=check)
    with pytest.raises(BrokenAnswer, match=r"call to tag .*non-unique"):
        _call(broken, '{"tags": ["a", "a"]}')


def test_a_structured_answer_is_checked_when_it_ends_not_when_it_is_cut() -> None:
    schema = {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}
    check = answer_check({}, schema)
    parser = HermesParser(tools={}, thinking=False, new_id=lambda: "call_1")
    cut = AnswerAssembler(parser, single_call=False, check=check)
    cut.feed("[1, 1")
    cut.finish("length", 1, 0, 1)  # incomplete, and it says so
    parser = HermesParser(tools={}, thinking=False, new_id=lambda: "call_1")
    ended = AnswerAssembler(parser, single_call=False, check=check)
    ended.feed("[1, 1]")
    with pytest.raises(BrokenAnswer, match="the answer does not follow its schema"):
        ended.finish("end", 1, 0, 1)


def _request(
    schema: dict[str, Any],
    strict: bool,
    tool: dict[str, Any] | None = None,
    tool_strict: bool = False,
) -> ChatRequest:
    parameters = {"type": "object", "properties": {"n": tool or {"type": "integer"}}}
    return ChatRequest(
        "m",
        (Message("user", (Text("hi"),)),),
        tools=(ToolSpec("t", "", parameters, tool_strict),),
        json_output=JsonOutput(schema, strict=strict, field="text.format.schema"),
    )


def test_strict_refuses_a_gap_naming_the_keyword_and_the_field() -> None:
    unique = {"type": "array", "uniqueItems": True}
    with pytest.raises(InvalidRequest, match=r"text.format.schema: .*uniqueItems") as err:
        refuse_gaps(_request(unique, strict=True))
    assert err.value.param == "text.format.schema"
    with pytest.raises(
        InvalidRequest, match=r"tools: t is strict.*uniqueItems \(at properties.n\)"
    ):
        refuse_gaps(_request({"type": "integer"}, False, tool=unique, tool_strict=True))
    # Not strict: served, and checked after the answer.
    refuse_gaps(_request(unique, strict=False, tool=unique))
    # Strict, with everything held: served.
    held = {"type": "integer", "maximum": 3}
    refuse_gaps(_request(held, strict=True, tool=held, tool_strict=True))
