"""What `engy list` and `engy show` print about installed models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ..errors import CatalogError, NotGGUF
from ..models.catalog import CAPABILITIES, Catalog, load_catalog
from ..models.download import progress_bar
from ..models.ggufmeta import parameter_count, read_metadata, trained_context
from ..models.pull import pull
from ..models.store import Installed, Removed, find

_SOURCE = {
    "catalog": "pulled",
    "hf": "pulled",
    "url": "pulled",
    "pypi": "package",
    "file": "imported",
    "hf-cache": "hf cache",
}


def human_size(n: int | None) -> str:
    """Bytes in decimal units, as download pages show them (18.6 GB)."""
    if not n:
        return "-"
    size = float(n)
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} TB"


def list_table(records: list[Installed]) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("ID", "SIZE", "QUANT", "CONTEXT", "FROM", "PATH"):
        table.add_column(column, no_wrap=column != "PATH", overflow="fold")
    for r in records:
        table.add_row(
            r.id,
            human_size(r.size),
            r.quant or "-",
            f"{r.context:,}" if r.context else "-",
            _SOURCE.get(r.source, r.source),
            str(r.path),
        )
    return table


def _params(n: int) -> str:
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return str(n)


def _template_capabilities(template: str) -> list[str]:
    found = []
    if "tools" in template:
        found.append("tools")
    if any(m in template for m in ("<think>", "enable_thinking", "reasoning", "thinking")):
        found.append("thinking")
    return found


def describe(ref: str, catalog: Catalog | None = None) -> list[tuple[str, str]]:
    """`engy show`: what an installed model is, from its GGUF header and the
    catalog. Raises CatalogError when `ref` is not installed."""
    catalog = catalog or load_catalog()
    record = find(ref, catalog)
    if record is None:
        raise CatalogError(f"{ref} is not installed (see `engy list`, or `engy pull {ref}`)")
    entry = catalog.find(record.id)
    try:
        meta: dict[str, Any] = read_metadata(record.path)
        params = sum(parameter_count(p) for p in record.files)
    except (NotGGUF, OSError) as exc:
        raise CatalogError(f"{record.path}: cannot read its GGUF header ({exc})") from None
    template = meta.get("tokenizer.chat_template")
    template = template if isinstance(template, str) else (entry.chat_template if entry else None)
    family = record.family or (entry.family if entry else None) or _detected_family(template)
    if entry is not None:
        capabilities = list(entry.capabilities)
    else:
        capabilities = _template_capabilities(template or "")
        if record.mmproj is not None:
            capabilities.append("vision")
    size_label = meta.get("general.size_label")
    rows = [
        ("id", record.id),
        ("name", entry.name if entry else str(meta.get("general.name", record.path.stem))),
        ("architecture", str(meta.get("general.architecture", "unknown"))),
        ("parameters", f"{_params(params)}" + (f" ({size_label})" if size_label else "")),
        ("quantization", record.quant or "unknown"),
        ("context", f"{trained_context(meta) or record.context or 0:,} tokens (trained)"),
        ("template family", family or "unknown"),
        ("capabilities", ", ".join(c for c in CAPABILITIES if c in capabilities) or "none"),
        (
            "licence",
            (entry.license if entry else "") or str(meta.get("general.license", "unknown")),
        ),
        ("size", human_size(record.size or sum(_size(p) for p in record.files))),
        ("source", f"{_SOURCE.get(record.source, record.source)}: {record.origin}"),
        (
            "path",
            str(record.path)
            + (f" (+{len(record.files) - 1} parts)" if len(record.files) > 1 else ""),
        ),
    ]
    # Images need the projector file, whatever the catalog says of the model.
    if record.mmproj is not None:
        rows.append(("images", f"yes, through the projector {record.mmproj}"))
    else:
        rows.append(("images", "no (no vision projector)"))
    return rows


def _size(path: Path) -> int:
    return path.stat().st_size if path.is_file() else 0


def _detected_family(template: str | None) -> str | None:
    """The tool-call format the engine would read from this chat template."""
    if not template:
        return None
    from ..prompt.families import detect_family

    return detect_family(template)


def pull_with_progress(ref: str, console: Console) -> Installed:
    """`engy pull`: pull with a progress bar on `console`."""

    def waiting() -> None:
        console.print(f"waiting for another engy pull of {ref} to finish...", soft_wrap=True)

    progress = progress_bar(console)  # started by the first download
    try:
        return pull(ref, progress=progress, on_wait=waiting)
    finally:
        progress.stop()


def removed_lines(gone: Removed) -> list[str]:
    """What `engy rm` says it did, a line each."""
    lines = []
    for r in gone.models:
        done = f"removed ({human_size(r.size)})" if r.owned else f"forgot it; {r.path} is kept"
        name = f"{r.id}@{r.quant}" if r.quant else r.id
        lines.append(f"{name}: {done}")
    lines += [f"removed an unfinished download: {d}" for d in gone.unfinished]
    return lines
