"""JSON Schema to GBNF: the rules a forced tool call's arguments follow.

Real tool schemas (Claude Code, Codex: JSON Schema 2020-12) use more than a
grammar can say, so each schema is first reduced (`reduced`):
- kept: type, properties, required, additionalProperties (false or a schema),
  items, prefixItems, enum, const, anyOf, oneOf, allOf, local $ref with
  $defs / definitions, the date / time / date-time / uuid formats, and
  length and item limits up to MAX_REPEAT;
- dropped: annotations (description, title, default, examples, $schema ...),
  number bounds (but a minimum of 0 or more rules out a minus sign),
  pattern (a regex cannot safely become a grammar here),
  other formats, remote $refs and everything else;
- a schema that says nothing about its type (`{}`, `true`) means any value;
  `false` means none (a property that may not appear).

Objects list their required properties first, in the schema's order, then
any of the optional ones in that order; an object that declares properties
takes no others unless additionalProperties is a schema. Arrays and strings
honour their limits; tuples (`prefixItems`, a list of `items`) have exactly
their items.

A schema that cannot be converted (a $ref to nowhere, too many values)
falls back: a tool's arguments to any object, a value to any value. Schemas
come from requests, so conversion is bounded: more than MAX_SCHEMA_NODES
values are not converted.

`Notation` says how values are written: JSON by default; a family that
writes its own notation (Gemma 4) gives its own quotes, keys and constants.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..chat import STRING_GRAMMAR
from .gbnf import literal
from .lark import string_rules

MAX_REPEAT = 64
MAX_SCHEMA_NODES = 16384

ANY: dict[str, Any] = {"type": ["object", "array", "string", "number", "boolean", "null"]}
OBJECT: dict[str, Any] = {"type": "object"}
_TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})
_FORMATS = frozenset({"date", "time", "date-time", "uuid", "uuid1", "uuid3", "uuid4", "uuid5"})
# Keywords that say what a value is; a schema with none of them is any value.
_SHAPE = frozenset(
    {"type", "properties", "additionalProperties", "items", "prefixItems", "enum", "const"}
    | {"anyOf", "oneOf", "allOf", "$ref"}
)
# A JSON string character: not a quote, backslash or control character, or an
# escape; or a raw newline, tab or carriage return, which models write in code
# (the parsers send them escaped: the client gets valid JSON).
JSON_CHAR = r'[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) | [\t\n\r]'


@dataclass(frozen=True)
class Notation:
    quote: str  # what opens and closes a string
    char: str  # GBNF of one character inside a string
    space: str  # GBNF of the whitespace allowed after each token
    key: Callable[[str], str]  # an object key as written, quotes and all
    constant: Callable[[Any], str]  # an enum or const value as written


# After each token, JSON's own whitespace the way models were trained to
# write it: a space, or a newline and an indentation (pretty-printed calls),
# bounded so that whitespace cannot run on. One space at most made a model
# that wanted a newline after `20` write more digits instead.
JSON_SPACE = '(" " | "\\n" [ \\t]{0,40})?'

JSON = Notation(
    quote='"',
    char=JSON_CHAR,
    space=JSON_SPACE,
    key=json.dumps,
    constant=lambda value: json.dumps(value, ensure_ascii=False),
)


class _Unconvertible(Exception):
    """Inside this module only: the schema cannot be converted."""


def arguments_rules(
    parameters: Any, prefix: str, rules: dict[str, str], notation: Notation = JSON
) -> str:
    """Adds the rules of a tool's arguments object to `rules` (names start
    with `prefix`); returns the root rule's name."""
    root = root_schema(parameters)
    return _convert_first((root, OBJECT), prefix, rules, notation)


def value_rules(schema: Any, prefix: str, rules: dict[str, str], notation: Notation = JSON) -> str:
    """Adds the rules of one value that follows `schema` (any JSON value
    when it cannot be converted); returns its rule's name."""
    return _convert_first((reduced(schema) or dict(ANY), dict(ANY)), prefix, rules, notation)


def _convert_first(
    schemas: tuple[dict[str, Any], ...], prefix: str, rules: dict[str, str], notation: Notation
) -> str:
    for schema in schemas:
        if not small(schema):
            continue
        converter = _Converter(prefix, notation, schema)
        try:
            root = converter.visit(schema, "")
        except (_Unconvertible, RecursionError):
            continue
        rules.update(converter.rules)
        return root
    raise AssertionError("the fallback schema always converts")  # pragma: no cover


def small(schema: Any) -> bool:
    """Whether `schema` holds at most MAX_SCHEMA_NODES values."""
    stack, seen = [schema], 0
    while stack:
        item = stack.pop()
        seen += 1
        if seen > MAX_SCHEMA_NODES:
            return False
        if isinstance(item, (dict, list)):
            stack.extend(item.values() if isinstance(item, dict) else item)
    return True


