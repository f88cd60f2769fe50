"""KV cache types: prefill and decode with f16, q8_0 and q4_0 caches, engy
beside llama-server with the same -ctk/-ctv, and the KV memory each
allocated (llama.cpp's own `llama_kv_cache: size`: engy ps, llama-server's log).

    LLAMA_SERVER=$(bench/build_llama_server.sh) .venv/bin/python bench/kvtypes.py \\
        --model ~/.cache/engy/real-models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf

Both servers get one sequence of --ctx-size tokens, flash attention on (a
quantized V needs it; f16 runs with it too, so the types compare alone) and
the same threads; each type starts a fresh pair, both loaded, taking turns
request by request. Per type: the median of --rounds rounds of a prompt of
--prompt tokens that nothing has cached (prefill tokens/s), then --decode
tokens of free text (decode tokens/s); "paired" is the median of each
round's engy/llama-server ratio. Not a test and not run in CI.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import tempfile
from pathlib import Path

import httpx

from bench import ask_engy, ask_llama, fresh_round, start_engy, start_llama, take_turns

TYPES = ("f16", "q8_0", "q4_0")
STORY = [{"role": "user", "content": "Write a long story about a lighthouse keeper."}]
_KV = re.compile(r"llama_kv_cache: size =\s+([\d.]+) MiB")


def kv_mib(log: Path) -> float:
    return sum(float(m[1]) for m in _KV.finditer(log.read_text(errors="replace")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--ctx-size", type=int, default=16384)
    parser.add_argument("--prompt", type=int, default=3000, help="prompt tokens (about)")
    parser.add_argument("--decode", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--types", nargs="+", default=list(TYPES), help="cache types to run")
    args = parser.parse_args()
    binary = os.environ.get("LLAMA_SERVER")
    logs = Path(tempfile.mkdtemp(prefix="kvtypes-"))
    rows: list[tuple[str, str, float, float | None, float | None]] = []
    for kv in args.types:
        types = ["--cache-type-k", kv, "--cache-type-v", kv]
        servers = [
            start_engy(
                args.model, args.threads, logs, "--ctx-size", str(args.ctx_size),
                "--parallel", "1", "--flash-attn", "on", "--speculative", "off", *types,
            )
        ]  # fmt: skip
        try:
            if binary:
                # -lv 4: its KV size line; -ngl 999: every layer, as engy's
                # auto, where there is a GPU
                extra = ["-fa", "on", "-lv", "4", "-ngl", "999", *types]
                servers.append(
                    start_llama(
                        binary, args.model, args.threads, args.ctx_size, logs, *extra, parallel=1
                    )
                )
            asks = [ask_engy(servers[0].url)] + [ask_llama(s.url) for s in servers[1:]]
            runs = take_turns(
                asks, args.rounds, lambda ask: fresh_round(ask, args.prompt, STORY, args.decode)
            )
            figures = [
                {
                    "prefill tok/s": statistics.median(p for p, _ in got),
                    "decode tok/s": statistics.median(d for _, d in got),
                }
                for got in runs
            ]
            # Each round's engy/llama ratio, paired: the VM's slow spells
            # move both servers' figures of one round alike.
            paired = {
                metric: statistics.median(
                    [a[k] / b[k] for a, b in zip(*runs, strict=True) if b[k]] or [0.0]
                )
                for k, metric in enumerate(("prefill tok/s", "decode tok/s"))
            } if binary else {}  # fmt: skip
            # llama.cpp's own figure, as engy ps shows it
            status = httpx.get(servers[0].url + "/engy/ps").json()["models"][0]
            figures[0]["KV MiB"] = status["kv_bytes"] / (1 << 20)
        finally:
            for server in servers:
                server.stop()
        if binary:
            figures[1]["KV MiB"] = kv_mib(servers[1].log)
        for metric in ("prefill tok/s", "decode tok/s", "KV MiB"):
            other = figures[1][metric] if binary else None
            rows.append((kv, metric, figures[0][metric], other, paired.get(metric)))
    print(f"model {args.model.name}, window {args.ctx_size}, {args.threads} threads")
    print(f"{'type':6}  {'metric':14}  {'engy':>9}  {'llama-server':>12}  engy/llama  paired")
    for kv, metric, a, b, pair in rows:
        ratio = f"{a / b:.2f}" if b else "-"
        theirs = f"{b:12.1f}" if b is not None else f"{'-':>12}"
        both = f"{pair:.2f}" if pair is not None else "-"
        print(f"{kv:6}  {metric:14}  {a:9.1f}  {theirs}  {ratio:>10}  {both:>6}")


if __name__ == "__main__":
    main()
