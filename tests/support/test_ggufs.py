"""The tiny-GGUF builder, checked against the real llama.cpp."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path
from typing import Any

import pytest

from support import ggufs

llama_cpp = pytest.importorskip("llama_cpp")
jsonschema = pytest.importorskip("jsonschema")
pytest.importorskip("gguf")

_missing = ggufs.fixtures_missing_reason("qwen2", "Qwen-Qwen3-0.6B.jinja")
pytestmark = pytest.mark.skipif(_missing is not None, reason=_missing or "")

ANSWER = "Hello from engy."
QWEN3 = "Qwen-Qwen3-0.6B.jinja"

CHATS: list[list[dict[str, str]]] = [
    [{"role": "user", "content": "hi"}],
    [
        {"role": "system", "content": "You are a coding agent. Be terse."},
        {"role": "user", "content": "Write a Python function that reverses a list."},
    ],
    [
        {"role": "user", "content": "```py\nprint(x)\n```\nWhy does this fail?"},
        {"role": "assistant", "content": "x is not defined."},
        {"role": "user", "content": ANSWER},  # the answer itself as input changes nothing
    ],
]

# A forced tool call's arguments: a free string and an enum, both required.
TOOL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "mode": {"type": "string", "enum": ["read", "write", "append"]},
    },
    "required": ["path", "mode"],
}


def render(template: str, messages: list[dict[str, str]], **extra: Any) -> str:
    """Render a chat template the way llama-cpp-python's Jinja2 formatter does."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(msg: str) -> None:
        raise ValueError(msg)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    text = (ggufs.TEMPLATE_DIR / template).read_text()
    return env.from_string(text).render(
        messages=messages, add_generation_prompt=True, bos_token="", eos_token="", **extra
    )


def load(path: Path) -> Any:
    return llama_cpp.Llama(model_path=str(path), n_ctx=1024, seed=1234, verbose=False)


def generate_ids(llm: Any, prompt: str, temp: float, limit: int = 40) -> list[int]:
    """Sample token ids until end-of-generation (included) or ``limit``."""
    out: list[int] = []
    tokens = llm.tokenize(prompt.encode(), special=True)
    for tok in llm.generate(tokens, temp=temp, top_k=40, top_p=0.95, reset=True):
        out.append(tok)
        if llama_cpp.llama_vocab_is_eog(llm._model.vocab, tok) or len(out) >= limit:
            break
    return out


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tiny-ggufs")


@pytest.fixture(scope="module")
def answer_llm(cache_dir: Path) -> Any:
    llm = load(ggufs.tiny_gguf_cached(cache_dir, answer=ANSWER))
    yield llm
    llm.close()


@pytest.fixture(scope="module")
def plain_llm(cache_dir: Path) -> Any:
    llm = load(ggufs.tiny_gguf_cached(cache_dir))
    yield llm
    llm.close()


def test_build_time_and_metadata(tmp_path: Path) -> None:
    t0 = time.perf_counter()
    path = ggufs.build_tiny_gguf(tmp_path / "m.gguf", answer=ANSWER, context_length=4096)
    took = time.perf_counter() - t0
    print(f"\nqwen2 tiny gguf: built in {took:.2f}s, {path.stat().st_size / 1e6:.1f} MB")

    llm = load(path)
    try:
        meta = llm.metadata
        assert meta["general.architecture"] == "llama"
        assert meta["llama.context_length"] == "4096"
        assert meta["tokenizer.chat_template"] == (ggufs.TEMPLATE_DIR / QWEN3).read_text()
        assert llm.n_vocab() == 151936
        assert llm._model.n_ctx_train() == 4096
    finally:
        llm.close()


def test_no_template(tmp_path: Path) -> None:
    llm = load(ggufs.build_tiny_gguf(tmp_path / "m.gguf", template=None))
    try:
        assert "tokenizer.chat_template" not in llm.metadata
    finally:
        llm.close()


@pytest.mark.parametrize("temp", [0.0, 1.0])
@pytest.mark.parametrize("chat", range(len(CHATS)))
@pytest.mark.parametrize("thinking", [None, False])
def test_answers_whatever_the_prompt(
    answer_llm: Any, chat: int, temp: float, thinking: bool | None
) -> None:
    extra = {} if thinking is None else {"enable_thinking": thinking}
    prompt = render(QWEN3, CHATS[chat], **extra)
    out = answer_llm.create_completion(prompt, max_tokens=40, temperature=temp)
    choice = out["choices"][0]
    assert choice["text"] == ANSWER
    assert choice["finish_reason"] == "stop"


def test_answer_token_chain(answer_llm: Any) -> None:
    chain = ggufs.tokenize(ggufs.vocab_path("qwen2"), ANSWER)
    im_end = answer_llm.tokenize(b"<|im_end|>", add_bos=False, special=True)
    assert len(im_end) == 1
    print(f"\nanswer chain {chain} + end {im_end}")
    for temp in (0.0, 1.0):
        ids = generate_ids(answer_llm, render(QWEN3, CHATS[0]), temp)
        assert ids == [*chain, *im_end]


@pytest.mark.parametrize("temp", [0.0, 1.0])
@pytest.mark.parametrize("which", ["answer", "plain"])
def test_json_schema_grammar_closes_quickly(
    answer_llm: Any, plain_llm: Any, which: str, temp: float
) -> None:
    llm = answer_llm if which == "answer" else plain_llm
    grammar = llama_cpp.LlamaGrammar.from_json_schema(json.dumps(TOOL_SCHEMA), verbose=False)
    prompt = render(QWEN3, CHATS[1])
    out = llm.create_completion(prompt, max_tokens=40, temperature=temp, grammar=grammar)
    text = out["choices"][0]["text"]
    print(f"\n{which} @ {temp}: {text!r} ({out['usage']['completion_tokens']} tokens)")
    assert out["choices"][0]["finish_reason"] == "stop"
    jsonschema.validate(json.loads(text), TOOL_SCHEMA)


