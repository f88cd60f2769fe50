"""What a saved KV state belongs to: the model's content, the llama.cpp build
and everything that shapes the cache (cache types, flash attention, the
sliding window, a projector). A state is only ever restored into a context
whose identity is the same, so another model of the same shapes, another
build or another layout never gets it.

A model's content is its store manifest's sha256 where the store has one;
a GGUF served by path is hashed once and remembered by path, size and mtime
(in `digests.json` beside the cache), so a restart does not read it again.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

import llama_cpp

from ..loading.model import Model

_LOCK = threading.Lock()


@dataclass(frozen=True)
class Identity:
    model: str  # sha256 of the weights
    build: str  # llama.cpp: the bindings' version and what the build reports
    layout: str  # what shapes the KV cells
    projector: str  # sha256 of the vision projector, "" without one
    name: str  # the model's file name, for people reading `engy cache`

    @property
    def key(self) -> str:
        """The directory name of this identity's entries."""
        fields = asdict(self)
        fields.pop("name")
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:24]

    def to_json(self) -> dict[str, str]:
        return asdict(self)


def build_id() -> str:
    info = llama_cpp.llama_print_system_info().decode("utf-8", "replace")
    return hashlib.sha256(f"{llama_cpp.__version__}\n{info}".encode()).hexdigest()[:24]


def file_digest(path: Path, remembered: Path) -> str:
    """The sha256 of `path`, computed once per path, size and mtime."""
    stat = path.stat()
    key = f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"
    with _LOCK:
        known = _read(remembered)
        if key in known:
            return known[key]
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    digest = h.hexdigest()
    with _LOCK:
        known = _read(remembered)
        known[key] = digest
        _write(remembered, known)
    return digest


def _read(path: Path) -> dict[str, str]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)}


def _write(path: Path, data: dict[str, str]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)


def model_identity(model: Model, remembered: Path) -> Identity:
    """The identity of a loaded model's KV states. Reading a GGUF for its
    digest happens once per file (see `file_digest`)."""
    options = model.options
    digest = options.digest or file_digest(model.path, remembered)
    projector = file_digest(options.mmproj, remembered) if options.mmproj else ""
    layout = {
        "n_swa": model.n_swa,
        "swa_full": False,
        "flash_attn": model.flash_attn,
        "type_k": model.type_k,
        "type_v": model.type_v,
        "n_layer": model.n_layer,
        "n_embd": model.n_embd,
        "unified": True,
    }
    return Identity(
        model=digest,
        build=build_id(),
        layout=json.dumps(layout, sort_keys=True),
        projector=projector,
        name=model.path.name,
    )
