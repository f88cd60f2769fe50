"""Images for `engy chat`: `/image PATH`, or a path typed (or dropped onto
the terminal) as the whole message."""

from __future__ import annotations

import base64
import shlex
from pathlib import Path

from ...chat import Image
from ...errors import NotAnImage
from ...protocols.images import image_format


def load_image(path: Path) -> Image:
    """The file at `path` as an image part (PNG, JPEG, GIF or WebP)."""
    path = path.expanduser()
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise NotAnImage(f"cannot read {path}: {exc.strerror}") from None
    media_type = image_format(data)
    if media_type is None:
        raise NotAnImage(f"{path} is not a PNG, JPEG, GIF or WebP image")
    return Image(media_type, base64.b64encode(data).decode(), where=str(path))


def typed_path(line: str) -> Path | None:
    """The image file `line` names, when the whole line is one path (as a
    terminal writes a dropped file: quoted, or with escaped spaces)."""
    text = line.strip()
    if not text or "\n" in text:
        return None
    try:
        words = shlex.split(text)
    except ValueError:
        return None
    if len(words) != 1:
        return None
    path = Path(words[0]).expanduser()
    try:
        if not path.is_file():
            return None
        with path.open("rb") as f:
            head = f.read(16)
    except OSError:
        return None
    return path if image_format(head) is not None else None


def size_text(image: Image) -> str:
    n = len(image.data) * 3 // 4
    return f"{n / 1024:.0f} KB" if n >= 1024 else f"{n} bytes"
