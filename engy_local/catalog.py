"""The model catalog (`models.toml`) and turning a MODEL argument into a
file to load."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from platformdirs import user_data_dir

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


class CatalogError(Exception):
    """A MODEL argument that cannot be served; the message says why."""


@dataclass(frozen=True)
class Entry:
    id: str
    name: str
    file: str
    aliases: tuple[str, ...] = ()
    pypi: str | None = None
    sha256: str | None = None
    quant: str = ""
    context: int | None = None
    family: str | None = None
    chat_template: str | None = None
    capabilities: tuple[str, ...] = ()
    license: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


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
    "chat_template", "capabilities", "license",
}  # fmt: skip


def parse_catalog(text: str) -> Catalog:
    data = tomllib.loads(text)
    entries = {}
    for model_id, raw in data.get("models", {}).items():
        entries[model_id] = Entry(
            id=model_id,
            name=raw.get("name", model_id),
            file=raw["file"],
            aliases=tuple(raw.get("aliases", ())),
            pypi=raw.get("pypi"),
            sha256=raw.get("sha256"),
            quant=raw.get("quant", ""),
            context=raw.get("context"),
            family=raw.get("family"),
            chat_template=raw.get("chat_template"),
            capabilities=tuple(raw.get("capabilities", ())),
            license=raw.get("license", ""),
            extra={k: v for k, v in raw.items() if k not in _KNOWN},
        )
    default = data.get("default", "")
    if default and default not in entries:
        raise CatalogError(f"models.toml: default {default!r} is not a model in the catalog")
    return Catalog(default=default, entries=entries)


def load_catalog() -> Catalog:
    text = resources.files("engy_local").joinpath("models.toml").read_text("utf-8")
    return parse_catalog(text)


def engy_home() -> Path:
    """Where engy keeps models and settings: $ENGY_HOME, else the platform's
    user data directory."""
    env = os.environ.get("ENGY_HOME")
    return Path(env).expanduser() if env else Path(user_data_dir("engy", appauthor=False))


def models_dir() -> Path:
    return engy_home() / "models"
