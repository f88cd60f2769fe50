"""Random JSON Schemas over every keyword the grammar holds (schema.py), for
the property test and the bounded run on a real model: hypothesis draws
them, and `seeded` gives the same kind of schema from a plain seed.

The oracle that judges an answer is the `jsonschema` library with its format
checker (`validates`), never engy's own compiler."""

from __future__ import annotations

import json
import random
from typing import Any

import jsonschema
from hypothesis import strategies as st

FORMATS = ["date", "time", "date-time", "uuid", "email", "ipv4", "hostname"]
# Patterns the grammar holds (regex.py's subset); anchored and not.
PATTERNS = [
    "^[A-Z]{3}$",
    "^[a-z]+-[0-9]{2,4}$",
    "^(red|green|blue)$",
    "[0-9]",
    "^v[0-9]+\\.[0-9]+$",
    "ab+c",
]
_SCALARS = st.one_of(
    st.integers(-1000, 1000),
    st.booleans(),
    st.none(),
    st.text("abcXYZ 01_-", max_size=6),
    st.sampled_from([0.5, -2.25, 10.0]),
)
_KEYS = st.text("abcdefghij_", min_size=1, max_size=6)


@st.composite
def _integer(draw: st.DrawFn) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer"}
    low = draw(st.one_of(st.none(), st.integers(-400, 400)))
    high = draw(st.one_of(st.none(), st.integers(-400, 400)))
    if low is not None and high is not None and high < low:
        low, high = high, low
    if low is not None:
        schema["exclusiveMinimum" if draw(st.booleans()) else "minimum"] = low
    if high is not None:
        schema["exclusiveMaximum" if draw(st.booleans()) else "maximum"] = high
    if low is not None and high is not None and high - low < 2:
        schema.pop("exclusiveMinimum", None)
        schema.pop("exclusiveMaximum", None)
        schema["minimum"], schema["maximum"] = low, high
    return schema


@st.composite
def _number(draw: st.DrawFn) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "number"}
    low = draw(st.one_of(st.none(), st.integers(-50, 50)))
    if low is not None:
        schema["exclusiveMinimum" if draw(st.booleans()) else "minimum"] = low
        if draw(st.booleans()):
            schema["maximum"] = low + draw(st.integers(1, 100))
    return schema


@st.composite
def _string(draw: st.DrawFn) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    kind = draw(st.sampled_from(["plain", "lengths", "pattern", "format"]))
    if kind == "lengths":
        low = draw(st.integers(0, 12))
        schema["minLength"] = low
        if draw(st.booleans()):
            schema["maxLength"] = low + draw(st.integers(0, 20))
    elif kind == "pattern":
        schema["pattern"] = draw(st.sampled_from(PATTERNS))
    elif kind == "format":
        schema["format"] = draw(st.sampled_from(FORMATS))
    return schema


def _leaf() -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        _integer(),
        _number(),
        _string(),
        _string(),  # strings carry most keywords: drawn twice as often
        st.just({"type": "boolean"}),
        st.just({"type": "null"}),
        st.lists(_SCALARS, min_size=1, max_size=4, unique_by=json.dumps).map(
            lambda values: {"enum": values}
        ),
        _SCALARS.map(lambda value: {"const": value}),
        st.just({}),
    )


