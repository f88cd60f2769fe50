"""What an upstream is, as `engy serve --upstream` configures it: its URL and
dialect, the tokenizer whose vocabulary and template engy renders with, and
the names and facts it is served under."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import EngyError
from .spec import UpstreamSpec
from .wire import GRAMMARS, KINDS, Grammar, Kind


@dataclass(frozen=True)
class UpstreamOptions:
    url: str  # the upstream's base URL: http://host:port
    tokenizer: Path  # the GGUF (or HF tokenizer) whose vocabulary and template are used
    id: str  # the model id engy serves it as
    kind: Kind = "llamacpp"
    model: str | None = None  # the name sent to the upstream (openai kind)
    key: str | None = None  # sent as Authorization: Bearer
    aliases: tuple[str, ...] = ()
    chat_template: str | None = None  # overrides the GGUF's
    family: str | None = None  # overrides the family detection
    ctx_size: int | None = None  # cap on the window (None: the upstream's)
    quantization: str = ""
    backend: str = "upstream"  # what GET /v1/models and engy ps call its device
    gpu: bool | None = None  # runs on a GPU, as configured (None: not known)
    grammar: Grammar | None = None  # its grammar parameter (openai kind); None: discover


@dataclass(frozen=True)
class LocalModel:
    """The facts of a GGUF engy knows (a store model, a path) that an
    upstream serving it takes: where it is, its names, its catalog settings."""

    path: Path
    id: str
    aliases: tuple[str, ...] = ()
    chat_template: str | None = None
    family: str | None = None
    ctx_size: int | None = None
    quantization: str = ""


def gguf_upstream_options(spec: UpstreamSpec, local: LocalModel) -> UpstreamOptions:
    """An upstream whose vocabulary and template are those of a GGUF engy
    knows (MODEL, or its tokenizer=), with its catalog settings (a chat
    template, a family override). It is served as its model= when given,
    else under the GGUF's id and aliases."""
    model = spec.model
    names = (local.id, *local.aliases)
    return UpstreamOptions(
        url=spec.url,
        tokenizer=local.path,
        id=model or local.id,
        kind=_kind(spec.kind),
        model=model,
        key=spec.key,
        aliases=tuple(n for n in names if n != (model or local.id)),
        chat_template=local.chat_template,
        family=local.family,
        ctx_size=local.ctx_size,
        quantization=spec.quantization or local.quantization,
        gpu=_gpu(spec),
        grammar=_grammar(spec),
    )


def hf_upstream_options(
    path: Path, spec: UpstreamSpec, ctx_size: int | None, quantization: str = ""
) -> UpstreamOptions:
    """An upstream with a Hugging Face tokenizer (its snapshot's directory or
    tokenizer.json): served as its model=, else under the directory's name."""
    folder = path if path.is_dir() else path.parent
    return UpstreamOptions(
        url=spec.url,
        tokenizer=path,
        id=spec.model or folder.resolve().name,
        kind=_kind(spec.kind),
        model=spec.model,
        key=spec.key,
        ctx_size=ctx_size,
        quantization=spec.quantization or quantization,
        gpu=_gpu(spec),
        grammar=_grammar(spec),
    )


def _kind(kind: str) -> Kind:
    dialect = next((k for k in KINDS if k == kind), None)
    if dialect is None:
        raise EngyError(f"--upstream-kind {kind!r}: one of {', '.join(KINDS)}")
    return dialect


def _grammar(spec: UpstreamSpec) -> Grammar | None:
    return next((g for g in GRAMMARS if g == spec.grammar), None)


def _gpu(spec: UpstreamSpec) -> bool | None:
    """As configured; vLLM and SGLang (the openai kind) run on GPUs; what a
    llama-server runs on it does not say."""
    if spec.gpu is not None:
        return spec.gpu
    return True if spec.kind == "openai" else None
