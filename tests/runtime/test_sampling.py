"""Greedy sampling takes the logits' argmax in numpy (a fraction of what
llama_sampler_sample costs on a 151k vocabulary): it must pick the token
llama.cpp's own greedy sampler picks, ties included, grammar or not."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import llama_cpp
import numpy as np
import pytest

from engy_local.prompt.prepare import SamplingParams
from engy_local.runtime.engine.sampling import Sampler
from engy_local.runtime.loading.context import Context
from engy_local.runtime.loading.model import LoadOptions, Model


@pytest.fixture(scope="module")
def ctx(tiny_qwen3: Path) -> Iterator[Context]:
    model = Model(LoadOptions(tiny_qwen3, ctx_size=256, parallel=1, threads=2))
    context = Context(model)
    context.batch.add(1, 0, 0, True)
    assert context.decode()
    yield context
    context.close()
    model.close()


def llama_greedy(context: Context) -> int:
    chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
    llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_greedy())
    try:
        return int(llama_cpp.llama_sampler_sample(chain, context.ctx, 0))
    finally:
        llama_cpp.llama_sampler_free(chain)


def set_logits(context: Context, top: dict[int, float]) -> None:
    """Every logit -1 but the given ones (written into the context's own
    logits, where both samplers read them)."""
    raw = llama_cpp.llama_get_logits_ith(context.ctx, 0)
    logits = np.ctypeslib.as_array(raw, shape=(context.model.n_vocab,))
    logits[:] = -1.0
    for token, value in top.items():
        logits[token] = value


@pytest.mark.parametrize(
    "top",
    [
        {},  # all equal: the lowest id
        {500: 3.0},
        {9: 2.0, 1000: 2.0},  # a tie: the lower id
        {1000: 2.0, 9: 2.0},
        {7: 5.0, 8: 4.9},
        {-1: 1.0},  # the last id
    ],
    ids=["all equal", "one max", "tie", "tie reversed", "close", "last"],
)
def test_greedy_picks_what_llama_cpp_picks(ctx: Context, top: dict[int, float]) -> None:
    n_vocab = ctx.model.n_vocab
    set_logits(ctx, {t % n_vocab: v for t, v in top.items()})
    sampler = Sampler(ctx.model, SamplingParams(max_tokens=8, temperature=0.0))
    try:
        assert sampler.sample(ctx.ctx, 0) == llama_greedy(ctx)
    finally:
        sampler.close()


def test_greedy_under_a_grammar_still_checks_the_grammar(ctx: Context) -> None:
    # The argmax is a token the grammar does not allow: the grammar's pick.
    vocab = ctx.model
    allowed = vocab.marker_tokens("yes")
    assert len(allowed) == 1
    set_logits(ctx, {500: 9.0, allowed[0]: 1.0})
    params = SamplingParams(max_tokens=8, temperature=0.0, grammar='root ::= "yes"')
    sampler = Sampler(ctx.model, params)
    try:
        assert sampler.sample(ctx.ctx, 0) == allowed[0]
    finally:
        sampler.close()
