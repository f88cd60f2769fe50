"""Several models in one server: the `Backend` that picks a model by the
request's `model`, loads it on demand within a memory budget, and unloads
the least recently used when room is needed or after a keep-alive.

Each loaded model has its own worker thread (one owner per model); the
pool only decides which models are loaded.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ..backend import ModelInfo, ModelStatus, SequenceStatus, provider_failure
from ..chat import Answer, ChatRequest, Event, Sampling, with_defaults
from ..errors import Busy, EngyError, ModelLoadError, ModelNotFound, NotGGUF, NoWorker
from ..models.ggufmeta import read_metadata, trained_context
from ..prompt.nextturn import next_turn
from ..prompt.prepare import count_tokens, prepare
from .cache.disk import DiskTier
from .cache.identity import model_identity
from .cache.kvfiles import DiskBudget
from .cache.segments import Layout
from .engine.job import Job
from .engine.local import LocalGeneration, ServedModel
from .engine.worker import Worker
from .loading.memory import check_fits, fit_window, footprint
from .loading.model import Model, backend_label, label_gpu

log = logging.getLogger("engy.pool")


@dataclass(frozen=True)
class DiskSettings:
    """Where the disk tier keeps states, and how many bytes it may."""

    root: Path
    budget: int


@dataclass
class _Loaded:
    model: Model
    worker: Worker
    info: ModelInfo
    cost: int  # bytes this model is estimated to hold
    last_used: float


def total_memory() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return 16 << 30


def estimate_cost(served: ServedModel) -> int:
    """Weights, a KV cache of the model's types for the window it will get,
    and the RAM its saved states may take."""
    options = served.options
    fp = footprint(options.path, options.cache_type_k, options.cache_type_v)
    window = min(fp.trained, options.ctx_size) if options.ctx_size else fp.trained
    return fp.total(window, options.parallel) + options.cache_ram


def _window(served: ServedModel, meta: dict[str, object]) -> int:
    trained = trained_context(meta) or 4096
    cap = served.options.ctx_size
    return min(trained, cap) if cap else trained


def _check_files(served: ServedModel) -> None:
    """A model's files are there to load: another tool may have removed
    them while this server ran (`ollama rm`, a prune, a folder tidied)."""
    for path in (served.options.path, served.options.mmproj):
        if path is not None and not path.is_file():
            who = f"{served.owner} no longer has it" if served.owner else "moved or deleted"
            raise ModelLoadError(
                f"cannot load {served.id}: {path} is gone ({who}); `engy list` shows the "
                "models there are now"
            )


class ModelPool:
    def __init__(
        self,
        served: Sequence[ServedModel],
        *,
        primary: str | None = None,
        output_cap: int = 8192,
        queue_size: int = 16,
        timeout: float | None = None,
        heartbeat: float = 10.0,
        memory_budget: int | None = None,
        keep_alive: float | None = 1800.0,
        disk: DiskSettings | None = None,
    ) -> None:
        self.served = list(served)
        self.output_cap = output_cap
        self.queue_size = queue_size
        self.timeout = timeout
        self.heartbeat = heartbeat
        self.memory_budget = memory_budget or int(total_memory() * 0.8)
        self.keep_alive = keep_alive
        self.disk = disk if disk is not None and disk.budget > 0 else None
        self._disk_budget: DiskBudget | None = None
        self._loaded: dict[str, _Loaded] = {}
        self._fitted: dict[str, int] = {}  # windows --ctx-size auto gave, by model
        self._lock = threading.RLock()
        self._closed = threading.Event()
        self.primary = self._find(primary).id if primary else None
        if self.primary:
            self._instance(self._find(self.primary))
        if keep_alive:
            threading.Thread(target=self._reaper, name="engy-keepalive", daemon=True).start()

    # -- Backend --------------------------------------------------------

    @property
    def info(self) -> ModelInfo:
        """The primary model (the one `engy serve` was started for)."""
        return self.resolve(self.primary or self.served[0].id)

    def models(self) -> list[ModelInfo]:
        return [self._info(s) for s in self.served]

    def resolve(self, model: str) -> ModelInfo:
        return self._info(self._find(model))

    def count_tokens(self, request: ChatRequest) -> int:
        loaded = self._instance(self._find(request.model))
        return count_tokens(loaded.model, request)

    async def submit(self, request: ChatRequest) -> LocalGeneration:
        served = self._find(request.model)
        if served.defaults != Sampling():
            request = replace(request, sampling=with_defaults(request.sampling, served.defaults))
        if request.provider is not None:
            failure = provider_failure(request.provider, self._info(served))
            if failure:
                raise NoWorker(f"no worker meets the provider requirements: {failure}")
        loop = asyncio.get_running_loop()
        # Loading, rendering and tokenizing take a while: off the event loop.
        loaded = await loop.run_in_executor(None, self._instance, served)
        prepared = await loop.run_in_executor(None, prepare, loaded.model, request, self.output_cap)
        generation = LocalGeneration(len(prepared.tokens), self.timeout, self.heartbeat)
        answer = Answer()  # folded as it goes out: the next turn's start follows from it

        def emit(event: Event | EngyError | None) -> None:
            if event is not None and not isinstance(event, EngyError):
                answer.add(event)
            generation.emit(event)

        job = Job(
            tokens=prepared.tokens,
            params=prepared.params,
            parser=prepared.new_parser(),
            emit=emit,
            follow=lambda: next_turn(loaded.model, request, answer),
            flush=generation.flush,
            single_call=prepared.single_call,
            media=prepared.media,
            marks=prepared.marks,
            answer_start=prepared.answer_start,
            where=prepared.where,
            scaffold=prepared.scaffold,
            check=prepared.check,
            cache_reuse=request.cache_reuse,
        )
        generation.job = job
        with self._lock:
            if self._loaded.get(served.id) is not loaded:  # evicted meanwhile
                raise Busy(f"{served.id} was unloaded to make room; try again", retry_after=1)
            loaded.worker.submit(job)
            loaded.last_used = time.monotonic()
        return generation

    def load(self, model_id: str) -> ModelInfo:
        """Load `model_id` as a request for it would (`backend.Manages`)."""
        return self._instance(self._find(model_id)).info

    def unload(self, model_id: str) -> bool:
        """Unload `model_id` if it is loaded and idle (`backend.Manages`)."""
        served = self._find(model_id)
        with self._lock:
            loaded = self._loaded.get(served.id)
            if loaded is None or not loaded.worker.idle():
                return False
            self._unload(served.id)
            return True

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            for model_id in list(self._loaded):
                self._unload(model_id)

    # -- internals ------------------------------------------------------

    def _find(self, name: str) -> ServedModel:
        # A leading vendor/ segment is ignored ("engy/qwen3" is "qwen3").
        for candidate in dict.fromkeys((name, name.split("/", 1)[-1])):
            for served in self.served:
                if candidate == served.id or candidate in served.aliases:
                    return served
        raise ModelNotFound(name)

    def _info(self, served: ServedModel) -> ModelInfo:
        loaded = self._loaded.get(served.id)
        if loaded is not None:
            return loaded.info
        path = served.options.path
        try:
            window = self._fitted.get(served.id) or _window(served, read_metadata(path))
        except (OSError, NotGGUF):
            window = 0
        backend = backend_label(served.options.gpu_layers)
        return ModelInfo(
            id=served.id,
            display_name=served.id,
            path=str(path),
            context_length=window,
            created=int(path.stat().st_mtime) if path.exists() else 0,
            quantization=served.quantization,
            backend=backend,
            gpu=label_gpu(backend),
            supports_images=served.options.mmproj is not None,
        )

    def _instance(self, served: ServedModel) -> _Loaded:
        with self._lock:
            loaded = self._loaded.get(served.id)
            if loaded is None:
                _check_files(served)
                served = self._sized(served)
                cost = estimate_cost(served)
                self._make_room(cost)
                model = Model(served.options)
                # Weights and KV on RPC workers take no memory here.
                kept = 1.0 - model.split.remote_share
                cache = served.options.cache_ram
                cost = int((cost - cache) * kept) + cache
                info = replace(
                    self._info(served),
                    context_length=model.n_ctx,
                    backend=model.backend,
                    gpu=label_gpu(model.backend),
                )
                try:
                    worker = Worker(model, queue_size=self.queue_size, disk=self._tier(model))
                except BaseException:
                    model.close()
                    raise
                loaded = _Loaded(model, worker, info, cost, time.monotonic())
                self._loaded[served.id] = loaded
                log.info("loaded %s", served.id)
            loaded.last_used = time.monotonic()
            return loaded

    def _sized(self, served: ServedModel) -> ServedModel:
        """The model with the window it will get: under --ctx-size auto the
        largest that fits the memory budget; an explicit one is checked
        against it (a DoesNotFit before llama.cpp tries to allocate it)."""
        options = served.options
        fp = footprint(options.path, options.cache_type_k, options.cache_type_v)
        types = f"K {options.cache_type_k}, V {options.cache_type_v}"
        if options.ctx_auto:
            # Room for the RAM cache's saved states too: all of it is engy's.
            window = fit_window(fp, options.parallel, self.memory_budget - options.cache_ram)
            self._fitted[served.id] = window
            return replace(served, options=replace(options, ctx_size=window, ctx_auto=False))
        window = min(fp.trained, options.ctx_size) if options.ctx_size else fp.trained
        check_fits(fp, window, options.parallel, self.memory_budget, types, options.cache_ram)
        return served

    def _tier(self, model: Model) -> DiskTier | None:
        """The disk tier of a model just loaded (None: off)."""
        if self.disk is None:
            return None
        root = self.disk.root
        try:
            root.mkdir(mode=0o700, parents=True, exist_ok=True)
            identity = model_identity(model, root / "digests.json")
        except OSError as exc:
            log.warning("kv cache: %s is not usable (%s); the disk tier is off", root, exc)
            return None
        if self._disk_budget is None:  # one bound for all models
            self._disk_budget = DiskBudget(root, self.disk.budget)
        recurrent = "hybrid" if model.hybrid else "recurrent" if model.recurrent else ""
        layout = Layout(model.n_swa > 0, recurrent, model.cell_ext)
        return DiskTier(self._disk_budget, identity, layout)

    def _make_room(self, cost: int) -> None:
        """Unload idle models, least recently used first, until `cost` fits
        (one that only reads an answer's next turn in counts as idle)."""
        while self._loaded and self._used() + cost > self.memory_budget:
            idle = [m for m, lm in self._loaded.items() if not lm.worker.serving()]
            if not idle:
                raise Busy(
                    "the memory budget is taken by models that are busy; try again shortly",
                    retry_after=5,
                )
            self._unload(min(idle, key=lambda m: self._loaded[m].last_used))

    def _used(self) -> int:
        return sum(lm.cost for lm in self._loaded.values())

    def _unload(self, model_id: str) -> None:
        loaded = self._loaded.pop(model_id)
        loaded.worker.close()
        loaded.model.close()
        log.info("unloaded %s", model_id)

    def _reaper(self) -> None:
        assert self.keep_alive
        while not self._closed.wait(min(30.0, self.keep_alive)):
            now = time.monotonic()
            with self._lock:
                for model_id, loaded in list(self._loaded.items()):
                    if loaded.worker.idle() and now - loaded.last_used > self.keep_alive:
                        self._unload(model_id)

    def status(self) -> list[ModelStatus]:
        """The loaded models, most recently used first (for `engy ps`)."""
        now = time.monotonic()
        out: list[ModelStatus] = []
        with self._lock:
            loaded = sorted(self._loaded.items(), key=lambda kv: -kv[1].last_used)
            for model_id, lm in loaded:
                busy = not lm.worker.idle()
                left: float | None = None
                if self.keep_alive:
                    left = self.keep_alive if busy else self.keep_alive - (now - lm.last_used)
                family, template = lm.model.family, lm.model.template
                served = self._find(model_id)
                out.append(
                    ModelStatus(
                        id=model_id,
                        context_length=lm.info.context_length,
                        backend=lm.info.backend,
                        cost=lm.cost,
                        keep_alive_left=None if left is None else max(0.0, left),
                        busy=busy,
                        family=family.name,
                        thinking=family.thinking is not None
                        or template.thinking_switch is not None,
                        quantization=lm.info.quantization,
                        aliases=served.aliases,
                        caches=lm.worker.caches(),
                        limits=lm.worker.limits(),
                        faults=lm.worker.faults(),
                        sequences=[SequenceStatus(**seq) for seq in lm.worker.sequences()],
                        images=lm.model.projector is not None,
                        split=lm.model.split.line(),
                        offloaded=lm.model.split.offloaded or 0,
                        kv_types=lm.model.kv_types,
                        kv_bytes=lm.worker.kv_bytes(),
                        fitted=model_id in self._fitted,
                    )
                )
        return out
