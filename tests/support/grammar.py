"""Running a grammar through llama.cpp's own grammar sampler on a real
vocabulary, and the captured clients' tools."""

from __future__ import annotations

import ctypes
import json
import math
import random
from pathlib import Path
from typing import Any

import llama_cpp
import pytest

from engy_local.chat import ToolSpec
from support.paths import FIXTURES

REQUESTS = FIXTURES / "requests"


def captured_tools(name: str) -> list[ToolSpec]:
    """The function tools of a captured client request (Codex namespaces
    flattened), read at test time."""
    path = REQUESTS / name
    if not path.is_file():
        pytest.skip(f"captured request not found: {path}")
    body = json.loads(path.read_text())["body"]
    specs = []
    for tool in body["tools"]:
        for t in tool.get("tools", [tool]):
            schema = t.get("input_schema", t.get("parameters"))
            if schema is not None:
                name = t.get("name") or t["type"]  # Codex's tool_search has no name
                specs.append(ToolSpec(name, t.get("description", ""), schema))
    return specs


CLIENTS = [
    "claude-code-2.1.332-first-turn.json",
    "codex-0.171.0-first-turn.json",
    "codex-0.171.0-first-turn-gpt-5.5-slug.json",
]


class Vocab:
    """A real tokenizer (the qwen2 vocab-only GGUF) to drive llama.cpp's
    grammar sampler with."""

    def __init__(self, path: Path) -> None:
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        self.model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
        assert self.model
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.eos = llama_cpp.llama_vocab_eos(self.vocab)
        chars = [chr(c) for c in range(32, 127)] + ["\n", "\u00e9"]
        self.char_tokens = {}
        for c in chars:
            toks = self.tokenize(c)
            if len(toks) == 1:
                self.char_tokens[toks[0]] = c

    def tokenize(self, text: str) -> list[int]:
        data = text.encode()
        out = (ctypes.c_int32 * (len(data) + 8))()
        n = llama_cpp.llama_tokenize(self.vocab, data, len(data), out, len(out), False, False)
        return [int(t) for t in out[:n]]

    def sampler(self, gbnf: str) -> Any:
        sampler = llama_cpp.llama_sampler_init_grammar(self.vocab, gbnf.encode(), b"root")
        assert sampler
        return sampler

    @staticmethod
    def allowed(sampler: Any, tokens: list[int]) -> list[int]:
        data = (llama_cpp.llama_token_data * len(tokens))(
            *[llama_cpp.llama_token_data(t, 0.0, 0.0) for t in tokens]
        )
        arr = llama_cpp.llama_token_data_array(data, len(tokens), -1, False)
        llama_cpp.llama_sampler_apply(sampler, ctypes.byref(arr))
        return [int(data[i].id) for i in range(arr.size) if data[i].logit != -math.inf]

    def accepts(self, gbnf: str, text: str) -> bool:
        """Whether the grammar lets a model write exactly `text` and stop."""
        sampler = self.sampler(gbnf)
        try:
            for token in self.tokenize(text):
                if not self.allowed(sampler, [token]):
                    return False
                llama_cpp.llama_sampler_accept(sampler, token)
            return bool(self.allowed(sampler, [self.eos]))
        finally:
            llama_cpp.llama_sampler_free(sampler)

    def random_sentence(self, gbnf: str, rng: random.Random, limit: int = 600) -> str | None:
        """A random text the grammar allows, one character token at a time
        (None if it did not finish within `limit` characters)."""
        sampler = self.sampler(gbnf)
        closers = {t for t, c in self.char_tokens.items() if c in '"}]'}
        text = ""
        try:
            for _ in range(limit):
                allowed = self.allowed(sampler, [*self.char_tokens, self.eos])
                if self.eos in allowed:
                    return text
                assert allowed, f"dead end after {text!r}"
                closing = [t for t in allowed if t in closers]
                late = len(text) > 120 and rng.random() < 0.7
                token = rng.choice(closing if closing and late else allowed)
                llama_cpp.llama_sampler_accept(sampler, token)
                text += self.char_tokens[token]
            return None
        finally:
            llama_cpp.llama_sampler_free(sampler)
