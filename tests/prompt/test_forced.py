"""Forced-call grammars: they compile in llama.cpp for every real tool schema
of Claude Code and Codex, and, run by llama.cpp's own grammar sampler on a
real vocabulary, accept exactly the well-formed calls."""

from __future__ import annotations

import json
import random
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
from llama_cpp.llama_grammar import LlamaGrammar
from support.grammar import CLIENTS, Vocab, captured_tools

from engy_local.chat import TextDelta, ToolCallEnd, ToolCallStart, ToolSpec
from engy_local.grammar.schema import gaps
from engy_local.prompt.calls.forced import forced_call_grammar, json_answer_grammar
from engy_local.prompt.families import get
from engy_local.prompt.parsing.toolparse import HermesParser
from engy_local.runtime.engine.sampling import check_grammar


@pytest.mark.parametrize("request_file", CLIENTS)
def test_every_captured_tool_compiles(request_file: str) -> None:
    tools = captured_tools(request_file)
    assert len(tools) >= 8
    for tool in tools:
        gbnf = forced_call_grammar([tool])
        assert check_grammar(gbnf), tool.name
        LlamaGrammar.from_string(gbnf, verbose=False)
        assert json.dumps(tool.name) in gbnf.replace('\\"', '"')
        for prop in tool.parameters.get("properties", {}):  # not the any-object fallback
            assert f'\\"{prop}\\"' in gbnf, (tool.name, prop)
    everything = forced_call_grammar(tools)
    assert check_grammar(everything)
    assert len(everything) < 100_000


def test_markers_and_names_appear() -> None:
    gbnf = forced_call_grammar([ToolSpec("get_time", "", {"type": "object"})])
    assert '"<tool_call>\\n{\\"name\\": \\""' in gbnf
    assert '"get_time\\", \\"arguments\\": "' in gbnf
    assert '"}\\n</tool_call>"' in gbnf


def test_bad_requests() -> None:
    with pytest.raises(ValueError, match="unknown tool-call family 'nope'"):
        forced_call_grammar([ToolSpec("a", "", {})], family="nope")
    with pytest.raises(ValueError, match="no forced-call grammar"):
        forced_call_grammar([ToolSpec("a", "", {})], family="none")
    with pytest.raises(ValueError, match="at least one tool"):
        forced_call_grammar([])


# ---- running the grammar in llama.cpp ----------------------------------------


BASH = ToolSpec(
    "Bash",
    "Run a command",
    {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "the command"},
            "timeout": {"type": "integer", "minimum": 0},
            "mode": {"type": "string", "enum": ["fast", 'say "hi"\\']},
        },
        "required": ["command"],
        "additionalProperties": False,
    },
)
READ = ToolSpec(
    "Read",
    "Read files",
    {
        "type": "object",
        "properties": {
            "paths": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
            "limit": {"type": ["integer", "null"]},
        },
        "required": ["paths"],
    },
)


def call(name: str, args: str) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        (call("Bash", '{"command": "ls -la"}'), True),
        (call("Bash", '{"command": "echo \\"}\\" \\u00e9", "timeout": 30}'), True),
        (call("Bash", '{"command": "x", "mode": "say \\"hi\\"\\\\"}'), True),
        (call("Read", '{"paths": ["/a", "/b"], "limit": null}'), True),
        (call("Read", '{"paths": []}'), True),
        (call("Bash", "{}"), False),  # command is required
        (call("Bash", '{"command": "ls", "extra": 1}'), False),  # no other keys
        (call("Bash", '{"command": "ls", "mode": "slow"}'), False),  # not in the enum
        (call("Bash", '{"command": 5}'), False),
        (call("Bash", '{"command": "a\nb"}'), True),  # a raw newline in a string: sent escaped
        (call("Read", '{"paths": ["/a", "/b", "/c"]}'), False),  # maxItems
        (call("Write", '{"command": "ls"}'), False),  # not offered
        ("Sure! " + call("Bash", '{"command": "ls"}'), False),
        (call("Bash", '{"command": "ls"}') + "\n" + call("Bash", '{"command": "ls"}'), False),
    ],
)
def test_grammar_accepts_exactly_the_calls(vocab: Vocab, text: str, ok: bool) -> None:
    assert vocab.accepts(forced_call_grammar([BASH, READ]), text) is ok


