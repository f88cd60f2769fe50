"""MoE experts in CPU memory on a GPU: engy's --cpu-moe and --n-cpu-moe
beside llama-server's same flags, on the same GGUF. For a machine with a
GPU and a CUDA (or other offloading) build of both.

    LLAMA_SERVER=/path/to/llama-server python bench/moe_offload.py [--model GGUF]

Per placement (every layer offloaded; the experts of the first half of the
MoE layers in CPU memory; every expert in CPU memory; nothing offloaded):
where the weights went (engy ps's split line; llama-server's own
"model buffer size" lines), the GPU memory each server process holds
(nvidia-smi), prefill and decode tokens/s (the median of --rounds rounds,
the servers taking turns), and whether engy's greedy answer is the one it
gives with every weight on the GPU. The model is by default a random
Qwen3 MoE that tests/support/hybrid.py builds (--layers layers of width
--width, 4 experts of which 2 run, half precision); --model takes any GGUF.
Not a test and not run in CI.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

from bench import REPO, ask_engy, ask_llama, fresh_round, start_engy, start_llama, take_turns

STORY = [{"role": "user", "content": "note 3? note 5? keep going."}]
_BUFFER = re.compile(r"(\S+) model buffer size =\s+([\d.]+) MiB")


def random_moe(width: int, layers: int) -> Path:
    sys.path.insert(0, str(REPO / "tests"))
    from support.hybrid import hybrid_gguf_cached  # type: ignore[import-not-found]

    cache = REPO / ".engy-test" / "ggufs"
    built = hybrid_gguf_cached(cache, arch="qwen3moe", n_embd=width, n_layer=layers, half=True)
    return Path(built)


def gpu_mib(pid: int) -> float | None:
    """The GPU memory process `pid` holds, as nvidia-smi reports it."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 2 and fields[0] == str(pid):
            return float(fields[1])
    return None


def buffers(log: Path) -> str:
    """llama.cpp's load log, summed per buffer: "CUDA0 3012 MiB, CPU 1500 MiB"."""
    sizes: dict[str, float] = {}
    for name, mib in _BUFFER.findall(log.read_text(errors="replace")):
        sizes[name] = sizes.get(name, 0.0) + float(mib)
    return ", ".join(f"{name} {mib:.0f} MiB" for name, mib in sizes.items())


def overridden(log: Path) -> int:
    """The tensors llama.cpp's load log says it put elsewhere by name (-ot)."""
    text = log.read_text(errors="replace")
    return sum("buffer type overridden to" in line for line in text.splitlines())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--ctx-size", type=int, default=8192)
    parser.add_argument("--prompt", type=int, default=1500, help="prompt tokens (about)")
    parser.add_argument("--decode", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--no-cpu-only", action="store_true", help="skip the CPU-only run")
    args = parser.parse_args()
    model = args.model or random_moe(args.width, args.layers)
    binary = os.environ.get("LLAMA_SERVER")
    logs = Path(tempfile.mkdtemp(prefix="moe-offload-"))
    half = max(1, args.layers // 2)
    # (name, engy's flags, llama-server's)
    placements = [
        ("all on GPU", ["--gpu-layers", "-1"], ["-ngl", "999"]),
        (f"--n-cpu-moe {half}", ["--n-cpu-moe", str(half)], ["-ngl", "999", "-ncmoe", str(half)]),
        ("--cpu-moe", ["--cpu-moe"], ["-ngl", "999", "--cpu-moe"]),
        ("CPU only", ["--gpu-layers", "0"], ["-ngl", "0"]),
    ][: 3 if args.no_cpu_only else 4]
    print(f"model {model.name} ({model.stat().st_size / (1 << 20):.0f} MiB), logs in {logs}")
    first_answer = None
    for name, engy_args, llama_args in placements:
        common = ["--ctx-size", str(args.ctx_size), "--parallel", "1", "--flash-attn", "on"]
        servers = [start_engy(model, args.threads, logs, *common, *engy_args, "--verbose")]
        try:
            if binary:
                extra = ["-fa", "on", "-lv", "4", *llama_args]  # -lv 4: its buffer lines
                servers.append(
                    start_llama(
                        binary, model, args.threads, args.ctx_size, logs, *extra, parallel=1
                    )
                )
            asks = [ask_engy(servers[0].url)] + [ask_llama(s.url) for s in servers[1:]]
            _, answer = asks[0]("", STORY, 24, {})
            first_answer = first_answer if first_answer is not None else answer
            runs = take_turns(
                asks, args.rounds, lambda ask: fresh_round(ask, args.prompt, STORY, args.decode)
            )
            split = httpx.get(servers[0].url + "/engy/ps").json()["models"][0]["split"]
            memory = [gpu_mib(s.proc.pid) for s in servers]
        finally:
            for server in servers:
                server.stop()
        print(f"\n{name}")
        print(f"  engy split      {split}")
        print(f"  engy overrides  {overridden(servers[0].log)} tensors put in CPU memory by name")
        print(f"  engy answer     {'same' if answer == first_answer else 'DIFFERENT'}: {answer!r}")
        for server, got, mib in zip(servers, runs, memory, strict=True):
            pre = statistics.median(p for p, _ in got)
            dec = statistics.median(d for _, d in got)
            gpu = f"{mib:.0f} MiB" if mib is not None else "-"
            speed = f"prefill {pre:8.1f} tok/s  decode {dec:7.1f} tok/s"
            print(f"  {server.name:14}  {speed}  GPU {gpu}")
            print(f"  {'':14}  {buffers(server.log)}")


if __name__ == "__main__":
    main()
