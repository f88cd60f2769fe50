"""Images in requests: `/v1/messages` image blocks with a base64 source,
`/v1/chat/completions` `image_url` parts holding a base64 data URL, and the
per-request limits (`--max-image-bytes`, `--max-images`; over either is 413).

Pure: the data is checked to be base64 of a PNG, JPEG, GIF or WebP file
here; whether the model can decode and see it is the engine's business.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from ..chat import Image, Message, ToolResult
from ..errors import InvalidRequest, RequestTooLarge
from . import fields as f

MEDIA_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
# Anthropic's own limits: 5 MB per image, 100 images per request.
MAX_IMAGE_BYTES = 5 * 1024 * 1024
MAX_IMAGES = 100


@dataclass(frozen=True)
class ImageLimits:
    max_image_bytes: int = MAX_IMAGE_BYTES  # decoded bytes of one image
    max_images: int = MAX_IMAGES  # images in one request, all turns together


def image_format(data: bytes) -> str | None:
    """The media type `data` is a file of, by its first bytes."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def parse_image(block: dict[str, Any], path: str, limits: ImageLimits) -> Image:
    """An `image` block with a base64 source; a url source is 400."""
    source = f.obj(f.required(block, "source", f"{path}.source"), f"{path}.source")
    kind = f.string(source, "type", f"{path}.source.type")
    if kind != "base64":
        raise InvalidRequest(
            f"{path}.source: only base64 images are supported, not {kind!r}",
            f"{path}.source.type",
        )
    media_type = f.string(source, "media_type", f"{path}.source.media_type")
    if media_type not in MEDIA_TYPES:
        raise InvalidRequest(
            f"{path}.source.media_type: expected one of {', '.join(MEDIA_TYPES)}, "
            f"got {media_type!r}",
            f"{path}.source.media_type",
        )
    data = f.string(source, "data", f"{path}.source.data")
    return _checked(media_type, data, path, f"{path}.source.data", limits)


def parse_data_url(url: str, path: str, field: str, limits: ImageLimits) -> Image:
    """An image given as `data:image/png;base64,...` (`field` names where the
    URL stood); a URL of any other scheme is 400, since nothing is fetched."""
    head, comma, data = url.partition(",")
    if not head.lower().startswith("data:") or not comma:
        scheme = url.split(":", 1)[0] if ":" in url[:16] else "a path"
        raise InvalidRequest(
            f"{field}: only base64 data URLs (data:image/png;base64,...) are supported, "
            f"not {scheme}",
            field,
        )
    media_type, _, encoding = head[5:].partition(";")
    media_type = media_type.lower().replace("image/jpg", "image/jpeg")  # a common misspelling
    if encoding.lower() != "base64":
        raise InvalidRequest(f"{field}: the data URL must be base64 (;base64,)", field)
    if media_type not in MEDIA_TYPES:
        raise InvalidRequest(
            f"{field}: expected one of {', '.join(MEDIA_TYPES)}, got {media_type!r}", field
        )
    return _checked(media_type, data, path, field, limits)


def _checked(media_type: str, data: str, path: str, field: str, limits: ImageLimits) -> Image:
    """The image of base64 `data`, checked: valid base64, within the size
    limit, a PNG, JPEG, GIF or WebP file."""
    text = "".join(data.split())
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest(f"{field}: not valid base64", field) from None
    if len(raw) > limits.max_image_bytes:
        raise _too_big(path, len(raw), limits)
    if image_format(raw) is None:
        raise InvalidRequest(f"{field}: not a PNG, JPEG, GIF or WebP image", field)
    return Image(media_type, text, where=path)


def check_count(messages: Iterable[Message], limits: ImageLimits) -> None:
    n = sum(1 for _ in _images(messages))
    if n > limits.max_images:
        raise RequestTooLarge(
            f"the request has {n} images, over the limit of {limits.max_images} (--max-images)"
        )


def _images(messages: Iterable[Message]) -> Iterator[Image]:
    for message in messages:
        for part in message.parts:
            if isinstance(part, Image):
                yield part
            elif isinstance(part, ToolResult):
                yield from (p for p in part.parts if isinstance(p, Image))


def _too_big(path: str, size: int, limits: ImageLimits) -> RequestTooLarge:
    return RequestTooLarge(
        f"{path}: the image is {size} bytes, over the limit of "
        f"{limits.max_image_bytes} bytes (--max-image-bytes)"
    )


__all__ = [
    "MAX_IMAGES",
    "MAX_IMAGE_BYTES",
    "MEDIA_TYPES",
    "ImageLimits",
    "check_count",
    "parse_data_url",
    "parse_image",
]