# ---- reduction -------------------------------------------------------------


def root_schema(parameters: Any) -> dict[str, Any]:
    """A tool's parameters reduced, and always an object."""
    schema = reduced(parameters) if isinstance(parameters, dict) else None
    if not schema or schema == ANY:
        return dict(OBJECT)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = "object" if "object" in kind else "other"
    if kind not in (None, "object") or ("type" not in schema and "properties" not in schema):
        return dict(OBJECT)
    return {**schema, "type": "object"}


def reduced(schema: Any) -> dict[str, Any] | None:
    """`schema` cut down to what converts; None for `false`."""
    if schema is False:
        return None
    if not isinstance(schema, dict):
        return dict(ANY)
    out: dict[str, Any] = {}
    kind = schema.get("type")
    if isinstance(kind, str) and kind in _TYPES:
        out["type"] = kind
    elif isinstance(kind, list):
        kinds = [k for k in kind if isinstance(k, str) and k in _TYPES]
        if kinds:
            out["type"] = kinds if len(kinds) > 1 else kinds[0]
    props = schema.get("properties")
    if isinstance(props, dict):
        kept = {k: reduced(v) for k, v in props.items() if isinstance(k, str)}
        out["properties"] = {k: v for k, v in kept.items() if v is not None}
        required = schema.get("required")
        if isinstance(required, list):
            out["required"] = [r for r in required if r in out["properties"]]
    extra = schema.get("additionalProperties")
    if extra is False or isinstance(extra, dict):
        out["additionalProperties"] = reduced(extra) if extra is not False else False
    items = schema.get("items")
    if isinstance(items, list):
        out["items"] = [reduced(i) or dict(ANY) for i in items]
    elif items is not None and items is not False:
        out["items"] = reduced(items)
    if isinstance(schema.get("prefixItems"), list):
        out["prefixItems"] = [reduced(i) or dict(ANY) for i in schema["prefixItems"]]
    for low, high in (("minItems", "maxItems"), ("minLength", "maxLength")):
        _copy_limits(schema, out, low, high)
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        out["enum"] = schema["enum"]
    if "const" in schema:
        out["const"] = schema["const"]
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(key), list):
            alternatives = [r for r in map(reduced, schema[key]) if r is not None]
            if alternatives:
                out[key] = alternatives
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        out["$ref"] = ref
    for key in ("$defs", "definitions"):
        if isinstance(schema.get(key), dict):
            out[key] = {k: reduced(v) or dict(ANY) for k, v in schema[key].items()}
    bound = schema.get("minimum", schema.get("exclusiveMinimum"))
    if isinstance(bound, (int, float)) and not isinstance(bound, bool) and bound >= 0:
        out["minimum"] = 0  # all the grammar says of bounds: no minus sign
    if schema.get("format") in _FORMATS and out.get("type") == "string":
        out["format"] = schema["format"]
    if out.get("type") == "string" and isinstance(schema.get(STRING_GRAMMAR), dict):
        out[STRING_GRAMMAR] = schema[STRING_GRAMMAR]
    if not _SHAPE & out.keys():
        return {**out, **ANY}
    return out


def _copy_limits(schema: dict[str, Any], out: dict[str, Any], low: str, high: str) -> None:
    lo, hi = _limit(schema.get(low)), _limit(schema.get(high))
    if lo is not None:
        out[low] = lo
    if hi is not None and hi >= (lo or 0):
        out[high] = hi


def _limit(value: Any) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_REPEAT
    return value if ok else None


# ---- conversion ------------------------------------------------------------

_NAME = re.compile(r"[^A-Za-z0-9-]+")
_HEX = "[0-9a-fA-F]"
_DATE = '[0-9]{4} "-" ("0" [1-9] | "1" [0-2]) "-" ("0" [1-9] | [1-2] [0-9] | "3" [0-1])'
_TIME = (
    '([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{3})? '
    '("Z" | ("+" | "-") ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9])'
)
_FORMAT_BODIES = {
    "date": _DATE,
    "time": _TIME,
    "date-time": f'({_DATE}) "T" ({_TIME})',
    "uuid": f'{_HEX}{{8}} "-" {_HEX}{{4}} "-" {_HEX}{{4}} "-" {_HEX}{{4}} "-" {_HEX}{{12}}',
}


