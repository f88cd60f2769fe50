"""Images in a prompt: where the chat template puts them, and their bytes.

The projector's tokenizer (vision.py) wants the rendered prompt with its
media marker where each image stands, and the images in that order. mtmd
writes each model's own begin/end-of-image tokens around the marker, so the
marker takes the place of the template's own image placeholder (`<|image|>`,
`<start_of_image>`, `[IMG]`, ...), never stands beside it.

Where a template has a placeholder for `{"type": "image"}` content parts
(probed once per template), user turns carry their images as such parts and
the template decides where they go; each placeholder it writes is then one
image. Images in tool results, and in every turn of a template without one,
are written as text where they stand. Either way each image is first
rendered as a sentinel unique to the render (or the template's placeholder),
then found in the output and replaced by the marker, so the images come out
in the order the prompt has them, whatever the template did.

Nothing here imports llama_cpp: `marker` is handed in.
"""

from __future__ import annotations

import base64
import binascii
import re
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from ...chat import Image, Message, ToolResult
from ...errors import EngyError, InvalidRequest, TemplateLimitHit
from .messages import ImageSlots
from .template import ChatTemplate

_PROBE = "Describe this."


@dataclass(frozen=True)
class PlacedImages:
    text: str  # the rendered prompt, `marker` where each image stands
    images: list[bytes]  # in the order of the markers
    sources: list[Image]  # the parts they came from, in the same order


def images_of(conversation: Sequence[Message]) -> list[Image]:
    """Every image of a conversation, in order (as prompt.py numbers them)."""
    found: list[Image] = []
    for message in conversation:
        for part in message.parts:
            if isinstance(part, Image):
                found.append(part)
            elif isinstance(part, ToolResult):
                found.extend(p for p in part.parts if isinstance(p, Image))
    return found


def image_bytes(image: Image) -> bytes:
    try:
        return base64.b64decode(image.data, validate=True)
    except (binascii.Error, ValueError):
        where = image.where or "an image"
        raise InvalidRequest(f"{where}: the image data is not valid base64", image.where) from None


@lru_cache(maxsize=64)
def image_placeholder(template: ChatTemplate) -> str | None:
    """The text `template` writes for an image content part, if it writes
    one: the difference between a user turn with and without an image."""
    plain = [{"role": "user", "content": _PROBE}]
    with_image = [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": _PROBE}]}
    ]
    try:
        a = template.render(plain, add_generation_prompt=False)
        b = template.render(with_image, add_generation_prompt=False)
    except TemplateLimitHit:
        raise  # a looping template: one limit, not one per probe
    except EngyError:
        return None
    n = len(b) - len(a)
    head = 0
    while head < len(a) and a[head] == b[head]:
        head += 1
    if n <= 0 or b[head + n :] != a[head:]:  # not one insertion: the text changed too
        return None
    # Where the inserted text shares characters with its neighbours it could
    # stand a little further left ("X<|" + "IMG|><|" + "Y" is also "X" +
    # "<|IMG|>" + "<|Y"): take the place where it opens and closes a token.
    places = [i for i in range(head, max(-1, head - n - 1), -1) if b[:i] + b[i + n :] == a]
    candidates = [b[i : i + n].strip() for i in places]
    inserted = next((c for c in candidates if _bracketed(c)), candidates[-1])
    if not inserted or _PROBE in inserted or "type" in inserted or "{" in inserted:
        return None
    return inserted


def _bracketed(text: str) -> bool:
    return len(text) > 1 and text[0] in "<[" and text[-1] == {"<": ">", "[": "]"}[text[0]]


def place_images(
    conversation: Sequence[Message],
    render: Callable[[ImageSlots | None], str],
    placeholder: str | None,
    marker: str,
) -> PlacedImages:
    """Render `conversation` (through `render`, which builds the template
    messages with the given slots) with `marker` where each image stands."""
    images = images_of(conversation)
    if not images:
        return PlacedImages(render(None), [], [])
    data = [image_bytes(image) for image in images]
    nonce = secrets.token_hex(6)
    sentinel = re.compile(f"<engy-image-{nonce}-([0-9]+)>")

    def text(k: int) -> str:
        return f"<engy-image-{nonce}-{k}>"

    n = len(images)
    if placeholder is not None:
        try:
            out = render(ImageSlots(text, parts=True))
        except EngyError:  # a template that takes no list content here
            out = None
        placed = _substitute(out, sentinel, placeholder, marker, n) if out is not None else None
        if placed is not None and len(placed[1]) == n:
            return PlacedImages(
                placed[0], [data[k] for k in placed[1]], [images[k] for k in placed[1]]
            )
    placed = _substitute(render(ImageSlots(text)), sentinel, None, marker, n)
    assert placed is not None
    # An image the template dropped (a turn it does not show) is not seen.
    return PlacedImages(placed[0], [data[k] for k in placed[1]], [images[k] for k in placed[1]])


def _substitute(
    out: str, sentinel: re.Pattern[str], placeholder: str | None, marker: str, n: int
) -> tuple[str, list[int]] | None:
    """`out` with every image's text replaced by `marker`, and the images'
    numbers in order; None when the placeholders do not add up."""
    # The marker typed in a conversation is text, not an image.
    out = out.replace(marker, marker.replace("__", "_"))
    found = {int(m.group(1)) for m in sentinel.finditer(out)}
    if placeholder is None:
        pattern = sentinel
        as_parts: list[int] = []
    else:
        pattern = re.compile(f"{sentinel.pattern}|{re.escape(placeholder)}")
        n_placeholders = out.count(placeholder)
        # Images written as parts are those not written as text, in order.
        as_parts = sorted(set(range(n)) - found)
        if len(as_parts) != n_placeholders:
            return None
    order: list[int] = []
    queue = iter(as_parts)

    def swap(m: re.Match[str]) -> str:
        order.append(int(m.group(1)) if m.group(1) is not None else next(queue))
        return marker

    return pattern.sub(swap, out), order


__all__ = ["PlacedImages", "image_bytes", "image_placeholder", "images_of", "place_images"]
