"""Names that come from outside (catalogs, `hf:` refs, URLs, hub listings,
manifests) never reach a path outside the store.

- `file_name(name)`: a name the store writes under a model's directory: one
  path segment, not `.` or `..`, no `/` or `\\` (a Windows separator), no `:`
  (a drive letter, an NTFS stream), no control characters.
- `repo_path(path)`: a file's path inside a repository (a catalog's `file`):
  relative, `/`-separated segments, each a `file_name`; it is joined into a
  URL, and its last segment becomes the file's name in the store.
- `within(path, root)`: whether `path`, symlinks resolved, lies under `root`.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import UnsafeName

_BAD = re.compile(r"[/\\:\x00-\x1f\x7f]")


def file_name(name: str) -> str:
    if not name or name in (".", "..") or _BAD.search(name) or name != name.strip():
        raise UnsafeName(f"unsafe file name {name!r}")
    return name


def repo_path(path: str) -> str:
    if not path or path.startswith("/"):
        raise UnsafeName(f"unsafe path {path!r}")
    for segment in path.split("/"):
        try:
            file_name(segment)
        except UnsafeName:
            raise UnsafeName(f"unsafe path {path!r}") from None
    return path


def within(path: Path, root: Path) -> bool:
    try:
        return path.resolve().is_relative_to(root.resolve())
    except (OSError, RuntimeError):  # a symlink loop
        return False
