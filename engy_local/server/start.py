"""`engy serve`: build what it serves, print where it listens, run."""

from __future__ import annotations

import logging
from pathlib import Path

from rich.console import Console

from ..protocols.images import ImageLimits
from ..runtime.cpu import guard_line
from ..runtime.devices import offload_devices
from .app import Settings, create_app
from .backends import build_backend, store_hooks, upstream_specs
from .guard import AccessPolicy
from .options import ServeOptions, check_exposure
from .page import open_when_ready, page_url
from .shutdown import Drain, GracefulServer


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
    with console.status("loading model..."):
        backend = build_backend(options)
    info = backend.info
    url = f"http://{options.host}:{options.port}"
    console.print(f"[bold]engy[/bold] serving [cyan]{info.id}[/cyan] ({Path(info.path).name})")
    others = [m.id for m in backend.models() if m.id != info.id]
    if others:
        console.print(f"  also      {', '.join(others)} (loaded on first use)")
    console.print(f"  backend   {info.backend}  (CPU: {guard_line()})")
    for device in offload_devices(memory=True):
        console.print(f"  device    {device.line()}", highlight=False, soft_wrap=True)
    split = next((m.split for m in backend.status() if m.id == info.id), "")
    if split:
        console.print(f"  split     {split}", highlight=False, soft_wrap=True)
    console.print(
        f"  context   {info.context_length} tokens, {options.parallel} conversations at once"
    )
    for spec in upstream_specs(options) if options.upstream else ():
        console.print(f"  upstream  {spec.url} ({spec.kind})", highlight=False)
    console.print(f"  url       {url}  (POST /v1/messages, POST /v1/responses)")
    console.print(f"  page      {url}/  (requests, sessions, models, chat)", highlight=False)
    console.print(f"  Claude Code: ANTHROPIC_BASE_URL={url} claude --model {info.id}")
    access = AccessPolicy.build(options.host, options.allow_hosts, options.allow_origins)
    limits = ImageLimits(options.max_image_bytes, options.max_images)
    hooks = store_hooks(backend, options)
    settings = Settings(api_key=options.api_key, access=access, images=limits, store=hooks)
    app = create_app(settings, backend)
    drain: Drain = app.state.drain
    # ws="none": a WebSocket upgrade reaches the app as plain HTTP and
    # gets 426, on which Codex falls back to HTTP at once.
    config = uvicorn.Config(
        app, host=options.host, port=options.port, log_level="warning", ws="none"
    )
    if options.open_page:
        open_when_ready(page_url(options.host, options.port))
    try:
        GracefulServer(config, drain, options.shutdown_grace).run()
    finally:
        backend.close()
        console.print("engy stopped")
