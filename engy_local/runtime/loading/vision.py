"""Images through a model's vision projector (llama.cpp's mtmd library).

A `Projector` is loaded from a model's mmproj GGUF next to the text model.
`tokenize(text, images)` takes a rendered prompt in which the media marker
(`Projector.marker`) stands where each image goes, in order, and gives back
the whole prompt as token ids: text as the model's own ids, each image as a
run of placeholder ids, one per image token, all equal to `image_id(bytes)`.
That id is negative (never a real token) and comes from a hash of the image's
bytes, so a cache that compares tokens sees the same image in the next turn
of a conversation as the same prefix, and a different image as different.

Each image becomes one or more `Media` (a projector that tiles an image makes
one per tile, with text ids between them), each with its place in the token
list. Whoever owns the llama.cpp context decodes the text ids itself and,
when prefill reaches `media.start`, calls `media.eval(ctx, seq_id, n_past,
n_batch)`, which encodes the image and writes its embeddings into that
sequence at that position, and returns the position after it (`n_pos`
positions on, which is not `n_tokens` for M-RoPE models).

Calls into mtmd are serialized by a lock per projector: tokenizing (which
decodes and preprocesses images) may come from any thread, evaluating only
from the thread that owns the llama.cpp context.
"""

from __future__ import annotations

import ctypes
import hashlib
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import llama_cpp
import llama_cpp.mtmd_cpp as mtmd

from ...errors import InvalidRequest, ProjectorLoadError, ServerError, UndecodableImage
from . import llamalog

# mtmd logs every load at length: into engy's log too (llamalog).
mtmd.mtmd_log_set(llamalog.callback, ctypes.c_void_p(0))
mtmd.mtmd_helper_log_set(llamalog.callback, ctypes.c_void_p(0))

MARKER: str = mtmd.mtmd_default_marker().decode("utf-8")


def image_id(data: bytes) -> int:
    """The placeholder token id of an image: negative, from its bytes."""
    digest = hashlib.sha256(data).digest()
    return -1 - int.from_bytes(digest[:4], "little") % (2**31 - 1)


class Media:
    """One image chunk of a tokenized prompt, ready to evaluate."""

    def __init__(
        self, projector: Projector, chunk: int, start: int, n_tokens: int, n_pos: int, ident: int
    ) -> None:
        self._projector = projector
        self._chunk = chunk  # an owned copy of mtmd's chunk, freed with this object
        self.start = start  # index of the first placeholder in Tokenized.tokens
        self.n_tokens = n_tokens  # placeholders in the token list
        self.n_pos = n_pos  # positions it takes in the sequence
        self.id = ident  # the placeholder id
        weakref.finalize(self, mtmd.mtmd_input_chunk_free, chunk)

    @property
    def end(self) -> int:
        return self.start + self.n_tokens

    def eval(self, ctx: llama_cpp.llama_context_p, seq_id: int, n_past: int, n_batch: int) -> int:
        """Encode the image and decode its embeddings into sequence `seq_id`
        from position `n_past` (in sub-batches of `n_batch`; a model that
        attends to an image non-causally needs it in one ubatch). Returns
        the new n_past, `n_pos` on. No logits are kept: a prompt never ends
        with an image (the generation prompt follows), so the next token is
        sampled after text."""
        return self._projector._eval(self._chunk, ctx, seq_id, n_past, n_batch)

    def __repr__(self) -> str:
        return f"Media(start={self.start}, n_tokens={self.n_tokens}, n_pos={self.n_pos})"


@dataclass(frozen=True)
class Tokenized:
    tokens: list[int]
    media: tuple[Media, ...]

    @property
    def n_pos(self) -> int:
        """Positions the whole prompt takes (tokens, but an image's n_pos)."""
        return len(self.tokens) + sum(m.n_pos - m.n_tokens for m in self.media)


