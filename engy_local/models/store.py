"""The local model store: what is installed, and where its files are.

Layout, under `engy_home()/models`:

    <model>@<quant>/          one directory per installed model
        manifest.json         what it is (written last, atomically)
        <name>.gguf ...       its files (none for a file imported by reference)
        <name>.gguf.part      a download under way or interrupted
        .lock                 held by the pull that is writing here

A model is installed exactly when its directory holds a manifest; the manifest
is written only after every file is in place and verified, so nothing
half-written is ever listed or served. GGUFs in the Hugging Face cache are
listed too and served where they are (see `hfcache`), and so are the GGUFs
of Ollama's store, LM Studio's folders and the folders a user names (see
`ollama` and `folders`): never written to, and never removed by `engy rm`.

The manifest (JSON), one per model:

    {"engy_manifest": 1, "id": "qwen3-coder:30b", "quant": "Q4_K_M",
     "source": "catalog", "origin": "unsloth/Qwen3-Coder-30B-A3B-Instruct-GGUF",
     "owned": true, "files": [{"path": "Qwen3-Coder-30B-A3B-Instruct-Q4_K_M.gguf",
     "size": 18556689568, "sha256": "fadc..."}], "mmproj": null,
     "size": 18556689568, "context": 262144, "family": "qwen3-coder",
     "architecture": "qwen3moe", "aliases": [], "pulled": "2026-08-01T12:00:00Z"}

`source` is catalog, hf, url, file (imported by reference) or pypi. A relative
`path` lies in the model's directory; an absolute one is the user's own file
(`owned` false), which `engy rm` forgets but never deletes.

A manifest is not trusted to stay inside the store: one whose directory is a
symbolic link, whose relative paths lead out of its directory (`..`, a
symlink), or that claims to own an absolute path, is ignored with a warning.
`engy rm` deletes only the files the store writes (the manifest's own files,
their `.part`, the lock and temporary files), never follows a symlink, and
removes the directory only when that leaves it empty.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import CatalogError
from . import hfcache
from .catalog import Catalog, Entry, load_catalog, models_dir, quant_of, split_stem
from .elsewhere import elsewhere, not_ours
from .installed import Installed as Installed  # re-exported: the store lists these
from .installed import catalog_index
from .safety import within

log = logging.getLogger("engy.store")

MANIFEST = "manifest.json"
FORMAT = 1


# --- directories, locks and manifests ---------------------------------------------


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.") or "model"


def model_dir(model_id: str, variant: str) -> Path:
    """The directory of one installed model (`variant`: its quant, or its
    file's stem when the name states none)."""
    return models_dir() / f"{_slug(model_id)}@{_slug(variant)}"


@contextlib.contextmanager
def lock(directory: Path, on_wait: Any = None) -> Iterator[None]:
    """Hold `directory`'s lock file; another holder makes this wait (calling
    `on_wait()` once first). The OS drops the lock when a process dies."""
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / ".lock").open("a+b") as f:
        if sys.platform == "win32":  # pragma: no cover
            import msvcrt

            msvcrt.locking(f.fileno(), msvcrt.LK_LOCK, 1)
            yield
            return
        import fcntl

        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait()
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def write_manifest(directory: Path, record: dict[str, Any]) -> Path:
    """Write `directory`/manifest.json atomically: a temporary file, flushed
    to disk, then renamed over."""
    target = directory / MANIFEST
    tmp = directory / f".{MANIFEST}.{os.getpid()}.tmp"
    with tmp.open("w", encoding="utf-8") as f:
        json.dump({"engy_manifest": FORMAT, **record}, f, indent=2)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, target)
    return target


class _Outside(ValueError):
    """A manifest that points outside the store."""


def _file_path(directory: Path, entry: Any, owned: bool) -> Path:
    raw = entry["path"]
    if not isinstance(raw, str) or not raw or "\x00" in raw:
        raise TypeError("path")
    path = Path(raw)
    if path.is_absolute() or path.drive:
        if owned:  # the store only owns what it wrote in the model's directory
            raise _Outside(raw)
        return path
    if not within(directory / path, directory):
        raise _Outside(raw)
    return directory / path


