"""What `engy serve` was asked for: every setting, as one value the
start-up and the tests build."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import EngyError
from ..protocols.images import MAX_IMAGE_BYTES, MAX_IMAGES
from .guard import is_loopback
from .shutdown import DEFAULT_GRACE

# The disk tier's default size: a few long agent sessions of a 30B model,
# or hundreds of a small one; a laptop's disk holds it easily.
DEFAULT_DISK_CACHE = 16 << 30


@dataclass(frozen=True)
class ServeOptions:
    model: str | None = None
    host: str = "127.0.0.1"
    port: int = 8642
    ctx_size: int | None = 32768
    ctx_auto: bool = False  # --ctx-size auto: the window the memory budget holds
    cache_type_k: str = "f16"  # the KV cache's types (runtime.memory.KV_TYPES)
    cache_type_v: str = "f16"
    flash_attn: str = "auto"  # auto, on or off; "on" where a quantized V needs it
    cpu_moe: int = 0  # MoE layers whose experts stay in CPU memory: the first N; -1: all
    gpu_layers: int | None = None
    threads: int | None = None
    api_key: str | None = None
    timeout: float | None = 600.0
    max_output_tokens: int = 8192
    temperature: float | None = None  # for requests that set none; None: engy's default
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
    cache_disk: Path | None = None  # the disk tier's directory; None: $ENGY_HOME/kvcache
    cache_disk_size: int = DEFAULT_DISK_CACHE  # bytes on disk, all models together; 0: off
    speculative: str = "auto"  # drafts from the conversation where they pay; "off"
    draft_max: int = 16  # the longest draft
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
    verbose: bool = False  # show llama.cpp's own log lines (and engy's loads)
    open_page: bool = False  # --open: open the page in the browser once serving


def check_exposure(options: ServeOptions) -> None:
    """A server off loopback answers whoever reaches it: it needs a key,
    unless --no-api-key says that is meant."""
    if not is_loopback(options.host) and not options.api_key and not options.no_api_key:
        raise EngyError(
            f"--host {options.host} is reachable from other machines: set --api-key "
            "(or ENGY_API_KEY), or pass --no-api-key to serve without one"
        )