class Projector:
    """A loaded mmproj, bound to the text model it projects into."""

    def __init__(
        self,
        path: Path,
        model_handle: llama_cpp.llama_model_p,
        threads: int,
        *,
        use_gpu: bool | None = None,
    ) -> None:
        if not path.is_file():
            raise ProjectorLoadError(f"projector file not found: {path}")
        params = mtmd.mtmd_context_params_default()
        params.use_gpu = (
            bool(llama_cpp.llama_supports_gpu_offload()) if use_gpu is None else use_gpu
        )
        params.n_threads = max(1, threads)
        params.print_timings = False
        ctx = mtmd.mtmd_init_from_file(str(path).encode(), model_handle, params)
        if not ctx:
            raise ProjectorLoadError(
                f"could not load the projector {path.name} for this model "
                "(not an mmproj GGUF, or one made for another model)"
            )
        self._ctx: mtmd.mtmd_context_p | None = ctx
        self.path = path
        self._lock = threading.Lock()
        if not mtmd.mtmd_support_vision(ctx):
            self.close()
            raise ProjectorLoadError(f"{path.name} has no vision encoder")
        self.marker = MARKER
        vocab = llama_cpp.llama_model_get_vocab(model_handle)
        self._add_bos = bool(llama_cpp.llama_vocab_get_add_bos(vocab))
        self._bos_text = _piece(vocab, llama_cpp.llama_vocab_bos(vocab)) if self._add_bos else ""

    # -- images --------------------------------------------------------------

    def check(self, data: bytes) -> None:
        """Raise InvalidRequest when `data` is not an image this projector
        can decode."""
        bitmap = self._bitmap(data)
        if bitmap is None:
            raise InvalidRequest("the image could not be decoded")
        mtmd.mtmd_bitmap_free(bitmap)

    def tokenize(self, text: str, images: Sequence[bytes]) -> Tokenized:
        """The prompt `text`, with `marker` where each of `images` stands, as
        tokens and media. Tokenized as `Model.tokenize` does: the template's
        BOS text becomes the one real BOS token."""
        if text.count(self.marker) != len(images):
            raise ServerError(
                f"prompt has {text.count(self.marker)} image markers for {len(images)} images"
            )
        if self._bos_text and text.startswith(self._bos_text):
            text = text[len(self._bos_text) :]
        bitmaps: list[int] = []
        try:
            for i, data in enumerate(images):
                bitmap = self._bitmap(data)
                if bitmap is None:
                    raise UndecodableImage(i)
                mtmd.mtmd_bitmap_set_id(bitmap, _hex_id(data))
                bitmaps.append(bitmap)
            return self._tokenize(text.encode("utf-8"), bitmaps, images)
        finally:
            for bitmap in bitmaps:
                mtmd.mtmd_bitmap_free(bitmap)

    def close(self) -> None:
        with self._lock:
            if self._ctx is not None:
                mtmd.mtmd_free(self._ctx)
                self._ctx = None

    # -- internals -----------------------------------------------------------

    def _live(self) -> mtmd.mtmd_context_p:
        if self._ctx is None:
            raise ServerError("the vision projector was unloaded")
        return self._ctx

    def _bitmap(self, data: bytes) -> int | None:
        if not data:
            return None
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        with self._lock:
            bitmap: int | None = mtmd.mtmd_helper_bitmap_init_from_buf(
                self._live(), buf, len(data), False
            )
        if bitmap and mtmd.mtmd_bitmap_is_audio(bitmap):
            mtmd.mtmd_bitmap_free(bitmap)
            return None
        return bitmap or None

    def _tokenize(self, text: bytes, bitmaps: list[int], images: Sequence[bytes]) -> Tokenized:
        ids = {_hex_id(data): image_id(data) for data in images}
        chunks = mtmd.mtmd_input_chunks_init()
        if not chunks:
            raise ServerError("mtmd: out of memory")
        try:
            inp = mtmd.mtmd_input_text()
            inp.text = text
            inp.text_len = len(text)
            inp.add_special = True
            inp.parse_special = True
            array = (mtmd.mtmd_bitmap_p_ctypes * max(1, len(bitmaps)))(*bitmaps)
            with self._lock:
                rc = mtmd.mtmd_tokenize(
                    self._live(), chunks, ctypes.byref(inp), array, len(bitmaps)
                )
            if rc != 0:
                # 1: markers and images do not match (ours to keep right);
                # 2: an image the preprocessor refused.
                if rc == 2:
                    raise InvalidRequest("an image of the request could not be preprocessed")
                raise ServerError(f"mtmd_tokenize failed ({rc})")
            tokens: list[int] = []
            media: list[Media] = []
            for i in range(mtmd.mtmd_input_chunks_size(chunks)):
                chunk = mtmd.mtmd_input_chunks_get(chunks, i)
                kind = mtmd.mtmd_input_chunk_get_type(chunk)
                if kind == mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT:
                    n = ctypes.c_size_t(0)
                    ptr = mtmd.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
                    tokens.extend(ptr[k] for k in range(n.value))
                    continue
                if kind != mtmd.MTMD_INPUT_CHUNK_TYPE_IMAGE:
                    raise ServerError(f"mtmd: unexpected chunk type {kind}")
                n_tokens = mtmd.mtmd_input_chunk_get_n_tokens(chunk)
                n_pos = mtmd.mtmd_input_chunk_get_n_pos(chunk)
                raw_id = mtmd.mtmd_input_chunk_get_id(chunk) or b""
                ident = ids.get(raw_id, image_id(raw_id))
                owned = mtmd.mtmd_input_chunk_copy(chunk)
                if not owned:
                    raise ServerError("mtmd: out of memory")
                media.append(Media(self, owned, len(tokens), n_tokens, n_pos, ident))
                tokens.extend([ident] * n_tokens)
            return Tokenized(tokens, tuple(media))
        finally:
            mtmd.mtmd_input_chunks_free(chunks)

    def _eval(
        self, chunk: int, ctx: llama_cpp.llama_context_p, seq_id: int, n_past: int, n_batch: int
    ) -> int:
        new_n_past = llama_cpp.llama_pos(0)
        with self._lock:
            rc = mtmd.mtmd_helper_eval_chunk_single(
                self._live(), ctx, chunk, n_past, seq_id, n_batch, True, ctypes.byref(new_n_past)
            )
        if rc != 0:
            raise ServerError(f"evaluating an image failed (mtmd error {rc})")
        return int(new_n_past.value)


def _hex_id(data: bytes) -> bytes:
    return hashlib.sha256(data).hexdigest().encode()


def _piece(vocab: llama_cpp.llama_vocab_p, token: int) -> str:
    if token < 0:
        return ""
    buf = ctypes.create_string_buffer(64)
    n = llama_cpp.llama_token_to_piece(vocab, token, buf, 64, 0, True)
    return buf.raw[: max(0, n)].decode("utf-8", "replace")


__all__ = [
    "MARKER",
    "Media",
    "Projector",
    "ProjectorLoadError",
    "Tokenized",
    "UndecodableImage",
    "image_id",
]