def _extend(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    @st.composite
    def obj(draw: st.DrawFn) -> dict[str, Any]:
        props = draw(st.dictionaries(_KEYS, children, max_size=4))
        schema: dict[str, Any] = {"type": "object", "properties": props}
        names = list(props)
        if names:
            schema["required"] = draw(st.lists(st.sampled_from(names), unique=True))
        extra = draw(st.sampled_from(["absent", "false", "schema"]))
        if extra == "false":
            schema["additionalProperties"] = False
        elif extra == "schema":
            schema["additionalProperties"] = draw(children)
        return schema

    @st.composite
    def arr(draw: st.DrawFn) -> dict[str, Any]:
        if draw(st.integers(0, 4)) == 0:
            items = draw(st.lists(children, min_size=1, max_size=3))
            return {"type": "array", "prefixItems": items, "items": False}
        schema: dict[str, Any] = {"type": "array", "items": draw(children)}
        low = draw(st.integers(0, 3))
        if low:
            schema["minItems"] = low
        if draw(st.booleans()):
            schema["maxItems"] = low + draw(st.integers(0, 3))
        return schema

    @st.composite
    def either(draw: st.DrawFn) -> dict[str, Any]:
        parts = draw(st.lists(children, min_size=1, max_size=3))
        return {"anyOf": parts}

    @st.composite
    def one_of(draw: st.DrawFn) -> dict[str, Any]:
        # alternatives of distinct types: oneOf is then anyOf
        kinds = draw(st.lists(st.sampled_from(["string", "integer", "boolean", "null"]),
                              min_size=1, max_size=3, unique=True))  # fmt: skip
        return {"oneOf": [{"type": k} for k in kinds]}

    @st.composite
    def nullable(draw: st.DrawFn) -> dict[str, Any]:
        inner = draw(_integer())
        return {**inner, "type": ["integer", "null"]}

    return st.one_of(obj(), arr(), either(), one_of(), nullable())


TREE: dict[str, Any] = {
    "$defs": {
        "node": {
            "type": "object",
            "properties": {
                "v": {"type": "integer", "minimum": 0, "maximum": 9},
                "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2},
            },
            "required": ["v"],
            "additionalProperties": False,
        }
    },
    "$ref": "#/$defs/node",
}

schemas: st.SearchStrategy[dict[str, Any]] = st.one_of(
    st.recursive(_leaf(), _extend, max_leaves=8), st.just(TREE)
)


def objects() -> st.SearchStrategy[dict[str, Any]]:
    """Schemas of objects: a tool's input_schema."""
    return _extend(st.recursive(_leaf(), _extend, max_leaves=5)).filter(
        lambda s: s.get("type") == "object"
    )


def seeded(seed: int, tool: bool = False) -> dict[str, Any]:
    """A schema of the same kinds, from a plain seed (the same every run),
    with more in it than hypothesis' first, smallest draws: objects of a
    few properties, each of any kind. `tool`: an object (an input_schema)."""
    rng = random.Random(seed)
    if tool:
        return _random_object(rng, 2)
    return _random(rng, 2)


def _random(rng: random.Random, depth: int) -> dict[str, Any]:
    kinds = ["integer", "number", "string", "string", "enum", "boolean"]
    if depth > 0:
        kinds += ["object", "object", "array", "anyOf"]
    kind = rng.choice(kinds)
    if kind == "integer":
        low = rng.randint(-50, 300)
        return {"type": "integer", "minimum": low, "maximum": low + rng.randint(0, 500)}
    if kind == "number":
        return {"type": "number", "exclusiveMinimum": 0, "maximum": rng.choice([1, 10, 100])}
    if kind == "string":
        pick = rng.randint(0, 2)
        if pick == 0:
            return {"type": "string", "format": rng.choice(FORMATS)}
        if pick == 1:
            return {"type": "string", "pattern": rng.choice(PATTERNS)}
        return {"type": "string", "minLength": rng.randint(1, 5), "maxLength": rng.randint(6, 30)}
    if kind == "enum":
        return {"enum": rng.sample(["red", "green", "blue", 1, 2, None, True], rng.randint(1, 4))}
    if kind == "boolean":
        return {"type": "boolean"}
    if kind == "object":
        return _random_object(rng, depth - 1)
    if kind == "array":
        low = rng.randint(1, 2)
        item = _random(rng, depth - 1)
        return {"type": "array", "items": item, "minItems": low, "maxItems": low + 2}
    return {"anyOf": [_random(rng, depth - 1), {"type": "null"}]}


def _random_object(rng: random.Random, depth: int) -> dict[str, Any]:
    names = rng.sample(["name", "count", "when", "id", "tags", "score", "kind"], rng.randint(1, 4))
    props = {n: _random(rng, depth) for n in names}
    required = [n for n in names if rng.random() < 0.7]
    return {"type": "object", "properties": props, "required": required,
            "additionalProperties": False}  # fmt: skip


def validates(value: Any, schema: dict[str, Any]) -> str | None:
    """None where `value` follows `schema`; else what it breaks."""
    validator = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    return None if error is None else f"{error.message} at {list(error.absolute_path)}"
