"""Forced-call grammars driven through llama.cpp's grammar sampler on the
qwen2 vocabulary: the vocabularies, three random walks (by byte tokens, by
characters towards closers, by characters), and reading a walk back as
exactly one call."""

from __future__ import annotations

import ctypes
import json
import random
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import llama_cpp
import pytest

from engy_local.chat import ToolCallDelta, ToolCallEnd, ToolCallStart
from engy_local.prompt.families import make_parser
from support.grammar import Vocab
from support.paths import FIXTURES

VOCAB = FIXTURES / "vocab" / "ggml-vocab-qwen2.gguf"


class ByteVocab(Vocab):
    """The qwen2 vocabulary walked one token at a time, with the tokens of
    `texts` (markers split into byte tokens) besides the single characters."""

    def __init__(self, path: Path, texts: tuple[str, ...]) -> None:
        super().__init__(path)
        self.pieces: dict[int, bytes] = {t: c.encode() for t, c in self.char_tokens.items()}
        for text in texts:
            for token in self.tokenize(text):
                self.pieces.setdefault(token, self.piece(token))

    def piece(self, token: int) -> bytes:
        buf = ctypes.create_string_buffer(64)
        n = llama_cpp.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, True)
        return buf.raw[:n]

    def walk(self, gbnf: str, rng: random.Random, limit: int = 900) -> str | None:
        """A random text the grammar allows (None if it did not end within
        `limit` tokens); late in a long walk, closing characters are favoured."""
        sampler = self.sampler(gbnf)
        closers = {t for t, c in self.char_tokens.items() if c in '"}]<'}
        out = b""
        try:
            for step in range(limit):
                allowed = self.allowed(sampler, [*self.pieces, self.eos])
                if self.eos in allowed:
                    return out.decode()
                assert allowed, f"dead end after {out!r}"
                closing = [t for t in allowed if t in closers]
                late = step > 150 and rng.random() < 0.7
                token = rng.choice(closing if closing and late else allowed)
                llama_cpp.llama_sampler_accept(sampler, token)
                out += self.pieces[token]
            return None
        finally:
            llama_cpp.llama_sampler_free(sampler)


class Vocabs:
    """The plain vocabulary, and byte vocabularies made for sets of markers
    (each loaded once, all freed by `close`)."""

    def __init__(self) -> None:
        if not VOCAB.is_file():
            pytest.skip(f"vocab fixture not found: {VOCAB}")
        self.plain = Vocab(VOCAB)
        self._bytes: dict[tuple[str, ...], ByteVocab] = {}

    def bytes(self, texts: tuple[str, ...]) -> ByteVocab:
        if texts not in self._bytes:
            self._bytes[texts] = ByteVocab(VOCAB, texts)
        return self._bytes[texts]

    def close(self) -> None:
        for vocab in [self.plain, *self._bytes.values()]:
            llama_cpp.llama_model_free(vocab.model)


Walk = Callable[[Vocabs, str, random.Random], str | None]


def byte_walk(texts: tuple[str, ...]) -> Walk:
    """Walks by byte tokens, with the tokens of these markers (900 at most)."""
    return lambda vocabs, gbnf, rng: vocabs.bytes(texts).walk(gbnf, rng)


def sentence_walk(vocabs: Vocabs, gbnf: str, rng: random.Random) -> str | None:
    """Walks by characters (600 at most), closing late in a long walk."""
    return vocabs.plain.random_sentence(gbnf, rng)


def closing_walk(closers: tuple[str, ...]) -> Walk:
    """Walks by characters until the grammar ends (3000 at most, else it
    fails). Free text would wander for ever, so after a while the walk
    prefers whatever continues one of the `closers` (a close tag, `"`, `}`)."""

    def walk(vocabs: Vocabs, gbnf: str, rng: random.Random) -> str:
        vocab = vocabs.plain
        sampler = vocab.sampler(gbnf)
        text = ""
        try:
            for _ in range(3000):
                allowed = vocab.allowed(sampler, [*vocab.char_tokens, vocab.eos])
                if vocab.eos in allowed:
                    return text
                assert allowed, f"dead end after {text!r}"
                if len(text) > 150 and rng.random() < 0.8:
                    score = {t: _closing(text + vocab.char_tokens[t], closers) for t in allowed}
                    allowed = [t for t in allowed if score[t] == max(score.values())]
                token = rng.choice(allowed)
                llama_cpp.llama_sampler_accept(sampler, token)
                text += vocab.char_tokens[token]
            raise AssertionError(f"the walk did not finish: {text!r}")
        finally:
            llama_cpp.llama_sampler_free(sampler)

    return walk


def _closing(text: str, closers: tuple[str, ...]) -> int:
    """How much of a closer `text` ends with."""
    return max(
        (k for c in closers for k in range(len(c), 0, -1) if text.endswith(c[:k])), default=0
    )


def one_call(family: str, text: str, tools: Collection[str]) -> tuple[str, Any]:
    """The one call `text` holds, and nothing else: (name, arguments)."""
    parser = make_parser(family, tools=tools, thinking=False, new_id=lambda: "x")
    events = parser.feed(text) + parser.finish()
    start, *deltas, end = events
    assert isinstance(start, ToolCallStart) and isinstance(end, ToolCallEnd), (text, events)
    assert all(isinstance(e, ToolCallDelta) for e in deltas), (text, events)
    return start.name, json.loads(end.arguments)
