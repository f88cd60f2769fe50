"""`engy serve`: its options, in the panels of `engy serve --help`, turned
into `ServeOptions` (units converted, 0 meaning "none" where it says so)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ..server.options import DEFAULT_DISK_CACHE, ServeOptions
from .options import (
    DEFAULT_PORT,
    MEMORY,
    MODEL,
    NETWORK,
    RPC,
    SESSIONS,
    UPSTREAM,
    VISION,
    CtxWindow,
    GpuLayers,
    Host,
    Mmproj,
    ModelArg,
    ModelsDir,
    Port,
    Rpc,
    ServerKey,
    Temp,
    Threads,
    Verbose,
    console,
    ctx_window,
    gpu_layers,
    one_line_errors,
)

# typer needs Optional on Python 3.10.
# ruff: noqa: UP045


def _opt(help: str, panel: str, *names: str, **kw: Any) -> Any:
    return typer.Option(*names, help=help, rich_help_panel=panel, **kw)


def serve(
    model: ModelArg = None,
    ctx_size: CtxWindow = "32768",
    gpu_layers_: GpuLayers = "auto",
    threads: Threads = 0,
    cache_type_k: Annotated[
        str,
        _opt(
            "KV cache type of K: f16, q8_0 (half the memory), q4_0, q4_1, q5_0, q5_1, "
            "iq4_nl, bf16, f32",
            MEMORY,
            "--cache-type-k",
            "-ctk",
        ),
    ] = "f16",
    cache_type_v: Annotated[
        str,
        _opt(
            "KV cache type of V (a quantized V runs with flash attention)",
            MEMORY,
            "--cache-type-v",
            "-ctv",
        ),
    ] = "f16",
    flash_attn: Annotated[
        str, _opt("Flash attention: auto (where the backend has it), on or off", MEMORY)
    ] = "auto",
    cpu_moe: Annotated[
        bool,
        _opt("Keep every MoE expert tensor in CPU memory, the rest offloaded", MEMORY, "--cpu-moe"),
    ] = False,
    n_cpu_moe: Annotated[
        int,
        _opt("Keep the experts of the first N MoE layers in CPU memory", MEMORY, min=0),
    ] = 0,
    max_output_tokens: Annotated[
        int, _opt("Cap on output tokens per request, on every endpoint", MODEL)
    ] = 8192,
    temp: Temp = None,
    memory_budget: Annotated[
        float, _opt("GiB the loaded models may take (0: 80% of RAM)", MODEL, min=0)
    ] = 0,
    keep_alive: Annotated[
        float, _opt("Seconds an idle model stays loaded (0: until room is needed)", MODEL)
    ] = 1800,
    queue_size: Annotated[int, _opt("Requests that may wait for the model", SESSIONS)] = 16,
    parallel: Annotated[
        int, _opt("Conversations each model serves at once (KV sequences)", SESSIONS, min=1)
    ] = 4,
    cache_ram: Annotated[
        float, _opt("MiB of RAM for saved conversation states (0: none)", SESSIONS, min=0)
    ] = 2048,
    speculative: Annotated[
        str,
        _opt(
            "Speculative decoding from the conversation's own tokens: auto (where it pays), "
            "on (always) or off",
            SESSIONS,
        ),
    ] = "auto",
    draft_max: Annotated[
        int, _opt("The longest draft speculative decoding verifies", SESSIONS, min=1, max=64)
    ] = 16,
    cache_disk: Annotated[
        Optional[Path],
        _opt("Directory of the prompt cache on disk (default: $ENGY_HOME/kvcache)", SESSIONS),
    ] = None,
    cache_disk_size: Annotated[
        float,
        _opt(
            "GiB the prompt cache on disk may take, all models together (0: off)", SESSIONS, min=0
        ),
    ] = DEFAULT_DISK_CACHE / (1 << 30),
    repack: Annotated[
        Optional[bool],
        _opt(
            "CPU weight repacking (default: on, except where AMX would crash)",
            MODEL,
            "--repack/--no-repack",
            envvar="ENGY_REPACK",
        ),
    ] = None,
    host: Host = "127.0.0.1",
    port: Port = DEFAULT_PORT,
    api_key: ServerKey = None,
    no_api_key: Annotated[
        bool, _opt("Allow serving off loopback without a key", NETWORK, "--no-api-key")
    ] = False,
    allow_host: Annotated[
        Optional[list[str]],
        _opt(
            "Also accept this Host name (repeat, or comma-separated; '*': any)",
            NETWORK,
            "--allow-host",
            envvar="ENGY_ALLOW_HOST",
        ),
    ] = None,
    allow_origin: Annotated[
        Optional[list[str]],
        _opt(
            "Also accept requests from this browser Origin, e.g. https://app.example",
            NETWORK,
            "--allow-origin",
            envvar="ENGY_ALLOW_ORIGIN",
        ),
    ] = None,
    shutdown_grace: Annotated[
        float, _opt("Seconds streams may finish on Ctrl-C / SIGTERM", NETWORK, min=0)
    ] = 5.0,
    timeout: Annotated[float, _opt("Seconds one generation may take (0: no limit)", NETWORK)] = 600,
    upstream: Annotated[
        Optional[list[str]],
        _opt(
            "Run the tokens on this engine (llama-server, vLLM, SGLang): "
            "http://HOST:PORT[;kind=..;model=..;tokenizer=..;key=..;gpu=..;quantization=..] "
            "(repeat for several)",
            UPSTREAM,
        ),
    ] = None,
    upstream_kind: Annotated[
        str, _opt("Its completions API: llamacpp (/completion) or openai", UPSTREAM)
    ] = "llamacpp",
    upstream_model: Annotated[
        Optional[str], _opt("The model's name at the upstream (and here)", UPSTREAM)
    ] = None,
    upstream_key: Annotated[
        Optional[str], _opt("The upstream's API key", UPSTREAM, envvar="ENGY_UPSTREAM_KEY")
    ] = None,
    tokenizer: Annotated[
        Optional[str],
        _opt(
            "The upstreams' vocabulary and template: a GGUF, a model id, or a Hugging "
            "Face tokenizer.json or snapshot directory (default: MODEL)",
            UPSTREAM,
        ),
    ] = None,
    mmproj: Mmproj = None,
    max_image_bytes: Annotated[
        int, _opt("Largest image one request may send (413 over)", VISION)
    ] = 5 * 1024 * 1024,
    max_images: Annotated[int, _opt("Images one request may send (413 over)", VISION, min=0)] = 100,
    open_page: Annotated[
        bool,
        _opt("Open the page (requests, models, chat) in a browser", NETWORK, "--open"),
    ] = False,
    rpc: Rpc = None,
    tensor_split: Annotated[
        Optional[str],
        _opt("How much of the model each device takes, e.g. 3,1 (RPC workers, then GPUs)", RPC),
    ] = None,
    models_dir: ModelsDir = None,
    verbose: Verbose = False,
) -> None:
    """Serve a model on POST /v1/messages (Anthropic), /v1/responses and
    /v1/chat/completions (OpenAI)."""
    from ..models.folders import add_user_roots
    from ..runtime.loading.memory import check_flash, kv_type
    from ..runtime.loading.rpc import parse_tensor_split
    from ..server.start import run_server

    add_user_roots(list(models_dir or ()))

    if flash_attn not in ("auto", "on", "off"):
        raise typer.BadParameter("expected 'auto', 'on' or 'off'", param_hint="--flash-attn")
    window, ctx_auto = ctx_window(ctx_size)
    with one_line_errors():
        options = ServeOptions(
            model=model,
            host=host,
            port=port,
            ctx_size=window,
            ctx_auto=ctx_auto,
            cache_type_k=kv_type(cache_type_k, "--cache-type-k"),
            cache_type_v=kv_type(cache_type_v, "--cache-type-v"),
            flash_attn=check_flash(kv_type(cache_type_v, "--cache-type-v"), flash_attn),
            cpu_moe=-1 if cpu_moe else n_cpu_moe,
            gpu_layers=gpu_layers(gpu_layers_),
            threads=threads or None,
            api_key=api_key or None,
            no_api_key=no_api_key,
            allow_hosts=tuple(allow_host or ()),
            allow_origins=tuple(allow_origin or ()),
            shutdown_grace=shutdown_grace,
            timeout=timeout or None,
            max_output_tokens=max_output_tokens,
            temperature=temp,
            queue_size=queue_size,
            memory_budget=int(memory_budget * (1 << 30)) or None,
            keep_alive=keep_alive or None,
            upstream=tuple(upstream or ()),
            upstream_kind=upstream_kind,
            upstream_model=upstream_model or None,
            upstream_key=upstream_key or None,
            tokenizer=tokenizer or None,
            parallel=parallel,
            cache_ram=int(cache_ram * (1 << 20)),
            cache_disk=_path(cache_disk),
            speculative=_speculative(speculative),
            draft_max=draft_max,
            cache_disk_size=int(cache_disk_size * (1 << 30)),
            repack=repack,
            mmproj=_path(mmproj),
            max_image_bytes=max_image_bytes,
            max_images=max_images,
            rpc=tuple(rpc or ()),
            tensor_split=parse_tensor_split(tensor_split),
            verbose=verbose,
            open_page=open_page,
        )
        run_server(options, console)


def _speculative(value: str) -> str:
    if value not in ("auto", "on", "off"):
        raise typer.BadParameter("expected 'auto', 'on' or 'off'", param_hint="--speculative")
    return value


def _path(path: Path | None) -> Path | None:
    return path.expanduser() if path else None
