"""`--upstream URL[;key=value...]`: one upstream engine and its settings.

    engy serve --upstream 'http://gpu1:8000;kind=openai;model=qwen3-coder;tokenizer=~/qwen3'
               --upstream http://box2:8080

Settings a spec leaves out come from --upstream-kind, --upstream-model,
--upstream-key and --tokenizer, so one upstream needs no `;` at all.

    kind          llamacpp (/completion) or openai (/v1/completions)
    model         its name at the upstream, and its id here
    key           the upstream's API key (Authorization: Bearer)
    tokenizer     a GGUF, a model id, or a Hugging Face tokenizer.json / snapshot
    gpu           true / false: what the provider object's `gpu` sees
    quantization  what `provider.quantizations` and GET /v1/models see
    grammar       where a forced call's grammar goes (openai kind): structured_outputs,
                  guided_grammar, ebnf, grammar or none (default: found from the engine)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from urllib.parse import urlsplit

from ..errors import EngyError
from .wire import GRAMMARS, KINDS

_KEYS = ("kind", "model", "key", "tokenizer", "gpu", "quantization", "grammar")
_BOOLS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}


@dataclass(frozen=True)
class UpstreamSpec:
    url: str
    kind: str = "llamacpp"
    model: str | None = None
    key: str | None = None
    tokenizer: str | None = None  # None: MODEL's vocabulary and template
    gpu: bool | None = None  # None: as the kind suggests (openai: vLLM / SGLang, GPU)
    quantization: str | None = None
    grammar: str | None = None  # None: as the engine is found to take it


def parse_spec(text: str, defaults: UpstreamSpec | None = None) -> UpstreamSpec:
    url, *settings = (part.strip() for part in text.split(";"))
    where = urlsplit(url)
    if where.scheme not in ("http", "https") or not where.netloc:
        raise EngyError(f"--upstream {url!r}: expected an http:// or https:// URL")
    spec = replace(defaults or UpstreamSpec(url), url=url.rstrip("/"))
    values: dict[str, object] = {}
    for setting in filter(None, settings):
        name, sep, value = (s.strip() for s in setting.partition("="))
        if not sep or name not in _KEYS:
            known = ", ".join(k + "=" for k in _KEYS)
            raise EngyError(f"--upstream {text!r}: {setting!r} is not one of {known}")
        if name in values:
            raise EngyError(f"--upstream {text!r}: {name}= is given twice")
        if name == "gpu":
            if value.lower() not in _BOOLS:
                raise EngyError(f"--upstream {text!r}: gpu= takes true or false")
            values[name] = _BOOLS[value.lower()]
        else:
            values[name] = value or None
    spec = replace(spec, **values)  # type: ignore[arg-type]
    if spec.kind not in KINDS:
        raise EngyError(f"--upstream {text!r}: kind= is one of {', '.join(KINDS)}")
    if spec.grammar is not None and spec.grammar not in GRAMMARS:
        raise EngyError(f"--upstream {text!r}: grammar= is one of {', '.join(GRAMMARS)}")
    return spec


def parse_specs(texts: list[str] | tuple[str, ...], defaults: UpstreamSpec) -> list[UpstreamSpec]:
    return [parse_spec(text, defaults) for text in texts]
