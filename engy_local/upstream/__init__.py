"""engy in front of an upstream inference engine that takes token ids
(llama-server, vLLM, SGLang): the same templates, tokenizer, family parsers
and protocols as the local engine, the tokens run elsewhere. Depends on the
prompt half only; the server's start-up hands it a vocabulary."""

from .backend import UpstreamBackend, UpstreamGeneration, Vocabulary
from .options import LocalModel, UpstreamOptions, gguf_upstream_options, hf_upstream_options
from .routing import Routed
from .spec import UpstreamSpec, parse_specs
from .wire import KINDS, Kind

__all__ = [
    "KINDS",
    "Kind",
    "LocalModel",
    "Routed",
    "UpstreamBackend",
    "UpstreamGeneration",
    "UpstreamOptions",
    "UpstreamSpec",
    "Vocabulary",
    "gguf_upstream_options",
    "hf_upstream_options",
    "parse_specs",
]
