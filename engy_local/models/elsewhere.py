"""The models other tools keep, as the store lists them: Ollama's store
(`ollama`), LM Studio's folders and the user's (`folders`). Served where
they are and never removed by `engy rm` (`not_ours` says whose they are).

Names: Ollama's as `ollama:NAME:TAG`, and the bare `NAME:TAG` (`NAME` for
the tag latest) where the catalog has no model of that name; a folder's by
the file's stem, LM Studio's also by `publisher/repo`, `lmstudio:` before
either; the window and quantization from the GGUF's header.
"""

from __future__ import annotations

import functools
from pathlib import Path

from ..errors import NotGGUF
from . import folders, ollama
from .catalog import Catalog, load_catalog, quant_of, split_stem
from .ggufmeta import file_type, read_metadata, trained_context
from .installed import Installed, catalog_index

# Who owns the files of each source engy reads in place, as `engy rm` names it.
OWNERS = {
    "hf-cache": "the Hugging Face cache",
    "ollama": "Ollama",
    "lmstudio": "LM Studio",
    "folder": "your models folder",
}


@functools.lru_cache(maxsize=512)
def _header(path: Path, size: int, mtime: int) -> tuple[int | None, str]:
    """(trained context, quantization) from a GGUF's header; a file that
    changes is read again (its size and mtime are the key)."""
    try:
        meta = read_metadata(path)
    except (OSError, NotGGUF):
        return None, ""
    return trained_context(meta), file_type(meta)


def _facts(path: Path, name: str) -> tuple[int | None, str]:
    """(trained context, quantization: the file name's, else the header's)."""
    try:
        stat = path.stat()
    except OSError:
        return None, quant_of(name)
    context, quant = _header(path, stat.st_size, stat.st_mtime_ns)
    return context, quant_of(name) or quant


def _ollama_records(catalog: Catalog) -> list[Installed]:
    """Ollama's models as `ollama:NAME:TAG`, also by the bare `NAME:TAG`
    (and `NAME` for the tag latest) where the catalog does not have it."""
    records = []
    for model in ollama.scan():
        name = model.name
        short = name[: -len(":latest")] if name.endswith(":latest") else None
        aliases = [f"ollama:{short}"] if short else []
        aliases += [n for n in (name, short) if n and catalog.find(n) is None]
        context, quant = _facts(model.path, model.tag)
        records.append(
            Installed(
                id=f"ollama:{name}",
                quant=quant,
                files=(model.path,),
                mmproj=model.projector,
                size=model.size,
                context=context,
                source="ollama",
                origin=str(model.manifest),
                owned=False,
                aliases=tuple(aliases),
                sha256=(model.sha256,),
            )
        )
    return records


def _folder_records(catalog: Catalog, source: str, roots: list[Path]) -> list[Installed]:
    """A folder's models by their file's stem; LM Studio's also by
    `publisher/repo` (and `lmstudio:` before either), and by the catalog's
    id where the file is a catalog model's."""
    index = catalog_index(catalog)
    records = []
    for root in roots:
        for model in folders.scan(root):
            stem = split_stem(model.files[0].name)
            context, quant = _facts(model.files[0], model.files[0].name)
            known = index.get((model.repo, model.files[0].name)) if model.repo else None
            if source == "lmstudio":
                aliases = [f"lmstudio:{stem}", f"lmstudio:{model.rel}"]
                aliases += [model.repo, f"lmstudio:{model.repo}"] if model.repo else []
            else:
                aliases = [f"folder:{model.rel}"]
            if known:
                aliases += [known[0].id, *known[0].aliases]
            records.append(
                Installed(
                    id=stem,
                    quant=quant,
                    files=model.files,
                    mmproj=model.mmproj,
                    size=model.size + (model.mmproj.stat().st_size if model.mmproj else 0),
                    context=context,
                    family=known[0].family if known else None,
                    source=source,
                    origin=str(root),
                    owned=False,
                    aliases=tuple(dict.fromkeys(aliases)),
                )
            )
    return records


def elsewhere(catalog: Catalog | None = None) -> dict[str, list[Installed]]:
    """The models other tools keep, by source, in the order `find` searches
    them: Ollama's store, LM Studio's folders, the user's folders."""
    catalog = catalog or load_catalog()
    return {
        "ollama": _ollama_records(catalog),
        "lmstudio": _folder_records(catalog, "lmstudio", folders.lmstudio_roots()),
        "folder": _folder_records(catalog, "folder", folders.user_roots()),
    }


def not_ours(record: Installed) -> str:
    """Why `engy rm` leaves another tool's model alone, and how to remove it."""
    owner = OWNERS.get(record.source, record.source)
    how = {
        "ollama": f"use `ollama rm {record.id.removeprefix('ollama:')}`",
        "lmstudio": "delete it in LM Studio (My Models)",
    }.get(record.source, "delete the file yourself if you mean to")
    return (
        f"{record.id} belongs to {owner} ({record.path}); engy serves it in place and "
        f"never deletes another tool's files: {how}"
    )
