"""llama.cpp's saved sequence state (`llama_state_seq_get_data`), read as
cells, so that a state can be cut into pieces by position and put back
together: the disk tier stores a conversation's new tokens, not its whole
prefix again.

The blob starts with u32 magic (0xaf143cd8) and i32 seq_id; then each KV
cache writes, for one sequence:

    u32 n_stream, then per stream: u32 cell_count, and when it is not 0
      cell_count x (i32 pos, u32 n_seq_id, [ext], n_seq_id x i32 seq_id)
      u32 v_trans, u32 n_layer
      n_layer x (i32 k_type, u64 k_row, cell_count x k_row bytes)
      V for each layer that has one: (i32 v_type, u64 v_row, cell_count x v_row)
      or, transposed: (i32 v_type, u32 v_elem, u32 n_embd, n_embd x cell_count x v_elem)

A model with a sliding window writes two caches one after the other: the
full-attention one, then the window one (only the window one for a partial
state). Cells come in the cache's own order, not by position; `pieces`
sorts them. A hybrid model (attention and recurrent layers) writes its
attention cache, then its recurrent state, which is kept here as opaque
bytes (`split_recurrent`); a partial state is the recurrent part alone.
A model with M-RoPE positions (Qwen2-VL, Qwen3.5) writes each cell's `ext`
too: i32 x, i32 y, i32 tok (`ext=True` here). Anything else (cells shared
by several sequences, a layout that does not add up to the blob's length)
is `Unparsed`, and the caller keeps such a state whole.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

MAGIC = 0xAF143CD8


class Unparsed(Exception):
    """Inside the runtime only: a state this module cannot read as cells."""


@dataclass(frozen=True)
class Layer:
    type: int  # ggml type of its K (or V) rows
    row: int  # bytes a cell takes (transposed V: bytes of one element)
    width: int  # transposed V: elements of one cell; else 0
    data: np.ndarray  # uint8, cells x row (transposed V: width x cells x row)


@dataclass(frozen=True)
class Cache:
    """One KV cache's cells of a sequence, sorted by position."""

    positions: np.ndarray  # int32, ascending
    seq: int  # the sequence id the cells were saved from
    v_trans: int
    k: tuple[Layer, ...]
    v: tuple[Layer, ...]
    ext: np.ndarray | None = None  # int32, cells x 3 (x, y, tok); None: not written

    def take(self, start: int, end: int) -> Cache:
        """The cells at positions in [start, end)."""
        keep = (self.positions >= start) & (self.positions < end)
        return self._select(keep)

    def _select(self, keep: np.ndarray) -> Cache:
        def cut(layer: Layer) -> Layer:
            data = layer.data[:, keep] if layer.width else layer.data[keep]
            return Layer(layer.type, layer.row, layer.width, data)

        k, v = tuple(map(cut, self.k)), tuple(map(cut, self.v))
        ext = self.ext[keep] if self.ext is not None else None
        return Cache(self.positions[keep], self.seq, self.v_trans, k, v, ext)

    @property
    def n_cells(self) -> int:
        return int(self.positions.size)


def concat(caches: list[Cache]) -> Cache:
    """Cells of several pieces of one cache, in order (positions ascending)."""
    first = caches[0]

    def join(layers: list[Layer]) -> Layer:
        axis = 1 if layers[0].width else 0
        data = np.concatenate([layer.data for layer in layers], axis=axis)
        return Layer(layers[0].type, layers[0].row, layers[0].width, data)

    return Cache(
        np.concatenate([c.positions for c in caches]),
        first.seq,
        first.v_trans,
        tuple(join([c.k[i] for c in caches]) for i in range(len(first.k))),
        tuple(join([c.v[i] for c in caches]) for i in range(len(first.v))),
        np.concatenate([c.ext for c in caches]) if first.ext is not None else None,
    )


