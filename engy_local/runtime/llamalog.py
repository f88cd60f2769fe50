"""What llama.cpp says while a model loads: where its weights went.

llama.cpp logs the split (`offloaded 7/7 layers to GPU`, one `model buffer
size` line per device buffer) and nothing in its API returns it, so the
load's log is captured and those lines parsed. Errors still reach stderr,
as llama-cpp-python's own callback (restored afterwards) prints them.
"""

from __future__ import annotations

import ctypes
import re
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import llama_cpp
from llama_cpp._logger import llama_log_callback

_ERROR = 3  # GGML_LOG_LEVEL_ERROR
_BUFFER = re.compile(r"load_tensors:\s+(\S+) model buffer size =\s+([\d.]+) MiB")
_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
_lock = threading.Lock()  # one capture at a time: the callback is process-wide


@dataclass(frozen=True)
class Split:
    """How one load placed the model: layers offloaded, MiB per buffer."""

    offloaded: int | None = None  # layers (the output layer counts as one)
    layers: int | None = None
    buffers: tuple[tuple[str, float], ...] = ()  # (buffer, MiB), e.g. ("RPC0[h:p]", 30.0)

    @property
    def remote_share(self) -> float:
        """The part of the weights on RPC workers (their buffers are named
        RPC<n>[host:port]): memory on other machines."""
        total = sum(mib for _, mib in self.buffers)
        remote = sum(mib for name, mib in self.buffers if name.startswith("RPC"))
        return remote / total if total else 0.0

    def line(self) -> str:
        parts = [f"{name} {mib:.1f} MiB" for name, mib in self.buffers]
        if self.offloaded is not None:
            parts.insert(0, f"{self.offloaded}/{self.layers} layers offloaded")
        return ", ".join(parts)


def parse_split(text: str) -> Split:
    offloaded = layers = None
    if match := _OFFLOADED.search(text):
        offloaded, layers = int(match[1]), int(match[2])
    buffers = tuple((m[1], float(m[2])) for m in _BUFFER.finditer(text))
    return Split(offloaded, layers, buffers)


@contextmanager
def captured() -> Iterator[list[str]]:
    """Collect llama.cpp's log lines for the duration of the block."""
    lines: list[str] = []

    @llama_cpp.llama_log_callback  # type: ignore[untyped-decorator]
    def collect(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
        line = text.decode("utf-8", "replace")
        lines.append(line)
        if level == _ERROR:
            print(line, end="", flush=True, file=sys.stderr)

    with _lock:
        llama_cpp.llama_log_set(collect, ctypes.c_void_p(0))
        try:
            yield lines
        finally:
            llama_cpp.llama_log_set(llama_log_callback, ctypes.c_void_p(0))
