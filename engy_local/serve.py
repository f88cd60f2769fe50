"""`engy serve`: resolve the model, load it, print where it listens, run."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from .catalog import CatalogError, load_catalog
from .engine.local import ServedModel
from .engine.model import LoadOptions
from .engine.pool import ModelPool
from .server import Settings, create_app
from .store import locate


@dataclass(frozen=True)
class ServeOptions:
    model: str | None = None
    host: str = "127.0.0.1"
    port: int = 8642
    ctx_size: int | None = 32768
    gpu_layers: int | None = None
    threads: int | None = None
    api_key: str | None = None
    timeout: float | None = 600.0
    max_output_tokens: int = 8192
    queue_size: int = 16
    memory_budget: int | None = None  # bytes; None: 80% of RAM
    keep_alive: float | None = 1800.0  # seconds an idle model stays loaded


def resolve_model(ref: str | None, options: ServeOptions) -> ServedModel:
    """A GGUF path, or a catalog id or alias (none: the catalog's default)."""
    catalog = load_catalog()
    if ref and (ref.endswith(".gguf") or Path(ref).expanduser().is_file()):
        path = Path(ref).expanduser().resolve()
        if not path.is_file():
            raise CatalogError(f"no such file: {path}")
        # A catalog model's file served by path still gets its catalog
        # template (GGUFs such as the default one carry none) and id.
        known = next((e for e in catalog.entries.values() if e.file == path.name), None)
        template = known.chat_template if known else None
        aliases = (path.name, known.id) if known else (path.name,)
        load = LoadOptions(path, options.ctx_size, options.gpu_layers, options.threads, template)
        return ServedModel(id=path.stem, options=load, aliases=aliases)
    name = ref or catalog.default
    entry = catalog.find(name)
    if entry is None:
        ids = ", ".join(sorted(catalog.entries))
        raise CatalogError(f"unknown model {name!r}: not a file and not in the catalog ({ids})")
    load = LoadOptions(
        locate(entry), options.ctx_size, options.gpu_layers, options.threads, entry.chat_template
    )
    return ServedModel(id=entry.id, options=load, aliases=entry.aliases, quantization=entry.quant)


def build_backend(options: ServeOptions) -> ModelPool:
    """The pool of models to serve, with the asked-for one loaded."""
    primary = resolve_model(options.model, options)
    return ModelPool(
        [primary],
        primary=primary.id,
        output_cap=options.max_output_tokens,
        queue_size=options.queue_size,
        timeout=options.timeout,
        memory_budget=options.memory_budget,
        keep_alive=options.keep_alive,
    )


def run_server(options: ServeOptions, console: Console) -> None:
    import uvicorn

    with console.status("loading model..."):
        backend = build_backend(options)
    info = backend.info
    url = f"http://{options.host}:{options.port}"
    console.print(f"[bold]engy[/bold] serving [cyan]{info.id}[/cyan] ({Path(info.path).name})")
    console.print(f"  backend   {info.backend}")
    console.print(f"  context   {info.context_length} tokens")
    console.print(f"  url       {url}  (POST /v1/messages, POST /v1/responses)")
    console.print(f"  Claude Code: ANTHROPIC_BASE_URL={url} claude --model {info.id}")
    app = create_app(Settings(api_key=options.api_key), backend)
    try:
        # ws="none": a WebSocket upgrade reaches the app as plain HTTP and
        # gets 426, on which Codex falls back to HTTP at once.
        uvicorn.run(app, host=options.host, port=options.port, log_level="warning", ws="none")
    finally:
        backend.close()
        console.print("engy stopped")
