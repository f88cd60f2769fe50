"""The disk tier under the RAM prompt cache: sequence states that survive a
restart, found by the longest prefix of a prompt they hold.

Entries are segments of token sequences, each a file: the tokens from
`start` to `end`, the full-attention KV cells at those positions, and, for a
model with a sliding window, the window as it was at `end`. A segment's
parent holds the positions before it, so a conversation that grows writes
only its new tokens, and conversations sharing a preamble share its
segments. A model with recurrent state is stored the same way as a windowed
one, its recurrent state at `end` in place of the window (a hybrid's
attention cells are still cut by position); it resumes only at a segment's
end. A state whose cells cannot be read apart (kvstate.Unparsed) is one
segment from 0, whole.

- Lookup: a hash chain over blocks of BLOCK tokens finds the segments whose
  path holds the prompt's longest run of whole blocks; the tokens are then
  compared, and a state is restored only for tokens it really holds. A
  windowed model resumes only where a window was kept: at a segment's end,
  or one token before it (the window at `end` still covers that position).
- Identity: files live under a directory named by the model, build and
  layout (identity.py), and say all of it again in their header: a file of
  another identity is never used.
- Writes go through one thread, each to a temporary file renamed into place;
  what is stored is never written again; the size bound holds at all times,
  least recently used out first (a segment goes with the ones built on it).
- A truncated, corrupt, foreign or unreadable file is removed and the
  request evaluated as if nothing was stored. A full or read-only disk turns
  the tier off with one warning; serving goes on.
- The files hold prompts: directories are 0700, files 0600.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import queue
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import kvstate, segments
from .identity import Identity
from .kvfiles import (
    HEADER,
    MAGIC,
    DiskBudget,
    private_dir,
    read_file,
    read_header,
    read_hits,
    write_hits,
)

log = logging.getLogger("engy.cache")

BLOCK = 256  # tokens a hash-chain block holds
_OFF = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM}


# tokens, state, windows, ends (see DiskTier.put)
_Put = tuple[list[int], bytes, list[tuple[int, bytes]], list[int]]


@dataclass
class Segment:
    key: str
    parent: str  # "" for the first
    start: int
    end: int
    tokens: np.ndarray  # int32, positions start..end
    window: bool  # holds the sliding window as it was at `end`
    whole: bool  # an opaque state of positions 0..end
    size: int  # bytes of its file
    used: float  # last use (the file's mtime)
    hits: int = 0
    children: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Hit:
    """A stored state and how many prompt tokens it gives."""

    segment: str
    tokens: int


def _chain(tokens: np.ndarray, blocks: int, seed: bytes = b"") -> list[bytes]:
    out, h = [], seed
    for i in range(blocks):
        h = hashlib.sha256(h + tokens[i * BLOCK : (i + 1) * BLOCK].tobytes()).digest()[:16]
        out.append(h)
    return out


def _common(a: np.ndarray, b: np.ndarray) -> int:
    n = min(a.size, b.size)
    diff = np.nonzero(a[:n] != b[:n])[0]
    return int(diff[0]) if diff.size else n


class DiskTier:
    def __init__(self, budget: DiskBudget, identity: Identity, layout: segments.Layout) -> None:
        self.root = root = budget.root
        self.shared = budget
        self.budget = budget.limit
        self.identity = identity
        self.layout = layout
        self.windowed = layout.windowed  # the model keeps a sliding window (two caches)
        # "hybrid" (attention and recurrent layers), "recurrent" (no
        # attention), "": none. Its segments end in the recurrent state.
        self.recurrent = layout.recurrent
        self.checkpointed = self.layout.checkpointed  # resumes only where a state was kept
        self.dir = root / identity.key
        self.on = budget.limit > 0
        self.segments: dict[str, Segment] = {}
        self.blocks: dict[bytes, set[str]] = {}  # chain hash -> segments whose path holds it
        self.restored_tokens = 0
        self.hits = 0
        self.written = 0  # bytes written since start
        self._lock = budget.lock
        self._queue: queue.Queue[_Put | None] = queue.Queue(maxsize=4)
        self._writer: threading.Thread | None = None
        if self.on:
            try:
                private_dir(root)
                private_dir(self.dir)
                self._scan()
            except OSError as exc:
                self._off(exc)
        if self.on:
            budget.tiers.append(self)
            self._writer = threading.Thread(target=self._write_loop, name="engy-disk", daemon=True)
            self._writer.start()

    # -- what is stored -------------------------------------------------

    @property
    def used(self) -> int:
        return sum(s.size for s in self.segments.values())

    def _path(self, key: str) -> Path:
        return self.dir / f"{key}.kv"

    def _scan(self) -> None:
        found = {}
        for path in self.dir.glob("*.kv"):
            header = read_header(path)
            if header is None or header.get("identity") != self.identity.to_json():
                log.warning("kv cache: removed %s (unreadable, or another model's)", path.name)
                path.unlink(missing_ok=True)
                continue
            found[path.stem] = header
        for path in self.dir.glob(".*.tmp"):
            path.unlink(missing_ok=True)  # a write cut short
        hits = read_hits(self.dir)
        # Parents first: a segment is kept only when its whole path is.
        for key in sorted(found, key=lambda k: found[k]["end"]):
            h = found[key]
            parent = h["parent"]
            if parent and parent not in self.segments:
                self._path(key).unlink(missing_ok=True)
                continue
            tokens = np.frombuffer(bytes.fromhex(h["tokens"]), dtype="<i4").copy()
            stat = self._path(key).stat()
            self._add(
                Segment(
                    key, parent, h["start"], h["end"], tokens, h["window"], h["whole"],
                    stat.st_size, stat.st_mtime, hits.get(key, 0),
                )
            )  # fmt: skip

    def _add(self, seg: Segment) -> None:
        self.segments[seg.key] = seg
        if seg.parent:
            self.segments[seg.parent].children.add(seg.key)
        path = self._tokens(seg.key)
        for h in _chain(path, path.size // BLOCK):
            self.blocks.setdefault(h, set()).add(seg.key)

    def _tokens(self, key: str) -> np.ndarray:
        """All tokens up to a segment's end."""
        parts = []
        while key:
            seg = self.segments[key]
            parts.append(seg.tokens)
            key = seg.parent
        return np.concatenate(parts[::-1]) if parts else np.zeros(0, dtype="<i4")

    def leaves(self, keep: set[str]) -> list[tuple[float, str]]:
        """(last use, key) of the segments nothing is built on, but `keep`."""
        return [
            (s.used, s.key) for s in self.segments.values() if not s.children and s.key not in keep
        ]

    def drop(self, key: str) -> None:
        """A segment and every segment built on it, files and all."""
        seg = self.segments.pop(key, None)
        if seg is None:
            return
        for child in list(seg.children):
            self.drop(child)
        if seg.parent in self.segments:
            self.segments[seg.parent].children.discard(key)
        for keys in self.blocks.values():
            keys.discard(key)
        self._path(key).unlink(missing_ok=True)

    # -- lookup ---------------------------------------------------------

    def best(self, prompt: list[int], usable: int) -> Hit | None:
        """The stored state giving the most of `prompt`, at most `usable`
        tokens (the rest must be evaluated)."""
        if not self.on or usable < BLOCK:
            return None
        tokens = np.asarray(prompt, dtype="<i4")
        with self._lock:
            candidates: set[str] = set()
            for h in _chain(tokens, usable // BLOCK):
                if h not in self.blocks or not self.blocks[h]:
                    break
                candidates = self.blocks[h]
            best: Hit | None = None
            for key in candidates:
                common = min(_common(self._tokens(key), tokens), usable)
                hit = self._resumable(key, common)
                if hit is not None and (best is None or hit.tokens > best.tokens):
                    best = hit
            return best

    def _resumable(self, key: str, common: int) -> Hit | None:
        """Where, on the path to `key`, a state can resume with `common`
        tokens of the prompt matching."""
        while key:
            seg = self.segments[key]
            if seg.start < common:
                if not self.checkpointed:
                    return Hit(key, min(common, seg.end))
                # A window at `end` still covers the token before it; a
                # recurrent state is exactly where it was kept.
                reach = seg.end if self.recurrent else seg.end - 1
                if seg.window and common >= reach:
                    return Hit(key, min(common, seg.end))
            key = seg.parent
        return None

    def load(self, hit: Hit) -> tuple[list[int], bytes, list[int]] | None:
        """The tokens a hit's state holds and the state: `hit.tokens` of
        them, or to the segment's end for a windowed or whole state (the
        caller cuts it back), and where its segments end. None, and the
        files gone, when one is bad."""
        with self._lock:
            if hit.segment not in self.segments:
                return None  # evicted since the lookup
            path = []
            key = hit.segment
            while key:
                path.append(self.segments[key])
                key = self.segments[key].parent
            held = self._tokens(hit.segment)
        path.reverse()
        try:
            blob = self._assemble(path, hit.tokens)
        except (OSError, ValueError, kvstate.Unparsed, KeyError) as exc:
            log.warning("kv cache: dropped a bad entry (%s)", exc)
            with self._lock:
                self.drop(path[0].key)
            return None
        now = time.time()
        with self._lock:
            for seg in path:
                seg.used = now
                if seg.key in self.segments:
                    os.utime(self._path(seg.key), (now, now))
            path[-1].hits += 1
            self.hits += 1
            self.restored_tokens += hit.tokens
        whole = path[-1].whole or self.checkpointed
        held_n = held.size if whole else hit.tokens
        ends = [seg.end for seg in path if seg.end <= held_n]
        return [int(t) for t in held[:held_n]], blob, ends

    def _assemble(self, path: list[Segment], n: int) -> bytes:
        if path[-1].whole:
            return self._payload(path[-1])[1]
        return segments.assemble(self.layout, [self._split(seg)[1:] for seg in path], n)

    def _payload(self, seg: Segment) -> tuple[dict[str, Any], bytes]:
        header, payload = read_file(self._path(seg.key))
        if header.get("identity") != self.identity.to_json():
            raise ValueError("another model's state")
        if len(payload) != header["size"] or zlib.crc32(payload) != header["crc"]:
            raise ValueError("truncated or corrupt")
        return header, payload

    def _split(self, seg: Segment) -> tuple[dict[str, Any], bytes, bytes]:
        header, payload = self._payload(seg)
        base_len = header["base"]
        assert isinstance(base_len, int)
        return header, payload[:base_len], payload[base_len:]

    # -- writing ---------------------------------------------------------

    def put(
        self,
        tokens: list[int],
        state: bytes,
        windows: list[tuple[int, bytes]],
        ends: list[int],
    ) -> None:
        """Store a sequence's state, from another thread. `ends`: where its
        prompts ended, so that segments end there (the next turn re-renders
        what came after); a windowed model's `windows`: its window at some
        of those positions (it can resume only where it has one)."""
        if not self.on:
            return
        try:
            self._queue.put_nowait((list(tokens), state, list(windows), list(ends)))
        except queue.Full:
            log.info("kv cache: the disk is behind; a state of %d tokens not stored", len(tokens))

    def flush(self) -> None:
        """Wait until every state handed to `put` is written."""
        if self._writer is not None:
            self._queue.join()

    def close(self) -> None:
        if self._writer is not None:
            self.flush()
            self._queue.put(None)
            self._writer.join(timeout=60)
            self._writer = None
        with self._lock:
            if self in self.shared.tiers:
                self.shared.tiers.remove(self)
            if self.on:
                write_hits(self.dir, {k: s.hits for k, s in self.segments.items() if s.hits})

    def _write_loop(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                if self.on:
                    self._store(*item)
            except OSError as exc:
                self._off(exc)
            except Exception:  # one bad state must not stop the tier
                log.exception("kv cache: a state could not be stored")
            finally:
                self._queue.task_done()

    def _store(
        self, tokens: list[int], state: bytes, windows: list[tuple[int, bytes]], ends: list[int]
    ) -> None:
        arr = np.asarray(tokens, dtype="<i4")
        with self._lock:
            parent, start = self._stored_prefix(arr)
        if start >= len(tokens):
            return  # all of it is stored already
        pieces = segments.cut(self.layout, state, windows, ends, start, len(tokens))
        if pieces is None:
            self._write_segment("", 0, arr, state, b"", whole=True)
            return
        for end, base, window in pieces:
            parent = self._write_segment(parent, start, arr[start:end], base, window)
            start = end

    def _stored_prefix(self, tokens: np.ndarray) -> tuple[str, int]:
        """The deepest segment whose whole path `tokens` starts with."""
        best, end = "", 0
        candidates: set[str] = set()
        for h in _chain(tokens, tokens.size // BLOCK):
            if not self.blocks.get(h):
                break
            candidates = self.blocks[h]
        for key in candidates:
            k = key
            while k:
                seg = self.segments[k]
                if seg.end <= tokens.size and not seg.whole and seg.end > end:
                    path = self._tokens(k)
                    if _common(path, tokens) == path.size:
                        best, end = k, seg.end
                        break
                k = seg.parent
        return best, end

    def _write_segment(
        self, parent: str, start: int, tokens: np.ndarray, base: bytes, window: bytes,
        whole: bool = False,
    ) -> str:  # fmt: skip
        payload = base + window
        with self._lock:
            path = np.concatenate([self._tokens(parent), tokens]) if parent else tokens
        key = hashlib.sha256(self.identity.key.encode() + path.tobytes()).hexdigest()[:32]
        header = {
            "identity": self.identity.to_json(),
            "parent": parent,
            "start": start,
            "end": start + int(tokens.size),
            "tokens": tokens.astype("<i4").tobytes().hex(),
            "window": bool(window),
            "whole": whole,
            "base": len(base),
            "size": len(payload),
            "crc": zlib.crc32(payload),
        }
        head = json.dumps(header).encode()
        size = HEADER.size + len(head) + len(payload)
        with self._lock:
            if key in self.segments:
                return key
            if size > self.budget:
                return parent
            self._make_room(size, keep=parent)
        target = self._path(key)
        tmp = self.dir / f".{key}.{os.getpid()}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(HEADER.pack(MAGIC, len(head)) + head)
                f.write(payload)
            os.replace(tmp, target)
        except OSError:
            tmp.unlink(missing_ok=True)
            raise
        now = time.time()
        seg = Segment(key, parent, start, start + int(tokens.size), tokens.copy(), bool(window),
                      whole, size, now)  # fmt: skip
        with self._lock:
            if parent and parent not in self.segments:  # evicted meanwhile
                target.unlink(missing_ok=True)
                return ""
            self._add(seg)
            self.written += size
        log.debug("kv cache: stored %d tokens (%d bytes)", tokens.size, size)
        return key

    def _make_room(self, size: int, keep: str) -> None:
        protected = set()
        k = keep
        while k:
            protected.add(k)
            k = self.segments[k].parent
        self.shared.make_room(size, protected)

    def _off(self, exc: OSError) -> None:
        if self.on:
            self.on = False
            why = "full or read-only" if exc.errno in _OFF else "not usable"
            log.warning("kv cache: %s is %s (%s); the disk tier is off", self.dir, why, exc)

    # -- figures --------------------------------------------------------

    def stats(self) -> dict[str, int]:
        with self._lock:
            leaves = sum(not s.children for s in self.segments.values())
            return {
                "entries": leaves,
                "bytes": self.used,
                "budget": self.budget,
                "hits": self.hits,
                "restored_tokens": self.restored_tokens,
            }
