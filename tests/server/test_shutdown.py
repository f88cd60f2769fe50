"""Graceful shutdown of a real `engy serve`: on SIGTERM (or Ctrl-C) streams
in flight get a grace period, then each ends with its protocol's terminal
error event, the models are freed and the process exits 0; a second signal
ends everything at once."""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from support.server import EngyServer

from engy_local.server.shutdown import Drain

GRACE = 2.0


def stream_events(url: str, path: str, body: dict[str, Any], started: threading.Event) -> list[Any]:
    """Every SSE event of one streaming request, as (event, data); sets
    `started` once the model has written something. Chat Completions names
    no events: its chunks come as ("chunk", data), its end as ("[DONE]", None)."""
    events: list[Any] = []
    try:
        with httpx.stream("POST", url + path, json=body, timeout=120) as r:
            assert r.status_code == 200, r.read()
            name = None
            for line in r.iter_lines():
                if line.startswith("event: "):
                    name = line[7:]
                elif line == "data: [DONE]":
                    events.append(("[DONE]", None))
                elif line.startswith("data: "):
                    data = json.loads(line[6:])
                    events.append((name or "chunk", data))
                    content = [c["delta"].get("content") for c in data.get("choices", [])]
                    if name in ("content_block_delta", "response.output_text.delta") or any(
                        content
                    ):
                        started.set()
    except httpx.HTTPError as exc:  # the connection went away without an end
        events.append(("transport", str(exc)))
    started.set()
    return events


def long_streams(model: str) -> list[tuple[str, dict[str, Any]]]:
    hi = [{"role": "user", "content": "Write a long story."}]
    return [
        ("/v1/messages", {"model": model, "max_tokens": 3000, "stream": True, "messages": hi}),
        ("/v1/messages", {"model": model, "max_tokens": 3000, "stream": True, "messages": hi}),
        (
            "/v1/responses",
            {"model": model, "max_output_tokens": 3000, "stream": True, "input": "A story."},
        ),
        (
            "/v1/chat/completions",
            {"model": model, "max_tokens": 3000, "stream": True, "messages": hi},
        ),
    ]


def start_streams(server: EngyServer) -> tuple[list[threading.Thread], list[list[Any]]]:
    model = httpx.get(server.url + "/v1/models").json()["data"][0]["id"]
    results: list[list[Any]] = [[] for _ in long_streams(model)]
    threads = []
    for i, (path, body) in enumerate(long_streams(model)):
        started = threading.Event()

        def run(
            i: int = i,
            path: str = path,
            body: dict[str, Any] = body,
            started: threading.Event = started,
        ) -> None:
            results[i] = stream_events(server.url, path, body, started)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        assert started.wait(120), "the stream never started"
        threads.append(thread)
    return threads, results


def terminal(path: str, events: list[Any]) -> tuple[str, Any]:
    assert events, "no events"
    name, data = events[-1]
    if path == "/v1/chat/completions":  # an error chunk, then [DONE]
        assert name == "[DONE]" and len(events) >= 2, events[-3:]
        name, data = events[-2]
        if "error" in data:
            assert data["error"]["code"] == "server_is_overloaded"
            assert "shutting down" in data["error"]["message"]
            return "error chunk", data
        assert data["choices"][0]["finish_reason"] is not None, events[-3:]
        return "finished", data
    if path == "/v1/messages":
        assert name in ("message_stop", "error"), events[-3:]
        if name == "error":
            assert data["error"]["type"] == "overloaded_error"
            assert "shutting down" in data["error"]["message"]
    else:
        assert name in ("response.completed", "response.incomplete", "response.failed"), events[-3:]
        if name == "response.failed":
            assert data["response"]["error"]["code"] == "server_is_overloaded"
    return name, data


def test_sigterm_with_three_streams_in_flight(tiny_qwen3: Path) -> None:
    server = EngyServer(str(tiny_qwen3), "--ctx-size", "4096", "--shutdown-grace", str(GRACE))
    try:
        threads, results = start_streams(server)
        signalled = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        # No new requests: the listening socket is closed (or, racing it, a 503).
        try:
            r = httpx.get(server.url + "/v1/models", timeout=5)
            assert r.status_code == 503
        except httpx.ConnectError:
            pass
        code = server.proc.wait(timeout=GRACE + 30)
        took = time.monotonic() - signalled
        for thread in threads:
            thread.join(timeout=30)
    finally:
        server.stop()
    assert code == 0, server.output()
    assert took < GRACE + 30
    names = [
        terminal(path, events)[0]
        for (path, _), events in zip(long_streams("m"), results, strict=True)
    ]
    # 3000 tokens take far longer than the grace: the drain ended them.
    assert names == ["error", "error", "response.failed", "error chunk"], names
    assert "engy stopped" in server.output()


def test_a_second_signal_ends_at_once(tiny_qwen3: Path) -> None:
    server = EngyServer(str(tiny_qwen3), "--ctx-size", "4096", "--shutdown-grace", "120")
    try:
        threads, results = start_streams(server)
        signalled = time.monotonic()
        server.proc.send_signal(signal.SIGINT)
        time.sleep(0.5)
        server.proc.send_signal(signal.SIGINT)
        code = server.proc.wait(timeout=60)
        took = time.monotonic() - signalled
        for thread in threads:
            thread.join(timeout=30)
    finally:
        server.stop()
    assert code == 0, server.output()
    assert took < 60  # not the 120 s grace
    for (path, _), events in zip(long_streams("m"), results, strict=True):
        assert events
        if events[-1][0] != "transport":  # a stream may be cut without its end
            terminal(path, events)


def test_a_drain_begun_before_any_request_still_ends_it() -> None:
    drain = Drain()
    drain.begin(0.2)  # the signal came while the first request was loading

    async def first_request() -> float:
        started = time.monotonic()
        await asyncio.wait_for(drain.expired(), 10)
        return time.monotonic() - started

    assert asyncio.run(first_request()) < 5
    later = Drain()

    async def second_signal() -> None:
        waiting = asyncio.ensure_future(later.expired())
        await asyncio.sleep(0)
        later.begin(60)
        later.begin(0)  # at once
        await asyncio.wait_for(waiting, 10)

    asyncio.run(second_signal())
