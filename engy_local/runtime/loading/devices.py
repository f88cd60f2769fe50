"""The devices llama.cpp can put a model on, from ggml's backend registry.

llama-cpp-python binds llama.h only; the registry (ggml-backend.h) is
reached with a few ctypes signatures. A model loaded without an explicit
device list goes onto every GPU-like device in the registry: local GPUs
and, once registered (rpc.py), RPC workers, which llama.cpp puts first.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

from llama_cpp import llama_cpp as _llama

# The symbols are looked up through libllama's handle, so they resolve to
# the libggml libllama itself loaded (libggml.so.0). The wheel ships
# libggml.so as a copy, not a link: opening it by that name would load a
# second ggml with a registry of its own that llama.cpp never sees.
_lib = _llama._lib
_p, _size, _str = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p


def _bind(name: str, restype: object, *argtypes: object) -> Any:
    fn = getattr(_lib, name)
    fn.restype, fn.argtypes = restype, list(argtypes)
    return fn


dev_count = _bind("ggml_backend_dev_count", _size)
dev_get = _bind("ggml_backend_dev_get", _p, _size)
dev_name = _bind("ggml_backend_dev_name", _str, _p)
dev_description = _bind("ggml_backend_dev_description", _str, _p)
dev_type = _bind("ggml_backend_dev_type", ctypes.c_int, _p)
dev_memory = _bind(
    "ggml_backend_dev_memory", None, _p, ctypes.POINTER(_size), ctypes.POINTER(_size)
)
dev_reg = _bind("ggml_backend_dev_backend_reg", _p, _p)
reg_name = _bind("ggml_backend_reg_name", _str, _p)
reg_by_name = _bind("ggml_backend_reg_by_name", _p, _str)
reg_dev_count = _bind("ggml_backend_reg_dev_count", _size, _p)
reg_dev_get = _bind("ggml_backend_reg_dev_get", _p, _p, _size)
reg_proc_address = _bind("ggml_backend_reg_get_proc_address", _p, _p, _str)
dev_by_type = _bind("ggml_backend_dev_by_type", _p, ctypes.c_int)
dev_buffer_type = _bind("ggml_backend_dev_buffer_type", _p, _p)
register = _bind("ggml_backend_register", None, _p)
# ggml_abort_callback_t ggml_set_abort_callback(ggml_abort_callback_t callback)
set_abort_callback = _bind("ggml_set_abort_callback", _p, _p)

# enum ggml_backend_dev_type
_KINDS = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel", 4: "meta"}


@dataclass(frozen=True)
class Device:
    name: str  # llama.cpp's: CPU, CUDA0, RPC0 ...
    description: str  # for an RPC device, its worker's HOST:PORT
    kind: str  # cpu, gpu, igpu, accel
    backend: str  # the registry it comes from: CPU, CUDA, Metal, RPC ...
    free: int  # bytes
    total: int

    @property
    def remote(self) -> bool:
        return self.backend == "RPC"

    @property
    def offloads(self) -> bool:
        """Whether llama.cpp puts layers on it (CPU layers are the rest)."""
        return self.kind in ("gpu", "igpu")

    def line(self) -> str:
        memory = f"{self.total / (1 << 30):.1f} GiB, {self.free / (1 << 30):.1f} free"
        return f"{self.name} ({self.description}): {memory}"


def device(handle: int, memory: bool = True) -> Device:
    """One device; `memory=False` leaves free and total at 0. Asking an RPC
    device its memory is a round trip to the worker, queued behind whatever
    it is computing: not for a label on every GET /v1/models."""
    free, total = _size(0), _size(0)
    if memory:
        dev_memory(handle, ctypes.byref(free), ctypes.byref(total))
    reg = dev_reg(handle)
    return Device(
        name=_text(dev_name(handle)),
        description=_text(dev_description(handle)),
        kind=_KINDS.get(dev_type(handle), "other"),
        backend=_text(reg_name(reg)) if reg else "",
        free=free.value,
        total=total.value,
    )


def all_devices(memory: bool = True) -> list[Device]:
    return [device(dev_get(i), memory) for i in range(dev_count())]


def offload_devices(memory: bool = False) -> list[Device]:
    """Where layers go, in llama.cpp's order: RPC workers, then local GPUs
    (integrated ones only when there is no discrete one)."""
    found = all_devices(memory)
    remote = [d for d in found if d.offloads and d.remote]
    gpus = [d for d in found if d.kind == "gpu" and not d.remote]
    igpus = [d for d in found if d.kind == "igpu" and not d.remote]
    return remote + (gpus or igpus)


def cpu_buffer_type() -> int:
    """The CPU device's buffer type: plain host memory (a tensor put there
    is neither offloaded nor repacked)."""
    buft: int = dev_buffer_type(dev_by_type(0))
    return buft


def local_gpu() -> str | None:
    """The local offload backend (CUDA, Metal, Vulkan ...), or None for CPU
    only. RPC workers are not local: a build with RPC is not a GPU build."""
    for d in all_devices(memory=False):
        if d.offloads and not d.remote:
            return d.backend or "GPU"
    return None


def _text(value: bytes | None) -> str:
    return value.decode("utf-8", "replace") if value else ""
