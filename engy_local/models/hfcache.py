"""GGUFs already in the Hugging Face cache, found and used where they are.

The cache (`huggingface_hub`'s layout) keeps each repository as
`models--owner--repo/snapshots/<revision>/<path in the repo>`, every file a
link into `blobs/`. A file appears in a snapshot only once it is complete,
so whatever is listed here is whole. engy reads the cache and never writes
to it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .catalog import split_parts

_SHA256_CHARS = frozenset("0123456789abcdef")


def hub_cache() -> Path:
    """$HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub
    (honouring $XDG_CACHE_HOME), as huggingface_hub resolves it."""
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(name):
            return Path(os.environ[name]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    cache = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return Path(cache).expanduser() / "huggingface" / "hub"


@dataclass(frozen=True)
class CachedModel:
    """One model in the cache: a GGUF file, or every part of a split one."""

    repo: str
    path: str  # the first file's path inside the repository
    files: tuple[Path, ...]
    mmproj: Path | None
    sha256: tuple[str | None, ...]  # from the blob names, which are the files' sha256
    size: int


def _snapshots(repo_dir: Path) -> list[Path]:
    """The snapshot of refs/main first, then the others, newest first."""
    snaps = repo_dir / "snapshots"
    if not snaps.is_dir():
        return []
    found = sorted(
        (p for p in snaps.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime, reverse=True
    )
    try:
        main = (repo_dir / "refs" / "main").read_text().strip()
    except OSError:
        return found
    return sorted(found, key=lambda p: p.name != main)


def _blob_sha(path: Path) -> str | None:
    name = Path(os.path.realpath(path)).name
    return name if len(name) == 64 and set(name) <= _SHA256_CHARS else None


def _repo_models(repo: str, snapshot_files: dict[str, Path]) -> list[CachedModel]:
    projectors = sorted(p for p in snapshot_files if p.rsplit("/", 1)[-1].startswith("mmproj"))
    mmproj = snapshot_files[projectors[0]] if len(projectors) == 1 else None
    models = []
    for rel in sorted(snapshot_files):
        if rel in projectors:
            continue
        parts = split_parts(rel)
        if parts[0] != rel or not all(p in snapshot_files for p in parts):
            continue  # a later part, or a split set not all there
        files = tuple(snapshot_files[p] for p in parts)
        size = sum(f.stat().st_size for f in files)
        shas = tuple(_blob_sha(f) for f in files)
        models.append(CachedModel(repo, rel, files, mmproj, shas, size))
    return models


def scan(root: Path | None = None) -> list[CachedModel]:
    """Every complete GGUF model in the cache."""
    root = root if root is not None else hub_cache()
    if not root.is_dir():
        return []
    models: list[CachedModel] = []
    for repo_dir in sorted(root.glob("models--*")):
        owner, _, name = repo_dir.name[len("models--") :].partition("--")
        files: dict[str, Path] = {}
        for snapshot in _snapshots(repo_dir):
            for f in snapshot.rglob("*.gguf"):
                rel = f.relative_to(snapshot).as_posix()
                if rel not in files and f.is_file():  # is_file: the link's blob exists
                    files[rel] = f
        models.extend(_repo_models(f"{owner}/{name}", files))
    return models
