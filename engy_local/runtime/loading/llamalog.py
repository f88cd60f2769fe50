"""What llama.cpp says, as engy's own log: the `engy.llama` logger.

llama.cpp writes its log through one process-wide callback, and
llama-cpp-python's prints it raw to stderr. Its `set_verbose(False)` means
"errors only", but llama-cpp-python 0.3.36 reads the levels with ggml's
old numbering (INFO 1, WARN 2, ERROR 3, DEBUG 4) while the ggml it bundles
counts DEBUG 1, INFO 2, WARN 3, ERROR 4: every warning printed as an error
(`control-looking token ... was not control-type`, `n_ctx_seq (131072) >
n_ctx_train (32768)`, the latter only because the sequences share one
unified cache), and real errors were hidden as debug lines. Here the
callback is ours (`install`, done on import), with ggml's numbering: each
line, pieces joined, goes to `engy.llama` at its level, which shows nothing
unless asked (`show`, or a handler of one's own: `engy serve --verbose`).
engy says itself what went wrong: a model llama.cpp refuses is a
ModelLoadError naming the error lines of its load (`Capture.errors`).

A load's lines are also what says where its weights went: llama.cpp logs
the split (`offloaded 7/7 layers to GPU`, one `model buffer size` line per
device buffer) and nothing in its API returns it, so `captured()` collects
them and `parse_split` reads them.
"""

from __future__ import annotations

import ctypes
import logging
import re
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TextIO

import llama_cpp

log = logging.getLogger("engy.llama")
log.addHandler(logging.NullHandler())  # nothing shown, not even errors, until `show`
log.propagate = False

# enum ggml_log_level (ggml.h): NONE, DEBUG, INFO, WARN, ERROR, CONT (continues
# the line before)
_CONT = 5
_LEVELS = {
    0: logging.INFO,
    1: logging.DEBUG,
    2: logging.INFO,
    3: logging.WARNING,
    4: logging.ERROR,
}
_BUFFER = re.compile(r"load_tensors:\s+(\S+) model buffer size =\s+([\d.]+) MiB")
_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
_KV_SIZE = re.compile(r"llama_kv_cache: size =\s+([\d.]+) MiB")
# One line per backend, at creation ("sched_reserve:") and again at close.
_COMPUTE_SIZE = re.compile(r"sched_reserve:\s+(\S+) compute buffer size =\s+([\d.]+) MiB")
_OVERRIDDEN = re.compile(r"tensor (blk\.\d+)\.\S+ .*buffer type overridden to (\S+)")
_FUNCTION = re.compile(r"^\w+: ")  # how llama.cpp's log lines start
_lock = threading.Lock()  # one capture at a time: the callback is process-wide


@dataclass
class Capture:
    """A block's log: every line, and those at the error level."""

    lines: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(line + "\n" for line in self.lines)


class _Pending(threading.local):
    """A line llama.cpp has not finished yet, per thread."""

    def __init__(self) -> None:
        self.text = ""
        self.level = logging.INFO


_pending = _Pending()
_capture: Capture | None = None


def _line(level: int, line: str) -> None:
    capture = _capture
    if capture is not None:
        capture.lines.append(line)
        if level >= logging.ERROR:
            capture.errors.append(line.strip())
    if line.strip():
        log.log(level, "%s", line)


@llama_cpp.llama_log_callback  # type: ignore[untyped-decorator]
def callback(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
    """The one callback llama.cpp and mtmd log through (vision.py sets it
    for mtmd)."""
    pending = _pending
    if level != _CONT:
        if pending.text:  # a line that never got its newline
            _line(pending.level, pending.text)
            pending.text = ""
        pending.level = _LEVELS.get(level, logging.INFO)
    pending.text += text.decode("utf-8", "replace")
    *lines, pending.text = pending.text.split("\n")
    for line in lines:
        _line(pending.level, line)


def install() -> None:
    llama_cpp.llama_log_set(callback, ctypes.c_void_p(0))


def show(level: int = logging.DEBUG, stream: TextIO | None = None, prefix: str = "") -> None:
    """Print llama.cpp's lines from `level` up on `stream` (stderr)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(logging.Formatter(prefix + "%(message)s"))
    log.addHandler(handler)
    log.setLevel(level)


@contextmanager
def captured() -> Iterator[Capture]:
    """Collect llama.cpp's log lines for the duration of the block (they
    still go to the log as well)."""
    global _capture
    capture = Capture()
    with _lock:
        _capture = capture
        try:
            yield capture
        finally:
            _capture = None


def strip_function(line: str) -> str:
    """A log line without the llama.cpp function that wrote it."""
    return _FUNCTION.sub("", line.strip())


def parse_kv_size(text: str) -> int:
    """Bytes of KV cache a context's creation said it allocated (a model
    with a sliding window has two caches, each says its own)."""
    return int(sum(float(m[1]) for m in _KV_SIZE.finditer(text)) * (1 << 20))


def parse_compute_size(text: str) -> int:
    """Bytes of compute buffers a context's creation said it reserved, on
    every backend (on a GPU, memory taken whether a step uses it or not)."""
    return int(sum(float(m[2]) for m in _COMPUTE_SIZE.finditer(text)) * (1 << 20))


@dataclass(frozen=True)
class Split:
    """How one load placed the model: layers offloaded, MiB per buffer."""

    offloaded: int | None = None  # layers (the output layer counts as one)
    layers: int | None = None
    buffers: tuple[tuple[str, float], ...] = ()  # (buffer, MiB), e.g. ("RPC0[h:p]", 30.0)
    overridden: int = 0  # layers with tensors kept in CPU memory (--cpu-moe)

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
        if self.overridden:
            layers = "layer" if self.overridden == 1 else "layers"
            parts.append(f"experts of {self.overridden} {layers} in CPU memory")
        return ", ".join(parts)


def parse_split(text: str) -> Split:
    offloaded = layers = None
    if match := _OFFLOADED.search(text):
        offloaded, layers = int(match[1]), int(match[2])
    buffers = tuple((m[1], float(m[2])) for m in _BUFFER.finditer(text))
    overridden = {m[1] for m in _OVERRIDDEN.finditer(text) if m[2].startswith("CPU")}
    return Split(offloaded, layers, buffers, len(overridden))


install()
