"""Other tools' model stores, built in a HOME of a test's own: Ollama's
(manifests and sha256 blobs, the older `manifests/` layout and the newer
`manifests-v2/` links), LM Studio's folder, and a plain folder of GGUFs.
And a snapshot of a tree, to show engy changed nothing in it."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

MODEL = "application/vnd.ollama.image.model"
PROJECTOR = "application/vnd.ollama.image.projector"
TEMPLATE = "application/vnd.ollama.image.template"
PARAMS = "application/vnd.ollama.image.params"
LICENSE = "application/vnd.ollama.image.license"
ADAPTER = "application/vnd.ollama.image.adapter"
CONFIG = "application/vnd.docker.container.image.v1+json"
MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
LIST = "application/vnd.ollama.manifest.list.v2+json"
# Ollama's own chat template for a Qwen-style model: a Go template, which
# engy reads only where the GGUF carries no Jinja template.
GO_TEMPLATE = (
    "{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}"
    "<|im_start|>assistant\n"
)


def blob(root: Path, data: bytes) -> dict[str, Any]:
    """Store `data` as Ollama does; its layer's digest and size."""
    digest = hashlib.sha256(data).hexdigest()
    path = root / "blobs" / f"sha256-{digest}"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        path.write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def linked_blob(root: Path, source: Path) -> dict[str, Any]:
    """A large file as a blob without a copy: a link to it under its digest
    (engy reads a blob through a link as through the file)."""
    digest = hashlib.sha256()
    with source.open("rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    path = root / "blobs" / f"sha256-{digest.hexdigest()}"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        path.symlink_to(source)
    return {"digest": f"sha256:{digest.hexdigest()}", "size": source.stat().st_size}


def ollama_manifest(
    root: Path,
    model: Path,
    projector: Path | None = None,
    *,
    adapter: Path | None = None,
    link: bool = False,
    template: str = GO_TEMPLATE,
    params: str = '{"stop":["<|im_end|>"],"temperature":0.7}',
) -> dict[str, Any]:
    """A manifest as `ollama pull` writes it: config, model, (projector),
    template, params and licence layers, each a blob (with `link`, the
    model's a link to `model`; `template` and `params`, Ollama's own)."""
    config = blob(root, json.dumps({"model_format": "gguf", "model_family": "qwen3"}).encode())
    weights = linked_blob(root, model) if link else blob(root, model.read_bytes())
    layers = [{"mediaType": MODEL, **weights}]
    if projector is not None:
        layers.append({"mediaType": PROJECTOR, **blob(root, projector.read_bytes())})
    if adapter is not None:
        layers.append({"mediaType": ADAPTER, **blob(root, adapter.read_bytes())})
    layers += [
        {"mediaType": TEMPLATE, **blob(root, template.encode())},
        {"mediaType": PARAMS, **blob(root, params.encode())},
        {"mediaType": LICENSE, **blob(root, b"Apache License 2.0")},
    ]
    return {
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": {"mediaType": CONFIG, **config},
        "layers": layers,
    }


def ollama_pull(
    root: Path,
    name: str,
    tag: str,
    model: Path,
    projector: Path | None = None,
    *,
    host: str = "registry.ollama.ai",
    namespace: str = "library",
    v2: bool = False,
    manifest: dict[str, Any] | None = None,
) -> Path:
    """`ollama pull NAME:TAG` as it lands on disk: the manifest file (or,
    with `v2`, a link in manifests-v2 to the manifest's own blob)."""
    manifest = manifest or ollama_manifest(root, model, projector)
    data = json.dumps(manifest).encode()
    if v2:
        digest = blob(root, data)["digest"].split(":")[1]
        host = "ollama.com" if host == "registry.ollama.ai" else host
        path = root / "manifests-v2" / host / namespace / name / tag
        path.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(root / "blobs" / f"sha256-{digest}", path.parent), path)
        return path
    path = root / "manifests" / host / namespace / name / tag
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def place(directory: Path, name: str, source: Path) -> Path:
    """A copy of `source` as `directory/name` (LM Studio's and a user's
    folders hold plain files)."""
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, directory / name)
    return directory / name


def snapshot(root: Path) -> dict[str, tuple[str, int, int, int]]:
    """Every entry under `root`: kind, size, mtime (ns) and mode, links not
    followed. Equal snapshots: nothing was added, removed or touched."""
    found = {}
    for directory, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(directory) / name
            st = path.lstat()
            kind = "link" if path.is_symlink() else "dir" if path.is_dir() else "file"
            found[str(path.relative_to(root))] = (kind, st.st_size, st.st_mtime_ns, st.st_mode)
    return found
