"""Reading a GGUF file's metadata header without loading the model.

Only what engy needs before a load (the trained context, the architecture,
the chat template) and to check that a file is a GGUF at all. Arrays are
skipped, not decoded: the vocabulary is large and never needed here.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any, BinaryIO

from ..errors import NotGGUF

MAGIC = b"GGUF"

# GGUF value types: id -> struct format of a scalar (strings and arrays apart)
_SCALARS = {
    0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
    10: "<Q", 11: "<q", 12: "<d",
}  # fmt: skip
_STRING, _ARRAY = 8, 9
_U64 = struct.Struct("<Q")
_BLOCK = 1 << 20


# Bounds no real file comes near; a header that claims more is lying, and
# reading it would take minutes (a count of 2**64 entries) or all memory.
MAX_KEYS = 1 << 16
MAX_TENSORS = 1 << 20
MAX_DIMS = 8  # ggml has 4
MAX_STRING_ARRAY = 1 << 24  # a vocabulary is a few hundred thousand strings


class _Header:
    """A GGUF header read with every count and length checked against what
    is left of the file: a truncated or lying file fails at once."""

    def __init__(self, f: BinaryIO, name: str) -> None:
        self.f = f
        self.name = name
        self.size = f.seek(0, 2)
        f.seek(0)

    def left(self) -> int:
        return self.size - self.f.tell()

    def fail(self, what: str) -> NotGGUF:
        return NotGGUF(f"{self.name}: {what}")

    def read(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        data = self.f.read(size)
        if len(data) != size:
            raise self.fail("truncated header")
        return struct.unpack(fmt, data)[0]

    def count(self, fmt: str, most: int, each: int, what: str) -> int:
        """A count of things at least `each` bytes long, at most `most`."""
        n: int = self.read(fmt)
        if n > most or n * each > self.left():
            raise self.fail(f"{what} count {n} is more than the file can hold")
        return n

    def skip(self, n: int) -> None:
        if n > self.left():
            raise self.fail("truncated header")
        self.f.seek(n, 1)

    def string(self) -> str:
        n = self.count("<Q", self.size, 1, "string length")
        return self.f.read(n).decode("utf-8", "replace")

    def skip_string(self) -> None:
        self.skip(self.count("<Q", self.size, 1, "string length"))

    def skip_strings(self, n: int) -> None:
        """Skips `n` strings, reading the file in blocks: a vocabulary is
        150k+ of them, and one read and seek each took 0.6 s a file."""
        block, at = b"", 0
        for _ in range(n):
            if at + 8 > len(block):
                block = block[at:] + self.f.read(_BLOCK)
                at = 0
                if len(block) < 8:
                    raise self.fail("truncated header")
            (length,) = _U64.unpack_from(block, at)
            at += 8 + length
            if at > len(block):  # a string longer than what is read
                self.skip(at - len(block))
                block, at = b"", 0
        self.f.seek(at - len(block), 1)  # give back what is read beyond

    def skip_array(self) -> int:
        kind = self.read("<I")
        if kind == _STRING:
            n = self.count("<Q", MAX_STRING_ARRAY, 8, "array")
            self.skip_strings(n)
        elif kind in _SCALARS:
            width = struct.calcsize(_SCALARS[kind])
            n = self.count("<Q", self.size, width, "array")
            self.skip(width * n)
        else:
            raise self.fail(f"unsupported array type {kind}")
        return n

    def start(self) -> tuple[int, int, int]:
        """(version, tensor count, key count) after checking the magic."""
        if self.f.read(4) != MAGIC:
            raise NotGGUF(f"{self.name} is not a GGUF file")
        version = self.read("<I")
        if version < 2:
            raise self.fail(f"GGUF version {version} is too old")
        # A tensor record is at least 8 (name) + 4 (dims) + 4 + 8 bytes; a
        # key/value at least 8 (key) + 4 (type) + 1.
        n_tensors = self.count("<Q", MAX_TENSORS, 24, "tensor")
        n_kv = self.count("<Q", MAX_KEYS, 13, "key")
        return version, n_tensors, n_kv

    def value(self, key: str) -> Any:
        kind = self.read("<I")
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            return self.skip_array()
        if kind in _SCALARS:
            return self.read(_SCALARS[kind])
        raise self.fail(f"unknown value type {kind} for {key}")


def read_metadata(path: Path) -> dict[str, Any]:
    """Key/value metadata; an array's value is its length."""
    with path.open("rb") as f:
        header = _Header(f, path.name)
        version, _, n_kv = header.start()
        meta: dict[str, Any] = {"GGUF.version": version}
        for _ in range(n_kv):
            key = header.string()
            meta[key] = header.value(key)
        return meta


def trained_context(meta: dict[str, Any]) -> int | None:
    arch = meta.get("general.architecture")
    value = meta.get(f"{arch}.context_length")
    return int(value) if isinstance(value, int) else None


def parameter_count(path: Path) -> int:
    """How many weights the file's tensors hold (the product of each
    tensor's dimensions, summed); for a split GGUF, this part's share."""
    with path.open("rb") as f:
        header = _Header(f, path.name)
        _, n_tensors, n_kv = header.start()
        for _ in range(n_kv):
            header.skip_string()  # key
            header.value("")
        total = 0
        for _ in range(n_tensors):
            header.skip_string()  # name
            count = 1
            for _ in range(header.count("<I", MAX_DIMS, 8, "dimension")):
                count *= header.read("<Q")
            header.skip(4 + 8)  # type, offset
            total += count
        return total


def tensor_sizes(path: Path) -> dict[str, int]:
    """Bytes of each tensor's data, by name, from the offsets the header
    gives (each runs to the next one's start, or to the end of the file;
    the alignment padding after a tensor counts as its own)."""
    with path.open("rb") as f:
        header = _Header(f, path.name)
        _, n_tensors, n_kv = header.start()
        alignment = 32
        for _ in range(n_kv):
            key = header.string()
            value = header.value(key)
            if key == "general.alignment" and isinstance(value, int) and value > 0:
                alignment = value
        offsets: list[tuple[int, str]] = []
        for _ in range(n_tensors):
            name = header.string()
            header.skip(8 * header.count("<I", MAX_DIMS, 8, "dimension"))
            header.skip(4)  # type
            offsets.append((header.read("<Q"), name))
        data = -(-f.tell() // alignment) * alignment
        offsets.sort()
        ends = [start for start, _ in offsets[1:]] + [header.size - data]
        return {name: end - start for (start, name), end in zip(offsets, ends, strict=True)}


# llama.cpp's `enum llama_ftype` (general.file_type): the quantization most
# of a file's weights have, by number.
FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1",
    10: "Q2_K", 11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M",
    16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S",
    22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M",
    28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0",
    37: "TQ2_0", 38: "MXFP4",
}  # fmt: skip


def file_type(meta: dict[str, Any]) -> str:
    """The quantization the header states (general.file_type), or ""."""
    value = meta.get("general.file_type")
    return FILE_TYPES.get(value, "") if isinstance(value, int) else ""
