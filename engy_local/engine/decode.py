"""The token loop of one sequence: reuse the cached prefix, evaluate the rest
of the prompt in chunks, then sample until an end token, a stop sequence or
the token budget.

It is a generator of steps so that the scheduler (worker.py) decides when
each step runs: it checks cancellation between steps, and a later scheduler
can interleave several sequences.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from dataclasses import dataclass

import llama_cpp
from llama_cpp._internals import LlamaSampler
from llama_cpp.llama_grammar import LlamaGrammar

from ..errors import ServerError
from .grammar import check_grammar
from .model import BATCH, Model


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int
    temperature: float = 0.8
    top_p: float = 0.95
    top_k: int = 40
    min_p: float = 0.05
    stop: tuple[str, ...] = ()
    grammar: str | None = None  # GBNF; constrains every sampled token


@dataclass(frozen=True)
class Prefilled:
    """The prompt is in the KV cache; `cached` tokens of it were reused."""

    cached: int


@dataclass(frozen=True)
class Progress:
    done: int
    total: int


@dataclass(frozen=True)
class Piece:
    """Text produced by one sampled token (may be empty: a partial UTF-8
    character, or text held back as a possible stop-sequence prefix).
    `sampled` is False for the text flushed at the end."""

    text: str
    sampled: bool = True


@dataclass(frozen=True)
class Done:
    reason: str  # "end", "length" or "stop"
    tokens: int  # tokens generated


Step = Prefilled | Progress | Piece | Done


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class _StopScanner:
    """Holds back text that may be the start of a stop sequence."""

    def __init__(self, stops: tuple[str, ...]) -> None:
        self.stops = tuple(s for s in stops if s)
        self.pending = ""

    def push(self, text: str) -> tuple[str, bool]:
        """Returns (text safe to release, stopped)."""
        if not self.stops:
            return text, False
        buf = self.pending + text
        hits = [(buf.find(s), s) for s in self.stops if s in buf]
        if hits:
            at = min(i for i, _ in hits)
            self.pending = ""
            return buf[:at], True
        keep = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(buf)), 0, -1):
                if buf.endswith(s[:k]):
                    keep = max(keep, k)
                    break
        self.pending = buf[len(buf) - keep :]
        return buf[: len(buf) - keep], False

    def flush(self) -> str:
        out, self.pending = self.pending, ""
        return out


def _sampler(model: Model, p: SamplingParams) -> LlamaSampler:
    sampler = LlamaSampler()
    if p.grammar is not None:
        # llama.cpp would only fail inside the sampler; check it here.
        if not check_grammar(p.grammar):
            raise ServerError("internal error: the tool-call grammar does not parse")
        grammar = LlamaGrammar.from_string(p.grammar, verbose=False)
        sampler.add_grammar(model.llm._model, grammar)
    if p.temperature <= 0.0:
        sampler.add_greedy()
    else:
        sampler.add_top_k(p.top_k if p.top_k > 0 else model.llm.n_vocab())
        sampler.add_top_p(p.top_p, 1)
        sampler.add_min_p(p.min_p, 1)
        sampler.add_temp(p.temperature)
        sampler.add_dist(llama_cpp.LLAMA_DEFAULT_SEED)
    return sampler


def run(model: Model, prompt: list[int], params: SamplingParams) -> Iterator[Step]:
    """Steps of one generation. The caller stops iterating to cancel; the
    KV cache then holds the prompt and what was generated so far, which the
    next request may reuse."""
    llm = model.llm
    sampler = _sampler(model, params)  # built first: a bad grammar fails early
    # Reuse the longest prefix the cache shares with this prompt. At least
    # one token is evaluated again so there are fresh logits to sample from.
    held = list(llm._input_ids[: llm.n_tokens])
    keep = min(common_prefix(held, prompt), len(prompt) - 1)
    if keep > 0 and llm._ctx.kv_cache_seq_rm(-1, keep, -1):
        llm.n_tokens = keep
    else:  # nothing shared, or partial removal unsupported (recurrent models)
        keep = 0
        llm.reset()
        llm._ctx.kv_cache_clear()
    yield Prefilled(cached=keep)

    total = len(prompt)
    done = keep
    while done < total:
        chunk = prompt[done : done + BATCH]
        llm.eval(chunk)
        done += len(chunk)
        yield Progress(done, total)

    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    stops = _StopScanner(params.stop)
    produced = 0
    while True:
        if produced >= params.max_tokens or llm.n_tokens >= model.n_ctx:
            yield Piece(decoder.decode(b"", final=True) + stops.flush(), sampled=False)
            yield Done("length", produced)
            return
        token = sampler.sample(llm._ctx, -1)
        produced += 1
        if model.is_end(token):
            # The end token counts as output, as hosted APIs count it.
            yield Piece(decoder.decode(b"", final=True) + stops.flush())
            yield Done("end", produced)
            return
        text, stopped = stops.push(decoder.decode(model.piece(token)))
        if stopped:
            yield Piece(text)
            yield Done("stop", produced)
            return
        llm.eval([token])
        yield Piece(text)