class _Reader:
    def __init__(self, blob: bytes) -> None:
        self.blob = memoryview(blob)
        self.at = 0

    def take(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        if self.at + size > len(self.blob):
            raise Unparsed("the state ends early")
        (value,) = struct.unpack_from(fmt, self.blob, self.at)
        self.at += size
        return int(value)

    def bytes(self, n: int) -> np.ndarray:
        if n < 0 or self.at + n > len(self.blob):
            raise Unparsed("the state ends early")
        out = np.frombuffer(self.blob, dtype=np.uint8, count=n, offset=self.at)
        self.at += n
        return out


def parse(blob: bytes, caches: int, ext: bool = False) -> list[Cache | None]:
    """The `caches` KV caches a state holds, in order; None for one that
    holds no cell of the sequence. `ext`: its cells carry M-RoPE positions."""
    reader = _Reader(blob)
    if reader.take("<I") != MAGIC:
        raise Unparsed("not a sequence state")
    reader.take("<i")
    out = [_cache(reader, ext) for _ in range(caches)]
    if reader.at != len(blob):
        raise Unparsed("bytes left over")
    return out


def _cache(r: _Reader, ext: bool) -> Cache | None:
    if r.take("<I") != 1:
        raise Unparsed("not a single-stream cache")
    n = r.take("<I")
    if n == 0:
        return None
    width = 6 if ext else 3  # pos, n_seq_id = 1, [x, y, tok,] seq_id
    meta = r.bytes(n * 4 * width)
    cells = np.frombuffer(meta.tobytes(), dtype="<i4").reshape(n, width)
    if not (cells[:, 1] == 1).all() or not (cells[:, -1] == cells[0, -1]).all():
        raise Unparsed("cells of several sequences, or not laid out as expected")
    v_trans, n_layer = r.take("<I"), r.take("<I")
    if v_trans > 1 or not 0 < n_layer < 4096:
        raise Unparsed("not a KV cache's data")
    k = []
    for _ in range(n_layer):
        kind, row = r.take("<i"), r.take("<Q")
        k.append(Layer(kind, row, 0, r.bytes(n * row).reshape(n, row)))
    v = []
    for _ in range(n_layer):
        if v_trans:
            kind, elem, width = r.take("<i"), r.take("<I"), r.take("<I")
            data = r.bytes(width * n * elem).reshape(width, n, elem)
            v.append(Layer(kind, elem, width, data))
        else:
            kind, row = r.take("<i"), r.take("<Q")
            v.append(Layer(kind, row, 0, r.bytes(n * row).reshape(n, row)))
    order = np.argsort(cells[:, 0], kind="stable")
    extra = cells[:, 2:5].astype(np.int32) if ext else None
    positions = cells[:, 0].astype(np.int32)
    cache = Cache(positions, int(cells[0, -1]), v_trans, tuple(k), tuple(v), extra)
    return cache._select(order) if not (order == np.arange(n)).all() else cache


def write(caches: list[Cache | None]) -> bytes:
    """The state blob of `caches` (the inverse of `parse`, cells by position)."""
    seq = next((c.seq for c in caches if c is not None), 0)
    out = bytearray(struct.pack("<Ii", MAGIC, seq))
    for cache in caches:
        out += struct.pack("<I", 1)
        if cache is None or cache.n_cells == 0:
            out += struct.pack("<I", 0)
            continue
        n = cache.n_cells
        out += struct.pack("<I", n)
        meta = np.empty((n, 3 if cache.ext is None else 6), dtype="<i4")
        meta[:, 0], meta[:, 1], meta[:, -1] = cache.positions, 1, cache.seq
        if cache.ext is not None:
            meta[:, 2:5] = cache.ext
        out += meta.tobytes()
        out += struct.pack("<II", cache.v_trans, len(cache.k))
        for layer in cache.k:
            out += struct.pack("<iQ", layer.type, layer.row) + layer.data.tobytes()
        for layer in cache.v:
            if layer.width:
                out += struct.pack("<iII", layer.type, layer.row, layer.width)
            else:
                out += struct.pack("<iQ", layer.type, layer.row)
            out += layer.data.tobytes()
    return bytes(out)


def split_recurrent(blob: bytes, attention: bool, ext: bool = False) -> tuple[Cache | None, bytes]:
    """A recurrent model's state: its attention cells (a hybrid's; None for
    a purely recurrent model or where it holds none) and the recurrent part
    as llama.cpp wrote it. A partial state (`attention` False) is the
    recurrent part alone."""
    reader = _Reader(blob)
    if reader.take("<I") != MAGIC:
        raise Unparsed("not a sequence state")
    reader.take("<i")
    cache = _cache(reader, ext) if attention else None
    rest = bytes(reader.blob[reader.at :])
    if not rest:
        raise Unparsed("no recurrent state")
    return cache, rest


def join_recurrent(cells: Cache | None, recurrent: bytes, attention: bool) -> bytes:
    """The state blob of attention cells and a recurrent part (the inverse
    of `split_recurrent`)."""
    if attention:
        return write([cells]) + recurrent
    return struct.pack("<Ii", MAGIC, 0) + recurrent
