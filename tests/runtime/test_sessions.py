"""Sessions and continuous batching through a real `engy serve`: each
conversation keeps its KV sequence, concurrent requests are batched without
changing what they say, a cancelled request leaves the others alone, and a
conversation pushed out of its sequence comes back from the RAM cache."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from support.server import EngyServer

pytestmark = pytest.mark.timeout(600)


def client(server: EngyServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0, timeout=300)


def ask(
    server: EngyServer,
    messages: list[dict[str, Any]],
    system: str = "",
    max_tokens: int = 8,
) -> anthropic.types.Message:
    kwargs: dict[str, Any] = {"system": system} if system else {}
    return client(server).messages.create(
        model=served_id(server),
        max_tokens=max_tokens,
        messages=messages,  # type: ignore[arg-type]
        extra_body={"temperature": 0},  # greedy: the same text alone and batched
        **kwargs,
    )


def served_id(server: EngyServer) -> str:
    ids: list[str] = [m["id"] for m in httpx.get(server.url + "/v1/models").json()["data"]]
    return ids[0]


def text_of(message: anthropic.types.Message) -> str:
    return "".join(b.text for b in message.content if b.type == "text")


def prompt_tokens(message: anthropic.types.Message) -> int:
    u = message.usage
    return u.input_tokens + (u.cache_read_input_tokens or 0)


SYSTEMS = {
    "a": "You are a terse assistant for a Rust project. " * 12,
    "b": "You are a helpful travel planner who answers in French. " * 12,
}
QUESTIONS = ["Say hello.", "Name a colour.", "Count to three.", "Say goodbye."]


def test_two_conversations_interleaved_keep_their_caches(gemma_server: EngyServer) -> None:
    history: dict[str, list[dict[str, Any]]] = {"a": [], "b": []}
    earlier: dict[str, int] = {}
    for turn in range(3):
        for name in ("a", "b"):
            history[name].append({"role": "user", "content": QUESTIONS[turn]})
            reply = ask(gemma_server, history[name], SYSTEMS[name])
            if turn > 0:
                # Everything the previous turn's prompt held is read from the cache.
                assert (reply.usage.cache_read_input_tokens or 0) >= earlier[name], (name, turn)
            earlier[name] = prompt_tokens(reply)
            history[name].append({"role": "assistant", "content": text_of(reply) or "ok"})


def _held(server: EngyServer) -> list[int]:
    """Tokens each KV sequence holds, as `engy ps` shows them."""
    [model] = httpx.get(server.url + "/engy/ps").json()["models"]
    return [s["tokens"] for s in model["sequences"]]


def test_an_idle_conversation_leaves_the_kv_cache_while_another_runs(
    gemma_server: EngyServer,
) -> None:
    """An idle conversation's cells would slow every other one's decode (one
    unified cache): it waits in the RAM cache instead, and its next turn
    still reads its whole prompt from cache."""
    rules = {k: " ".join(f"Rule {i}: {k} answers stay short." for i in range(60)) for k in "ab"}
    first = {
        k: ask(gemma_server, [{"role": "user", "content": "Say hello."}], rules[k]) for k in "ab"
    }
    assert min(prompt_tokens(m) for m in first.values()) > 300  # conversations, not greetings
    # Only b's sequence holds anything: a went to the RAM cache when b came.
    [b_held] = [n for n in _held(gemma_server) if n]
    assert b_held >= prompt_tokens(first["b"])
    again = [
        {"role": "user", "content": "Say hello."},
        {"role": "assistant", "content": text_of(first["a"]) or "ok"},
        {"role": "user", "content": "Again."},
    ]
    second = ask(gemma_server, again, rules["a"])
    assert (second.usage.cache_read_input_tokens or 0) >= prompt_tokens(first["a"])


def _together(server: EngyServer, prompts: list[str], max_tokens: list[int]) -> list[str]:
    out: list[str] = [""] * len(prompts)
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            reply = ask(server, [{"role": "user", "content": prompts[i]}], "", max_tokens[i])
            out[i] = text_of(reply)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    return out


PROMPTS = [
    "Write a haiku about the sea.",
    "List three prime numbers and explain why they are prime.",
    "What is the capital of France? Answer in one sentence.",
    "Describe a cat to someone who has never seen one.",
]


GEMMA_PROMPTS = [
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,",
    "Monday, Tuesday, Wednesday, Thursday,",
    "a b c d e f g h i j k",
    "10, 20, 30, 40, 50, 60, 70,",
]


@pytest.fixture(scope="module")
def endless_server(tiny_qwen3: Path) -> Iterator[EngyServer]:
    # This tiny model writes '"' for ever: only the token limit ends it.
    server = EngyServer(str(tiny_qwen3), "--ctx-size", "4096", "--parallel", "4")
    yield server
    server.stop()


LIMITS = [9, 17, 26, 33]


def test_concurrent_requests_each_get_their_own_limit_tiny(endless_server: EngyServer) -> None:
    alone = [
        text_of(ask(endless_server, [{"role": "user", "content": p}], "", n))
        for p, n in zip(PROMPTS, LIMITS, strict=True)
    ]
    assert [len(t) for t in alone] == LIMITS, alone
    assert _together(endless_server, PROMPTS, LIMITS) == alone


def test_concurrent_requests_say_what_they_say_alone_gemma(gemma_path: Path) -> None:
    # Repacked weights take another matrix kernel for a batch of several
    # rows than for one, which moves the last bits of the logits; without
    # repacking a batched sequence computes exactly what it does alone.
    # The prompts are ones this small model continues with some confidence:
    # where its logits are near ties, the order of additions decides.
    server = EngyServer(str(gemma_path), "--ctx-size", "4096", "--parallel", "4", "--no-repack")
    try:
        limits = [16] * len(GEMMA_PROMPTS)
        alone = [
            text_of(ask(server, [{"role": "user", "content": p}], "", 16)) for p in GEMMA_PROMPTS
        ]
        assert len(set(alone)) == len(GEMMA_PROMPTS)  # four different answers
        assert _together(server, GEMMA_PROMPTS, limits) == alone
    finally:
        server.stop()


def test_a_cancelled_stream_leaves_the_others_running(endless_server: EngyServer) -> None:
    results: dict[int, anthropic.types.Message] = {}

    def full(i: int) -> None:
        messages = [{"role": "user", "content": PROMPTS[i]}]
        results[i] = ask(endless_server, messages, "", LIMITS[i])

    body = {
        "model": served_id(endless_server),
        "max_tokens": 2000,
        "stream": True,
        "messages": [{"role": "user", "content": PROMPTS[3]}],
    }
    threads = [threading.Thread(target=full, args=(i,)) for i in range(3)]
    with httpx.stream("POST", endless_server.url + "/v1/messages", json=body, timeout=60) as r:
        seen = 0
        for line in r.iter_lines():
            if line.startswith("event: content_block_delta"):
                seen += 1
                if seen == 2:
                    for t in threads:
                        t.start()
                if seen >= 20:
                    break  # the client goes away mid-stream, while the others run
    for t in threads:
        t.join(300)
    for i in range(3):
        assert results[i].stop_reason == "max_tokens"
        assert results[i].usage.output_tokens == LIMITS[i]
        assert len(text_of(results[i])) == LIMITS[i]
    # The cancelled one gave its sequence back: the next request is served at once.
    assert len(text_of(ask(endless_server, [{"role": "user", "content": "x"}], "", 5))) == 5


@pytest.fixture(scope="module")
def single_server(gemma_path: Path) -> Iterator[EngyServer]:
    server = EngyServer(str(gemma_path), "--parallel", "1", "--ctx-size", "8192")
    yield server
    server.stop()


def test_an_evicted_conversation_comes_back_from_the_ram_cache(single_server: EngyServer) -> None:
    server = single_server
    long_system = " ".join(f"Rule {i}: keep answers short and precise." for i in range(120))
    conv = [{"role": "user", "content": "Say hello."}]
    started = time.monotonic()
    first = ask(server, conv, long_system, 4)
    full_prefill = time.monotonic() - started
    assert prompt_tokens(first) > 1000
    # Another conversation takes the only sequence.
    ask(server, [{"role": "user", "content": "Name a colour."}], "Be brief.", 4)
    conv += [
        {"role": "assistant", "content": text_of(first) or "ok"},
        {"role": "user", "content": "Again."},
    ]
    started = time.monotonic()
    second = ask(server, conv, long_system, 4)
    restored = time.monotonic() - started
    assert (second.usage.cache_read_input_tokens or 0) >= prompt_tokens(first)
    assert restored < full_prefill / 2, (restored, full_prefill)
    cached = second.usage.cache_read_input_tokens
    assert "seq=0" in server.output() and f"cached={cached}" in server.output()


def test_a_sliding_window_model_resumes_from_the_end_of_an_earlier_prompt(
    single_server: EngyServer,
) -> None:
    # Gemma 3 keeps only the last 512 positions (plus some slack) in most
    # layers. When a client sends an earlier answer back changed (as clients
    # that drop reasoning do) after the conversation has gone well past it,
    # those layers no longer reach back: the checkpoint taken at the end of
    # that turn's prompt does.
    server = single_server
    question = [{"role": "user", "content": "Tell me about the sea in one line."}]
    first = ask(server, question, "", 4)
    long_answer = " ".join(f"The sea, part {i}, is wide and deep." for i in range(110))
    follow = [{"role": "user", "content": "Go on."}]
    second = ask(server, [*question, {"role": "assistant", "content": long_answer}, *follow])
    assert prompt_tokens(second) > prompt_tokens(first) + 1000
    changed = [*question, {"role": "assistant", "content": "The sea is wide."}, *follow]
    third = ask(server, changed, "", 4)
    assert (third.usage.cache_read_input_tokens or 0) >= prompt_tokens(first)
