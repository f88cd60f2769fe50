"""engy's own GGUF header reader: every count and length is bounded by the
file, so a truncated or lying file fails fast with NotGGUF, never a hang, a
MemoryError or a traceback."""

from __future__ import annotations

import contextlib
import struct
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engy_local.errors import NotGGUF
from engy_local.models.ggufmeta import parameter_count, read_metadata

U32, U64, STRING, ARRAY = 4, 10, 8, 9


def s(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def kv_u32(key: str, value: int) -> bytes:
    return s(key) + struct.pack("<I", U32) + struct.pack("<I", value)


def kv_str(key: str, value: str) -> bytes:
    return s(key) + struct.pack("<I", STRING) + s(value)


def kv_strings(key: str, values: list[str]) -> bytes:
    head = s(key) + struct.pack("<IIQ", ARRAY, STRING, len(values))
    return head + b"".join(s(v) for v in values)


def tensor(name: str, dims: list[int]) -> bytes:
    shape = b"".join(struct.pack("<Q", d) for d in dims)
    return s(name) + struct.pack("<I", len(dims)) + shape + struct.pack("<IQ", 0, 0)


def header(kvs: list[bytes], tensors: list[bytes], *, n_kv: int | None = None) -> bytes:
    counts = struct.pack("<QQ", len(tensors), len(kvs) if n_kv is None else n_kv)
    return b"GGUF" + struct.pack("<I", 3) + counts + b"".join(kvs) + b"".join(tensors)


VALID = header(
    [
        kv_str("general.architecture", "llama"),
        kv_u32("llama.context_length", 4096),
        kv_str("tokenizer.chat_template", "{{ messages }}"),
        kv_strings("tokenizer.ggml.tokens", ["a", "b", "c"]),
    ],
    [tensor("token_embd.weight", [8, 3]), tensor("output.weight", [8, 3])],
)


def write(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "x.gguf"
    path.write_bytes(data)
    return path


def test_a_valid_header_reads(tmp_path: Path) -> None:
    path = write(tmp_path, VALID)
    meta = read_metadata(path)
    assert meta["general.architecture"] == "llama"
    assert meta["llama.context_length"] == 4096
    assert meta["tokenizer.ggml.tokens"] == 3
    assert parameter_count(path) == 48


def test_a_large_vocabulary_is_skipped_whole(tmp_path: Path) -> None:
    # Strings across read blocks and one longer than a block: the keys
    # after the vocabulary still read.
    tokens = [f"tok{i}" for i in range(200_000)] + ["x" * (3 << 20), "end"]
    data = header(
        [kv_strings("tokenizer.ggml.tokens", tokens), kv_u32("llama.context_length", 8192)],
        [tensor("output.weight", [8, 3])],
    )
    meta = read_metadata(write(tmp_path, data))
    assert meta["tokenizer.ggml.tokens"] == len(tokens)
    assert meta["llama.context_length"] == 8192
    assert parameter_count(tmp_path / "x.gguf") == 24


def test_every_truncation_fails(tmp_path: Path) -> None:
    # Cut anywhere inside the metadata: NotGGUF, never a partial answer.
    end = VALID.index(b"\x11\x00\x00\x00\x00\x00\x00\x00token_embd")  # tensors start
    for cut in range(end):
        with pytest.raises(NotGGUF):
            read_metadata(write(tmp_path, VALID[:cut]))
    for cut in range(len(VALID)):
        with pytest.raises(NotGGUF):
            parameter_count(write(tmp_path, VALID[:cut]))


HUGE = 2**64 - 1
LIES = [
    ("not gguf", b"GGML" + VALID[4:]),
    ("version 1", b"GGUF" + struct.pack("<I", 1) + VALID[8:]),
    ("key count 2^64", header([kv_u32("a", 1)], [], n_kv=HUGE)),
    ("key count past the file", header([kv_u32("a", 1)], [], n_kv=1000)),
    ("tensor count 2^64", b"GGUF" + struct.pack("<IQQ", 3, HUGE, 0)),
    ("string length 2^64", b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", HUGE)),
    (
        "string value past the file",
        header([s("k") + struct.pack("<I", STRING) + struct.pack("<Q", 10**9) + b"abc"], []),
    ),
    (
        "string array of 2^64",
        header([s("k") + struct.pack("<IIQ", ARRAY, STRING, HUGE)], []),
    ),
    (
        "string array of zero-length strings, lying count",
        header([s("k") + struct.pack("<IIQ", ARRAY, STRING, 10**7) + b"\0" * 800], []),
    ),
    (
        "scalar array past the file",
        header([s("k") + struct.pack("<IIQ", ARRAY, U64, 2**40)], []),
    ),
    ("nested array", header([s("k") + struct.pack("<IIQ", ARRAY, ARRAY, 1) + b"\0" * 12], [])),
    ("unknown value type", header([s("k") + struct.pack("<I", 99) + b"\0" * 8], [])),
]


@pytest.mark.parametrize("data", [c[1] for c in LIES], ids=[c[0] for c in LIES])
def test_lying_headers_fail_fast(tmp_path: Path, data: bytes) -> None:
    path = write(tmp_path, data)
    started = time.monotonic()
    with pytest.raises(NotGGUF):
        read_metadata(path)
    with pytest.raises(NotGGUF):
        parameter_count(path)
    assert time.monotonic() - started < 5


def test_tensor_with_too_many_dimensions(tmp_path: Path) -> None:
    path = write(tmp_path, header([kv_u32("a", 1)], [tensor("t", [1] * 40)]))
    assert read_metadata(path)["a"] == 1
    with pytest.raises(NotGGUF, match="dimension"):
        parameter_count(path)


@settings(
    max_examples=300,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    edits=st.lists(
        st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255)), min_size=1, max_size=8
    ),
    cut=st.integers(0, len(VALID)),
)
def test_fuzzed_headers_read_or_fail_cleanly(
    tmp_path: Path, edits: list[tuple[int, int]], cut: int
) -> None:
    data = bytearray(VALID)
    for at, byte in edits:
        data[at] = byte
    path = write(tmp_path, bytes(data[: max(cut, 4)]))
    started = time.monotonic()
    for read in (read_metadata, parameter_count):
        with contextlib.suppress(NotGGUF):
            read(path)
    assert time.monotonic() - started < 2
