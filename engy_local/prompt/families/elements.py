"""Forced calls whose parameters are elements of their own (DeepSeek V3.2 /
V4 DSML, Kimi K3): the grammar of one call per tool in an `ElementLayout`.
Not a family itself (no `FAMILY`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...chat import ToolSpec
from ...grammar.gbnf import literal, until
from ...grammar.schema import value_rules

__all__ = ["ElementLayout", "element_call_rules", "value_kinds"]


_MAX_LENGTH = 64  # the longest maxLength written out as a bounded repeat
# JSON Schema types -> the kind of value an element holds (Kimi K3's names).
_KINDS = {
    "string": "string",
    "number": "number",
    "integer": "number",
    "boolean": "boolean",
    "null": "null",
    "object": "object",
    "array": "array",
}


def _string_choices(schema: Any) -> list[str] | None:
    """The values of a string enum (or const), else None."""
    if not isinstance(schema, dict):
        return None
    choices = schema.get("enum") if "enum" in schema else None
    if choices is None and isinstance(schema.get("const"), str):
        choices = [schema["const"]]
    if isinstance(choices, list) and choices and all(isinstance(c, str) for c in choices):
        return choices
    return None


def _length_bounds(schema: Any) -> tuple[int, int] | None:
    """(minLength, maxLength) of a string whose maxLength is small enough
    to write out as a bounded repeat."""
    if not isinstance(schema, dict):
        return None
    high, low = schema.get("maxLength"), schema.get("minLength", 0)
    if not isinstance(high, int) or isinstance(high, bool) or not 0 <= high <= _MAX_LENGTH:
        return None
    low = low if isinstance(low, int) and not isinstance(low, bool) else 0
    return min(max(low, 0), high), high


def value_kinds(schema: Any) -> list[str]:
    """The kinds of value a parameter of `schema` may hold, "string" first:
    all of them when the schema does not say."""
    if _string_choices(schema) is not None:
        return ["string"]
    types = schema.get("type") if isinstance(schema, dict) else None
    if isinstance(types, str):
        types = [types]
    kinds = [_KINDS[t] for t in types if t in _KINDS] if isinstance(types, list) else []
    kinds = list(dict.fromkeys(kinds or _KINDS.values()))
    return sorted(kinds, key=lambda k: k != "string")


@dataclass(frozen=True)
class ElementLayout:
    """How a family writes a call with one element per parameter, for the
    forced-call grammar: `call_head(name)`, then for each parameter
    `key_open + escape(key) + key_close(kind)`, the value, `value_close`,
    `after_value`; then `call_close`. A string value is free text that
    cannot hold `value_close`; any other is JSON following its schema."""

    call_head: Callable[[str], str]
    key_open: str
    key_close: Callable[[str], str]  # the value's kind -> what closes the head
    value_close: str
    after_value: str
    call_close: str
    escape: Callable[[str], str] = str


def element_call_rules(tools: list[ToolSpec], rules: dict[str, str], layout: ElementLayout) -> str:
    """Adds one rule per tool, each one call to it in `layout`: the
    parameters of the schema's `properties` in its order, the optional ones
    skippable, no others (a schema without properties takes any keys with
    string values). A string is free text without the value's close marker,
    one of its enum's values, or, with a maxLength up to 64, at most that
    many characters on one line without `<`. Returns the alternatives."""
    end = literal(layout.value_close + layout.after_value)
    rules.update(until(layout.value_close, "el-text"))
    text = "el-text-0" + (" " + literal(layout.after_value) if layout.after_value else "")
    for i, tool in enumerate(tools):
        parts = [literal(layout.call_head(tool.name))]
        props = tool.parameters.get("properties") if isinstance(tool.parameters, dict) else None
        if not isinstance(props, dict):
            head = literal(layout.key_open) + ' [^"&<>\\n]+ ' + literal(layout.key_close("string"))
            rules[f"el-{i}-any"] = f"{head} {text}"
            parts.append(f"el-{i}-any*")
        else:
            required = tool.parameters.get("required")
            needed = set(required) if isinstance(required, list) else set()
            for j, (key, schema) in enumerate(props.items()):
                name = f"el-{i}-p{j}"
                rules[name] = _element_rule(str(key), schema, name, rules, layout, end, text)
                parts.append(name if key in needed else name + "?")
        parts.append(literal(layout.call_close))
        rules[f"call-{i}"] = " ".join(parts)
    return " | ".join(f"call-{i}" for i in range(len(tools)))


def _element_rule(
    key: str,
    schema: Any,
    name: str,
    rules: dict[str, str],
    layout: ElementLayout,
    end: str,
    text: str,
) -> str:
    kinds = value_kinds(schema)
    key_open = layout.key_open + layout.escape(key)
    alternatives = []
    if kinds[0] == "string":
        head = literal(key_open + layout.key_close("string"))
        choices = _string_choices(schema)
        bounds = _length_bounds(schema)
        if choices is not None:
            alternatives.append(f"{head} ({' | '.join(map(literal, choices))}) {end}")
        elif bounds is not None:
            alternatives.append(f"{head} [^<\\n]{{{bounds[0]},{bounds[1]}}} {end}")
        else:
            alternatives.append(f"{head} {text}")
    others = [k for k in kinds if k != "string"]
    heads = list(dict.fromkeys(literal(key_open + layout.key_close(k)) for k in others))
    if heads:
        value = value_rules(schema, name + "-", rules)
        alternatives.append(f"({' | '.join(heads)}) {value} {end}")
    return " | ".join(f"({a})" for a in alternatives)
