"""engy in front of an upstream inference engine that takes token ids
(llama-server, vLLM, SGLang): the same templates, tokenizer, family parsers
and protocols as the local engine, the tokens run elsewhere."""

from .backend import (
    UpstreamBackend,
    UpstreamGeneration,
    UpstreamOptions,
    hf_upstream_options,
    upstream_options,
)
from .routing import Routed
from .spec import UpstreamSpec, parse_specs
from .wire import KINDS, Kind

__all__ = [
    "KINDS",
    "Kind",
    "Routed",
    "UpstreamBackend",
    "UpstreamGeneration",
    "UpstreamOptions",
    "UpstreamSpec",
    "hf_upstream_options",
    "parse_specs",
    "upstream_options",
]
