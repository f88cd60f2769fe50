"""What `engy list`, `engy models` and `engy show` print about models."""

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
from ..runtime.loading.fit import Fit, Machine, estimate
from ..runtime.loading.fit import machine as this_machine

_SOURCE = {
    "catalog": "pulled",
    "hf": "pulled",
    "url": "pulled",
    "pypi": "package",
    "file": "imported",
    "hf-cache": "hf cache",
    "ollama": "ollama",
    "lmstudio": "lm studio",
    "folder": "folder",
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


def fit_of(record: Installed, machine: Machine) -> Fit:
    """How an installed model fits this machine at serve's defaults."""
    return estimate(record.files, record.size, machine)


def _memory(fit: Fit) -> str:
    return human_size(fit.need) + (" + KV" if fit.kv is None else "")


def list_json(records: list[Installed], machine: Machine) -> list[dict[str, Any]]:
    """`engy list --json`: one object a model."""
    rows = []
    for r in records:
        rows.append(
            {
                "id": r.id,
                "aliases": list(r.aliases),
                "quant": r.quant,
                "size": r.size,
                "context": r.context,
                "source": r.source,
                "owned": r.owned,
                "path": str(r.path),
                "mmproj": str(r.mmproj) if r.mmproj else None,
                **fit_of(r, machine).to_json(),
            }
        )
    return rows


def list_table(records: list[Installed], machine: Machine) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("ID", "SIZE", "QUANT", "CONTEXT", "MEMORY", "FIT", "FROM", "PATH"):
        table.add_column(column, no_wrap=column != "PATH", overflow="fold")
    for r in records:
        fit = fit_of(r, machine)
        table.add_row(
            r.id,
            human_size(r.size),
            r.quant or "-",
            f"{r.context:,}" if r.context else "-",
            _memory(fit),
            fit.label,
            _SOURCE.get(r.source, r.source),
            str(r.path),
        )
    return table


def catalog_json(
    catalog: Catalog, records: list[Installed], machine: Machine
) -> list[dict[str, Any]]:
    """`engy models --json`: each catalog model at its default quant, with
    its size on disk where a copy is here (engy's store, the Hugging Face
    cache, Ollama, LM Studio, a folder), else the size to download."""
    rows = []
    for entry in catalog.entries.values():
        here = [r for r in records if entry.id in r.names()]
        record = next((r for r in here if r.quant == entry.quant), here[0] if here else None)
        if record is not None:
            fit = fit_of(record, machine)
        else:
            fit = estimate(None, entry.size or 0, machine)
        rows.append(
            {
                "id": entry.id,
                "name": entry.name,
                "quant": record.quant if record else entry.quant,
                "default": entry.id == catalog.default,
                "installed": record is not None,
                "source": record.source if record else None,
                "size": record.size if record else entry.size,
                **fit.to_json(),
            }
        )
    return rows


def catalog_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("ID", "QUANT", "SIZE", "MEMORY", "FIT", "NAME"):
        table.add_column(column, no_wrap=column != "NAME", overflow="fold")
    for row in rows:
        where = f" ({_SOURCE.get(row['source'], row['source'])})" if row["installed"] else ""
        size = "-" if not row["size"] else human_size(row["size"]) + (where or " to get")
        memory = human_size(row["memory"]) + (" + KV" if row["kv"] is None else "")
        mark = " (default)" if row["default"] else ""
        table.add_row(row["id"], row["quant"], size, memory, row["fit_label"], row["name"] + mark)
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
    """`engy pull`: pull with a progress bar on `console` (after a warning
    where the model will not fit this machine)."""
    warning = fit_warning(ref)
    if warning:
        console.print(f"[yellow]warning:[/yellow] {warning}", soft_wrap=True, highlight=False)

    def waiting() -> None:
        console.print(f"waiting for another engy pull of {ref} to finish...", soft_wrap=True)

    progress = progress_bar(console)  # started by the first download
    try:
        return pull(ref, progress=progress, on_wait=waiting)
    finally:
        progress.stop()


def fit_warning(ref: str, machine: Machine | None = None) -> str:
    """What `engy pull` says before downloading a catalog model that will
    not fit this machine ("" where it fits, or its size is not known)."""
    catalog = load_catalog()
    name, _, quant = ref.partition("@")
    entry = catalog.find(name) if not ref.startswith(("hf:", "http://", "https://")) else None
    if entry is None:
        return ""
    try:
        size = entry.pick(quant or None).size
    except CatalogError:
        return ""
    if not size:
        return ""
    machine = machine or this_machine()
    fit = estimate(None, size, machine)
    if fit.verdict == "large":
        return (
            f"{entry.id} is {human_size(size)} of weights, more than this machine's memory "
            "holds (engy models shows what fits)"
        )
    if fit.verdict == "ram" and machine.gpu_free:
        return f"{entry.id} ({human_size(size)}) will not fit the GPU; it would run from RAM"
    return ""


def removed_lines(gone: Removed) -> list[str]:
    """What `engy rm` says it did, a line each."""
    lines = []
    for r in gone.models:
        done = f"removed ({human_size(r.size)})" if r.owned else f"forgot it; {r.path} is kept"
        name = f"{r.id}@{r.quant}" if r.quant else r.id
        lines.append(f"{name}: {done}")
    lines += [f"removed an unfinished download: {d}" for d in gone.unfinished]
    return lines
