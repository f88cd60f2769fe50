"""What a model takes in memory before it is loaded: its weights, and a KV
cache of the cache types asked for, for the window each sequence may fill.
The pool weighs models against its budget with it, `--ctx-size auto` picks
the window that fits, and an explicit window that cannot fit is refused
before llama.cpp tries to allocate it.

The figures come from the GGUF's header alone (no llama.cpp), and err on
the large side: sliding-window layers are counted as if they held the
whole window.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import DoesNotFit, KVTypeError, NotGGUF
from ...models.ggufmeta import read_metadata, tensor_sizes, trained_context

# The KV cache types llama.cpp accepts (its -ctk / -ctv): bytes per block
# of values, values per block.
KV_TYPES: dict[str, tuple[int, int]] = {
    "f32": (4, 1),
    "f16": (2, 1),
    "bf16": (2, 1),
    "q8_0": (34, 32),
    "q5_1": (24, 32),
    "q5_0": (22, 32),
    "q4_1": (20, 32),
    "q4_0": (18, 32),
    "iq4_nl": (18, 32),
}
QUANTIZED = frozenset(name for name, (_, block) in KV_TYPES.items() if block > 1)
# The smallest window --ctx-size auto gives: less is no use to an agent.
MIN_WINDOW = 2048
# Windows --ctx-size auto picks are a multiple of this.
WINDOW_STEP = 256


def kv_type(name: str, which: str = "--cache-type-k") -> str:
    """A cache type's name, checked (`which` names the option in the error)."""
    name = name.lower()
    if name not in KV_TYPES:
        raise KVTypeError(
            f"{which}: {name!r} is not a KV cache type; use one of {', '.join(KV_TYPES)}"
        )
    return name


def check_flash(type_v: str, flash_attn: str) -> str:
    """The flash attention setting a V cache type runs with: a quantized V
    needs flash attention (llama.cpp reads it only there), so "auto" turns
    it on, and "off" is refused."""
    if type_v not in QUANTIZED:
        return flash_attn
    if flash_attn == "off":
        raise KVTypeError(
            f"--cache-type-v {type_v} needs flash attention: llama.cpp reads a quantized V "
            "cache only there (drop --flash-attn off, or keep V at f16)"
        )
    return "on"


