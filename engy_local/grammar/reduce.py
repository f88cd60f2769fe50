"""JSON Schema reduced to what a grammar says exactly, and what it leaves out.

`reduced` keeps type, properties, required, additionalProperties (false or
a schema), items, prefixItems, minItems/maxItems and minLength/maxLength up
to MAX_REPEAT, enum and const, anyOf, oneOf, allOf, local $refs with $defs /
definitions, numeric bounds (as `low`/`high` with `low_open`/`high_open`:
integral ones, which numbers.py writes as digit ranges), a pattern that
regex.py converts, and the formats of stringformats.py. Annotations and
unknown keywords go: they say nothing about validity.

Each keyword that constrains a value beyond that is a gap, named with its
path (`reduce_schema`): schema.gaps says them, answercheck.py checks an
answer against them, and under `strict` they are a 400. Pure.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from ..chat import STRING_GRAMMAR
from .lark import string_rules
from .stringformats import format_body

MAX_REPEAT = 512
MAX_SCHEMA_NODES = 16384

ANY: dict[str, Any] = {"type": ["object", "array", "string", "number", "boolean", "null"]}
OBJECT: dict[str, Any] = {"type": "object"}
TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})
# Keywords that say what a value is; a schema with none of them is any value.
SHAPE = frozenset(
    {"type", "properties", "additionalProperties", "items", "prefixItems", "enum", "const"}
    | {"anyOf", "oneOf", "allOf", "$ref"}
)


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


# Keywords that say nothing about validity (annotations, and vocabularies
# that name the schema): dropped without loss.
_ANNOTATIONS = frozenset(
    {"description", "title", "default", "examples", "example", "$schema", "$id", "$anchor"}
    | {"$comment", "$vocabulary", "deprecated", "readOnly", "writeOnly", "contentMediaType"}
    | {"contentEncoding", "contentSchema", "discriminator", "nullable", "strict", "name"}
    | {"$defs", "definitions", STRING_GRAMMAR}
)
_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
# Keywords that constrain a value beyond what the grammar says (each a gap,
# but the cases _others finds held anyway).
_BEYOND = frozenset(
    {"multipleOf", "uniqueItems", "not", "if", "patternProperties", "propertyNames"}
    | {"minProperties", "maxProperties", "dependentRequired", "dependentSchemas"}
    | {"dependencies", "contains", "minContains", "maxContains", "unevaluatedProperties"}
    | {"unevaluatedItems", "additionalItems", "$dynamicRef", "$recursiveRef"}
)


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
    return _Reducer().reduce(schema, "")


def reduce_schema(schema: Any) -> tuple[dict[str, Any] | None, list[str]]:
    """`reduced(schema)`, and its gaps: "keyword (at path)" for each part
    the reduced schema no longer says, $refs to nowhere among them."""
    reducer = _Reducer()
    out = reducer.reduce(schema, "")
    reducer.check_refs(schema)
    return out, reducer.gaps


class _Reducer:
    """One schema's reduction, and what it left out."""

    def __init__(self) -> None:
        self.gaps: list[str] = []

    def _gap(self, keyword: str, path: str) -> None:
        self.gaps.append(f"{keyword} (at {path or 'the root'})")

    def reduce(self, schema: Any, path: str) -> dict[str, Any] | None:
        if schema is False:
            return None
        if not isinstance(schema, dict):
            return dict(ANY)
        out: dict[str, Any] = {}
        held = set(_ANNOTATIONS)
        kind = schema.get("type")
        if isinstance(kind, str) and kind in TYPES:
            out["type"] = kind
        elif isinstance(kind, list):
            kinds = [k for k in kind if isinstance(k, str) and k in TYPES]
            if kinds:
                out["type"] = kinds if len(kinds) > 1 else kinds[0]
        held.add("type")
        props = schema.get("properties")
        if isinstance(props, dict):
            kept = {
                k: self.reduce(v, _at(path, "properties", k))
                for k, v in props.items()
                if isinstance(k, str)
            }
            out["properties"] = {k: v for k, v in kept.items() if v is not None}
        required = schema.get("required")
        if isinstance(required, list) and required:
            names = [r for r in dict.fromkeys(required) if isinstance(r, str)]
            props_out = out.setdefault("properties", {})
            closed = schema.get("additionalProperties") is False
            for r in names:  # a required key with no schema of its own: any value
                if r not in props_out and not (isinstance(props, dict) and r in props):
                    if closed:
                        self._gap(f"required {r} (not allowed by additionalProperties)", path)
                    else:
                        props_out[r] = dict(ANY)
                elif r not in props_out:
                    self._gap(f"required {r} (its schema is false)", path)
            out["required"] = [r for r in names if r in props_out]
        held |= {"properties", "required"}
        extra = schema.get("additionalProperties")
        if extra is False or isinstance(extra, dict):
            out["additionalProperties"] = (
                self.reduce(extra, _at(path, "additionalProperties"))
                if extra is not False
                else False
            )
        held.add("additionalProperties")
        items = schema.get("items")
        if isinstance(items, list):
            out["items"] = [
                self.reduce(i, _at(path, "items", n)) or dict(ANY) for n, i in enumerate(items)
            ]
        elif items is not None and items is not False:
            out["items"] = self.reduce(items, _at(path, "items"))
        elif items is False and "prefixItems" not in schema:
            out["maxItems"] = 0
        if isinstance(schema.get("prefixItems"), list):
            out["prefixItems"] = [
                self.reduce(i, _at(path, "prefixItems", n)) or dict(ANY)
                for n, i in enumerate(schema["prefixItems"])
            ]
        held |= {"items", "prefixItems"}
        for low, high in (("minItems", "maxItems"), ("minLength", "maxLength")):
            self._limits(schema, out, low, high, path)
            held |= {low, high}
        tuple_ = out.get("prefixItems", out.get("items"))
        if isinstance(tuple_, list):  # exactly its items: limits past them break
            n = len(tuple_)
            if out.get("minItems", 0) > n or out.get("maxItems", n) < n:
                self._gap("minItems/maxItems beside a tuple of items", path)
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            out["enum"] = schema["enum"]
        if "const" in schema:
            out["const"] = schema["const"]
        held |= {"enum", "const"}
        for key in ("anyOf", "oneOf", "allOf"):
            if isinstance(schema.get(key), list):
                reduced_ = [
                    self.reduce(sub, _at(path, key, n)) for n, sub in enumerate(schema[key])
                ]
                alternatives = [a for a in reduced_ if a is not None]
                if alternatives:
                    out[key] = alternatives
                held.add(key)
        if "oneOf" in out and not _disjoint(out["oneOf"]):
            self._gap("oneOf (read as anyOf)", path)
        if "allOf" in out and len(out["allOf"]) > 1 and not all(map(_mergeable, out["allOf"])):
            self._gap("allOf (its parts' properties merged)", path)
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/"):
            out["$ref"] = ref
            held.add("$ref")
        for key in ("$defs", "definitions"):
            if isinstance(schema.get(key), dict):
                out[key] = {
                    k: self.reduce(v, _at(path, key, k)) or dict(ANY)
                    for k, v in schema[key].items()
                }
        self._bounds(schema, out, path)
        held |= set(_BOUNDS)
        fmt = schema.get("format")
        if fmt is not None:
            name = "uuid" if isinstance(fmt, str) and fmt.startswith("uuid") else fmt
            if out.get("type") == "string" and format_body(str(name)) is not None:
                out["format"] = name
                held.add("format")
            elif _may_be(out, "string"):
                self._gap(f"format {fmt}", path)
        held.add("format")
        pattern = schema.get("pattern")
        if isinstance(pattern, str) and _may_be(out, "string"):
            if out.get("type") == "string" and "format" not in out and _pattern_converts(pattern):
                out["pattern"] = pattern
            else:
                self._gap("pattern", path)
        held.add("pattern")
        if "pattern" in out or "format" in out:
            for key in ("minLength", "maxLength"):  # a grammar takes one of them
                if key in out:
                    del out[key]
                    self._gap(f"{key} beside {'pattern' if 'pattern' in out else 'format'}", path)
        if out.get("type") == "string" and isinstance(schema.get(STRING_GRAMMAR), dict):
            out[STRING_GRAMMAR] = schema[STRING_GRAMMAR]
        self._others(schema, out, held, path)
        if not SHAPE & out.keys():
            return {**out, **ANY}
        return out

    def _others(
        self, schema: dict[str, Any], out: dict[str, Any], held: set[str], path: str
    ) -> None:
        """Every other keyword that constrains, as a gap (but the cases the
        grammar holds anyway)."""
        for key, value in schema.items():
            if key in held or key not in _BEYOND:
                continue  # unknown keywords are annotations (JSON Schema)
            if key == "uniqueItems" and value is not True:
                continue
            if key in ("minProperties", "maxProperties") and _properties_hold(out, key, value):
                continue
            if key in ("unevaluatedProperties", "unevaluatedItems") and value in (True, {}):
                continue
            if key == "patternProperties" and _patterns_hold(out, value):
                continue
            if key == "additionalItems" and not isinstance(schema.get("items"), list):
                continue  # it applies after a list of items only
            if key == "multipleOf" and value == 1 and out.get("type") == "integer":
                continue
            self._gap(key, path)

    def _limits(
        self, schema: dict[str, Any], out: dict[str, Any], low: str, high: str, path: str
    ) -> None:
        for key in (low, high):
            value = schema.get(key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                continue
            if value <= MAX_REPEAT:
                out[key] = value
            else:
                self._gap(f"{key} over {MAX_REPEAT}", path)
        if low in out and high in out and out[high] < out[low]:
            del out[high]
            self._gap(f"{high} below {low}", path)

    def _bounds(self, schema: dict[str, Any], out: dict[str, Any], path: str) -> None:
        """minimum and maximum (exclusive or not), as the integral bounds
        the grammar holds: `low`/`high` with `low_open`/`high_open`."""
        bounds = {k: schema[k] for k in _BOUNDS if k in schema}
        if not bounds:
            return
        kind = out.get("type")
        numeric = [
            k
            for k in ([kind] if isinstance(kind, str) else kind or [])
            if k in ("integer", "number")
        ]
        if not numeric:
            if kind is None or not isinstance(kind, (str, list)) or "type" not in out:
                self._gap("minimum/maximum without a numeric type", path)
            return
        low = _bound(bounds, "minimum", "exclusiveMinimum", +1)
        high = _bound(bounds, "maximum", "exclusiveMaximum", -1)
        if low is None and high is None:
            self._gap("minimum/maximum (not numbers)", path)
            return
        integral = all(b is None or float(b[0]).is_integer() for b in (low, high))
        if numeric == ["integer"]:
            lo = None if low is None else _integer_at_least(*low)
            hi = None if high is None else _integer_at_most(*high)
            out["low"], out["high"] = lo, hi
            out["low_open"] = out["high_open"] = False
        elif integral:
            out["low"] = None if low is None else int(low[0])
            out["high"] = None if high is None else int(high[0])
            out["low_open"] = bool(low and low[1])
            out["high_open"] = bool(high and high[1])
        else:
            if low is not None and float(low[0]) >= 0:
                out["low"], out["low_open"] = 0, False  # no minus sign, at least
                out.setdefault("high", None)
                out.setdefault("high_open", False)
            self._gap("minimum/maximum with a fraction, on a number", path)

    def check_refs(self, schema: Any) -> None:
        """$refs that point nowhere (the schema then takes any value)."""
        stack = [schema]
        while stack:
            item = stack.pop()
            if isinstance(item, dict):
                ref = item.get("$ref")
                nowhere = isinstance(ref, str) and (
                    not ref.startswith("#/") or _target(schema, ref) is None
                )
                if nowhere:
                    self._gap(f"$ref {ref}", "")
                stack.extend(item.values())
            elif isinstance(item, list):
                stack.extend(item)


def _at(path: str, *parts: object) -> str:
    return ".".join([path, *map(str, parts)]) if path else ".".join(map(str, parts))


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _bound(bounds: dict[str, Any], closed: str, open_: str, side: int) -> tuple[float, bool] | None:
    """The tighter of a closed and an open bound: (value, open). An old
    draft's boolean exclusiveMinimum makes `minimum` open."""
    found: list[tuple[float, bool]] = []
    if _number(bounds.get(closed)):
        found.append((bounds[closed], bounds.get(open_) is True))
    if _number(bounds.get(open_)):
        found.append((bounds[open_], True))
    if not found:
        return None
    # The tighter: the larger low, the smaller high; open wins a tie.
    return max(found, key=lambda b: (side * b[0], b[1]))


def _integer_at_least(value: float, open_: bool) -> int:
    n = math.floor(value) + 1 if open_ else math.ceil(value)
    return int(n)


def _integer_at_most(value: float, open_: bool) -> int:
    n = math.ceil(value) - 1 if open_ else math.floor(value)
    return int(n)


def _may_be(out: dict[str, Any], kind: str) -> bool:
    t = out.get("type")
    return t is None or t == kind or (isinstance(t, list) and kind in t)


def _properties_hold(out: dict[str, Any], key: str, value: Any) -> bool:
    """minProperties that the required keys meet, maxProperties that the
    closed set of properties cannot pass."""
    if not _count(value):
        return True
    props = out.get("properties") or {}
    if key == "minProperties":
        return len(out.get("required") or ()) >= int(value)
    closed = "properties" in out and not isinstance(out.get("additionalProperties"), dict)
    return closed and len(props) <= int(value)


def _patterns_hold(out: dict[str, Any], patterns: Any) -> bool:
    """patternProperties on an object the grammar closes, whose declared
    keys none of the patterns match: no key it writes is theirs."""
    closed = "properties" in out and not isinstance(out.get("additionalProperties"), dict)
    if not closed or not isinstance(patterns, dict):
        return False
    try:
        return not any(re.search(str(p), k) for p in patterns for k in out["properties"])
    except re.error:
        return False


def _disjoint(alternatives: list[dict[str, Any]]) -> bool:
    """Whether no value can match two of oneOf's alternatives (then oneOf
    is anyOf): each has its own type, or its own constants."""
    kinds = [a.get("type") for a in alternatives]
    if all(isinstance(k, str) for k in kinds):
        named = ["number" if k == "integer" else k for k in kinds]
        return len(set(named)) == len(named)
    values: list[list[Any]] = []
    for a in alternatives:
        if "enum" not in a and "const" not in a:
            return False
        values.append(list(a["enum"]) if "enum" in a else [a["const"]])
    seen = [json.dumps(_plain(x), sort_keys=True) for v in values for x in v]
    return len(seen) == len(set(seen))


def _plain(value: Any) -> Any:
    """1.0 as 1: JSON Schema's equality of numbers."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _mergeable(part: dict[str, Any]) -> bool:
    """An allOf part whose whole meaning survives the merge."""
    return set(part) <= {"type", "properties", "required", "additionalProperties", "$ref"} and (
        part.get("type") in (None, "object")
    )


def _pattern_converts(pattern: str) -> bool:
    return string_rules("regex", whole_pattern(pattern), "p-", {}) is not None


def whole_pattern(pattern: str) -> str:
    """A schema's pattern (found anywhere in the string) as a regex that
    matches the whole string."""
    body = pattern
    start = body.startswith("^")
    end = body.endswith("$") and not body.endswith("\\$")
    body = body[1 if start else 0 : -1 if end else None]
    return ("" if start else ".*") + f"(?:{body})" + ("" if end else ".*")


def _target(root: Any, ref: str) -> Any:
    target: Any = root
    for part in ref[2:].split("/"):
        if not isinstance(target, dict) or part not in target:
            return None
        target = target[part]
    return target
