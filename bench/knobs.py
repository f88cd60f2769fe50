"""What the engine's knobs are worth on this machine, in one run: weight
repacking on/off, flash attention auto/off, and the prefill batch size.

    .venv/bin/python bench/knobs.py [--model GGUF] [--prompt 3000] [--decode 64]

In-process (no HTTP): each setting loads the model, reads one prompt of
--prompt tokens (nothing cached) and decodes --decode tokens greedily;
prefill and decode tokens/s are printed side by side with the ratio to the
first row. Not a test; a few minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from dataclasses import replace

from engy_local.chat import Finished, Started, TextDelta
from engy_local.prompt.prepare import SamplingParams
from engy_local.runtime.engine.job import Job
from engy_local.runtime.engine.worker import Worker
from engy_local.runtime.loading import context
from engy_local.runtime.loading.model import LoadOptions, Model
from engy_local.server.backends import resolve_model
from engy_local.server.options import ServeOptions


def run_once(options: LoadOptions, batch: int, n_prompt: int, n_decode: int) -> tuple[float, float]:
    context.BATCH = batch
    model = Model(options)
    worker = Worker(model)
    try:
        words = " ".join(f"item{i} is {i * 7 % 13}." for i in range(n_prompt))
        text = model.template.render(
            [{"role": "user", "content": words}], add_generation_prompt=True
        )
        tokens = model.tokenize(text)[:n_prompt]
        marks: dict[str, float] = {}
        done = threading.Event()

        def emit(item: object) -> None:
            now = time.monotonic()
            if isinstance(item, Started):
                marks["start"] = now
            elif isinstance(item, TextDelta) and "first" not in marks:
                marks["first"] = now
            elif isinstance(item, Finished):
                marks["produced"] = item.usage.output_tokens
            elif item is None:
                marks["end"] = now
                done.set()

        parser = model.family.parser(tools={}, thinking=False, new_id=lambda: "call_1")
        params = SamplingParams(max_tokens=n_decode, temperature=0)
        worker.submit(Job(tokens, params, parser, emit))
        done.wait(1800)
        prefill = len(tokens) / (marks["first"] - marks["start"])
        # The model may end before --decode tokens: count what it produced.
        decode = (marks["produced"] - 1) / max(1e-6, marks["end"] - marks["first"])
        return prefill, decode
    finally:
        worker.close()
        model.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", help="GGUF (default: the catalog's default model)")
    ap.add_argument("--prompt", type=int, default=3000)
    ap.add_argument("--decode", type=int, default=64)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    args = ap.parse_args()
    served = resolve_model(args.model, ServeOptions(ctx_size=32768, threads=args.threads))
    base = replace(served.options, parallel=1, cache_ram=0)
    settings = [
        ("repack on, flash auto, batch 512", replace(base, repack=True), 512),
        ("repack off", replace(base, repack=False), 512),
        ("flash off", replace(base, repack=True, flash_attn="off"), 512),
        ("batch 256", replace(base, repack=True), 256),
        ("batch 1024", replace(base, repack=True), 1024),
    ]
    print(
        f"{served.options.path.name}: {args.prompt} prompt tokens, {args.decode} decoded, "
        f"{args.threads} threads"
    )
    print(f"{'setting':34} {'prefill tok/s':>14} {'ratio':>6} {'decode tok/s':>13} {'ratio':>6}")
    first: tuple[float, float] | None = None
    for name, options, batch in settings:
        prefill, decode = run_once(options, batch, args.prompt, args.decode)
        first = first or (prefill, decode)
        print(
            f"{name:34} {prefill:14.1f} {prefill / first[0]:6.2f} "
            f"{decode:13.1f} {decode / first[1]:6.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