class _Converter:
    """The rules of one schema; every name starts with `prefix`."""

    def __init__(self, prefix: str, notation: Notation, root: dict[str, Any]) -> None:
        self.prefix = prefix
        self.notation = notation
        self.root = root
        self.rules: dict[str, str] = {}
        self._refs: dict[str, str] = {}  # $ref -> its rule

    # -- naming ---------------------------------------------------------

    def _add(self, name: str, body: str) -> str:
        """A rule under a unique name (a number is added on a clash with
        another body)."""
        base = self.prefix + (_NAME.sub("-", name).strip("-") or "root")
        rule, n = base, 1
        while rule in self.rules and self.rules[rule] != body:
            n += 1
            rule = f"{base}{n}"
        self.rules[rule] = body
        return rule

    def _space(self) -> str:
        return self._add("space", self.notation.space)

    def _primitive(self, kind: str) -> str:
        sp, q = self._space(), literal(self.notation.quote)
        if kind == "string":
            char = self._add("char", self.notation.char)
            return self._add("string", f"{q} {char}* {q} {sp}")
        if kind in ("integer", "number"):
            integral = self._add("integral-part", "[0] | [1-9] [0-9]{0,15}")
            if kind == "integer":
                return self._add("integer", f'("-"? {integral}) {sp}')
            decimal = self._add("decimal-part", "[0-9]{1,16}")
            return self._add(
                "number", f'("-"? {integral}) ("." {decimal})? ([eE] [-+]? {integral})? {sp}'
            )
        if kind == "boolean":
            return self._add("boolean", f'("true" | "false") {sp}')
        if kind == "null":
            return self._add("null", f'"null" {sp}')
        if kind == "object":
            value, key = self._primitive("value"), self._primitive("string")
            pair = f'{key} ":" {sp} {value}'
            return self._add("object", f'"{{" {sp} ({pair} ("," {sp} {pair})*)? "}}" {sp}')
        if kind == "array":
            value = self._primitive("value")
            return self._add("array", f'"[" {sp} ({value} ("," {sp} {value})*)? "]" {sp}')
        # any value: named first, so that object and array may refer to it
        rule = self.prefix + "value"
        if rule not in self.rules:
            self.rules[rule] = ""
            kinds = ("object", "array", "string", "number", "boolean", "null")
            self.rules[rule] = " | ".join(self._primitive(k) for k in kinds)
        return rule

    # -- schemas --------------------------------------------------------

    def visit(self, schema: dict[str, Any], name: str) -> str:
        ref = schema.get("$ref")
        if isinstance(ref, str):
            return self._ref(ref)
        for key in ("anyOf", "oneOf"):
            if key in schema:
                alternatives = [self.visit(s, _child(name, i)) for i, s in enumerate(schema[key])]
                return self._add(name, " | ".join(alternatives))
        if "allOf" in schema:
            return self.visit(self._merged(schema["allOf"]), name)
        if "const" in schema:
            return self._add(name, literal(self.notation.constant(schema["const"])))
        if "enum" in schema:
            values = " | ".join(literal(self.notation.constant(v)) for v in schema["enum"])
            return self._add(name, values)
        kind = schema.get("type")
        if isinstance(kind, list):
            alternatives = [self.visit({**schema, "type": k}, _child(name, k)) for k in kind]
            return self._add(name, " | ".join(alternatives))
        if kind is None:
            if "properties" in schema or "additionalProperties" in schema:
                kind = "object"
            elif "items" in schema or "prefixItems" in schema:
                kind = "array"
            else:
                return self._primitive("value")
        if kind == "object":
            return self._object(schema, name)
        if kind == "array":
            return self._array(schema, name)
        if kind == "string":
            return self._string(schema, name)
        if kind in ("integer", "number") and schema.get("minimum") == 0:
            signed = self.rules[self._primitive(kind)]
            return self._add(f"unsigned-{kind}", signed.replace('("-"? ', "(", 1))
        return self._primitive(kind)

    def _ref(self, ref: str) -> str:
        if ref in self._refs:
            return self._refs[ref]
        target: Any = self.root
        for part in ref[2:].split("/"):
            if not isinstance(target, dict) or part not in target:
                raise _Unconvertible(ref)
            target = target[part]
        if not isinstance(target, dict):
            raise _Unconvertible(ref)
        # Named before it is visited, so that a schema may refer to itself.
        rule = self.prefix + "ref-" + (_NAME.sub("-", ref[2:]).strip("-") or "x")
        self._refs[ref] = rule
        self.rules[rule] = ""
        self.rules[rule] = self.visit(target, "ref-" + ref[2:] + "-body")
        return rule

    def _merged(self, parts: list[dict[str, Any]]) -> dict[str, Any]:
        """allOf: one schema alone is itself; objects have all their
        properties, the required of each required."""
        resolved = [self._resolve(p) for p in parts]
        if len(resolved) == 1:
            return resolved[0]
        properties: dict[str, Any] = {}
        required: list[str] = []
        out: dict[str, Any] = {"type": "object"}
        for part in resolved:
            properties.update(part.get("properties") or {})
            required += [r for r in part.get("required") or () if r not in required]
            if "additionalProperties" in part:
                out["additionalProperties"] = part["additionalProperties"]
        return {**out, "properties": properties, "required": required}

    def _resolve(self, schema: dict[str, Any]) -> dict[str, Any]:
        seen: set[str] = set()
        while isinstance(schema.get("$ref"), str) and schema["$ref"] not in seen:
            seen.add(schema["$ref"])
            target: Any = self.root
            for part in schema["$ref"][2:].split("/"):
                if not isinstance(target, dict) or part not in target:
                    raise _Unconvertible(schema["$ref"])
                target = target[part]
            schema = target
        return schema

    def _object(self, schema: dict[str, Any], name: str) -> str:
        props: dict[str, Any] = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        if "properties" not in schema and extra is None:
            return self._primitive("object")
        sp = self._space()
        required = set(schema.get("required") or ())
        pairs = {}
        for key, sub in props.items():
            value = self.visit(sub, _child(name, key))
            pairs[key] = self._add(
                _child(name, f"{key}-kv"),
                f'{literal(self.notation.key(key))} {sp} ":" {sp} {value}',
            )
        first = [pairs[k] for k in props if k in required]
        optional = [pairs[k] for k in props if k not in required]
        if isinstance(extra, dict):
            key_rule = self._primitive("string")
            value = self.visit(extra, _child(name, "extra"))
            optional.append(self._add(_child(name, "extra-kv"), f'{key_rule} ":" {sp} {value}'))
        body = f'"{{" {sp} ' + f' "," {sp} '.join(first)
        if optional:
            # Any of the optional pairs, in their order: rest[i] may add
            # pairs i.. (additional pairs, last, may repeat); the choice is
            # which optional pair comes first.
            n, repeats = len(optional), isinstance(extra, dict)
            rest = [""] * (n + 1)
            for i in reversed(range(1 if not repeats or n > 1 else 0, n)):
                mark = "*" if repeats and i == n - 1 else "?"
                step = f'("," {sp} {optional[i]}){mark} {rest[i + 1]}'.strip()
                rest[i] = self._add(_child(name, f"rest{i}"), step)
            starts = [
                f"{pair} {rest[i] if repeats and i == n - 1 else rest[i + 1]}".strip()
                for i, pair in enumerate(optional)
            ]
            choice = " | ".join(starts)
            body += f' ("," {sp} ({choice}))?' if first else f" ({choice})?"
        return self._add(name, body + f' "}}" {sp}')

    def _array(self, schema: dict[str, Any], name: str) -> str:
        sp = self._space()
        items = schema.get("prefixItems", schema.get("items"))
        if isinstance(items, list):  # a tuple: exactly these
            parts = [self.visit(s, _child(name, i)) for i, s in enumerate(items)]
            inner = f' "," {sp} '.join(parts)
            return self._add(name, f'"[" {sp} {inner} "]" {sp}'.replace("  ", " "))
        item = (
            self.visit(items, _child(name, "item"))
            if isinstance(items, dict)
            else self._primitive("value")
        )
        low, high = schema.get("minItems", 0), schema.get("maxItems")
        if high == 0:
            return self._add(name, f'"[" {sp} "]" {sp}')
        more = _repeat(max(low - 1, 0), None if high is None else high - 1)
        body = f'{item} ("," {sp} {item}){more}'
        if low == 0:
            body = f"({body})?"
        return self._add(name, f'"[" {sp} {body} "]" {sp}')

    def _string(self, schema: dict[str, Any], name: str) -> str:
        sp, q = self._space(), literal(self.notation.quote)
        grammar = schema.get(STRING_GRAMMAR)
        if grammar is not None and self.notation is JSON:
            # A freeform tool's grammar, over the JSON-escaped text (lark.py);
            # where it does not convert, any string as below.
            prefix = self.prefix + (_NAME.sub("-", name).strip("-") or "root") + "-g-"
            content = string_rules(
                str(grammar.get("syntax")), str(grammar.get("definition")), prefix, self.rules
            )
            if content is not None:
                return self._add(_child(name, "grammar"), f"{q} {content} {q} {sp}")
        fmt = schema.get("format")
        if fmt is not None:
            body = _FORMAT_BODIES["uuid" if fmt.startswith("uuid") else fmt]
            return self._add(_child(name, fmt), f"{q} ({body}) {q} {sp}")
        low, high = schema.get("minLength", 0), schema.get("maxLength")
        if not low and high is None:
            return self._primitive("string")
        char = self._add("char", self.notation.char)
        return self._add(name, f"{q} {char}{_repeat(low, high)} {q} {sp}")


def _child(name: str, part: object) -> str:
    """The name of a part of `name`'s schema (the root's parts by their own)."""
    return f"{name}-{part}" if name else str(part)


def _repeat(low: int, high: int | None) -> str:
    """A GBNF repetition of `low` to `high` (None: any number more)."""
    if high is None:
        return "*" if low == 0 else ("+" if low == 1 else f"{{{low},}}")
    return f"{{{low},{high}}}"
