"""Checked reads of JSON request fields, shared by the protocol modules.

Each reader takes the object, the key and the dotted path used in the error
message, and raises `InvalidRequest` naming that path. Unknown keys are never
looked at, so they are tolerated.
"""

from __future__ import annotations

import math
from typing import Any

from ..chat import Provider
from ..errors import InvalidRequest

_MISSING: Any = object()
# Integers reach llama.cpp as C ints: anything larger is out of range there.
INT_MAX = 2**31 - 1


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def fail(path: str, expected: str, value: Any) -> InvalidRequest:
    return InvalidRequest(f"{path}: expected {expected}, got {_type_name(value)}", param=path)


def obj(value: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise fail(path, "an object", value)
    return value


def required(d: dict[str, Any], key: str, path: str) -> Any:
    if key not in d or d[key] is None:
        raise InvalidRequest(f"{path}: field required", param=path)
    return d[key]


def _absent(path: str, default: Any) -> Any:
    """What a missing (or null) field reads as: its default, if it has one."""
    if default is _MISSING:
        raise InvalidRequest(f"{path}: field required", param=path)
    return default


def string(d: dict[str, Any], key: str, path: str, default: Any = _MISSING) -> Any:
    value = d.get(key)
    if value is None:
        return _absent(path, default)
    if not isinstance(value, str):
        raise fail(path, "a string", value)
    return value


def integer(
    d: dict[str, Any],
    key: str,
    path: str,
    default: Any = _MISSING,
    minimum: int | None = None,
    maximum: int = INT_MAX,
) -> Any:
    value = d.get(key)
    if value is None:
        return _absent(path, default)
    if isinstance(value, bool) or not isinstance(value, int):
        # 5.0 is accepted as 5: JSON has one number type.
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise fail(path, "an integer", value)
    if minimum is not None and value < minimum:
        raise InvalidRequest(f"{path}: must be >= {minimum}, got {value}", param=path)
    if value > maximum:
        raise InvalidRequest(f"{path}: must be <= {maximum}, got {value}", param=path)
    return value


def number(
    d: dict[str, Any],
    key: str,
    path: str,
    default: Any = _MISSING,
    low: float | None = None,
    high: float | None = None,
) -> Any:
    value = d.get(key)
    if value is None:
        return _absent(path, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise fail(path, "a number", value)
    if not math.isfinite(value):  # Python's JSON reads NaN and Infinity
        raise InvalidRequest(f"{path}: must be a finite number, got {value}", param=path)
    if (low is not None and value < low) or (high is not None and value > high):
        raise InvalidRequest(f"{path}: must be between {low} and {high}, got {value}", param=path)
    return float(value)


def boolean(d: dict[str, Any], key: str, path: str, default: Any = _MISSING) -> Any:
    value = d.get(key)
    if value is None:
        return _absent(path, default)
    if not isinstance(value, bool):
        raise fail(path, "a boolean", value)
    return value


def array(d: dict[str, Any], key: str, path: str, default: Any = _MISSING) -> Any:
    value = d.get(key)
    if value is None:
        return _absent(path, default)
    if not isinstance(value, list):
        raise fail(path, "an array", value)
    return value


def strings(d: dict[str, Any], key: str, path: str) -> tuple[str, ...] | None:
    """An optional array of strings."""
    items = array(d, key, path, None)
    if items is None:
        return None
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise fail(f"{path}[{i}]", "a string", item)
    return tuple(items)


def provider(value: Any, path: str = "provider") -> Provider | None:
    """The `provider` object (worker requirements); unknown keys ignored."""
    if value is None:
        return None
    d = obj(value, path)
    quants = strings(d, "quantizations", f"{path}.quantizations")
    return Provider(
        only=strings(d, "only", f"{path}.only"),
        ignore=strings(d, "ignore", f"{path}.ignore") or (),
        quantizations=tuple(q.lower() for q in quants) if quants is not None else None,
        min_context=integer(d, "min_context", f"{path}.min_context", None, minimum=0),
        gpu=boolean(d, "gpu", f"{path}.gpu", None),
    )
