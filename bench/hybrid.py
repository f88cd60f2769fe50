"""A hybrid model's caches: engy beside llama-server (which keeps context
checkpoints of the recurrent state, 32 a slot by default), on the same GGUF.

    .venv/bin/python bench/hybrid.py [--model GGUF] [--rounds 3]
    LLAMA_SERVER=$(bench/build_llama_server.sh) .venv/bin/python bench/hybrid.py

The model is by default a random Qwen3.5 (GGUF arch qwen35: Gated DeltaNet
layers beside attention; 8 layers of width 1024, 700 MB in half precision,
reading about 1k tokens/s on 2 cores) that tests/support/hybrid.py builds;
--model takes any GGUF (a real Qwen3.5, LFM2, Nemotron H). An agent's
session with thinking off (Qwen3's template then writes an empty think
block that the next turn drops from the answer), each step a streamed
greedy request; figures are the share of the prompt read from cache (tokens
the server says it did not evaluate) and the time to the first token, the
median of --rounds sessions, each with a system prompt of its own:

    turn 2        system prompt (~1.7k tokens), a first turn, a side
                  request (another system prompt: a title), then turn 2:
                  cached % of turn 1's prompt
    resend        turn 1 sent again: cached % of its prompt
    edited        turn 2 with the first answer rewritten by the client
    shared        a new conversation with the same system prompt
    restart       turn 1, the server stopped and started again, turn 2
                  (engy with --cache-disk; llama-server keeps nothing)

Not a test; a few minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import REPO, Ask, Server, ask_engy, ask_llama, filler, start_engy, start_llama, table

CTX = 16384
ANSWER = 32  # tokens each answer runs to


# Thinking off, in each server's own words.
NO_THINKING: dict[str, dict[str, Any]] = {
    "engy": {"thinking": {"type": "disabled"}},
    "llama-server": {"chat_template_kwargs": {"enable_thinking": False}},
}


def random_qwen35() -> Path:
    sys.path.insert(0, str(REPO / "tests"))
    from support.hybrid import hybrid_gguf_cached  # type: ignore[import-not-found]

    cache = REPO / ".engy-test" / "ggufs"
    return Path(hybrid_gguf_cached(cache, arch="qwen35", n_embd=1024, n_layer=8, half=True))


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def session(ask: Ask, seed: int, extra: dict[str, Any]) -> dict[str, float]:
    """One session's figures (see the module's docstring)."""
    system = f"You are a coding agent (session {seed}).\n" + filler(1700, seed)
    first = [user("Read this file and say what it does.\n" + filler(400, seed + 1))]
    r1, answer = ask(system, first, ANSWER, extra)
    ask("You write session titles.", [user("Title for: fix the parser")], 8, extra)
    later = user("Now make the parser keep going after an error.")
    turn2 = [*first, {"role": "assistant", "content": answer or "ok"}, later]
    r2, _ = ask(system, turn2, 8, extra)
    again, _ = ask(system, first, 8, extra)
    edited = [*first, {"role": "assistant", "content": "It reads the build log."}, later]
    r3, _ = ask(system, edited, 8, extra)
    other, _ = ask(system, [user("Which rule mentions the parser?")], 8, extra)
    n1 = max(1, r1.prompt)
    return {
        "turn 1 prompt tokens": r1.prompt,
        "turn 2 cached % of turn 1": 100.0 * r2.cached / n1,
        "turn 2 TTFT s": r2.ttft,
        "turn 1 TTFT s": r1.ttft,
        "resend cached % of turn 1": 100.0 * again.cached / n1,
        "edited answer cached % of turn 1": 100.0 * r3.cached / n1,
        "shared system prompt cached %": 100.0 * other.cached / max(1, other.prompt),
    }


def restart(
    start: Callable[[], tuple[Server, Ask]], seed: int, extra: dict[str, Any]
) -> dict[str, float]:
    system = f"You are a coding agent (session {seed}).\n" + filler(1700, seed)
    first = [user("Read this file and say what it does.\n" + filler(400, seed + 1))]
    server, ask = start()
    try:
        r1, answer = ask(system, first, ANSWER, extra)
    finally:
        server.stop()
    server, ask = start()
    try:
        turn2 = [*first, {"role": "assistant", "content": answer or "ok"}, user("And then?")]
        r2, _ = ask(system, turn2, 8, extra)
    finally:
        server.stop()
    return {
        "turn 2 cached % of turn 1": 100.0 * r2.cached / max(1, r1.prompt),
        "turn 2 TTFT s": r2.ttft,
    }


def medians(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", type=Path, help="GGUF (default: a tiny random qwen35)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    model: Path = args.model or random_qwen35()
    binary = os.environ.get("LLAMA_SERVER")
    logs = Path(tempfile.mkdtemp(prefix="engy-bench-hybrid-"))
    print(f"model {model.name}, {args.threads} threads, logs in {logs}", flush=True)
    rows: list[tuple[str, str, float | None, float | None, str]] = []

    def add(workload: str, a: dict[str, float], b: dict[str, float] | None) -> None:
        for metric, value in a.items():
            rows.append((workload, metric, value, None if b is None else b.get(metric), ""))
        print(table(rows[-len(a) :]), "\n", flush=True)

    servers: list[Server] = []
    try:
        # A disk tier of this run's own: no prompt is found from an earlier run.
        own_disk = ("--cache-disk", str(logs / "kvcache-session"))
        engy = start_engy(model, args.threads, logs, "--ctx-size", str(CTX), *own_disk)
        servers.append(engy)
        llama = start_llama(binary, model, args.threads, CTX, logs) if binary else None
        if llama:
            servers.append(llama)
        asks = [(ask_engy(engy.url), NO_THINKING["engy"])]
        if llama:
            asks.append((ask_llama(llama.url), NO_THINKING["llama-server"]))
        results: list[list[dict[str, float]]] = [[] for _ in asks]
        for round_ in range(args.rounds):  # the servers in turn, each round
            for (ask, extra), out in zip(asks, results, strict=True):
                out.append(session(ask, 1000 + round_, extra))
        print("== session", flush=True)
        add("session", medians(results[0]), medians(results[1]) if llama else None)
        for server in servers:
            server.stop()
        servers.clear()

        disk = logs / "kvcache"

        def engy_once() -> tuple[Server, Ask]:
            extra = ("--ctx-size", str(CTX), "--cache-disk", str(disk))
            server = start_engy(model, args.threads, logs, *extra)
            return server, ask_engy(server.url)

        def llama_once() -> tuple[Server, Ask]:
            assert binary is not None
            server = start_llama(binary, model, args.threads, CTX, logs)
            return server, ask_llama(server.url)

        mine = [restart(engy_once, 2000 + r, NO_THINKING["engy"]) for r in range(args.rounds)]
        theirs = [
            restart(llama_once, 2000 + r, NO_THINKING["llama-server"]) for r in range(args.rounds)
        ] if binary else []  # fmt: skip
        print("== restart", flush=True)
        add("restart", medians(mine), medians(theirs) if theirs else None)
    finally:
        for server in reversed(servers):
            server.stop()
    print("== all figures\n" + table(rows))


if __name__ == "__main__":
    main()
