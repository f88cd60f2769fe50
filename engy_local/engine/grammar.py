"""GBNF grammars that force a tool call in the model's own syntax.

`forced_call_grammar(tools)` gives llama.cpp a grammar under which the model
can only write one well-formed call to one of `tools` (tool_choice any / tool),
with arguments that follow that tool's JSON Schema. The schema part comes from
llama-cpp-python's own converter (`llama_cpp.llama_grammar.SchemaConverter`),
run once per tool; each tool's rules get a prefix (`t0-`, `t1-`, ...) so tools
compose into one grammar without name clashes. Families whose calls are not
one JSON object (a tag per parameter) build their own rules from the whole
specs instead, with `value_rules` for each non-string parameter and `until`
for free text.

Real tool schemas (Claude Code, Codex: JSON Schema 2020-12) use more than the
converter understands, so each schema is first reduced to what it handles well:
- kept: type, properties, required, additionalProperties (false or a schema),
  items, prefixItems, enum, const, anyOf, oneOf, allOf, local $ref with
  $defs / definitions, the date / time / uuid formats, and length and item
  limits up to `_MAX_REPEAT` (each unit of a limit is a nested grammar group:
  a 524288-character maxLength would make a grammar megabytes long);
- dropped: annotations (description, title, default, examples, $schema ...),
  number bounds, pattern (its regex translation can let a string hold an
  unescaped quote), other formats, remote $refs and everything else;
- a schema that says nothing about its type (`{}`, `true`) means any JSON
  value; the arguments themselves are always an object.
A tool whose reduced schema still fails to convert or to compile falls back to
"any JSON object". JSON strings here may not hold raw control characters.

Schemas come from the request, so conversion is bounded: a schema of more
than `MAX_SCHEMA_NODES` values (objects, arrays, strings ...) is not converted, and one whose
rules come out over `MAX_TOOL_GRAMMAR` characters (nested length limits
multiply) is dropped; either falls back as above. A whole grammar over
`MAX_GRAMMAR` characters is an `InvalidRequest`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, cast

import llama_cpp
from llama_cpp.llama_grammar import SchemaConverter

from engy_local.chat import ToolSpec
from engy_local.errors import InvalidRequest

__all__ = ["check_grammar", "forced_call_grammar", "literal", "until", "value_rules"]

_MAX_REPEAT = 64
MAX_SCHEMA_NODES = 16384
MAX_TOOL_GRAMMAR = 256 * 1024
MAX_GRAMMAR = 4 * 1024 * 1024
_ANY: dict[str, Any] = {"type": ["object", "array", "string", "number", "boolean", "null"]}
_OBJECT: dict[str, Any] = {"type": "object"}
_TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})
_FORMATS = frozenset({"date", "time", "date-time", "uuid", "uuid1", "uuid3", "uuid4", "uuid5"})
# Keywords that say what a value is; a schema with none of them is any value.
_SHAPE = frozenset(
    {"type", "properties", "additionalProperties", "items", "prefixItems", "enum", "const"}
    | {"anyOf", "oneOf", "allOf", "$ref"}
)
# A JSON string character: not a quote, backslash or control character, or an escape.
_HEX4 = " ".join(["[0-9a-fA-F]"] * 4)
_CHAR_RULE = r'[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" ' + _HEX4 + ")"


def check_grammar(gbnf: str, root: str = "root") -> bool:
    """Whether llama.cpp parses `gbnf` (no model needed)."""
    sampler = llama_cpp.llama_sampler_init_grammar(None, gbnf.encode(), root.encode())
    if not sampler:
        return False
    llama_cpp.llama_sampler_free(sampler)
    return True


def forced_call_grammar(
    tools: Sequence[ToolSpec], family: str = "hermes", *, reasoning: bool = False
) -> str:
    """A grammar whose every sentence is one call to one of `tools` in
    `family`'s syntax. `reasoning=True`: the output starts inside a reasoning
    block the prompt opened, which must end (`</think>` or the family's own
    marker) before the call."""
    from .families import get  # the families build on this module

    chosen = get(family)
    if chosen.call_rules is None and chosen.tool_rules is None:
        raise ValueError(f"no forced-call grammar for tool-call family {family!r}")
    first: dict[str, ToolSpec] = {}
    for tool in tools:
        first.setdefault(tool.name, tool)
    specs = list(first.values())
    if not specs:
        raise ValueError("a forced tool call needs at least one tool")
    rules: dict[str, str] = {}
    if chosen.tool_rules is not None:  # the family writes each parameter itself
        chosen.tool_rules([_bounded(spec, chosen.tool_rules) for spec in specs], rules)
    elif chosen.call_rules is not None:
        roots = [_schema_rules(spec.parameters, f"t{i}-", rules) for i, spec in enumerate(specs)]
        chosen.call_rules([spec.name for spec in specs], roots, rules)
    if reasoning:
        rules.update(until(chosen.reasoning_end, "reasoning"))
        rules["root"] = "reasoning-0 [ \\t\\n]? [ \\t\\n]? call"
    else:
        rules["root"] = "call"
    grammar = "\n".join(f"{name} ::= {body}" for name, body in rules.items()) + "\n"
    if len(grammar) > MAX_GRAMMAR:
        raise InvalidRequest(
            f"tools: the forced call's grammar would be {len(grammar)} characters, "
            f"over the {MAX_GRAMMAR} limit",
            param="tools",
        )
    return grammar


# ---- one tool's arguments ----------------------------------------------------


class _Converter(SchemaConverter):
    def _format_literal(self, text: str) -> str:
        # The original leaves backslashes unescaped, which breaks JSON escapes.
        return literal(text)


def _schema_rules(parameters: Any, prefix: str, rules: dict[str, str]) -> str:
    """Adds the rules for one tool's arguments to `rules`; returns the name of
    the rule for the whole object."""
    return _first_compiling((_root_schema(parameters), _OBJECT), prefix, rules)


def value_rules(schema: Any, prefix: str, rules: dict[str, str]) -> str:
    """Adds the rules for one JSON value that follows `schema` (of any type,
    reduced as for a tool's arguments; any JSON value when that fails) to
    `rules`, prefixing their names with `prefix`; returns the value's rule."""
    return _first_compiling((_reduced(schema) or dict(_ANY), dict(_ANY)), prefix, rules)


def _first_compiling(schemas: Sequence[dict[str, Any]], prefix: str, rules: dict[str, str]) -> str:
    for schema in schemas:
        own = _convert(schema) if _small(schema) else None
        if own is None:
            continue
        renamed = {prefix + name: _renamed(body, own, prefix) for name, body in own.items()}
        grammar = "\n".join(f"{k} ::= {v}" for k, v in renamed.items())
        if len(grammar) <= MAX_TOOL_GRAMMAR and check_grammar(grammar, prefix + "root"):
            rules.update(renamed)
            return prefix + "root"
    raise AssertionError("the fallback grammar does not compile")  # pragma: no cover


def _bounded(spec: ToolSpec, tool_rules: Any) -> ToolSpec:
    """`spec`, or, when its parameters are too large to convert or their
    rules come out too large, the same tool taking any object."""
    if _small(spec.parameters):
        scratch: dict[str, str] = {}
        tool_rules([spec], scratch)
        if sum(len(k) + len(v) for k, v in scratch.items()) <= MAX_TOOL_GRAMMAR:
            return spec
    return ToolSpec(spec.name, spec.description, dict(_OBJECT))


def _small(schema: Any) -> bool:
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


def _convert(schema: dict[str, Any]) -> dict[str, str] | None:
    # The converter has no type annotations.
    converter: Any = cast(Any, _Converter)(
        prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False
    )
    try:
        converter.visit(converter.resolve_refs(schema, ""), "")
        text: str = converter.format_grammar()
    except Exception:  # the converter asserts and raises on what it cannot do
        return None
    rules = dict(line.split(" ::= ", 1) for line in text.splitlines())
    if "char" in rules:
        rules["char"] = _CHAR_RULE
    return rules


_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]|\{[^}]*\}|[A-Za-z0-9-]+|.', re.S)