def test_repeated_answer_token_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unique"):
        ggufs.build_tiny_gguf(tmp_path / "m.gguf", answer="no no no")
    assert not (tmp_path / "m.gguf").exists()


def test_cache_reuses_and_keys_on_arguments(tmp_path: Path) -> None:
    a = ggufs.tiny_gguf_cached(tmp_path, answer="Hi.")
    mtime = a.stat().st_mtime_ns
    assert ggufs.tiny_gguf_cached(tmp_path, answer="Hi.") == a
    assert a.stat().st_mtime_ns == mtime
    # Spelling out a default is the same model.
    assert ggufs.tiny_gguf_cached(tmp_path, answer="Hi.", vocab="qwen2") == a
    assert ggufs.tiny_gguf_cached(tmp_path, answer="Yo.") != a
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp")) == []


@pytest.mark.parametrize(
    ("vocab", "template"),
    [
        ("llama-bpe", "meta-llama-Llama-3.1-8B-Instruct.jinja"),
        ("gemma-4", "google-gemma-4-31B-it.jinja"),
    ],
)
def test_other_vocabs(cache_dir: Path, vocab: str, template: str) -> None:
    reason = ggufs.fixtures_missing_reason(vocab, template)
    if reason:
        pytest.skip(reason)
    path = ggufs.tiny_gguf_cached(cache_dir, vocab=vocab, template=template, answer=ANSWER)
    llm = load(path)
    try:
        for chat in CHATS:
            for temp in (0.0, 1.0):
                out = llm.create_completion(render(template, chat), max_tokens=40, temperature=temp)
                assert out["choices"][0]["text"] == ANSWER
                assert out["choices"][0]["finish_reason"] == "stop"
        grammar = llama_cpp.LlamaGrammar.from_json_schema(json.dumps(TOOL_SCHEMA), verbose=False)
        out = llm.create_completion(render(template, CHATS[1]), max_tokens=40, grammar=grammar)
        jsonschema.validate(json.loads(out["choices"][0]["text"]), TOOL_SCHEMA)
    finally:
        llm.close()


def test_long_answer_grows_the_model(tmp_path: Path) -> None:
    # 40+ tokens do not fit the minimum width; every word is distinct, so tokens are too.
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi"
    answer = f"{words} omicron pi rho sigma tau upsilon phi chi psi omega, one two six ten. Done!"
    assert len(ggufs.tokenize(ggufs.vocab_path("qwen2"), answer)) > ggufs.N_EMBD_MIN
    llm = load(ggufs.build_tiny_gguf(tmp_path / "m.gguf", answer=answer))
    try:
        out = llm.create_completion(render(QWEN3, CHATS[0]), max_tokens=80, temperature=1.0)
        assert out["choices"][0]["text"] == answer
        assert out["choices"][0]["finish_reason"] == "stop"
    finally:
        llm.close()


def test_explicit_end_token(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a single token"):
        ggufs.build_tiny_gguf(tmp_path / "bad.gguf", end_token="<|no such token|>")
    # No template to read the marker from: name it, and the model stops on it.
    path = ggufs.build_tiny_gguf(
        tmp_path / "m.gguf", template=None, answer="Hi.", end_token="<|im_end|>"
    )
    llm = load(path)
    try:
        ids = generate_ids(llm, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", 1.0)
        assert llm.detokenize(ids[:-1]) == b"Hi."
        assert ids[-1] == llm.tokenize(b"<|im_end|>", add_bos=False, special=True)[0]
    finally:
        llm.close()


def test_split_gguf_loads(tmp_path: Path) -> None:
    first = ggufs.build_tiny_gguf(tmp_path / "Tiny-F16.gguf", answer="Hi.", split_max_tensors=4)
    parts = sorted(tmp_path.glob("Tiny-F16-*-of-00003.gguf"))
    assert first == parts[0] and len(parts) == 3  # 12 tensors, 4 per part
    llm = load(first)  # llama.cpp finds the other parts by name
    try:
        out = llm.create_completion(render(QWEN3, CHATS[0]), max_tokens=10, temperature=0.0)
        assert out["choices"][0]["text"] == "Hi."
    finally:
        llm.close()
    with pytest.raises(ValueError, match="single files"):
        ggufs.tiny_gguf_cached(tmp_path, split_max_tensors=4)


@pytest.mark.parametrize("arch", ["qwen35", "lfm2"])
def test_hybrid_models_load_as_hybrid_and_depend_on_the_prompt(cache_dir: Path, arch: str) -> None:
    """llama.cpp loads the tiny hybrid as a hybrid; its greedy answer uses
    only the lexicon and changes with the prompt (the state carries it)."""
    from support import hybrid

    path = hybrid.hybrid_gguf_cached(cache_dir, arch=arch)
    llm = load(path)
    try:
        assert llama_cpp.llama_model_is_hybrid(llm._model.model)
        assert llm.metadata["general.architecture"] == arch
        lexicon = set(llm.tokenize(hybrid.LEXICON.encode(), add_bos=False))
        answers = set()
        for prompt in ("note 1: keep 2\n" * 20, "note 3: keep 4\n" * 20):
            ids = llm.tokenize(prompt.encode())
            out = list(itertools.islice(llm.generate(ids, temp=0, reset=True), 16))
            assert set(out) <= lexicon
            answers.add(tuple(out))
        assert len(answers) == 2
    finally:
        llm.close()
