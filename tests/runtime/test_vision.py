"""The vision projector on real llama.cpp: a tiny mlp projector built by the
tests (ggufs.build_tiny_projector) on the tiny answer model that sees
colours: after a red image it says " red", after a blue one " blue", so the
token sampled after an image shows that the image reached the sequence it
was evaluated into, and which image it was.

These tests build their own llama.cpp context: they check the projector's
contract (tokens, placeholders, media positions, eval into a sequence), not
the server's scheduler.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.images import BLUE, GREEN, RED, png

llama_cpp = pytest.importorskip("llama_cpp")

from engy_local.errors import InvalidRequest, ProjectorLoadError, UndecodableImage  # noqa: E402
from engy_local.runtime.loading.vision import MARKER, Projector, image_id  # noqa: E402

N_CTX = 512


def token(text: str) -> int:
    from support.ggufs import tokenize, vocab_path

    (tid,) = tokenize(vocab_path("qwen2"), text)
    return tid


@pytest.fixture(scope="module")
def projector_path(tiny_vision: tuple[Path, Path]) -> Path:
    return tiny_vision[1]


@pytest.fixture(scope="module")
def handle(tiny_vision: tuple[Path, Path]) -> Iterator[int]:
    params = llama_cpp.llama_model_default_params()
    params.n_gpu_layers = 0
    model = llama_cpp.llama_model_load_from_file(str(tiny_vision[0]).encode(), params)
    assert model
    yield model
    llama_cpp.llama_model_free(model)


@pytest.fixture(scope="module")
def projector(projector_path: Path, handle: int) -> Iterator[Projector]:
    p = Projector(projector_path, handle, threads=2)
    yield p
    p.close()


@pytest.fixture
def context(handle: int) -> Iterator[int]:
    params = llama_cpp.llama_context_default_params()
    params.n_ctx = N_CTX
    params.n_batch = N_CTX
    params.n_ubatch = N_CTX
    params.n_seq_max = 2
    params.n_threads = params.n_threads_batch = 2
    ctx = llama_cpp.llama_init_from_model(handle, params)
    assert ctx
    yield ctx
    llama_cpp.llama_free(ctx)


def decode_text(ctx: int, tokens: list[int], seq_id: int, n_past: int) -> int:
    batch = llama_cpp.llama_batch_init(len(tokens), 0, 1)
    try:
        for i, token in enumerate(tokens):
            batch.token[i] = token
            batch.pos[i] = n_past + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq_id
            batch.logits[i] = i == len(tokens) - 1
        batch.n_tokens = len(tokens)
        assert llama_cpp.llama_decode(ctx, batch) == 0
    finally:
        llama_cpp.llama_batch_free(batch)
    return n_past + len(tokens)


def prefill(ctx: int, projector: Projector, text: str, images: list[bytes], seq_id: int) -> int:
    """Evaluate a prompt the way a scheduler does: text in batches, each
    image alone at its start. Returns n_past."""
    tokenized = projector.tokenize(text, images)
    n_past, at = 0, 0
    for media in tokenized.media:
        if media.start > at:
            n_past = decode_text(ctx, tokenized.tokens[at : media.start], seq_id, n_past)
        n_past = media.eval(ctx, seq_id, n_past, N_CTX)
        at = media.end
    if at < len(tokenized.tokens):
        n_past = decode_text(ctx, tokenized.tokens[at:], seq_id, n_past)
    return n_past


def next_token(ctx: int, handle: int) -> int:
    vocab = llama_cpp.llama_model_get_vocab(handle)
    n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
    logits = llama_cpp.llama_get_logits_ith(ctx, -1)
    row = ctypes.cast(logits, ctypes.POINTER(ctypes.c_float * n_vocab)).contents
    return max(range(n_vocab), key=row.__getitem__)


def test_an_image_is_a_run_of_placeholders_where_the_marker_stands(
    projector: Projector, handle: int
) -> None:
    red = png(RED)
    tokenized = projector.tokenize(f"look{MARKER} now", [red])
    (media,) = tokenized.media
    assert media.n_tokens == 16  # (32 / 8) ** 2 patches
    assert media.n_pos == 16
    run = tokenized.tokens[media.start : media.end]
    assert run == [image_id(red)] * 16
    assert image_id(red) < 0
    # The text around it is the model's own tokens of that text.
    from support.ggufs import tokenize, vocab_path

    assert tokenized.tokens[: media.start] == tokenize(vocab_path("qwen2"), "look")
    assert tokenized.tokens[media.end :] == tokenize(vocab_path("qwen2"), " now")
    assert tokenized.n_pos == len(tokenized.tokens)


def test_equal_images_compare_equal_and_different_ones_differ(projector: Projector) -> None:
    text = f"a {MARKER} b {MARKER}"
    first = projector.tokenize(text, [png(RED), png(BLUE)])
    again = projector.tokenize(text, [png(RED), png(BLUE)])
    swapped = projector.tokenize(text, [png(BLUE), png(RED)])
    assert first.tokens == again.tokens
    assert first.tokens != swapped.tokens
    assert [m.id for m in first.media] == [image_id(png(RED)), image_id(png(BLUE))]
    assert [m.id for m in swapped.media] == [image_id(png(BLUE)), image_id(png(RED))]
    # The same pixels in another file are another image to the cache.
    assert image_id(png(RED, size=32)) != image_id(png(RED, size=33))


@pytest.mark.parametrize(("colour", "word"), [(RED, " red"), (BLUE, " blue"), (GREEN, "Hello")])
def test_an_evaluated_image_decides_the_next_token(
    projector: Projector,
    context: int,
    handle: int,
    colour: tuple[int, int, int],
    word: str,
) -> None:
    prefill(context, projector, f"Look: {MARKER} What colour?", [png(colour)], seq_id=1)
    # The model saw the image: red or blue it names; green it does not see,
    # so it starts its usual answer.
    assert next_token(context, handle) == token(word)


def test_the_image_goes_into_the_sequence_asked_for(
    projector: Projector, context: int, handle: int
) -> None:
    text = f"Look: {MARKER}"
    n_past = prefill(context, projector, text, [png(RED)], seq_id=1)
    tokens = projector.tokenize(text, [png(RED)]).tokens
    assert n_past == len(tokens)
    memory = llama_cpp.llama_get_memory(context)
    assert llama_cpp.llama_memory_seq_pos_max(memory, 1) == n_past - 1
    assert llama_cpp.llama_memory_seq_pos_max(memory, 0) == -1  # sequence 0 untouched


def test_two_images_are_evaluated_in_order(projector: Projector, context: int, handle: int) -> None:
    # Green then red, red then green: only the red one is seen, wherever it is.
    text = f"A {MARKER} then B {MARKER}?"
    prefill(context, projector, text, [png(GREEN), png(RED)], seq_id=0)
    assert next_token(context, handle) == token(" red")
    llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(context), True)
    prefill(context, projector, text, [png(BLUE), png(GREEN)], seq_id=0)
    assert next_token(context, handle) == token(" blue")


def test_an_undecodable_image_is_an_invalid_request(projector: Projector) -> None:
    broken = png(RED)[:40]  # a PNG header, then nothing
    with pytest.raises(InvalidRequest):
        projector.check(broken)
    with pytest.raises(UndecodableImage) as caught:
        projector.tokenize(f"{MARKER} {MARKER}", [png(RED), broken])
    assert caught.value.index == 1
    projector.check(png(RED))  # a good one passes


def test_a_projector_for_another_model_is_refused(tmp_path: Path, handle: int) -> None:
    from support.ggufs import build_tiny_projector

    wrong = build_tiny_projector(tmp_path / "mmproj-wide.gguf", n_embd_text=64)
    with pytest.raises(ProjectorLoadError, match="another model"):
        Projector(wrong, handle, threads=1)
    with pytest.raises(ProjectorLoadError, match="not found"):
        Projector(tmp_path / "missing.gguf", handle, threads=1)
