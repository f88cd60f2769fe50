"""`engy ps`: what a running engy holds, from its GET /engy/ps."""

from __future__ import annotations

import json

from rich.console import Console
from rich.table import Table

from ..backend import ModelStatus
from ..client import RemoteBackend
from ..errors import EngyError, RemoteError


def fetch_status(url: str, api_key: str | None) -> list[ModelStatus]:
    """The loaded models of the engy at `url`; an EngyError in one line."""
    backend = RemoteBackend(url, "messages", api_key)
    try:
        return backend.status()
    except RemoteError as exc:
        if exc.status == 401:
            raise EngyError(
                f"{backend.url} needs its API key: pass --api-key or set ENGY_API_KEY"
            ) from None
        if exc.status == 404:
            raise EngyError(f"{backend.url} is not an engy server (no /engy/ps)") from None
        if exc.status == 0:
            raise EngyError(f"no engy at {backend.url}: start one with `engy serve`") from None
        raise
    finally:
        backend.close()


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} B"


def _keep_alive(m: ModelStatus) -> str:
    if m.busy:
        return "busy"
    if m.keep_alive_left is None:
        return "until room is needed"
    minutes, seconds = divmod(int(m.keep_alive_left), 60)
    return f"{minutes}m {seconds:02d}s"


def status_table(models: list[ModelStatus]) -> Table:
    table = Table(box=None, pad_edge=False)
    # Narrow terminals fold a column rather than cut an id short.
    columns = ("MODEL", "CONTEXT", "BACKEND", "MEMORY", "KEEP-ALIVE", "FAMILY", "IMAGES")
    # Where the weights went, once any model has layers off this CPU.
    split = any(m.offloaded for m in models)
    for column in (*columns, "SEQUENCES", *(("SPLIT",) if split else ())):
        table.add_column(column, overflow="fold")
    for m in models:
        sequences = ", ".join(
            f"#{s.index}: {s.tokens} tokens" + (" (busy)" if s.busy else "") for s in m.sequences
        )
        table.add_row(
            m.id,
            str(m.context_length),
            m.backend,
            _size(m.cost),
            _keep_alive(m),
            m.family,
            "yes" if m.images else "no",
            sequences or "-",
            *((m.split or "-",) if split else ()),
        )
    return table


def print_status(models: list[ModelStatus], url: str, as_json: bool, out: Console) -> None:
    if as_json:
        out.print_json(json.dumps({"url": url, "models": [m.to_json() for m in models]}))
    elif not models:
        out.print(f"no model is loaded at {url}", highlight=False)
    else:
        out.print(status_table(models))
        for m in models:
            if m.kv_bytes:
                fitted = ", the window --ctx-size auto fitted to memory" if m.fitted else ""
                out.print(
                    f"{m.id}: KV cache {m.kv_types or 'f16'}, {_size(m.kv_bytes)}{fitted}",
                    highlight=False,
                )
            for limit in m.limits:
                out.print(f"{m.id}: {limit}", highlight=False)
            if m.faults:
                seen = ", ".join(f"{phase} {n}" for phase, n in sorted(m.faults.items()))
                out.print(f"{m.id}: faults answered and survived: {seen}", highlight=False)
            for c in m.caches:
                out.print(
                    f"{m.id}: {c.tier} cache {c.entries} entries, {_size(c.bytes)} of "
                    f"{_size(c.budget)}, {c.hits} hits, {c.restored_tokens:,} tokens restored",
                    highlight=False,
                )
