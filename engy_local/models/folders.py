"""GGUFs in folders: LM Studio's models folders and the folders a user
names, found and served where they are.

LM Studio keeps what it downloads as `<publisher>/<repo>/<file>.gguf` under
`~/.lmstudio/models` (`~/.cache/lm-studio/models` before version 0.3). A
user's folder (`engy serve --models-dir DIR`, `$ENGY_MODELS_DIRS`) may
hold GGUFs at any depth. Either way a file named `mmproj*.gguf` is the
vision projector of the model(s) beside it, not a model, and the parts of a
split GGUF (`-00001-of-00003.gguf`) are one model, listed once all its
parts are there.

engy only reads here: nothing is written, linked, locked or removed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .catalog import split_parts

# The env variable naming more folders of GGUFs, os.pathsep-separated.
ENV = "ENGY_MODELS_DIRS"
# How deep a folder is searched: publisher/repo/file is 3; a user's tree
# of a few more levels is common, a whole disk is not what was meant.
MAX_DEPTH = 6


def lmstudio_roots() -> list[Path]:
    """LM Studio's models folders that exist: ~/.lmstudio/models, and the
    older ~/.cache/lm-studio/models."""
    home = Path.home()
    candidates = (home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models")
    return [p for p in candidates if p.is_dir()]


def user_roots() -> list[Path]:
    """The folders $ENGY_MODELS_DIRS names (`--models-dir` adds to it), in
    order, each once."""
    raw = os.environ.get(ENV, "")
    found = [Path(p).expanduser() for p in raw.split(os.pathsep) if p.strip()]
    return list(dict.fromkeys(p.resolve() for p in found))


def add_user_roots(dirs: list[Path]) -> None:
    """`--models-dir DIR ...`: put `dirs` before those $ENGY_MODELS_DIRS
    names, for this process and what it starts."""
    if not dirs:
        return
    old = [p for p in os.environ.get(ENV, "").split(os.pathsep) if p.strip()]
    new = [str(Path(d).expanduser().resolve()) for d in dirs]
    os.environ[ENV] = os.pathsep.join(dict.fromkeys([*new, *old]))


@dataclass(frozen=True)
class FolderModel:
    """One GGUF model in a folder: a file, or every part of a split one."""

    root: Path  # the folder searched
    rel: str  # the first file's path under it, with / between parts
    files: tuple[Path, ...]
    mmproj: Path | None
    size: int

    @property
    def repo(self) -> str:
        """`publisher/repo` for a file in LM Studio's layout; "" otherwise."""
        parts = self.rel.split("/")
        return "/".join(parts[:2]) if len(parts) == 3 else ""


def is_projector(name: str) -> bool:
    return name.lower().startswith("mmproj") and name.lower().endswith(".gguf")


def _projector(names: list[str], directory: Path) -> Path | None:
    """The projector of a folder's models: the one there is, else the one of
    the widest type (f16 before q8_0, as llama.cpp's own tools pick)."""
    projectors = sorted(n for n in names if is_projector(n))
    if not projectors:
        return None
    for wanted in ("f32", "bf16", "f16"):
        for name in projectors:
            if wanted in name.lower():
                return directory / name
    return directory / projectors[0]


def scan(root: Path) -> list[FolderModel]:
    """Every complete GGUF model under `root` (symbolic links to files are
    followed, to folders not: a tree that links into itself ends)."""
    if not root.is_dir():
        return []
    models: list[FolderModel] = []
    base_depth = len(root.parts)
    for directory, subdirs, names in os.walk(root):
        here = Path(directory)
        if len(here.parts) - base_depth >= MAX_DEPTH:
            subdirs[:] = []
        subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
        ggufs = sorted(n for n in names if n.lower().endswith(".gguf") and not n.startswith("."))
        present = {n for n in ggufs if (here / n).is_file()}
        mmproj = _projector(sorted(present), here)
        for name in ggufs:
            if name not in present or is_projector(name):
                continue
            parts = split_parts(name)
            if parts[0] != name or not all(p in present for p in parts):
                continue  # a later part, or a split set not all there
            files = tuple(here / p for p in parts)
            size = sum(f.stat().st_size for f in files)
            rel = (here / name).relative_to(root).as_posix()
            models.append(FolderModel(root, rel, files, mmproj, size))
    return models