def read_manifest(path: Path, check_files: bool = True) -> Installed | None:
    """The model a manifest describes; None when it is unreadable, points
    outside the store (with a warning) or (with `check_files`) its files are
    gone (an imported file the user moved, say)."""
    directory = path.parent
    if directory.is_symlink() or not within(directory, models_dir()):
        log.warning("ignoring %s: its directory lies outside the store", path)
        return None
    try:
        data = json.loads(path.read_text("utf-8"))
        owned = data.get("owned", True)
        if not isinstance(owned, bool):
            raise TypeError("owned")
        files = tuple(_file_path(directory, f, owned) for f in data["files"])
        mmproj = _file_path(directory, data["mmproj"], owned) if data.get("mmproj") else None
        if not files:
            raise ValueError("no files")
        record = Installed(
            id=str(data["id"]),
            quant=str(data.get("quant", "")),
            files=files,
            mmproj=mmproj,
            size=int(data.get("size", 0)),
            context=data.get("context"),
            family=data.get("family"),
            source=str(data.get("source", "")),
            origin=str(data.get("origin", "")),
            owned=owned,
            aliases=tuple(data.get("aliases", ())),
            sha256=tuple(f.get("sha256") for f in data["files"]),
            manifest=path,
        )
    except _Outside as exc:
        log.warning("ignoring %s: it points outside the store (%s)", path, exc)
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if check_files and not all(f.is_file() for f in files):
        return None
    return record


def pulled(check_files: bool = True) -> list[Installed]:
    """The models in the store, in directory order."""
    root = models_dir()
    if not root.is_dir():
        return []
    found = (read_manifest(p, check_files) for p in sorted(root.glob(f"*/{MANIFEST}")))
    return [r for r in found if r is not None]


# --- the Hugging Face cache ------------------------------------------------------


def cached(catalog: Catalog | None = None) -> list[Installed]:
    """GGUFs in the Hugging Face cache. A catalog model's file takes the
    catalog's id; any other is `hf:owner/repo` with its quant."""
    catalog = catalog or load_catalog()
    index = catalog_index(catalog)
    records = []
    for model in hfcache.scan():
        known = index.get((model.repo, model.path))
        quant = known[1] if known else quant_of(model.path)
        entry = known[0] if known else None
        records.append(
            Installed(
                id=entry.id if entry else f"hf:{model.repo}",
                quant=quant,
                files=model.files,
                mmproj=model.mmproj,
                size=model.size,
                context=entry.context if entry else None,
                family=entry.family if entry else None,
                source="hf-cache",
                origin=model.repo,
                owned=False,
                aliases=(*(entry.aliases if entry else ()), f"hf:{model.repo}:{model.path}"),
                sha256=model.sha256,
            )
        )
    return records


def installed(hf_cache: bool = True) -> list[Installed]:
    """Every model that can be served: the store's, then (with `hf_cache`)
    those in the Hugging Face cache, Ollama's store, LM Studio's folders and
    the user's folders."""
    if not hf_cache:
        return pulled()
    catalog = load_catalog()
    others = elsewhere(catalog)
    return pulled() + cached(catalog) + [r for records in others.values() for r in records]


# --- finding a model -------------------------------------------------------------


def _split_ref(ref: str) -> tuple[str, str]:
    """`id@quant` -> (id, quant); `hf:owner/repo:QUANT` -> ("hf:owner/repo", QUANT);
    `hf:owner/repo:file.gguf` stays whole (a file name is an alias)."""
    ref = ref.strip()
    if "@" in ref and not ref.startswith(("/", ".", "~")):
        name, _, quant = ref.rpartition("@")
        return name, quant
    if ref.startswith("hf:") and ref.count(":") == 2 and not ref.endswith(".gguf"):
        name, _, quant = ref.rpartition(":")
        return name, quant
    return ref, ""


def _path_record(ref: str) -> Installed | None:
    path = Path(ref).expanduser()
    if not (ref.endswith(".gguf") and path.is_file()):
        return None
    path = path.resolve()
    return Installed(
        id=split_stem(path.name),
        quant=quant_of(path.name),
        files=(path,),
        size=path.stat().st_size,
        source="file",
        origin=str(path),
        owned=False,
    )


