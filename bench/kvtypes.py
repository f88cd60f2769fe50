"""KV cache types: prefill and decode with f16, q8_0 and q4_0 caches, engy
beside llama-server with the same -ctk/-ctv, and the KV memory each
allocated (llama.cpp's own `llama_kv_cache: size`: engy ps, llama-server's log).

    LLAMA_SERVER=$(bench/build_llama_server.sh) .venv/bin/python bench/kvtypes.py \\
        --model ~/.cache/engy/real-models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf \\
        --llama-server "$(bench/build_llama_server.sh --engine 0.3.36)"

Each --llama-server (and $LLAMA_SERVER) joins the run: beside the newest
llama.cpp, one built from engy's own engine tells engy's work apart from
llama.cpp's version.

Every server gets one sequence of --ctx-size tokens, flash attention on (a
quantized V needs it; f16 runs with it too, so the types compare alone) and
the same threads; each type starts fresh servers, all loaded, taking turns
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

from bench import STORY, ask_engy, ask_llama, fresh_round, start_engy, start_llama, take_turns

TYPES = ("f16", "q8_0", "q4_0")
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
    parser.add_argument(
        "--llama-server", action="append", default=[], help="another llama-server to run beside"
    )
    args = parser.parse_args()
    binaries = [b for b in [os.environ.get("LLAMA_SERVER"), *args.llama_server] if b]
    logs = Path(tempfile.mkdtemp(prefix="kvtypes-"))
    rows: list[tuple[str, str, float, list[tuple[float, float]]]] = []
    for kv in args.types:
        types = ["--cache-type-k", kv, "--cache-type-v", kv]
        servers = [
            start_engy(
                args.model, args.threads, logs, "--ctx-size", str(args.ctx_size),
                "--parallel", "1", "--flash-attn", "on", "--speculative", "off", *types,
            )
        ]  # fmt: skip
        try:
            for binary in binaries:
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
            # llama.cpp's own figure, as engy ps shows it
            status = httpx.get(servers[0].url + "/engy/ps").json()["models"][0]
            figures[0]["KV MiB"] = status["kv_bytes"] / (1 << 20)
        finally:
            for server in servers:
                server.stop()
        for server, theirs in zip(servers[1:], figures[1:], strict=True):
            theirs["KV MiB"] = kv_mib(server.log)
        for k, metric in enumerate(("prefill tok/s", "decode tok/s", "KV MiB")):
            others = []
            for i, theirs in enumerate(figures[1:], start=1):
                # Each round's engy/llama ratio, paired: the VM's slow spells
                # move the figures of one round alike.
                paired = statistics.median(
                    [a[k] / b[k] for a, b in zip(runs[0], runs[i], strict=True) if b[k]] or [0.0]
                ) if k < 2 else 0.0  # fmt: skip
                others.append((theirs[metric], paired))
            rows.append((kv, metric, figures[0][metric], others))
    print(f"model {args.model.name}, window {args.ctx_size}, {args.threads} threads")
    for i, binary in enumerate(binaries, start=1):
        print(f"llama-server {i}: {binary}")
    columns = "".join(
        f"  {f'llama {i}':>9}  engy/llama  paired" for i in range(1, len(binaries) + 1)
    )
    print(f"{'type':6}  {'metric':14}  {'engy':>9}{columns}")
    for kv, metric, a, others in rows:
        line = f"{kv:6}  {metric:14}  {a:9.1f}"
        for b, pair in others:
            ratio = f"{a / b:.2f}" if b else "-"
            both = f"{pair:.2f}" if pair else "-"
            line += f"  {b:9.1f}  {ratio:>10}  {both:>6}"
        print(line)


if __name__ == "__main__":
    main()