def test_reasoning_comes_first(vocab: Vocab) -> None:
    gbnf = forced_call_grammar([BASH], reasoning=True)
    body = call("Bash", '{"command": "ls"}')
    assert vocab.accepts(gbnf, "Plan: a <b> </thin </ </think\n</think>\n\n" + body)
    assert vocab.accepts(gbnf, "</think>" + body)
    assert not vocab.accepts(gbnf, body)  # the reasoning block must end first
    assert not vocab.accepts(gbnf, "a</think> b</think>\n" + body)


def test_tools_with_the_same_definition_names_do_not_clash(vocab: Vocab) -> None:
    def tool(name: str, item: dict[str, Any]) -> ToolSpec:
        return ToolSpec(
            name,
            "",
            {
                "type": "object",
                "properties": {"x": {"$ref": "#/$defs/Item"}},
                "required": ["x"],
                "$defs": {"Item": item},
            },
        )

    gbnf = forced_call_grammar([tool("A", {"type": "integer"}), tool("B", {"type": "boolean"})])
    assert vocab.accepts(gbnf, call("A", '{"x": 5}'))
    assert vocab.accepts(gbnf, call("B", '{"x": true}'))
    assert not vocab.accepts(gbnf, call("A", '{"x": true}'))
    assert not vocab.accepts(gbnf, call("B", '{"x": 5}'))


ODD = ToolSpec(
    "Odd",
    "",
    {
        "type": "object",
        "properties": {
            "id": {"type": "string", "pattern": "^\\d+(?=x)$"},
            "script": {"type": "string", "maxLength": 524288},
            "anything": {"description": "any JSON value"},
            "yes": True,
            "never": False,
            "remote": {"$ref": "https://example.com/schema.json"},
            "cond": {"if": {"type": "string"}, "then": {"minLength": 1}, "not": {}},
            "fmt": {"type": "string", "format": "ipv6"},
            "short": {"type": "string", "minLength": 1, "maxLength": 3},
        },
        "required": ["id"],
        "additionalProperties": False,
    },
)


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        (call("Odd", '{"id": "not digits", "script": "' + "x" * 700 + '"}'), True),
        (call("Odd", '{"id": "1", "anything": [1, {"a": null}], "yes": "s", "remote": 1}'), True),
        (call("Odd", '{"id": "1", "cond": false, "fmt": "nope"}'), True),
        (call("Odd", '{"id": "1", "short": "abc"}'), True),
        (call("Odd", '{"id": "1", "short": "abcd"}'), False),
        (call("Odd", '{"id": "1", "never": 1}'), False),
        (call("Odd", '{"script": "x"}'), False),
    ],
)
def test_unsupported_keywords_degrade(vocab: Vocab, text: str, ok: bool) -> None:
    assert vocab.accepts(forced_call_grammar([ODD]), text) is ok


def test_unusable_schema_falls_back_to_any_object(vocab: Vocab) -> None:
    broken = ToolSpec("Broken", "", {"type": "object", "properties": {"a": {"$ref": "#/nope"}}})
    not_object = ToolSpec("List", "", {"type": "array"})
    gbnf = forced_call_grammar([broken, not_object])
    assert vocab.accepts(gbnf, call("Broken", '{"b": [1]}'))
    assert vocab.accepts(gbnf, call("List", '{"c": {}}'))
    assert not vocab.accepts(gbnf, call("List", "[1]"))


@pytest.mark.parametrize("seed", range(12))
def test_random_sentences_are_valid_calls(vocab: Vocab, seed: int) -> None:
    """Whatever the grammar lets a model write parses into one call whose
    arguments validate against the tool's schema."""
    tools = [BASH, READ, ToolSpec("Free", "", {"type": "object"})]
    rng = random.Random(seed)
    text = vocab.random_sentence(forced_call_grammar(tools), rng)
    if text is None:
        pytest.skip("the random walk did not finish")
    parser = HermesParser(tools=[t.name for t in tools], thinking=False, new_id=lambda: "id")
    events = parser.feed(text) + parser.finish()
    starts = [e for e in events if isinstance(e, ToolCallStart)]
    ends = [e for e in events if isinstance(e, ToolCallEnd)]
    assert len(starts) == len(ends) == 1, text
    assert not [e for e in events if isinstance(e, TextDelta)], text
    schema = {t.name: t.parameters for t in tools}[starts[0].name]
    jsonschema.validate(json.loads(ends[0].arguments), schema)