def _renamed(body: str, names: dict[str, str], prefix: str) -> str:
    """`body` with every reference to a rule in `names` prefixed."""
    return "".join(prefix + t if t in names else t for t in _TOKEN.findall(body))


def _root_schema(parameters: Any) -> dict[str, Any]:
    schema = _reduced(parameters) if isinstance(parameters, dict) else None
    if not schema or schema == _ANY:
        return dict(_OBJECT)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = "object" if "object" in kind else "other"
    if kind not in (None, "object") or ("type" not in schema and "properties" not in schema):
        return dict(_OBJECT)
    return {**schema, "type": "object"}


def _reduced(schema: Any) -> dict[str, Any] | None:
    """`schema` cut down to what the converter handles; None for `false`."""
    if schema is False:
        return None
    if not isinstance(schema, dict):
        return dict(_ANY)
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
        kept = {k: _reduced(v) for k, v in props.items() if isinstance(k, str)}
        out["properties"] = {k: v for k, v in kept.items() if v is not None}
        required = schema.get("required")
        if isinstance(required, list):
            out["required"] = [r for r in required if r in out["properties"]]
    extra = schema.get("additionalProperties")
    if extra is False or isinstance(extra, dict):
        out["additionalProperties"] = _reduced(extra) if extra is not False else False
    items = schema.get("items")
    if isinstance(items, list):
        out["items"] = [_reduced(i) or dict(_ANY) for i in items]
    elif items is not None and items is not False:
        out["items"] = _reduced(items)
    if isinstance(schema.get("prefixItems"), list):
        out["prefixItems"] = [_reduced(i) or dict(_ANY) for i in schema["prefixItems"]]
    for low, high in (("minItems", "maxItems"), ("minLength", "maxLength")):
        _copy_limits(schema, out, low, high)
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        out["enum"] = schema["enum"]
    if "const" in schema:
        out["const"] = schema["const"]
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(key), list):
            alternatives = [r for r in map(_reduced, schema[key]) if r is not None]
            if alternatives:
                out[key] = alternatives
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        out["$ref"] = ref
    for key in ("$defs", "definitions"):
        if isinstance(schema.get(key), dict):
            out[key] = {k: _reduced(v) or dict(_ANY) for k, v in schema[key].items()}
    if schema.get("format") in _FORMATS and out.get("type") == "string":
        out["format"] = schema["format"]
    if not _SHAPE & out.keys():
        return {**out, **_ANY}
    return out


