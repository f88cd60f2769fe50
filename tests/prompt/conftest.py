"""What the prompt tests share: the real Qwen2 vocabulary that drives
llama.cpp's own grammar sampler (support/grammar.py)."""

from __future__ import annotations

from collections.abc import Iterator

import llama_cpp
import pytest
from support.grammar import FIXTURES, Vocab


@pytest.fixture(scope="module")
def vocab() -> Iterator[Vocab]:
    path = FIXTURES / "vocab" / "ggml-vocab-qwen2.gguf"
    if not path.is_file():
        pytest.skip(f"vocab fixture not found: {path}")
    v = Vocab(path)
    yield v
    llama_cpp.llama_model_free(v.model)