def kv_bytes(type_name: str, values: int) -> int:
    size, block = KV_TYPES[type_name]
    return -(-values // block) * size


@dataclass(frozen=True)
class Shape:
    """What one token's KV takes: values of K and of V over all the layers
    that hold a KV cache."""

    k_values: int
    v_values: int

    def per_token(self, type_k: str, type_v: str) -> int:
        return kv_bytes(type_k, self.k_values) + kv_bytes(type_v, self.v_values)


def kv_shape(meta: dict[str, Any]) -> Shape:
    """From a GGUF's metadata; an attention layer's KV heads times their width.
    Hybrid models with attention in every n-th layer only (Qwen3.5, Qwen3
    Next) count those; where the header says less, every layer counts."""
    arch = meta.get("general.architecture")

    def get(key: str, default: int) -> int:
        value = meta.get(f"{arch}.{key}", default)
        return value if isinstance(value, int) and value > 0 else default

    layers, heads = get("block_count", 32), get("attention.head_count", 32)
    kv_heads = get("attention.head_count_kv", heads)
    head_dim = get("embedding_length", 4096) // max(1, heads)
    k_len, v_len = get("attention.key_length", head_dim), get("attention.value_length", head_dim)
    interval = get("full_attention_interval", 1)
    attention = max(1, layers // interval)
    # MLA (DeepSeek, Kimi) caches a compressed latent instead of heads.
    latent = get("attention.kv_lora_rank", 0)
    if latent:
        rope = get("rope.dimension_count", 64)
        return Shape(attention * (latent + rope), 0)
    return Shape(attention * kv_heads * k_len, attention * kv_heads * v_len)


@dataclass(frozen=True)
class Footprint:
    """A model file's weights and the KV one token of context costs."""

    weights: int
    per_token: int  # bytes of KV per token, per sequence
    trained: int  # the model's own window

    def kv(self, window: int, parallel: int) -> int:
        return window * parallel * self.per_token

    def total(self, window: int, parallel: int) -> int:
        return self.weights + self.kv(window, parallel)


def footprint(path: Path, type_k: str = "f16", type_v: str = "f16") -> Footprint:
    size = path.stat().st_size
    try:
        meta = read_metadata(path)
    except (OSError, NotGGUF):
        return Footprint(size, 0, 4096)
    per_token = kv_shape(meta).per_token(type_k, type_v)
    return Footprint(size, per_token, trained_context(meta) or 4096)


def fit_window(fp: Footprint, parallel: int, budget: int) -> int:
    """The largest window, up to the model's own, whose KV cache for every
    sequence fits `budget` beside the weights (a multiple of WINDOW_STEP);
    a DoesNotFit where not even MIN_WINDOW does."""
    room = budget - fp.weights
    window = fp.trained
    if fp.per_token:
        window = min(window, room // (parallel * fp.per_token) // WINDOW_STEP * WINDOW_STEP)
    if window < min(MIN_WINDOW, fp.trained):
        raise DoesNotFit(
            f"--ctx-size auto: {_gib(fp.weights)} of weights leave no room for even "
            f"{MIN_WINDOW} tokens x {parallel} conversations within the memory budget of "
            f"{_gib(budget)}; raise --memory-budget, or lower --parallel or the cache types"
        )
    return window


def check_fits(
    fp: Footprint, window: int, parallel: int, budget: int, kv_types: str, cache_ram: int = 0
) -> None:
    """An explicit window whose KV cache cannot fit the budget beside the
    weights, refused before llama.cpp tries to allocate it (with what
    --ctx-size auto would give, which leaves `cache_ram` for the RAM cache)."""
    need = fp.total(window, parallel)
    if need <= budget:
        return
    fitting = ""
    with contextlib.suppress(DoesNotFit):
        fitting = f" (--ctx-size auto would give {fit_window(fp, parallel, budget - cache_ram)})"
    raise DoesNotFit(
        f"--ctx-size {window} x {parallel} conversations needs {_gib(fp.kv(window, parallel))} "
        f"of KV cache ({kv_types}) beside {_gib(fp.weights)} of weights: more than the memory "
        f"budget of {_gib(budget)}. Lower --ctx-size{fitting} or --parallel, quantize the "
        "cache (--cache-type-k q8_0 --cache-type-v q8_0), or raise --memory-budget"
    )


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.2f} GiB"


# What llama.cpp needs on a GPU beyond weights and KV (its compute buffers,
# the driver's own): kept free on each device, as llama-server's --fit does.
GPU_MARGIN = 1 << 30
_EXPERT = re.compile(r"^blk\.(\d+)\.ffn_(up|down|gate|gate_up)_(ch|)exps")
_LAYER = re.compile(r"^blk\.(\d+)\.")


@dataclass(frozen=True)
class Layers:
    """A model's weights by layer: what each layer's experts take, what the
    rest of it takes, and the output (and norms) after the last layer."""

    dense: tuple[int, ...]
    experts: tuple[int, ...]
    output: int


def layers_of(sizes: dict[str, int], n_layer: int) -> Layers:
    """From tensor sizes by name (ggufmeta.tensor_sizes). The token
    embedding stays in CPU memory (llama.cpp reads rows of it there)."""
    dense, experts = [0] * n_layer, [0] * n_layer
    output = 0
    for name, size in sizes.items():
        if (m := _EXPERT.match(name)) and int(m[1]) < n_layer:
            experts[int(m[1])] += size
        elif (m := _LAYER.match(name)) and int(m[1]) < n_layer:
            dense[int(m[1])] += size
        elif not name.startswith("token_embd"):
            output += size
    return Layers(tuple(dense), tuple(experts), output)


@dataclass(frozen=True)
class Offload:
    gpu_layers: int  # -1: all, with the output layer
    cpu_moe: int  # experts of the first N layers in CPU memory; -1: all; 0: none


def plan_offload(layers: Layers, kv_per_layer: int, free: int) -> Offload:
    """--gpu-layers auto on a GPU with `free` bytes (after GPU_MARGIN): every
    layer where all fits; else the experts of the first layers move to CPU
    memory, one layer at a time, until the rest fits; where even every
    expert on the CPU is too much, the last layers that fit are offloaded
    (llama.cpp offloads from the end), their experts still on the CPU."""
    n = len(layers.dense)
    whole = sum(layers.dense) + sum(layers.experts) + n * kv_per_layer + layers.output
    if whole <= free:
        return Offload(-1, 0)
    if any(layers.experts):
        need = whole
        for k in range(n):
            need -= layers.experts[k]
            if need <= free:
                return Offload(-1, k + 1)
    # Layers from the end; all of them with the output as well.
    used, fit = 0, 0
    for i in reversed(range(n)):
        used += layers.dense[i] + kv_per_layer
        if used > free:
            break
        fit += 1
    if fit == n and used + layers.output > free:
        fit -= 1
    return Offload(fit, -1 if any(layers.experts) else 0)


def auto_offload(
    path: Path, type_k: str, type_v: str, window: int, parallel: int, free: int
) -> Offload:
    """plan_offload for a GGUF served with that window and cache types."""
    try:
        meta = read_metadata(path)
        sizes = tensor_sizes(path)
    except (OSError, NotGGUF):
        return Offload(-1, 0)
    arch = meta.get("general.architecture")
    n_layer = meta.get(f"{arch}.block_count")
    if not isinstance(n_layer, int) or n_layer <= 0:
        return Offload(-1, 0)
    kv = kv_shape(meta).per_token(type_k, type_v) * window * parallel
    return plan_offload(layers_of(sizes, n_layer), kv // n_layer, free)
