"""`engy cache`: what the prompt cache on disk holds, and clearing it (all
of it, or one model's). Runs beside a server: a file it removes while the
server still lists it is a miss there, never a wrong state."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ..errors import CatalogError
from ..runtime.cache.kvfiles import Entry, entries
from .inventory import human_size


def cache_dir(directory: Path | None) -> Path:
    from ..models.catalog import engy_home

    return directory or engy_home() / "kvcache"


def _ago(when: float) -> str:
    seconds = max(0.0, time.time() - when)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit} ago"
    return "just now"


def table(found: list[Entry]) -> Table:
    out = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("MODEL", "TOKENS", "SIZE", "LAST USE", "HITS"):
        out.add_column(column, no_wrap=True)
    for e in sorted(found, key=lambda e: -e.used):
        out.add_row(
            e.identity.get("name", "?"), f"{e.tokens:,}", human_size(e.size), _ago(e.used),
            str(e.hits),
        )  # fmt: skip
    return out


def list_cache(directory: Path | None, console: Console) -> None:
    root = cache_dir(directory)
    found = list(entries(root)) if root.is_dir() else []
    if not found:
        console.print(f"the prompt cache on disk is empty ({root})", highlight=False)
        return
    total = sum(p.stat().st_size for p in root.rglob("*.kv"))
    console.print(table(found))
    console.print(f"{len(found)} entries, {human_size(total)} in {root}", highlight=False)


def clear_cache(directory: Path | None, model: str | None) -> list[str]:
    """Removes every stored state, or one model's (a GGUF path, an
    installed id or alias, or the file name `engy cache` shows). Returns
    lines saying what went."""
    root = cache_dir(directory)
    if not root.is_dir():
        return [f"nothing to clear in {root}"]
    name = None
    if model is not None:
        name = Path(model).name
        if not model.endswith(".gguf"):
            from ..server.backends import resolve_model
            from ..server.options import ServeOptions

            try:
                name = resolve_model(model, ServeOptions()).options.path.name
            except CatalogError:
                name = model
    names: dict[Path, set[str]] = {}
    for entry in entries(root):
        names.setdefault(entry.path.parent, set()).add(entry.identity.get("name", ""))
    gone = []
    for model_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        held = names.get(model_dir, set())
        if name is not None and name not in held:
            continue
        size = sum(p.stat().st_size for p in model_dir.glob("*.kv"))
        shutil.rmtree(model_dir, ignore_errors=True)
        label = ", ".join(sorted(n for n in held if n)) or model_dir.name
        gone.append(f"removed {label} ({human_size(size)})")
    if not gone:
        return [
            f"no stored states of {model} in {root}" if model else f"nothing to clear in {root}"
        ]
    return gone
