"""What the store and the other places models are found in say of a model
that can be served (`Installed`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .catalog import Catalog, Entry, split_stem


@dataclass(frozen=True)
class Installed:
    """A model that can be served: its files on disk and what it is."""

    id: str
    quant: str
    files: tuple[Path, ...]
    mmproj: Path | None = None
    size: int = 0
    context: int | None = None
    family: str | None = None
    # catalog | hf | url | file | pypi; read in place: hf-cache | ollama | lmstudio | folder
    source: str = "catalog"
    origin: str = ""  # the repository, URL or original path
    owned: bool = True  # whether `engy rm` deletes the files
    aliases: tuple[str, ...] = ()
    sha256: tuple[str | None, ...] = ()
    manifest: Path | None = None

    @property
    def path(self) -> Path:
        """The file to load (the first part of a split GGUF)."""
        return self.files[0]

    def names(self) -> tuple[str, ...]:
        """Every name this model answers to."""
        return (self.id, *self.aliases, self.path.name, split_stem(self.path.name))


def catalog_index(catalog: Catalog) -> dict[tuple[str, str], tuple[Entry, str]]:
    """(repository, path of a quant's first file) -> (entry, quant)."""
    index = {}
    for entry in catalog.entries.values():
        if entry.hf:
            for quant in entry.quants.values():
                index[(entry.hf, quant.files[0].path)] = (entry, quant.name)
    return index
