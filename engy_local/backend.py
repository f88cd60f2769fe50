"""What the HTTP server and the REPL need from whatever runs the model.

`runtime.pool.ModelPool` implements it on llama.cpp; protocol tests may use a
scripted one. Nothing here imports llama_cpp.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

from .chat import ChatRequest, Event, Provider


@dataclass(frozen=True)
class ModelInfo:
    id: str
    display_name: str
    path: str
    context_length: int  # the window as loaded (n_ctx)
    created: int  # unix seconds (the file's mtime)
    quantization: str = ""
    backend: str = "CPU"  # CPU / CUDA / Metal / RPC / upstream
    supports_images: bool = False
    gpu: bool | None = None  # runs on a GPU (provider.gpu); None: not known


@dataclass(frozen=True)
class SequenceStatus:
    """One KV sequence of a loaded model and what it holds (the engine with
    sessions fills these in; until then a model reports none)."""

    index: int
    tokens: int  # tokens of the conversation it holds
    busy: bool = False


@dataclass(frozen=True)
class CacheStatus:
    """One tier of a loaded model's prompt cache (saved sequence states)."""

    tier: str  # "ram" or "disk"
    entries: int  # states saved
    bytes: int  # bytes they take
    budget: int  # bytes they may take
    hits: int = 0  # requests restored from this tier
    restored_tokens: int = 0  # prompt tokens those restores spared


@dataclass(frozen=True)
class ModelStatus:
    """A loaded model as `engy ps` shows it (GET /engy/ps)."""

    id: str
    context_length: int  # the window as loaded (n_ctx)
    backend: str  # CPU / CUDA / Metal
    cost: int  # bytes it is estimated to hold: weights plus KV cache
    keep_alive_left: float | None  # seconds until an idle unload; None: kept
    busy: bool = False  # generating or with requests queued
    family: str = ""  # its tool-call family (prompt.families)
    thinking: bool = False  # the template or family can switch thinking on
    quantization: str = ""
    aliases: tuple[str, ...] = ()
    sequences: list[SequenceStatus] = field(default_factory=list)
    images: bool = False  # loaded with a vision projector
    split: str = ""  # where llama.cpp put the weights: layers offloaded, MiB per device
    offloaded: int = 0  # layers on GPUs or RPC workers (the output layer counts)
    caches: list[CacheStatus] = field(default_factory=list)  # the prompt cache, by tier
    # What this model does without, and why ("drafts off: ..."), in a few words.
    limits: list[str] = field(default_factory=list)
    # Faults the model's thread answered and lived through, by phase
    # (runtime/faults.py): a failed restore, decode or save.
    faults: dict[str, int] = field(default_factory=dict)
    kv_types: str = ""  # the KV cache's K and V types: "f16", "q8_0", "q8_0/f16"
    kv_bytes: int = 0  # the KV cache as llama.cpp allocated it
    fitted: bool = False  # the window is --ctx-size auto's: what fits the memory budget

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> ModelStatus:
        """The inverse of `to_json`; unknown keys are ignored (a newer
        server may say more), missing ones take their defaults."""
        known = {f for f in cls.__dataclass_fields__ if f in raw}
        values: dict[str, Any] = {k: raw[k] for k in known}
        values["aliases"] = tuple(raw.get("aliases") or ())
        values["sequences"] = [
            SequenceStatus(**{k: s[k] for k in SequenceStatus.__dataclass_fields__ if k in s})
            for s in raw.get("sequences") or ()
            if isinstance(s, dict)
        ]
        values["caches"] = [
            CacheStatus(**{k: c[k] for k in CacheStatus.__dataclass_fields__ if k in c})
            for c in raw.get("caches") or ()
            if isinstance(c, dict) and {"tier", "entries", "bytes", "budget"} <= c.keys()
        ]
        return cls(**values)


def provider_failure(provider: Provider, info: ModelInfo) -> str | None:
    """Which requirement of `provider` the model instance fails, if any."""
    names = {info.id}
    if provider.only is not None and not names & set(provider.only):
        return f"provider.only: {info.id} is not among {list(provider.only)}"
    if names & set(provider.ignore):
        return f"provider.ignore: {info.id} is ignored"
    if provider.quantizations is not None:
        quant = info.quantization.lower()
        if quant not in provider.quantizations:
            return f"provider.quantizations: {info.id} is {quant or 'of unknown quantization'}"
    if provider.min_context is not None and info.context_length < provider.min_context:
        return (
            f"provider.min_context: {info.id} has a {info.context_length}-token window, "
            f"{provider.min_context} required"
        )
    if provider.gpu is not None and info.gpu is None:
        return (
            f"provider.gpu: whether {info.id} runs on a GPU is not known (backend {info.backend})"
        )
    if provider.gpu is not None and info.gpu != provider.gpu:
        where = "on the GPU" if provider.gpu else "on the CPU"
        return f"provider.gpu: {info.id} does not run {where} (backend {info.backend})"
    return None


class Generation(Protocol):
    """One submitted request. Iterate it for events; `cancel()` stops it
    within one token and frees the model."""

    prompt_tokens: int  # exact prompt size, known once the request is accepted

    def __aiter__(self) -> AsyncIterator[Event]: ...

    def cancel(self) -> None: ...


class Backend(Protocol):
    @property
    def output_cap(self) -> int | None:
        """The cap on any request's output tokens (engy serve
        --max-output-tokens; None: whoever answers applies its own). The
        Responses parser needs it: an answer it cuts is incomplete."""
        ...

    def models(self) -> list[ModelInfo]: ...

    def resolve(self, model: str) -> ModelInfo:
        """The model a request's `model` names; raises ModelNotFound."""
        ...

    def count_tokens(self, request: ChatRequest) -> int:
        """Exact prompt size of `request` through its template and tokenizer.
        Blocking: call it off the event loop."""
        ...

    async def submit(self, request: ChatRequest) -> Generation:
        """Validate (PromptTooLong, InvalidRequest), then queue (Busy)."""
        ...

    def status(self) -> list[ModelStatus]:
        """The models loaded now, for `engy ps`."""
        ...


@runtime_checkable
class Manages(Protocol):
    """What a backend may offer besides `Backend`: loading and unloading a
    model on demand (the page's buttons). The server checks for it with
    isinstance; a backend without it has no such buttons."""

    def load(self, model_id: str) -> ModelInfo:
        """Load the model `model_id` names, as a request for it would
        (ModelNotFound, Busy when the budget is held by busy models).
        Blocking: call it off the event loop."""
        ...

    def unload(self, model_id: str) -> bool:
        """Unload it if it is loaded and idle; whether it was unloaded."""
        ...
