"""The disk tier's files: their format, one size bound for every model's
files under one directory, and the listing `engy cache` prints.

A file is MAGIC, a u32 header length, the header (JSON: the identity, the
segment's place and tokens, the payload's size and crc32), then the payload
(the full-attention cells, then the sliding window, each a state blob).
"""

from __future__ import annotations

import json
import os
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol


class Tier(Protocol):
    """What the budget needs of a model's tier (diskcache.DiskTier)."""

    @property
    def dir(self) -> Path: ...
    @property
    def used(self) -> int: ...

    def leaves(self, keep: set[str]) -> list[tuple[float, str]]: ...
    def drop(self, key: str) -> None: ...


MAGIC = b"ENGYKV01"
HEADER = struct.Struct("<8sI")  # magic, header length


@dataclass(frozen=True)
class Entry:
    """What `engy cache` lists: one stored conversation state."""

    identity: dict[str, str]
    tokens: int
    size: int
    used: float
    hits: int
    path: Path


class DiskBudget:
    """One size bound for every model's tier under one directory: the
    tiers loaded here, and the files of models not loaded now (their
    oldest files go first when room is needed)."""

    def __init__(self, root: Path, limit: int) -> None:
        self.root = root
        self.limit = limit
        self.lock = threading.RLock()  # the tiers' own lock: eviction crosses tiers
        self.tiers: list[Tier] = []

    def used(self) -> int:
        loaded = {t.dir for t in self.tiers}
        return sum(t.used for t in self.tiers) + sum(size for _, size, _ in self._others(loaded))

    def _others(self, loaded: set[Path]) -> list[tuple[float, int, Path]]:
        out = []
        for path in self.root.glob("*/*.kv"):
            if path.parent not in loaded:
                try:
                    stat = path.stat()
                except OSError:
                    continue
                out.append((stat.st_mtime, stat.st_size, path))
        return out

    def make_room(self, size: int, keep: set[str]) -> None:
        """Least recently used out until `size` more bytes fit; never the
        segments in `keep` (the path a write builds on)."""
        loaded = {t.dir for t in self.tiers}
        for _, _, path in sorted(self._others(loaded)):
            if self.used() + size <= self.limit:
                return
            path.unlink(missing_ok=True)
        while self.used() + size > self.limit:
            leaves = [(used, key, tier) for tier in self.tiers for used, key in tier.leaves(keep)]
            if not leaves:
                return
            _, key, tier = min(leaves, key=lambda leaf: leaf[0])
            tier.drop(key)


HITS = "hits.json"  # per model directory: restores of each segment, kept across restarts


def read_hits(directory: Path) -> dict[str, int]:
    try:
        data = json.loads((directory / HITS).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): v for k, v in data.items() if isinstance(v, int)}


def write_hits(directory: Path, hits: dict[str, int]) -> None:
    tmp = directory / f".{HITS}.{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(hits, f)
        os.replace(tmp, directory / HITS)
    except OSError:
        tmp.unlink(missing_ok=True)


def read_file(path: Path) -> tuple[dict[str, Any], bytes]:
    """A file's header and payload (ValueError: not one of ours)."""
    data = path.read_bytes()
    magic, length = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise ValueError("not a kv cache file")
    header = json.loads(data[HEADER.size : HEADER.size + length])
    if not isinstance(header, dict):
        raise ValueError("not a kv cache file")
    return header, data[HEADER.size + length :]


def private_dir(path: Path) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)


def read_header(path: Path) -> dict[str, Any] | None:
    try:
        with path.open("rb") as f:
            head = f.read(HEADER.size)
            magic, length = HEADER.unpack(head)
            if magic != MAGIC or length > 64 << 20:
                return None
            header = json.loads(f.read(length))
            size = path.stat().st_size
    except (OSError, ValueError, struct.error):
        return None
    if not isinstance(header, dict) or size != HEADER.size + length + header.get("size", -1):
        return None
    return header


def entries(root: Path) -> Iterator[Entry]:
    """Every stored conversation state under `root` (the leaves), for
    `engy cache`; unreadable files are left out."""
    for directory in sorted(p for p in root.glob("*") if p.is_dir()):
        headers = {}
        for path in directory.glob("*.kv"):
            header = read_header(path)
            if header is not None:
                headers[path.stem] = (header, path)
        parents = {h["parent"] for h, _ in headers.values()}
        hits = read_hits(directory)
        for key, (header, path) in headers.items():
            if key in parents:
                continue
            # Its path: the bytes and restores of the segments it is made of
            # (a shared preamble counts in each conversation built on it).
            size, restores, k = 0, 0, key
            while k in headers:
                size += headers[k][1].stat().st_size
                restores += hits.get(k, 0)
                k = str(headers[k][0]["parent"])
            identity = header["identity"]
            assert isinstance(identity, dict)
            end = int(str(header["end"]))
            yield Entry(identity, end, size, path.stat().st_mtime, restores, path)