# ---- a JSON answer (response_format) ------------------------------------------------

PERSON: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    ("schema", "text", "ok"),
    [
        (None, '{"any": [1, {"x": null}]}', True),
        (None, "{}", True),
        (None, "[1]", False),  # json_object: an object
        (None, "Sure: {}", False),
        (None, "```json\n{}\n```", False),
        (None, '{"a": 1} and more', False),
        (PERSON, '{"name": "Ann", "age": 7}', True),
        (PERSON, '{"name": "Ann", "age": 7, "tags": ["b", "a"]}', True),
        (PERSON, '{"name": "Ann"}', False),  # age is required
        (PERSON, '{"name": "Ann", "age": "7"}', False),
        (PERSON, '{"name": "Ann", "age": 7, "x": 1}', False),
        (PERSON, '{"name": "Ann", "age": 7, "tags": ["c"]}', False),
        (PERSON, '{"name": "Annabelle-Maria", "age": 7}', False),  # maxLength
        ({"type": "array", "items": {"type": "number"}}, "[1, 2.5, -3]", True),
        ({"type": "array", "items": {"type": "number"}}, '["1"]', False),
    ],
)
def test_json_answer_grammar_accepts_exactly_the_schema(
    vocab: Vocab, schema: dict[str, Any] | None, text: str, ok: bool
) -> None:
    gbnf = json_answer_grammar(schema, get("hermes"))
    assert check_grammar(gbnf)
    assert vocab.accepts(gbnf, text) is ok


def test_json_answer_after_a_reasoning_block_the_model_may_open(vocab: Vocab) -> None:
    gbnf = json_answer_grammar(PERSON, get("hermes"), may_think=True)
    assert check_grammar(gbnf)
    assert vocab.accepts(gbnf, '<think>\nAnn, 7.\n</think>\n\n{"name": "Ann", "age": 7}')
    assert vocab.accepts(gbnf, '{"name": "Ann", "age": 7}')  # or none
    assert not vocab.accepts(gbnf, 'Hm.</think>\n{"name": "Ann", "age": 7}')
    assert not vocab.accepts(gbnf, '<think>Ann</think>\n{"name": "Ann"}')
    mistral = json_answer_grammar(PERSON, get("mistral"), may_think=True)
    assert vocab.accepts(mistral, '[THINK]Ann.[/THINK]{"name": "Ann", "age": 7}')


def test_json_answer_after_reasoning_and_in_plain_json_for_every_family(vocab: Vocab) -> None:
    gbnf = json_answer_grammar(PERSON, get("hermes"), reasoning=True)
    assert vocab.accepts(gbnf, 'Hm.</think>\n{"name": "A", "age": 1}')
    assert not vocab.accepts(gbnf, '{"name": "A", "age": 1}')
    # Gemma 4 writes calls in its own notation; an answer is still JSON.
    assert vocab.accepts(json_answer_grammar(PERSON, get("gemma4")), '{"name": "A", "age": 1}')


@pytest.mark.parametrize("seed", range(6))
def test_json_answer_random_sentences_validate(vocab: Vocab, seed: int) -> None:
    text = vocab.random_sentence(json_answer_grammar(PERSON, get("hermes")), random.Random(seed))
    if text is None:
        pytest.skip("the random walk did not finish")
    jsonschema.validate(json.loads(text), PERSON)


# ---- what the JSON grammar holds, and what it cannot ------------------------------

