"""Reading a GGUF file's metadata header without loading the model.

Only what engy needs before a load (the trained context, the architecture,
the chat template) and to check that a file is a GGUF at all. Arrays are
skipped, not decoded: the vocabulary is large and never needed here.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any, BinaryIO

MAGIC = b"GGUF"

# GGUF value types: id -> struct format of a scalar (strings and arrays apart)
_SCALARS = {
    0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
    10: "<Q", 11: "<q", 12: "<d",
}  # fmt: skip
_STRING, _ARRAY = 8, 9


class NotGGUF(ValueError):
    pass


def _read(f: BinaryIO, fmt: str) -> Any:
    size = struct.calcsize(fmt)
    data = f.read(size)
    if len(data) != size:
        raise NotGGUF("truncated header")
    return struct.unpack(fmt, data)[0]


def _string(f: BinaryIO) -> str:
    n = _read(f, "<Q")
    data = f.read(n)
    if len(data) != n:
        raise NotGGUF("truncated header")
    return data.decode("utf-8", "replace")


def _skip_array(f: BinaryIO) -> int:
    kind, n = _read(f, "<I"), _read(f, "<Q")
    if kind == _STRING:
        for _ in range(n):
            f.seek(_read(f, "<Q"), 1)
    elif kind in _SCALARS:
        f.seek(struct.calcsize(_SCALARS[kind]) * n, 1)
    else:
        raise NotGGUF(f"unsupported array type {kind}")
    return int(n)


def read_metadata(path: Path) -> dict[str, Any]:
    """Key/value metadata; an array's value is its length."""
    with path.open("rb") as f:
        if f.read(4) != MAGIC:
            raise NotGGUF(f"{path.name} is not a GGUF file")
        version = _read(f, "<I")
        if version < 2:
            raise NotGGUF(f"{path.name}: GGUF version {version} is too old")
        _read(f, "<Q")  # tensor count
        n_kv = _read(f, "<Q")
        meta: dict[str, Any] = {"GGUF.version": version}
        for _ in range(n_kv):
            key = _string(f)
            kind = _read(f, "<I")
            if kind == _STRING:
                meta[key] = _string(f)
            elif kind == _ARRAY:
                meta[key] = _skip_array(f)
            elif kind in _SCALARS:
                meta[key] = _read(f, _SCALARS[kind])
            else:
                raise NotGGUF(f"{path.name}: unknown value type {kind} for {key}")
        return meta


def trained_context(meta: dict[str, Any]) -> int | None:
    arch = meta.get("general.architecture")
    value = meta.get(f"{arch}.context_length")
    return int(value) if isinstance(value, int) else None


def parameter_count(path: Path) -> int:
    """How many weights the file's tensors hold (the product of each
    tensor's dimensions, summed); for a split GGUF, this part's share."""
    with path.open("rb") as f:
        if f.read(4) != MAGIC:
            raise NotGGUF(f"{path.name} is not a GGUF file")
        _read(f, "<I")  # version
        n_tensors, n_kv = _read(f, "<Q"), _read(f, "<Q")
        for _ in range(n_kv):
            f.seek(_read(f, "<Q"), 1)  # key
            kind = _read(f, "<I")
            if kind == _STRING:
                f.seek(_read(f, "<Q"), 1)
            elif kind == _ARRAY:
                _skip_array(f)
            elif kind in _SCALARS:
                f.seek(struct.calcsize(_SCALARS[kind]), 1)
            else:
                raise NotGGUF(f"{path.name}: unknown value type {kind}")
        total = 0
        for _ in range(n_tensors):
            f.seek(_read(f, "<Q"), 1)  # name
            count = 1
            for _ in range(_read(f, "<I")):
                count *= _read(f, "<Q")
            f.seek(4 + 8, 1)  # type, offset
            total += count
        return total
