"""Whether a model fits this machine: the memory it needs at the default
window (weights, and a KV cache of the cache types for every sequence),
weighed against the GPU memory free now and the RAM the models may take.

`engy list`, `engy models` and `engy pull` say it before anything loads.
The figures are memory.py's, from the GGUF's header alone; a model not yet
downloaded has only its download size (its KV cache is not known until its
header is). The verdicts, best first:

    gpu      weights and KV cache fit the GPUs' free memory (Apple silicon's
             unified memory counts as GPU memory: Metal reports it)
    experts  a mixture of experts fits with some experts in CPU memory
             (as `--gpu-layers auto` would place it)
    ram      it fits the RAM the models may take, not the GPU
    large    it fits neither

Nothing here imports llama.cpp except `machine()`, which asks its device
registry what the GPUs have free.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ...errors import NotGGUF
from ...models.ggufmeta import read_metadata, tensor_sizes, trained_context
from .memory import GPU_MARGIN, kv_shape, layers_of, plan_offload

# What `engy serve` gives a model unless told otherwise: --ctx-size,
# --parallel, the cache types, and the memory budget (a share of RAM).
DEFAULT_WINDOW = 32768
DEFAULT_PARALLEL = 4
DEFAULT_KV = "f16"
RAM_SHARE = 0.8

VERDICTS = {
    "gpu": "fits on the GPU",
    "experts": "fits with experts in CPU memory",
    "ram": "fits in RAM only",
    "large": "too large",
}


@dataclass(frozen=True)
class Machine:
    """What this machine has for a model now."""

    gpu_free: tuple[int, ...]  # bytes free on each GPU llama.cpp offloads to
    gpu_names: tuple[str, ...]
    ram: int  # bytes of RAM the models may take

    @property
    def gpu_room(self) -> int:
        """GPU bytes for weights and KV, each device's margin kept free."""
        return sum(max(0, free - GPU_MARGIN) for free in self.gpu_free)


@dataclass(frozen=True)
class Fit:
    weights: int  # bytes of the model's files (the download, when not here)
    kv: int | None  # bytes of KV cache at `window` for every sequence; None: not known
    window: int | None  # the window it gets by default
    verdict: str  # a key of VERDICTS

    @property
    def need(self) -> int:
        return self.weights + (self.kv or 0)

    @property
    def label(self) -> str:
        return VERDICTS[self.verdict]

    def to_json(self) -> dict[str, object]:
        return {
            "weights": self.weights,
            "kv": self.kv,
            "window": self.window,
            "memory": self.need,
            "fit": self.verdict,
            "fit_label": self.label,
        }


def _ram() -> int:
    """RAM the models may take: serve's default budget (80% of it), and no
    more than Linux says is available now."""
    try:
        total = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        total = 16 << 30
    budget = int(total * RAM_SHARE)
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return min(budget, int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    return budget


def machine() -> Machine:
    """This machine now: its GPUs' free memory (from llama.cpp's device
    registry: a build without GPU support has none) and RAM."""
    try:
        from .devices import offload_devices

        gpus = [d for d in offload_devices(memory=True) if not d.remote]
    except (ImportError, OSError, AttributeError):  # no llama.cpp to ask
        gpus = []
    return Machine(tuple(d.free for d in gpus), tuple(d.name for d in gpus), _ram())


def verdict(weights: int, kv: int, machine: Machine, experts_fit: bool = False) -> str:
    need = weights + kv
    if machine.gpu_free and need <= machine.gpu_room:
        return "gpu"
    if experts_fit and need <= machine.gpu_room + machine.ram:
        return "experts"
    if need <= machine.ram:
        return "ram"
    return "large"


def estimate(
    files: tuple[Path, ...] | None,
    size: int,
    machine: Machine,
    window: int = DEFAULT_WINDOW,
    parallel: int = DEFAULT_PARALLEL,
    type_k: str = DEFAULT_KV,
    type_v: str = DEFAULT_KV,
) -> Fit:
    """How a model fits: from its GGUF files where they are here (the first
    holds the header), else from `size` alone (weights, KV unknown)."""
    if not files:
        return Fit(size, None, None, verdict(size, 0, machine))
    try:
        meta = read_metadata(files[0])
    except (OSError, NotGGUF):
        return Fit(size, None, None, verdict(size, 0, machine))
    weights = size or sum(p.stat().st_size for p in files if p.exists())
    window = min(trained_context(meta) or 4096, window)
    kv = kv_shape(meta).per_token(type_k, type_v) * window * parallel
    found = verdict(weights, kv, machine)
    if found != "gpu" and machine.gpu_free:
        found = verdict(weights, kv, machine, _experts_fit(files, meta, kv, machine))
    return Fit(weights, kv, window, found)


def _experts_fit(files: tuple[Path, ...], meta: dict[str, object], kv: int, m: Machine) -> bool:
    """Whether `--gpu-layers auto` would put every layer on the GPU with
    some experts in CPU memory (memory.plan_offload)."""
    arch = meta.get("general.architecture")
    n_layer = meta.get(f"{arch}.block_count")
    if not isinstance(n_layer, int) or n_layer <= 0:
        return False
    sizes: dict[str, int] = {}
    try:
        for path in files:
            sizes.update(tensor_sizes(path))
    except (OSError, NotGGUF):
        return False
    layers = layers_of(sizes, n_layer)
    if not any(layers.experts):
        return False
    plan = plan_offload(layers, kv // n_layer, m.gpu_room)
    return plan.gpu_layers == -1 and plan.cpu_moe != 0