# Keywords the grammar holds, each with a value that breaks it (now refused)
# and one that follows it. (Before issue 59 each of these was let through.)
HELD: list[tuple[str, dict[str, Any], str, str]] = [
    ("pattern", {"type": "string", "pattern": "^[A-Z]{3}$"}, '"abcd"', '"ABC"'),
    ("maximum", {"type": "integer", "maximum": 10}, "99", "10"),
    ("negative minimum", {"type": "integer", "minimum": -5}, "-99", "-5"),
    ("the issue's range", {"type": "integer", "minimum": 3, "maximum": 319}, "320", "319"),
    ("format email", {"type": "string", "format": "email"}, '"no at sign"', '"a.b@example.com"'),
    ("maxLength 100", {"type": "string", "maxLength": 100}, '"' + "x" * 120 + '"', '"xx"'),
    ("format date", {"type": "string", "format": "date"}, '"2023-02-29"', '"2024-02-29"'),
    (
        "an additional property is not a declared one",
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "ab": {"type": "integer"}},
            "additionalProperties": {"type": "boolean"},
        },
        '{"ab": true}',
        '{"a": 1, "abc": true, "b": false, "": true}',
    ),
]


@pytest.mark.parametrize(
    ("schema", "breaks", "follows"), [c[1:] for c in HELD], ids=[c[0] for c in HELD]
)
def test_json_answer_holds_each_keyword(
    vocab: Vocab, schema: dict[str, Any], breaks: str, follows: str
) -> None:
    gbnf = json_answer_grammar(schema, get("hermes"))
    assert check_grammar(gbnf)
    assert not vocab.accepts(gbnf, breaks)
    assert vocab.accepts(gbnf, follows)


# Each keyword the compiler does not enforce (a gap, schema.gaps), with a
# value that breaks it: the grammar takes that value (the answer check
# catches it after; docs/clients.md#structured-outputs), and still holds the
# type.
LOOSER: list[tuple[str, dict[str, Any], str, str]] = [
    ("multipleOf", {"type": "integer", "multipleOf": 5}, "7", '"5"'),
    ("maxLength over 512", {"type": "string", "maxLength": 600}, '"' + "x" * 620 + '"', "1"),
    (
        "uniqueItems",
        {"type": "array", "items": {"type": "integer"}, "uniqueItems": True},
        "[1, 1]",
        '["a"]',
    ),
    ("not", {"type": "integer", "not": {"const": 3}}, "3", '"3"'),
    (
        "minProperties",
        {"type": "object", "properties": {"a": {"type": "integer"}}, "minProperties": 1},
        "{}",
        '{"a": "x"}',
    ),
    ("oneOf as anyOf", {"oneOf": [{"type": "integer"}, {"type": "number"}]}, "1", '"1"'),
]


@pytest.mark.parametrize(
    ("schema", "breaks", "wrong"), [c[1:] for c in LOOSER], ids=[c[0] for c in LOOSER]
)
def test_json_answer_is_looser_where_the_compiler_cannot_say_a_keyword(
    vocab: Vocab, schema: dict[str, Any], breaks: str, wrong: str
) -> None:
    gbnf = json_answer_grammar(schema, get("hermes"))
    assert check_grammar(gbnf)
    assert gaps(schema)
    assert vocab.accepts(gbnf, breaks)
    assert not vocab.accepts(gbnf, wrong)


TREE: dict[str, Any] = {
    "$ref": "#/$defs/node",
    "$defs": {
        "node": {
            "type": "object",
            "properties": {
                "v": {"type": "integer"},
                "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}},
            },
            "required": ["v"],
        }
    },
}


@pytest.mark.parametrize(
    ("schema", "text"),
    [
        (TREE, '{"v": 1, "kids": [{"v": 2}, {"v": 3, "kids": []}]}'),  # recursive: held
        ({"$ref": "#/$defs/missing"}, '["any value"]'),  # nowhere: any value
        ({"$ref": "https://example.com/s.json"}, "true"),  # remote: any value
        ({"type": "nonsense"}, '"any value"'),
        ({}, "null"),
        ({"enum": list(range(20000))}, '{"too": "many values"}'),  # too large: any value
    ],
    ids=["recursive", "ref to nowhere", "remote ref", "unknown type", "empty", "huge enum"],
)
def test_json_answer_grammar_compiles_for_odd_schemas(
    vocab: Vocab, schema: dict[str, Any], text: str
) -> None:
    gbnf = json_answer_grammar(schema, get("hermes"))
    assert check_grammar(gbnf)
    LlamaGrammar.from_string(gbnf, verbose=False)
    assert vocab.accepts(gbnf, text)