def find(ref: str, catalog: Catalog | None = None) -> Installed | None:
    """The installed model `ref` names: an id or alias (catalog ids and
    aliases included), optionally `@quant`; `hf:owner/repo[:quant]`; a file
    name; or a path to a GGUF file. The store is searched before the
    Hugging Face cache; without a quant, the catalog's default quant wins."""
    catalog = catalog or load_catalog()
    name, quant = _split_ref(ref)
    entry = catalog.find(name)
    wanted = {name, entry.id} if entry else {name}
    for where in ("store", "hf-cache", "elsewhere"):
        if where == "elsewhere":
            groups = list(elsewhere(catalog).values())
        else:
            groups = [pulled() if where == "store" else cached(catalog)]
        matches = [r for records in groups for r in records if wanted & set(r.names())]
        if quant:
            matches = [r for r in matches if r.quant.lower() == quant.lower()]
        if matches:
            default = entry.quant if entry else ""
            return next((r for r in matches if r.quant == default), matches[0])
    return _path_record(ref)


def locate(entry: Entry) -> Path:
    """The GGUF file of a pulled catalog entry, from the store or the Hugging
    Face cache (one shipped in packages: `embedded.locate`)."""
    catalog = Catalog(default="", entries={entry.id: entry})
    found = find(entry.id, catalog)
    if found is not None:
        return found.path
    raise CatalogError(f"{entry.id} is not downloaded yet: run `engy pull {entry.id}`")


# --- removing --------------------------------------------------------------------


@dataclass(frozen=True)
class Removed:
    models: list[Installed]  # installed models removed (or, imported ones, forgotten)
    unfinished: list[Path]  # directories of interrupted pulls, deleted with their .part files


def _unfinished(names: set[str], quant: str) -> list[Path]:
    root = models_dir()
    if not root.is_dir():
        return []
    found = []
    for name in names:
        pattern = f"{_slug(name)}@{_slug(quant) if quant else '*'}"
        found += [
            d
            for d in root.glob(pattern)
            if d.is_dir() and not d.is_symlink() and not (d / MANIFEST).exists()
        ]
    return sorted(set(found))


def _delete(path: Path) -> None:
    """Delete `path` if it is a file (a symlink itself, never its target)."""
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)


def _clear(directory: Path, patterns: tuple[str, ...]) -> None:
    """Delete what the store writes in a model's directory besides its
    files (the lock, temporary manifests, and `patterns`), then the
    directory if that leaves it empty. Nothing else in it is touched."""
    if directory.is_symlink() or not directory.is_dir():
        return
    for pattern in (".lock", f".{MANIFEST}.*.tmp", *patterns):
        for path in directory.glob(pattern):
            _delete(path)
    try:
        directory.rmdir()
    except OSError:
        log.warning("left %s in place: it holds files engy did not write", directory)


def remove(ref: str) -> Removed:
    """Remove the store's models `ref` names (every quant, unless `@quant`
    is given), and any unfinished pull of them. Files the store downloaded
    are deleted; a file imported by reference is forgotten, never deleted.
    Models in the Hugging Face cache are left alone (CatalogError says so,
    as it does when nothing by that name is in the store)."""
    catalog = load_catalog()
    name, quant = _split_ref(ref)
    entry = catalog.find(name)
    wanted = {name, entry.id} if entry else {name}
    gone = [r for r in pulled(check_files=False) if wanted & set(r.names())]
    if quant:
        gone = [r for r in gone if r.quant.lower() == quant.lower()]
    for record in gone:
        assert record.manifest is not None
        directory = record.manifest.parent
        with lock(directory):
            record.manifest.unlink(missing_ok=True)  # first: from now on it is not listed
            for path in (*record.files, record.mmproj):
                if path is not None and record.owned and path.parent == directory:
                    _delete(path)
                    _delete(path.with_name(path.name + ".part"))
        _clear(directory, ())
    unfinished = []
    for directory in _unfinished(wanted, quant):
        with lock(directory):  # waits for a pull that is still running
            if (directory / MANIFEST).exists():
                continue  # it finished meanwhile: installed, not ours to delete unasked
        _clear(directory, ("*.gguf", "*.part"))
        unfinished.append(directory)
    if not gone and not unfinished:
        if any(wanted & set(r.names()) for r in cached(catalog)):
            raise CatalogError(
                f"{ref} is in the Hugging Face cache ({hfcache.hub_cache()}), which engy "
                "does not delete from: use `hf cache delete`"
            )
        for records in elsewhere(catalog).values():
            for record in records:
                if wanted & set(record.names()):
                    raise CatalogError(not_ours(record))
        raise CatalogError(f"{ref} is not installed (see `engy list`)")
    return Removed(gone, unfinished)
