"""A Hugging Face tokenizer (`--tokenizer DIR`) gives the local engine's
tokens: the same ids as llama.cpp on the GGUF made from the same vocabulary,
text by text and whole rendered prompts, and the same bytes back per token.
Through a real llama-server upstream it answers with the local prompt
count."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from support.paths import ANSWER, CACHE, need_fixtures
from support.server import EngyServer

from engy_local.prompt.hfvocab import HFVocabulary, is_hf_tokenizer
from engy_local.prompt.prepare import prepare
from engy_local.protocols.anthropic import parse_request
from engy_local.runtime.loading.vocab import Vocabulary

TEMPLATE = "Qwen-Qwen3-0.6B.jinja"

pytest.importorskip("tokenizers", reason="the tokenizers package (engy-local[upstream])")


@pytest.fixture(scope="module")
def snapshot() -> Path:
    need_fixtures()
    from support.hftokenizer import build_hf_snapshot

    return build_hf_snapshot(CACHE / "hf" / "qwen2-qwen3-template", TEMPLATE)


@pytest.fixture(scope="module")
def pair(snapshot: Path, tiny_answer: Path) -> Any:
    """The HF vocabulary and llama.cpp's, of one vocabulary and template."""
    hf = HFVocabulary(snapshot)
    gguf = Vocabulary(tiny_answer)
    yield hf, gguf
    gguf.close()


TEXTS = [
    "Hello, world!",
    "  leading spaces and trailing   ",
    "def f(x):\n    return x ** 2  # squares\n\n\n",
    "numbers 1234567 and 3.14159",
    "I'm sure they'll say we've DONE it",
    "naïve café, Größe, 東京, 🦀 emoji and 👩‍💻",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    '<tool_call>\n{"name": "read", "arguments": {}}\n</tool_call>',
    "tabs\tand\r\nwindows lines",
]


@pytest.mark.parametrize("text", TEXTS)
def test_same_ids_as_llama_cpp(pair: Any, text: str) -> None:
    hf, gguf = pair
    assert hf.tokenize(text) == gguf.tokenize(text)


@pytest.mark.parametrize("text", TEXTS)
def test_same_bytes_back_per_token(pair: Any, text: str) -> None:
    hf, gguf = pair
    ids = gguf.tokenize(text)
    assert [hf.piece(t) for t in ids] == [gguf.piece(t) for t in ids]
    assert b"".join(hf.piece(t) for t in ids).decode() == text


def test_the_turn_ends_where_llama_cpp_says(pair: Any) -> None:
    hf, gguf = pair
    for text in ("<|im_end|>", "<|endoftext|>", "<|im_start|>", "Hello"):
        (token,) = gguf.tokenize(text)[:1]
        assert hf.is_end(token) == gguf.is_end(token), text


def test_a_rendered_prompt_is_the_same_tokens(pair: Any) -> None:
    hf, gguf = pair
    body = {
        "model": "m",
        "max_tokens": 16,
        "system": "You are terse.",
        "messages": [{"role": "user", "content": "Read README.md please."}],
        "tools": [
            {
                "name": "read_file",
                "description": "Read a file.",
                "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
            }
        ],
    }
    request = parse_request(body).chat
    assert hf.family.name == gguf.family.name
    assert prepare(hf, request, 64).tokens == prepare(gguf, request, 64).tokens


def test_snapshot_files_are_read(snapshot: Path) -> None:
    hf = HFVocabulary(snapshot / "tokenizer.json")
    assert is_hf_tokenizer(snapshot) and is_hf_tokenizer(snapshot / "tokenizer.json")
    assert hf.trained_context == 40960  # config.json
    assert hf.eos_text == "<|im_end|>" and not hf.add_bos
    assert hf.quantization == "BF16"


def test_an_upstream_with_a_hf_tokenizer(snapshot: Path, tiny_answer: Path) -> None:
    from support.llama_server import LlamaServer, need_llama_server

    need_llama_server()
    upstream = LlamaServer(tiny_answer)
    spec = f"{upstream.url};model=hf-tiny;tokenizer={snapshot}"
    # MODEL is served here too, beside the upstream: it counts the local tokens.
    server = EngyServer(str(tiny_answer), "--upstream", spec)
    try:
        listed = httpx.get(server.url + "/v1/models").json()["data"]
        ids = [m["id"] for m in listed]
        assert ids[0] == "hf-tiny" and len(ids) == 2, ids
        assert listed[0]["quantization"] == "BF16"  # the snapshot's torch_dtype
        body = {
            "model": "hf-tiny",
            "max_tokens": 32,
            "messages": [{"role": "user", "content": "Hi"}],
        }
        r = httpx.post(server.url + "/v1/messages", json=body, timeout=120)
        assert r.status_code == 200, r.text
        answer = r.json()
        assert answer["content"][0]["text"] == ANSWER
        count = httpx.post(
            server.url + "/v1/messages/count_tokens", json={**body, "model": ids[1]}
        ).json()["input_tokens"]
        assert answer["usage"]["input_tokens"] == count
    finally:
        server.stop()
        upstream.stop()


@pytest.mark.parametrize(
    ("config", "quantization"),
    [
        ({"quantization_config": {"quant_method": "fp8"}, "torch_dtype": "bfloat16"}, "FP8"),
        ({"quantization_config": {"quant_method": "awq", "bits": 4}}, "AWQ"),
        ({"torch_dtype": "float16"}, "F16"),
        ({"dtype": "bfloat16"}, "BF16"),
        ({}, ""),
    ],
)
def test_the_snapshot_says_what_its_weights_are(config: dict[str, Any], quantization: str) -> None:
    from engy_local.prompt.hfvocab import _quantization

    assert _quantization(config) == quantization
