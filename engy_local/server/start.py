"""`engy serve`: build what it serves, print where it listens, run."""

from __future__ import annotations

import logging
from pathlib import Path

from rich.console import Console

from ..backend import ModelInfo
from ..models.catalog import load_catalog
from ..models.embedded import ready
from ..models.suggest import for_real_work, machine_memory
from ..protocols.images import ImageLimits
from ..runtime.loading import llamalog
from ..runtime.loading.cpu import guard_line
from ..runtime.loading.devices import offload_devices
from ..upstream.routing import Served
from .app import Settings, create_app
from .backends import build_backend, store_hooks, upstream_specs
from .guard import AccessPolicy
from .options import ServeOptions, check_exposure
from .page import open_when_ready, page_url
from .shutdown import Drain, GracefulServer

DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8642


class ConsoleLog(logging.Handler):
    """Log records as dim lines on the console, above its spinner."""

    def __init__(self, console: Console, prefix: str = "") -> None:
        super().__init__()
        self.console = console
        self.prefix = prefix

    def emit(self, record: logging.LogRecord) -> None:
        text = self.prefix + self.format(record)  # the message, and a traceback if any
        self.console.print(text, style="dim", markup=False, highlight=False, soft_wrap=True)


def run_server(options: ServeOptions, console: Console) -> None:
    import uvicorn

    check_exposure(options)
    # One line per request: model, sequence, tokens, speeds, stop reason.
    requests_log = logging.getLogger("engy.requests")
    requests_log.setLevel(logging.INFO)
    if not requests_log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
        requests_log.addHandler(handler)
        requests_log.propagate = False
    if options.verbose:  # llama.cpp's own lines, and engy's loads and unloads
        llamalog.log.addHandler(ConsoleLog(console, "llama.cpp "))
        llamalog.log.setLevel(logging.DEBUG)
        engy_log = logging.getLogger("engy")
        engy_log.addHandler(ConsoleLog(console))
        engy_log.setLevel(logging.INFO)
        engy_log.propagate = False
    if not options.upstream:
        ready(options.model, console)  # the default's first start: a bar while it is assembled
    with console.status("loading model..."):
        backend = build_backend(options)
    access = AccessPolicy.build(options.host, options.allow_hosts, options.allow_origins)
    limits = ImageLimits(options.max_image_bytes, options.max_images)
    hooks = store_hooks(backend, options)
    settings = Settings(
        api_key=options.api_key,
        access=access,
        images=limits,
        store=hooks,
        temperature=options.temperature,
    )
    app = create_app(settings, backend)
    drain: Drain = app.state.drain
    # ws="none": a WebSocket upgrade reaches the app as plain HTTP and
    # gets 426, on which Codex falls back to HTTP at once.
    config = uvicorn.Config(
        app, host=options.host, port=options.port, log_level="warning", ws="none"
    )
    server = GracefulServer(config, drain, options.shutdown_grace)
    try:
        # The server's Ctrl-C handling from the banner on: a Ctrl-C before
        # uvicorn starts is a graceful stop too, not an interrupted start.
        with server.capture_signals():
            print_banner(options, backend, console)
            if options.open_page:
                open_when_ready(page_url(options.host, options.port))
            if not server.should_exit:
                server.run()
    finally:
        backend.close()
        console.print("engy stopped")


def print_banner(options: ServeOptions, backend: Served, console: Console) -> None:
    """What is served and how to use it. Lines fit 80 columns for the usual
    names; a command or a value to copy stands alone at the end of its line
    and is never broken (soft wrap: a longer one is one line the terminal
    folds)."""
    info = backend.info
    url = f"http://{options.host}:{options.port}"

    def line(text: str) -> None:
        console.print(text, highlight=False, soft_wrap=True)

    console.print(
        f"[bold]engy[/bold] serving [cyan]{info.id}[/cyan] ({Path(info.path).name})",
        highlight=False,
        soft_wrap=True,
    )
    for text in starter_lines(info.id):
        line(text)
    others = [m.id for m in backend.models() if m.id != info.id]
    if others:
        line(f"  also      {', '.join(others)} (loaded on first use)")
    line(f"  backend   {info.backend}  (CPU: {guard_line()})")
    for device in offload_devices(memory=True):
        line(f"  device    {device.line()}")
    status = next((m for m in backend.status() if m.id == info.id), None)
    if status is not None and status.split:
        line(f"  split     {status.split}")
    line(f"  context   {_context(info, options.parallel)}")
    if status is not None and status.fitted:
        line("            (--ctx-size auto: fitted to the memory budget, at most the model's own)")
    if status is not None and status.kv_bytes:
        line(f"  KV cache  {status.kv_types}, {status.kv_bytes / (1 << 20):,.0f} MiB")
    for spec in upstream_specs(options) if options.upstream else ():
        line(f"  upstream  {spec.url} ({spec.kind})")
    line(f"  url       {url}")
    line("  APIs      POST /v1/messages, /v1/responses, /v1/chat/completions")
    line(f"  page      {url}/")
    if options.api_key:
        line("  key       required (x-api-key or Authorization: Bearer)")
    where = ""
    if options.host != DEFAULT_HOST:
        where += f" --host {options.host}"
    if options.port != DEFAULT_PORT:
        where += f" --port {options.port}"
    line("")
    line(f"  Claude Code   engy launch claude{where}")
    line(f"  Codex         engy launch codex{where}")
    line(f"  other tools   base URL {url}/v1")
    line(f"                model {info.id}")


def starter_lines(model_id: str) -> list[str]:
    """On the default model: what it is (its catalog `note`) and which model
    to pull for real work on this machine, with the memory that takes."""
    catalog = load_catalog()
    entry = catalog.entries.get(catalog.default)
    if entry is None or model_id != entry.id:
        return []
    note = entry.extra.get("note")
    lines = [f"  starter   {note}"] if isinstance(note, str) else []
    pick = for_real_work(catalog, machine_memory())
    if pick is not None:
        gib = pick.need / (1 << 30)
        lines.append(f"            For real work here (about {gib:.0f} GiB of memory):")
        lines.append(f"            engy pull {pick.entry.id}")
    return lines


def _context(info: ModelInfo, parallel: int) -> str:
    window = f"{info.context_length} tokens per conversation"
    return window if parallel == 1 else f"{window}, {parallel} conversations at once"
