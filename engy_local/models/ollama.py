"""GGUFs in Ollama's store, found and served where they are.

Ollama keeps a model as a manifest naming its layers, each a file in
`blobs/` named by its digest (`sha256-<hex>`). Under `$OLLAMA_MODELS`, else
`~/.ollama/models`:

    manifests/<host>/<namespace>/<model>/<tag>      JSON (older layout)
    manifests-v2/<host>/<namespace>/<model>/<tag>   a link to the manifest's own blob
    blobs/sha256-<hex>                              every layer, by digest

`ollama pull gemma3:270m` writes `registry.ollama.ai/library/gemma3/270m`
(`ollama.com` in manifests-v2); a model from elsewhere keeps its host and
namespace (`hf.co/owner/repo/Q4_K_M`). A manifest is

    {"schemaVersion": 2, "config": {...}, "layers": [
      {"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:...", "size": N},
      {"mediaType": "application/vnd.ollama.image.projector", ...},   # a vision model's
      {"mediaType": "application/vnd.ollama.image.template", ...}, ...]}

or a list of such manifests, one per runner (`"mediaType":
"application/vnd.ollama.manifest.list.v2+json", "manifests": [...]`), each
inline or a `digest` naming a blob that holds it. The model layer is the
GGUF llama.cpp loads; the projector layer, its vision projector. Template
and parameter layers are Ollama's own (a Go template; JSON): the chat
template comes from the GGUF, and where it carries none, from the format
Ollama's template writes (ollamatemplate.py, with `own_layers`). A model
whose weights are not one GGUF (safetensors tensor layers for MLX) or that
adds a LoRA adapter is not listed.

engy only reads here: nothing is written, linked, locked or removed.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("engy.ollama")

MODEL = "application/vnd.ollama.image.model"
TEMPLATE = "application/vnd.ollama.image.template"
PARAMS = "application/vnd.ollama.image.params"
PROJECTOR = "application/vnd.ollama.image.projector"
ADAPTER = "application/vnd.ollama.image.adapter"
LIST = "application/vnd.ollama.manifest.list.v2+json"
# Where `ollama pull NAME` puts a model: the host and namespace a bare name implies.
PUBLIC_HOSTS = ("registry.ollama.ai", "ollama.com")
LIBRARY = "library"
# A manifest is a few kB; a file claiming to be one beyond this is not.
MAX_MANIFEST = 1 << 20
# A manifest list's children, in the order of runners that load GGUFs.
RUNNERS = ("llamacpp", "ollama", "")
_DIGEST = re.compile(r"^sha256[:-]([0-9a-fA-F]{64})$")


def models_root() -> Path:
    """$OLLAMA_MODELS, else ~/.ollama/models (as Ollama resolves it)."""
    env = os.environ.get("OLLAMA_MODELS")
    return Path(env).expanduser() if env else Path.home() / ".ollama" / "models"


@dataclass(frozen=True)
class OllamaModel:
    """One model in Ollama's store: its name's parts and its files."""

    host: str
    namespace: str
    model: str
    tag: str
    path: Path  # the model layer's blob: a GGUF
    projector: Path | None
    sha256: str  # the model blob's digest (its name)
    size: int  # bytes of the model blob and the projector
    manifest: Path

    @property
    def name(self) -> str:
        """As `ollama list` writes it: `gemma3:270m`, `user/model:tag`,
        `hf.co/owner/repo:Q4_K_M`."""
        if self.host.lower() in PUBLIC_HOSTS:
            base = self.model if self.namespace == LIBRARY else f"{self.namespace}/{self.model}"
        else:
            base = f"{self.host}/{self.namespace}/{self.model}"
        return f"{base}:{self.tag}"


def blob(root: Path, digest: str) -> Path | None:
    """The file of a `sha256:<hex>` digest; None for anything else (a
    digest is never allowed to name a path of its own)."""
    m = _DIGEST.match(digest) if isinstance(digest, str) else None
    return root / "blobs" / f"sha256-{m[1].lower()}" if m else None


def _read_json(path: Path) -> Any:
    with path.open("rb") as f:
        data = f.read(MAX_MANIFEST + 1)
    if len(data) > MAX_MANIFEST:
        raise ValueError("too large for a manifest")
    return json.loads(data)


def _runnable(root: Path, manifest: dict[str, Any]) -> dict[str, Any] | None:
    """The manifest with layers: itself, or from a manifest list the child
    a GGUF runner loads (inline, or in the blob its digest names)."""
    if manifest.get("mediaType") != LIST:
        return manifest
    children = [c for c in manifest.get("manifests") or () if isinstance(c, dict)]
    for runner in RUNNERS:
        for child in children:
            if str(child.get("runner", "")).lower() != runner:
                continue
            if child.get("format") not in (None, "", "gguf"):
                continue
            if child.get("layers"):
                return child
            path = blob(root, child.get("digest", ""))
            if path is not None and path.is_file():
                data = _read_json(path)
                return data if isinstance(data, dict) else None
    return None


def _layers(manifest: dict[str, Any], media_type: str) -> list[dict[str, Any]]:
    return [
        layer
        for layer in manifest.get("layers") or ()
        if isinstance(layer, dict) and str(layer.get("mediaType", "")).split(";")[0] == media_type
    ]


def read(root: Path, path: Path, parts: tuple[str, str, str, str]) -> OllamaModel | None:
    """The model one manifest file describes; None where it is not one
    GGUF engy can serve, or its model blob is missing."""
    try:
        data = _read_json(path)
        manifest = _runnable(root, data) if isinstance(data, dict) else None
    except (OSError, ValueError):
        log.debug("ignoring %s: not a manifest", path)
        return None
    if manifest is None:
        return None
    models = _layers(manifest, MODEL)
    if len(models) != 1 or _layers(manifest, ADAPTER):
        return None
    model = blob(root, models[0].get("digest", ""))
    if model is None or not model.is_file():
        return None
    projectors = _layers(manifest, PROJECTOR)
    projector = blob(root, projectors[0].get("digest", "")) if projectors else None
    if projector is not None and not projector.is_file():
        projector = None
    size = model.stat().st_size + (projector.stat().st_size if projector else 0)
    host, namespace, name, tag = parts
    sha = model.name[len("sha256-") :]
    return OllamaModel(host, namespace, name, tag, model, projector, sha, size, path)


def _manifest_files(root: Path) -> list[tuple[Path, tuple[str, str, str, str]]]:
    """(file, (host, namespace, model, tag)) of every named manifest,
    manifests-v2 first; a name found in both is taken once."""
    found: dict[tuple[str, str, str, str], Path] = {}
    for directory in ("manifests-v2", "manifests"):
        base = root / directory
        if not base.is_dir():
            continue
        for path in sorted(base.glob("*/*/*/*")):
            host, namespace, model, tag = path.relative_to(base).parts
            key = (
                "registry.ollama.ai" if host.lower() in PUBLIC_HOSTS else host,
                namespace,
                model,
                tag,
            )
            if key not in found and path.is_file():
                found[key] = path
    return [(path, key) for key, path in found.items()]


def scan(root: Path | None = None) -> list[OllamaModel]:
    """Every model in Ollama's store that is one GGUF, by name."""
    root = root if root is not None else models_root()
    if not (root / "blobs").is_dir():
        return []
    models = (read(root, path, parts) for path, parts in _manifest_files(root))
    return sorted((m for m in models if m is not None), key=lambda m: m.name)


# A template or params layer is text of a few kB.
MAX_LAYER = 1 << 20


@dataclass(frozen=True)
class OwnLayers:
    """A model's Ollama-only layers, as text (None: it has none)."""

    template: str | None = None
    params: str | None = None


def own_layers(manifest: Path) -> OwnLayers:
    """The template and params layers of the model `manifest` names
    (`<root>/manifests/<host>/<namespace>/<model>/<tag>`)."""
    root = manifest.parents[4]
    try:
        data = _read_json(manifest)
        runnable = _runnable(root, data) if isinstance(data, dict) else None
    except (OSError, ValueError):
        return OwnLayers()
    if runnable is None:
        return OwnLayers()

    def text(media_type: str) -> str | None:
        for layer in _layers(runnable, media_type):
            path = blob(root, layer.get("digest", ""))
            try:
                if path is not None and path.stat().st_size <= MAX_LAYER:
                    return path.read_text("utf-8", errors="replace")
            except OSError:
                continue
        return None

    return OwnLayers(text(TEMPLATE), text(PARAMS))