def _copy_limits(schema: dict[str, Any], out: dict[str, Any], low: str, high: str) -> None:
    lo, hi = _limit(schema.get(low)), _limit(schema.get(high))
    if lo is not None:
        out[low] = lo
    if hi is not None and hi >= (lo or 0):
        out[high] = hi


def _limit(value: Any) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_REPEAT
    return value if ok else None


# ---- GBNF text -----------------------------------------------------------------

_LITERAL_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def literal(text: str) -> str:
    """`text` as a GBNF string literal."""
    out = []
    for c in text:
        if c in _LITERAL_ESCAPES:
            out.append(_LITERAL_ESCAPES[c])
        elif c < " " or c == "\x7f":
            out.append(f"\\x{ord(c):02X}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


_CLASS_ESCAPES = {"\\": "\\\\", "]": "\\]", "[": "\\[", "-": "\\x2D", "^": "\\x5E"}


def _class_char(c: str) -> str:
    if c in _CLASS_ESCAPES:
        return _CLASS_ESCAPES[c]
    return f"\\x{ord(c):02X}" if c < " " or c == "\x7f" else c


def until(marker: str, name: str) -> dict[str, str]:
    """Rules `name-0` ... matching any text up to and including the first
    `marker`: a right-linear grammar of the automaton that looks for it, one
    rule per state (how much of the marker was just seen)."""
    rules = {}
    for k in range(len(marker)):
        moves = {c: _advance(marker, k, c) for c in sorted(set(marker))}
        moves = {c: j for c, j in moves.items() if j}
        other = "[^" + "".join(_class_char(c) for c in moves) + "]"
        alternatives = [f"{other} {name}-0"]
        for c, j in moves.items():
            alternatives.append(literal(c) if j == len(marker) else f"{literal(c)} {name}-{j}")
        rules[f"{name}-{k}"] = " | ".join(alternatives)
    return rules


def _advance(marker: str, k: int, c: str) -> int:
    """After matching `marker[:k]` and reading `c`: how much of it is matched."""
    seen = marker[:k] + c
    for j in range(min(len(seen), len(marker)), 0, -1):
        if seen.endswith(marker[:j]):
            return j
    return 0
