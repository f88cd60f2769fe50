"""Per-request sampling: a llama.cpp sampler chain (temperature, top-k,
top-p, min-p) and, for forced tool calls, a grammar checked after sampling.

Applying a grammar to the whole vocabulary every token is what made forced
calls slow (262k candidates a token for Gemma). As llama.cpp's own sampler
does, the token is drawn first and only checked against the grammar; the
grammar is applied to every candidate only when that token is rejected,
which for a model following the grammar is rare.
"""

from __future__ import annotations

import ctypes
from typing import Any

import llama_cpp
import numpy as np

from ...errors import ServerError
from ...prompt.prepare import SamplingParams
from ..loading.model import Model

_TOKEN_DATA = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])


def check_grammar(gbnf: str, root: str = "root") -> bool:
    """Whether llama.cpp parses `gbnf` (no model needed)."""
    sampler = llama_cpp.llama_sampler_init_grammar(None, gbnf.encode(), root.encode())
    if not sampler:
        return False
    llama_cpp.llama_sampler_free(sampler)
    return True


def _grammar(model: Model, params: SamplingParams) -> Any:
    """llama.cpp's grammar sampler; lazy where the params give triggers:
    waiting until one of them matches the output (each word that is one
    token of its own triggers as that token too)."""
    assert params.grammar is not None
    gbnf = params.grammar.encode()
    if not params.triggers:
        return llama_cpp.llama_sampler_init_grammar(model.vocab, gbnf, b"root")
    patterns = (ctypes.c_char_p * len(params.triggers))(*(p.encode() for p in params.triggers))
    words = [model.marker_tokens(w) for w in params.trigger_words]
    tokens = [t[0] for t in words if len(t) == 1]
    ids = (llama_cpp.llama_token * max(1, len(tokens)))(*tokens)
    return llama_cpp.llama_sampler_init_grammar_lazy_patterns(
        model.vocab, gbnf, b"root", patterns, len(params.triggers), ids, len(tokens)
    )


class Sampler:
    def __init__(self, model: Model, params: SamplingParams, seed: int | None = None) -> None:
        """`seed` (else the request's, `params.seed`; else a random one)."""
        self.n_vocab = model.n_vocab
        self.grammar = None
        if params.grammar is not None:
            # llama.cpp would only fail inside the sampler; check it here.
            if not check_grammar(params.grammar):
                raise ServerError("internal error: the tool-call grammar does not parse")
            self.grammar = _grammar(model, params)
            if not self.grammar:
                raise ServerError("internal error: the tool-call grammar does not load")
        chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
        add = llama_cpp.llama_sampler_chain_add
        self.greedy = params.temperature <= 0.0
        if self.greedy:
            add(chain, llama_cpp.llama_sampler_init_greedy())
        else:
            add(chain, llama_cpp.llama_sampler_init_top_k(params.top_k or self.n_vocab))
            add(chain, llama_cpp.llama_sampler_init_top_p(params.top_p, 1))
            add(chain, llama_cpp.llama_sampler_init_min_p(params.min_p, 1))
            add(chain, llama_cpp.llama_sampler_init_temp(params.temperature))
            seed = params.seed if seed is None else seed
            seed = llama_cpp.LLAMA_DEFAULT_SEED if seed is None else seed
            add(chain, llama_cpp.llama_sampler_init_dist(seed))
        self.chain = chain
        self._one = llama_cpp.llama_token_data()
        self._one_array = llama_cpp.llama_token_data_array(
            data=ctypes.pointer(self._one), size=1, selected=-1, sorted=False
        )
        self.resampled = 0  # tokens the grammar rejected (for the bench)
        self.model = model
        self._after_digit = False  # the last token ended in a digit

    def sample(self, ctx: llama_cpp.llama_context_p, index: int) -> int:
        """The next token from the logits of batch position `index`."""
        if self.greedy:
            # numpy's argmax over the logits: 0.03 ms on Qwen's 151k tokens,
            # where llama_sampler_sample fills a fresh candidate array each
            # call (0.35 ms, >1% of a CPU decode step). Ties go to the
            # lowest id in both.
            logits = llama_cpp.llama_get_logits_ith(ctx, index)
            token = int(np.ctypeslib.as_array(logits, shape=(self.n_vocab,)).argmax())
        else:
            token = int(llama_cpp.llama_sampler_sample(self.chain, ctx, index))
        if self.grammar is None:
            return token
        if not self._allowed(token):
            self.resampled += 1
            ended = self._after_digit and not self.model.piece(token)[:1].isdigit()
            token = self._sample_constrained(ctx, index, no_digits=ended)
        llama_cpp.llama_sampler_accept(self.grammar, token)
        self._after_digit = self.model.piece(token)[-1:].isdigit()
        return token

    def accept(self, token: int) -> None:
        """`token` is output without sampling (a forced call's fixed start):
        the grammar and the chain move past it as if it had been drawn."""
        if self.grammar is not None:
            llama_cpp.llama_sampler_accept(self.grammar, token)
        llama_cpp.llama_sampler_accept(self.chain, token)

    def _allowed(self, token: int) -> bool:
        self._one.id = token  # type: ignore[assignment]
        self._one.logit = 1.0
        self._one.p = 0.0
        self._one_array.size = 1
        self._one_array.selected = -1
        llama_cpp.llama_sampler_apply(self.grammar, ctypes.byref(self._one_array))
        return bool(np.isfinite(self._one.logit))

    def _sample_constrained(
        self, ctx: llama_cpp.llama_context_p, index: int, no_digits: bool = False
    ) -> int:
        """A token the grammar allows. `no_digits`: the model wanted to end
        the number it was writing with something the grammar does not take
        there (a ","), so the number ends: a digit would only make it longer
        (`20` became 2000000000000000 at the digit cap)."""
        logits = llama_cpp.llama_get_logits_ith(ctx, index)
        data = np.empty(self.n_vocab, dtype=_TOKEN_DATA)
        data["id"] = np.arange(self.n_vocab, dtype=np.int32)
        data["logit"] = np.ctypeslib.as_array(logits, shape=(self.n_vocab,))
        data["p"] = 0.0
        array = llama_cpp.llama_token_data_array(
            data=data.ctypes.data_as(llama_cpp.llama_token_data_p),
            size=self.n_vocab,
            selected=-1,
            sorted=False,
        )
        llama_cpp.llama_sampler_apply(self.grammar, ctypes.byref(array))
        if no_digits:
            self._end_number(data)
        llama_cpp.llama_sampler_apply(self.chain, ctypes.byref(array))
        if not 0 <= array.selected < array.size:
            raise ServerError("the tool-call grammar allows no token here")
        return int(data["id"][array.selected])

    def _end_number(self, data: np.ndarray) -> None:
        """Rules out the allowed tokens that start with a digit, where others
        are allowed (after a digit the grammar allows few tokens)."""
        allowed = np.flatnonzero(np.isfinite(data["logit"]))
        if len(allowed) > 4096:
            return
        digits = [int(t) for t in allowed if self.model.piece(int(t))[:1].isdigit()]
        if 0 < len(digits) < len(allowed):
            data["logit"][digits] = -np.inf

    def close(self) -> None:
        if self.grammar:
            llama_cpp.llama_sampler_free(self.grammar)
            self.grammar = None
        if self.chain:
            llama_cpp.llama_sampler_free(self.chain)
            self.chain = None
