"""The memory levers for long agent contexts, on a real `engy serve`: a
quantized KV cache on every endpoint, through the disk tier's restart and
never restored into another type; a window fitted to the memory budget;
MoE experts kept in CPU memory. The model is a tiny random-weight Qwen3 MoE
(support/hybrid.py), so an answer depends on every weight and on the whole
prompt: a state restored wrong, or an expert lost, changes it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from support.ggufs import fixtures_missing_reason
from support.paths import CACHE
from support.server import EngyServer

GREEDY = {"temperature": 0}
NOTES = "\n".join(f"note {i}: keep {i * 37 % 100}" for i in range(120))
FIRST = [{"role": "user", "content": NOTES + "\nnote 7?"}]


def tiny_moe(**kwargs: Any) -> Path:
    if reason := fixtures_missing_reason("qwen35", "Qwen-Qwen3-0.6B.jinja"):
        pytest.skip(reason)
    from support.hybrid import hybrid_gguf_cached

    return hybrid_gguf_cached(CACHE / "ggufs", arch="qwen3moe", **kwargs)


@pytest.fixture(scope="module")
def moe() -> Path:
    return tiny_moe()


def ps(server: EngyServer) -> dict[str, Any]:
    models: list[dict[str, Any]] = httpx.get(server.url + "/engy/ps").json()["models"]
    return models[0]


def model_id(server: EngyServer) -> str:
    served: str = httpx.get(server.url + "/api/hello").json()["models"][0]
    return served


def messages(server: EngyServer, conversation: list[dict[str, str]]) -> tuple[str, int, int]:
    """(answer, prompt tokens read from cache, prompt tokens evaluated)."""
    with anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0) as client:
        r = client.messages.create(
            model=model_id(server), max_tokens=12, messages=conversation, extra_body=GREEDY
        )
    text = "".join(b.text for b in r.content if b.type == "text")
    return text, r.usage.cache_read_input_tokens or 0, r.usage.input_tokens


@pytest.fixture(scope="module")
def q8(moe: Path) -> Iterator[EngyServer]:
    server = EngyServer(str(moe), "--ctx-size", "4096", "-ctk", "q8_0", "-ctv", "q8_0")
    yield server
    server.stop()


def test_a_q8_0_cache_serves_every_endpoint(q8: EngyServer) -> None:
    text, _, _ = messages(q8, FIRST)
    assert text
    gpt = openai.OpenAI(base_url=q8.url + "/v1", api_key="x", max_retries=0)
    r = gpt.responses.create(model=model_id(q8), input="note 3?", max_output_tokens=8)
    assert r.output_text
    chat = gpt.chat.completions.create(
        model=model_id(q8), messages=[{"role": "user", "content": "note 3?"}], max_tokens=8
    )
    assert chat.choices[0].message.content
    stream = gpt.chat.completions.create(
        model=model_id(q8),
        messages=[{"role": "user", "content": "note 5?"}],
        max_tokens=8,
        stream=True,
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)


def test_q8_0_halves_the_kv_cache_llama_cpp_allocates(moe: Path, q8: EngyServer) -> None:
    f16 = EngyServer(str(moe), "--ctx-size", "4096")
    try:
        full = ps(f16)
    finally:
        f16.stop()
    quantized = ps(q8)
    assert (full["kv_types"], quantized["kv_types"]) == ("f16", "q8_0")
    # q8_0 stores 32 values in 34 bytes, f16 in 64
    assert quantized["kv_bytes"] / full["kv_bytes"] == pytest.approx(34 / 64, rel=0.02)
    assert "KV cache  q8_0" in q8.output()  # the banner says it


def test_a_64k_window_in_half_the_kv_memory_reads_a_prompt_past_32k() -> None:
    """What an agent on a laptop asks for: a 64k window whose KV cache takes
    half of f16's, filled past 32k tokens (the usual default) and answered.
    The same tiny MoE, its own window 64k."""
    long = tiny_moe(context_length=65536)
    window = ("--ctx-size", "65536", "--parallel", "1", "--cache-ram", "0")
    f16 = EngyServer(str(long), *window)
    try:
        full = ps(f16)
    finally:
        f16.stop()
    q8_0 = EngyServer(str(long), *window, "-ctk", "q8_0", "-ctv", "q8_0")
    try:
        half = ps(q8_0)
        assert half["context_length"] == full["context_length"] == 65536
        assert half["kv_bytes"] / full["kv_bytes"] == pytest.approx(34 / 64, rel=0.02)
        notes = "\n".join(f"note {i}: keep {i * 37 % 100}" for i in range(2900))  # 33.7k tokens
        text, cached, evaluated = messages(q8_0, [{"role": "user", "content": notes + "\n7?"}])
        assert text and cached + evaluated > 32768
    finally:
        q8_0.stop()


def test_a_quantized_cache_survives_a_restart_and_never_restores_into_another_type(
    moe: Path, tmp_path: Path
) -> None:
    disk = tmp_path / "kv"

    def serve(*types: str) -> EngyServer:
        return EngyServer(str(moe), "--ctx-size", "4096", "--cache-disk", str(disk), *types)

    q8_0 = ("-ctk", "q8_0", "-ctv", "q8_0")
    server = serve(*q8_0)
    try:
        answer, _, prompt = messages(server, FIRST)
    finally:
        server.stop()
    second = [*FIRST, {"role": "assistant", "content": answer}, {"role": "user", "content": "8?"}]

    def turn2(*args: str) -> tuple[str, int, int]:
        s = serve(*args)
        try:
            return messages(s, second)
        finally:
            s.stop()

    warm, cached, evaluated = turn2(*q8_0)
    assert cached >= prompt and evaluated < cached / 4  # turn 1 came from disk
    cold, none, _ = turn2(*q8_0, "--cache-disk-size", "0")
    assert none == 0 and warm == cold  # and it is the state a cold read makes
    # The same prompt on f16, or on q4_0, reads nothing of the q8_0 states.
    for other in (("-ctk", "f16", "-ctv", "f16"), ("-ctk", "q4_0", "-ctv", "q4_0")):
        _, restored, _ = turn2(*other)
        assert restored == 0, other


def test_a_combination_llama_cpp_cannot_run_is_a_clear_error_at_start(moe: Path) -> None:
    with pytest.raises(RuntimeError, match="--cache-type-v q8_0 needs flash attention"):
        EngyServer(str(moe), "-ctv", "q8_0", "--flash-attn", "off")
    with pytest.raises(RuntimeError, match="'q3_k' is not a KV cache type"):
        EngyServer(str(moe), "-ctk", "q3_k")


def test_ctx_size_auto_fits_the_budget_and_a_quantized_cache_doubles_it(moe: Path) -> None:
    budget = ("--memory-budget", "0.05", "--cache-ram", "0", "--parallel", "2")
    windows = {}
    for kv in ("f16", "q8_0"):
        s = EngyServer(str(moe), "--ctx-size", "auto", *budget, "-ctk", kv, "-ctv", kv)
        try:
            windows[kv] = ps(s)["context_length"]
            assert ps(s)["fitted"] and "--ctx-size auto" in s.output()
            info = httpx.get(s.url + "/v1/models").json()["data"][0]
            assert info["max_input_tokens"] == windows[kv]
        finally:
            s.stop()
    assert 2048 <= windows["f16"] < 32768  # below the model's own: the budget said so
    assert windows["q8_0"] / windows["f16"] == pytest.approx(64 / 34, rel=0.05)
    # The model's own window is more than that budget holds: refused at start.
    with pytest.raises(RuntimeError, match=r"--ctx-size 32768 x 2 conversations needs"):
        EngyServer(str(moe), "--ctx-size", "32768", *budget)


def test_experts_stay_in_cpu_memory_and_the_answers_do_not_change(moe: Path) -> None:
    answers, splits = [], []
    for args in ((), ("--cpu-moe",), ("--n-cpu-moe", "1")):
        s = EngyServer(str(moe), "--ctx-size", "4096", "--verbose", *args)
        try:
            answers.append(messages(s, FIRST)[0])
            splits.append(ps(s)["split"])
            log = s.output()
        finally:
            s.stop()
        # llama.cpp's own load log: each expert tensor it put in CPU memory
        overridden = [line for line in log.splitlines() if "buffer type overridden to CPU" in line]
        expected = {(): 0, ("--cpu-moe",): 4 * 3, ("--n-cpu-moe", "1"): 3}[args]
        assert len(overridden) == expected, log[-3000:]
        assert all("_exps.weight" in line for line in overridden)
    assert answers[0] == answers[1] == answers[2]
    assert "experts of 4 layers in CPU memory" in splits[1]
    assert "experts of 1 layer in CPU memory" in splits[2]
