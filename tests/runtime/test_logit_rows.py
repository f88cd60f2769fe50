"""Room for logits: llama.cpp keeps room in its compute buffer for as many
rows of logits as a step may ask for (n_vocab floats each), on the GPU when
the output layer is there. engy asks for one row a sequence, or one a
drafted token, never a whole batch: on gemma-3-270m (262k tokens in its
vocabulary) a batch's worth is 512 MiB. A step that would ask for more is a
clear error, not llama.cpp's abort."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from engy_local.chat import ChatRequest, Finished, Message, Sampling, Text, TextDelta
from engy_local.errors import ServerError
from engy_local.runtime.engine.local import ServedModel
from engy_local.runtime.engine.speculate import WIDE, output_rows
from engy_local.runtime.loading.context import BATCH, Context
from engy_local.runtime.loading.model import Model
from engy_local.runtime.pool import ModelPool

MIB = 1 << 20


@pytest.fixture(scope="module")
def served(gemma_path: Path) -> ServedModel:
    """gemma-3-270m as `engy serve` resolves it (its catalog entry gives the
    chat template the GGUF lacks)."""
    from engy_local.server.backends import resolve_model
    from engy_local.server.options import ServeOptions

    return resolve_model("gemma-3-270m-base", ServeOptions(ctx_size=2048))


@pytest.fixture(scope="module")
def gemma(served: ServedModel) -> Iterator[Model]:
    model = Model(replace(served.options, parallel=4, threads=2))
    yield model
    model.close()


def compute(model: Model, outputs: int) -> int:
    ctx = Context(model, outputs=outputs)
    try:
        return ctx.compute_bytes
    finally:
        ctx.close()


@pytest.mark.parametrize(("n_seq", "draft_max", "rows"), [
    (4, 0, 4),
    (1, 0, 1),
    (4, 16, 68),
    (1, 16, 65),  # a draft filling a wide step (63) beside its token, and a row kept
    (2, 4, 66),
    (4, 64, 68),
    (1, 64, 65),
    (8, 64, 136),
])  # fmt: skip
def test_a_step_asks_for_a_row_a_sequence_and_a_row_a_drafted_token(
    n_seq: int, draft_max: int, rows: int
) -> None:
    assert output_rows(n_seq, draft_max) == rows


@pytest.mark.parametrize("n_seq", range(1, 9))
def test_a_draft_filling_a_wide_step_fits_beside_every_other_sequence(n_seq: int) -> None:
    """One sequence drafts the 63 tokens of a wide step (speculate.WIDE)
    while every other one reads its prompt's last token in the same step:
    the rows of logits hold them all, and the drafts' room (the rows less
    one a sequence, as the scheduler keeps) holds the whole draft."""
    rows = output_rows(n_seq, 16)
    assert 1 + (WIDE - 1) + (n_seq - 1) <= rows
    assert rows - n_seq >= WIDE - 1


def test_the_rows_are_never_more_than_a_batch_nor_fewer_than_the_sequences(gemma: Model) -> None:
    for asked, room in [(0, 4), (2, 4), (68, 68), (10 * BATCH, BATCH)]:
        ctx = Context(gemma, outputs=asked)
        try:
            assert ctx.outputs == room
        finally:
            ctx.close()


def test_the_compute_buffer_holds_the_rows_a_step_asks_for_not_a_batch(gemma: Model) -> None:
    vocab_row = gemma.n_vocab * 4
    plain = compute(gemma, output_rows(4, 0))
    drafting = compute(gemma, output_rows(4, 16))
    whole_batch = compute(gemma, BATCH)
    assert gemma.n_vocab > 250_000
    # A whole batch's rows alone are 512 MiB; what engy asks for is far less.
    assert whole_batch > BATCH * vocab_row
    assert plain < 64 * MIB
    assert drafting < plain + 68 * vocab_row + 8 * MIB
    assert whole_batch - plain > 400 * MIB


def test_a_step_asking_for_more_rows_is_an_error_and_the_context_goes_on(gemma: Model) -> None:
    ctx = Context(gemma, outputs=4)
    try:
        for i in range(5):
            ctx.batch.add(2 + i, i, 0, True)
        with pytest.raises(ServerError, match="asked for 5 rows of logits"):
            ctx.decode()
        ctx.batch.clear()
        for i in range(5):
            ctx.batch.add(2 + i, i, 0, i == 4)
        assert ctx.decode()
        assert ctx.held(0) == 5
    finally:
        ctx.close()


def test_a_model_serves_four_drafting_streams_within_its_rows(served: ServedModel) -> None:
    """The scheduler's own context: four sequences generating with drafts
    at once stay within the rows it asked llama.cpp for."""
    options = replace(served.options, speculative="on", parallel=4, threads=2)
    pool = ModelPool([replace(served, id="m", aliases=(), options=options)], primary="m")
    lines = [f"The keeper climbed the stairs and lit lamp number {i}." for i in range(20)]
    text = "\n".join(lines) + "\n\nRepeat the text above exactly, nothing else."

    async def one(i: int) -> tuple[str, Finished | None]:
        request = ChatRequest(
            "m",
            (Message("user", (Text(f"({i}) {text}"),)),),
            sampling=Sampling(max_tokens=64, temperature=0),
        )
        out, finished = "", None
        async for event in await pool.submit(request):
            if isinstance(event, TextDelta):
                out += event.text
            elif isinstance(event, Finished):
                finished = event
        return out, finished

    async def all_of() -> list[tuple[str, Finished | None]]:
        return list(await asyncio.gather(*(one(i) for i in range(4))))

    try:
        answers = asyncio.run(all_of())
    finally:
        pool.close()
    for out, finished in answers:
        assert finished is not None and finished.usage.output_tokens > 0, answers
        assert out
    assert sum(f.usage.accepted_tokens for _, f in answers if f) > 0  # drafts ran
