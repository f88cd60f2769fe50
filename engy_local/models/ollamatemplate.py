"""An Ollama model whose GGUF carries no chat template, served with its
family's: Ollama's template layer (a Go template) names the turn format by
its markers, and `templates/` holds engy's Jinja template for each format.

Ollama converts many library models itself and keeps their prompt format
only as a Go template layer beside the GGUF, with a params layer (JSON:
stop words, temperature, num_ctx ...). engy does not run Go templates; it
reads which format one writes:

    <|im_start|> and <tool_call>      ChatML with Hermes calls (Qwen2.5, Hermes 3)
    <|im_start|>                      ChatML
    <|start_header_id|> and .Tools    Llama 3.1 / 3.2 with JSON calls
    <|start_header_id|>               Llama 3
    <start_of_turn>                   Gemma
    [INST]                            Mistral
    <|assistant|> and <|end|>         Phi-3

The rows go most specific first. A format that writes calls gets the
family's tool syntax; the others have tools described in the system prompt
("generic"). The GGUF's architecture must be one that format is known on,
so a template that merely mentions a marker is not mistaken for it.

The params layer gives the model's defaults: its stop words always end an
answer, and its temperature, top_p and top_k stand where neither the
request nor `engy serve --temp` sets them. Its num_ctx is not taken: the
window is engy's --ctx-size, since Ollama's small default windows are what
cut agents' prompts short.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

# Ollama's library gives Qwen2.5 this system prompt when a conversation
# has none, as Qwen's own template does.
QWEN_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

# Architectures a format is used on: a model of another, whose Go template
# happens to carry the markers, is not mapped.
_CHATML_ARCHES = frozenset(
    {"qwen2", "qwen2moe", "qwen3", "qwen3moe", "llama", "mistral", "internlm2", "olmo",
     "olmo2", "stablelm", "granite", "phi3", "starcoder2", "deepseek2", "yi", "smollm3"}
)  # fmt: skip
_LLAMA_ARCHES = frozenset({"llama"})
_GEMMA_ARCHES = frozenset({"gemma", "gemma2", "gemma3", "gemma3n"})
_MISTRAL_ARCHES = frozenset({"llama", "mistral", "mistral3"})
_PHI_ARCHES = frozenset({"phi3"})


@dataclass(frozen=True)
class Format:
    name: str  # the file under templates/
    markers: tuple[str, ...]  # all in the Go template
    arches: frozenset[str]
    title: str
    absent: tuple[str, ...] = ()  # none in it


FORMATS = (
    Format("chatml-tools", ("<|im_start|>", "<tool_call>"), _CHATML_ARCHES, "ChatML, Hermes calls"),
    Format("chatml", ("<|im_start|>",), _CHATML_ARCHES, "ChatML"),
    Format("llama3-tools", ("<|start_header_id|>", ".Tools"), _LLAMA_ARCHES, "Llama 3.1 calls"),
    Format("llama3", ("<|start_header_id|>",), _LLAMA_ARCHES, "Llama 3"),
    Format("gemma", ("<start_of_turn>",), _GEMMA_ARCHES, "Gemma"),
    # Llama 2's [INST] turns hold the system text in <<SYS>>: not Mistral's.
    Format("mistral", ("[INST]",), _MISTRAL_ARCHES, "Mistral", ("<<SYS>>",)),
    Format("phi3", ("<|assistant|>", "<|end|>"), _PHI_ARCHES, "Phi-3"),
)


@dataclass(frozen=True)
class Mapped:
    """Ollama's template mapped to engy's: the format and its Jinja source."""

    format: Format
    source: str


def template_source(name: str) -> str:
    return resources.files(__package__).joinpath("templates", f"{name}.jinja").read_text("utf-8")


def map_template(go_template: str, architecture: str | None) -> Mapped | None:
    """engy's template for the format `go_template` writes on a model of
    `architecture`; None where no known format matches."""
    arch = (architecture or "").lower()
    for fmt in FORMATS:
        if arch not in fmt.arches or any(m in go_template for m in fmt.absent):
            continue
        if all(m in go_template for m in fmt.markers):
            source = template_source(fmt.name)
            default = QWEN_SYSTEM if QWEN_SYSTEM in go_template else ""
            # Set as a Jinja string literal: JSON's quoting is Jinja's.
            source = source.replace("default_system | default('')", json.dumps(default))
            return Mapped(fmt, source)
    return None


def unknown_template(model: str) -> str:
    """Why `model` cannot load: no template, and none engy could map."""
    return (
        f"{model} has no chat template in its GGUF and Ollama's template for it is in no "
        "format engy knows (ChatML, Llama 3, Gemma, Mistral, Phi-3): give one in models.toml "
        f'([models."{model}"] chat_template = "..."), or serve a GGUF that carries its template'
    )


@dataclass(frozen=True)
class Params:
    """What an Ollama params layer sets that engy takes."""

    stop: tuple[str, ...] = ()
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def read_params(text: str) -> Params:
    """An Ollama params layer (`{"stop": [...], "temperature": 0.7, ...}`);
    what is not JSON, or a value of the wrong type, is left out."""
    try:
        data = json.loads(text)
    except ValueError:
        return Params()
    if not isinstance(data, dict):
        return Params()
    stop = data.get("stop")
    stops = [stop] if isinstance(stop, str) else stop if isinstance(stop, list) else []
    top_k = _number(data.get("top_k"))
    return Params(
        stop=tuple(dict.fromkeys(s for s in stops if isinstance(s, str) and s)),
        temperature=_number(data.get("temperature")),
        top_p=_number(data.get("top_p")),
        top_k=int(top_k) if top_k is not None and top_k >= 0 else None,
    )
