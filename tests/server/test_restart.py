"""The first turn after a restart, through a real `engy serve` and the
official SDKs: a conversation's prompt is read from the disk tier after a
SIGTERM and a new start, with the same greedy answer as without a cache; and
a client that resends a prompt still being read joins that read."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import anthropic
import httpx
import openai
from support.server import EngyServer

# This SDK has no temperature argument; the API takes it (greedy: 0).
GREEDY = {"temperature": 0}
NOTES = "\n".join(f"note {i}: the code for item {i} is {i * 37 % 1000}" for i in range(220))


def model_id(server: EngyServer) -> str:
    served: str = httpx.get(server.url + "/api/hello").json()["models"][0]
    return served


def terminate(server: EngyServer) -> None:
    """SIGTERM, as a service manager stops it (a graceful stop)."""
    server.proc.send_signal(signal.SIGTERM)
    server.proc.wait(timeout=120)
    server.stop()


def test_a_conversation_is_read_from_disk_after_a_restart(tiny_qwen3: Path, tmp_path: Path) -> None:
    disk = tmp_path / "kv"
    first = [{"role": "user", "content": NOTES + "\nWhich code has item 3?"}]

    server = EngyServer(str(tiny_qwen3), "--ctx-size", "8192", "--cache-disk", str(disk))
    client = anthropic.Anthropic(base_url=server.url, api_key="x")
    turn1 = client.messages.create(
        model=model_id(server), max_tokens=12, messages=first, extra_body=GREEDY
    )
    terminate(server)
    assert turn1.usage.cache_read_input_tokens == 0
    answer = "".join(b.text for b in turn1.content if b.type == "text")
    second = [
        *first,
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "And 4?"},
    ]

    def turn2(*args: str) -> tuple[str, int, int]:
        s = EngyServer(str(tiny_qwen3), "--ctx-size", "8192", *args)
        try:
            c = anthropic.Anthropic(base_url=s.url, api_key="x")
            r = c.messages.create(
                model=model_id(s), max_tokens=12, messages=second, extra_body=GREEDY
            )
            text = "".join(b.text for b in r.content if b.type == "text")
            return text, r.usage.cache_read_input_tokens or 0, r.usage.input_tokens
        finally:
            s.stop()

    warm, cached, uncached = turn2("--cache-disk", str(disk))
    cold, none, _ = turn2("--cache-disk-size", "0")
    prompt_of_turn1 = turn1.usage.input_tokens
    assert cached >= prompt_of_turn1  # all of turn 1's prompt came from disk
    assert uncached < cached / 4  # only the new turn was evaluated
    assert none == 0 and warm == cold  # the same greedy answer as without the cache

    # The other endpoint reads the same store: Responses reports it too.
    s = EngyServer(str(tiny_qwen3), "--ctx-size", "8192", "--cache-disk", str(disk))
    try:
        gpt = openai.OpenAI(base_url=s.url + "/v1", api_key="x")
        r = gpt.responses.create(
            model=model_id(s), input=first, max_output_tokens=16, temperature=0
        )
        assert r.usage is not None
        assert r.usage.input_tokens_details.cached_tokens >= 0.9 * r.usage.input_tokens
    finally:
        s.stop()


def prefill_log(server: EngyServer) -> list[str]:
    return [line for line in server.output().splitlines() if " prompt=" in line]


def test_a_resent_prompt_joins_the_read_in_progress(gemma_path: Path, engy_home: Path) -> None:
    server = EngyServer("gemma-3-270m-base", "--parallel", "2", home=engy_home)
    body = {
        "model": model_id(server),
        "max_tokens": 8,
        "temperature": 0,
        "messages": [{"role": "user", "content": NOTES + "\nRepeat the notes."}],
    }
    try:
        results: dict[str, dict[str, int]] = {}

        def send(name: str, body: dict[str, object]) -> None:
            r = httpx.post(server.url + "/v1/messages", json=body, timeout=600)
            results[name] = r.json()["usage"]

        def stream_then_hang_up(body: dict[str, object], after: float) -> None:
            """A client that gives up mid-prefill and goes away."""
            with (
                httpx.Client(timeout=600) as client,
                client.stream(
                    "POST", server.url + "/v1/messages", json={**body, "stream": True}
                ) as r,
            ):
                timer = threading.Timer(after, r.close)
                timer.start()
                try:
                    for _ in r.iter_lines():
                        pass
                except httpx.HTTPError:
                    pass  # closed under it: gone
                finally:
                    timer.cancel()

        for hang_up in (None, 2.0):
            # Long enough to be still reading when the copy arrives (and,
            # for the one that hangs up, when it goes).
            notes = NOTES if hang_up is None else "\n".join([NOTES] * 3)
            round_body = {
                **body,
                "system": f"Round {hang_up}.",
                "messages": [{"role": "user", "content": notes + "\nRepeat the notes."}],
            }
            if hang_up is None:
                first = threading.Thread(target=send, args=("first", round_body))
            else:
                first = threading.Thread(target=stream_then_hang_up, args=(round_body, hang_up))
            first.start()
            time.sleep(1.0)
            send("again", round_body)
            first.join(600)
            again = results["again"]
            n = again["input_tokens"] + again["cache_read_input_tokens"]
            if hang_up is None:
                # It waited for the first one's read and started from its end.
                assert again["cache_read_input_tokens"] >= n - 1, again
            else:
                # The first one went away mid-read: the read went on for this
                # one from where it was, nothing evaluated twice.
                assert 0 < again["cache_read_input_tokens"] < n - 1, again
                assert "a resent prompt takes over its read" in server.output()
        joined = [line for line in prefill_log(server) if " joined" in line]
        assert len(joined) == 2, prefill_log(server)
    finally:
        server.stop()
