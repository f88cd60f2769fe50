"""JSON Schema to GBNF: the rules a tool call's arguments and a structured
answer follow.

Each schema is first reduced (reduce.py) to what a grammar says exactly:
type, properties, required, additionalProperties (false or a schema), items,
prefixItems, minItems/maxItems and minLength/maxLength up to MAX_REPEAT,
enum and const of any JSON type, anyOf, oneOf whose alternatives cannot
overlap, allOf of object parts, local $refs with $defs / definitions
(recursion too), integer minimum/maximum/exclusiveMinimum/exclusiveMaximum
as digit ranges (numbers.py; integral bounds on numbers too), pattern
(regex.py, over the JSON-escaped text) and the formats of stringformats.py.
Annotations (description, title, default ...) and unknown keywords say
nothing about validity and go.

What no grammar here holds is a gap (`gaps`: uniqueItems, multipleOf, not,
if, propertyNames, dependentRequired, a fractional bound on a number, a
length beside a pattern or format, limits over MAX_REPEAT, a remote $ref
...): the grammar is looser there, and the answer is checked against the
whole schema once it ends (answercheck.py); under `strict` a gap is a 400.

Objects list their required properties first, in the schema's order, then
any of the optional ones in that order; an object that declares properties
takes no others unless additionalProperties is a schema. A schema that says
nothing about its type (`{}`, `true`) means any value; `false` means none
(a property that may not appear).

A schema that cannot be converted (a $ref to nowhere, too many values, a
range with no number in it) falls back: a tool's arguments to any object, a
value to any value. Schemas come from requests, so conversion is bounded:
more than MAX_SCHEMA_NODES values are not converted.

`Notation` says how values are written: JSON by default; a family that
writes its own notation (Gemma 4) gives its own quotes, keys and constants.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..chat import STRING_GRAMMAR
from .gbnf import class_char, literal
from .lark import string_rules
from .numbers import integer_range, number_range
from .reduce import (
    ANY,
    MAX_REPEAT,
    MAX_SCHEMA_NODES,
    OBJECT,
    reduce_schema,
    reduced,
    root_schema,
    small,
    whole_pattern,
)
from .stringformats import format_body

__all__ = [
    "ANY",
    "JSON",
    "JSON_CHAR",
    "JSON_SPACE",
    "MAX_REPEAT",
    "MAX_SCHEMA_NODES",
    "OBJECT",
    "Notation",
    "arguments_rules",
    "gaps",
    "reduced",
    "root_schema",
    "small",
    "value_rules",
]

# A JSON string character: not a quote, backslash or control character, or an
# escape (never \\u of a surrogate: each character is one code point, as a
# schema's lengths count them); or a raw newline, tab or carriage return,
# which models write in code (the parsers send them escaped: the client gets
# valid JSON).
JSON_CHAR = (
    r'[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" ([0-9a-cA-CefEF] [0-9a-fA-F]{3} | [dD] '
    r"[0-7] [0-9a-fA-F]{2})) | [\t\n\r]"
)


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


def gaps(schema: Any) -> list[str]:
    """What the grammar of `schema` does not hold, each as "keyword (at
    path)": keywords it drops, values past its limits, a schema that does
    not convert at all (its grammar is then any value). Empty: every value
    the grammar allows validates against the schema."""
    if not isinstance(schema, (dict, bool)):
        return []
    return list(_gaps(json.dumps(schema, sort_keys=True)))


@functools.lru_cache(maxsize=256)
def _gaps(text: str) -> tuple[str, ...]:
    """gaps() of a schema by its JSON (the same tools come with every turn)."""
    schema = json.loads(text)
    if not small(schema):
        return (f"more than {MAX_SCHEMA_NODES} values (at the root)",)
    out, found = reduce_schema(schema)
    if out is not None and not found:
        try:
            _Converter("", JSON, out).visit(out, "")
        except (_Unconvertible, RecursionError) as exc:
            found.append(f"a schema no grammar converts ({exc})")
    return tuple(found)


# ---- conversion ------------------------------------------------------------

_NAME = re.compile(r"[^A-Za-z0-9-]+")


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
        if kind in ("integer", "number") and ("low" in schema or "high" in schema):
            return self._bounded(schema, kind, name)
        return self._primitive(kind)

    def _bounded(self, schema: dict[str, Any], kind: str, name: str) -> str:
        low, high = schema.get("low"), schema.get("high")
        low_open, high_open = schema.get("low_open", False), schema.get("high_open", False)
        if kind == "integer":
            if low is not None and low_open:
                low += 1
            if high is not None and high_open:
                high -= 1
            body = integer_range(low, high)
        else:
            body = number_range(low, low_open, high, high_open)
        if not body:
            raise _Unconvertible("no number lies within its minimum and maximum")
        return self._add(_child(name, f"{kind}-range"), f"({body}) {self._space()}")

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
            if props and self.notation is JSON:  # no key of its own properties again
                key_rule = self._other_key(list(props), _child(name, "other-key"))
            else:
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

    def _other_key(self, keys: list[str], name: str) -> str:
        """A JSON string that is none of `keys`: an additional property's
        name, which must not be a declared one (its value would answer to
        that property's schema). The words of a trie of the keys: leave it
        on a character no key has there, or stop where no key ends. Written
        without escapes, so that what is written is what is compared."""
        trie: dict[str, Any] = {}
        for key in keys:
            node = trie
            for c in key:
                node = node.setdefault(c, {})
            node[""] = {}  # a key ends here
        plain = self._add("plain-char", r'[^"\\\x7F\x00-\x1F]')
        q, sp = literal(self.notation.quote), self._space()
        counter = [0]

        def rule(node: dict[str, Any]) -> str:
            # a key's character that cannot stand unescaped is never written
            chars = sorted(c for c in node if c and c not in '"\\' and " " <= c != "\x7f")
            parts = [q] if "" not in node else []  # the string may stop here
            off = "".join(class_char(c) for c in chars)
            parts.append(f'[^"\\\\\\x7F\\x00-\\x1F{off}] {plain}* {q}' if off else f"{plain}+ {q}")
            for c in chars:
                counter[0] += 1
                parts.append(f"{literal(c)} {rule(node[c])}")
            counter[0] += 1
            return self._add(f"{name}{counter[0]}", " | ".join(parts))

        return self._add(name, f"{q} {rule(trie)} {sp}")

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
        body = format_body(fmt) if fmt is not None else None
        if body is not None:
            return self._add(_child(name, fmt), f"{q} ({body}) {q} {sp}")
        pattern = schema.get("pattern")
        if pattern is not None and self.notation is JSON:
            prefix = self.prefix + (_NAME.sub("-", name).strip("-") or "root") + "-p-"
            content = string_rules("regex", whole_pattern(pattern), prefix, self.rules)
            if content is not None:
                return self._add(_child(name, "pattern"), f"{q} {content} {q} {sp}")
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
