"""Decode with another conversation idle in the KV cache, engy beside
llama-server (both: 4 sequences in one unified cache).

    LLAMA_SERVER=$(bench/build_llama_server.sh) .venv/bin/python bench/idle.py \\
        --model ~/.cache/engy/real-models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf

In one unified cache llama.cpp's attention walks every cell up to the
highest one in use, whosever it is: an agent's second conversation (a
subagent, another session) left in the cache slows the first one's decode
when it comes back. Per round, with a fresh pair of system prompts of
--prompt tokens: conversation A's first turn (decode alone), then B's, then
A's second turn (decode after B); --decode tokens of free text each. Both
servers are loaded and take turns round by round. Not a test and not run in
CI.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
from pathlib import Path

from bench import Ask, ask_engy, ask_llama, start_engy, start_llama, system_prompt

ASKS = (
    "Write a long story about a lighthouse keeper.",
    "Now write another one, about her brother.",
)


def one_round(ask: Ask, args: argparse.Namespace) -> tuple[float, float, float]:
    """Decode tok/s of A's first turn, B's first turn, A's second turn."""
    a, b = (system_prompt(args.prompt, random.randrange(1 << 30)) for _ in range(2))
    first = [{"role": "user", "content": ASKS[0]}]
    run_a, text = ask(a, first, args.decode, {})
    run_b, _ = ask(b, first, args.decode, {})
    again = [*first, {"role": "assistant", "content": text}, {"role": "user", "content": ASKS[1]}]
    run_again, _ = ask(a, again, args.decode, {})
    if run_again.cached < run_a.prompt // 2:
        print(f"  (A's second turn read only {run_again.cached} tokens from cache)")
    return run_a.decode, run_b.decode, run_again.decode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--ctx-size", type=int, default=16384)
    parser.add_argument("--prompt", type=int, default=4000, help="system prompt tokens (about)")
    parser.add_argument("--decode", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args()
    binary = os.environ.get("LLAMA_SERVER")
    logs = Path(tempfile.mkdtemp(prefix="idle-"))
    ctx = ["--ctx-size", str(args.ctx_size)]
    servers = [start_engy(args.model, args.threads, logs, *ctx, "--speculative", "off")]
    try:
        if binary:
            servers.append(start_llama(binary, args.model, args.threads, args.ctx_size, logs))
        asks = [ask_engy(servers[0].url)] + [ask_llama(s.url) for s in servers[1:]]
        runs: list[list[tuple[float, float, float]]] = [[] for _ in servers]
        for _ in range(args.rounds):
            for ask, got in zip(asks, runs, strict=True):
                got.append(one_round(ask, args))
    finally:
        for server in servers:
            server.stop()
    print(f"model {args.model.name}, prompts ~{args.prompt} tokens, {args.threads} threads")
    print(f"median decode tok/s of {args.rounds} rounds; logs in {logs}")
    names = ("A alone", "B after A", "A after B")
    print(f"{'':10}  {'engy':>7}  {'llama-server':>12}  engy/llama")
    for i, name in enumerate(names):
        mine = statistics.median(r[i] for r in runs[0])
        theirs = statistics.median(r[i] for r in runs[1]) if binary else None
        other = f"{theirs:12.1f}" if theirs else f"{'-':>12}"
        ratio = f"{mine / theirs:.2f}" if theirs else "-"
        print(f"{name:10}  {mine:7.1f}  {other}  {ratio}")


if __name__ == "__main__":
    main()
