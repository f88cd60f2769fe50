"""Decode speed of a tool call under its grammar against free text, on one
model: engy's own per-request decode rate (its log line) for free text, a
forced call (tool_choice any: the grammar from the first token) and a call
under auto (the lazy grammar, from where the model starts the call).

    .venv/bin/python bench/calls.py \\
        --model ~/.cache/engy/real-models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf

Drafting is off (--speculative off): free text that repeats itself would
otherwise draft faster than anything. Each round asks the three in turn;
the figures are medians of --rounds. Not a test and not run in CI.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import tempfile
from pathlib import Path
from typing import Any

import httpx

from bench import Server, start_engy

WRITE_FILE = {
    "name": "write_file",
    "description": "Write text to a file, replacing what it held.",
    "input_schema": {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "Absolute path of the file."},
            "content": {"type": "string", "description": "The whole new content."},
        },
        "required": ["path", "content"],
    },
}
CALL = "{}: Write a four-line poem about the sea into the file /tmp/poem.txt."
FREE = "Write the numbers from 1 to 300 in English words, separated by commas (list {})."
_LINE = re.compile(r"decode=([\d.]+) tok/s .*?tokens=(\d+)")


def last_decode(server: Server) -> tuple[float, int]:
    """(decode tok/s, tokens) of the latest request, from engy's log."""
    found = _LINE.findall(server.log.read_text(errors="replace"))
    rate, tokens = found[-1]
    return float(rate), int(tokens)


def ask(server: Server, model: str, content: str, max_tokens: int, extra: dict[str, Any]) -> str:
    body = {"model": model, "max_tokens": max_tokens, "temperature": 0, **extra}
    body["messages"] = [{"role": "user", "content": content}]
    r = httpx.post(server.url + "/v1/messages", json=body, timeout=600)
    r.raise_for_status()
    return str(r.json()["stop_reason"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args()
    logs = Path(tempfile.mkdtemp(prefix="calls-"))
    server = start_engy(args.model, args.threads, logs, "--speculative", "off")
    kinds: dict[str, tuple[str, int, dict[str, Any]]] = {
        "free text": (FREE, 128, {}),
        "forced call": (CALL, 256, {"tools": [WRITE_FILE], "tool_choice": {"type": "any"}}),
        "call under auto": (CALL, 256, {"tools": [WRITE_FILE]}),
    }
    rates: dict[str, list[float]] = {k: [] for k in kinds}
    tokens: dict[str, list[int]] = {k: [] for k in kinds}
    stops: dict[str, list[str]] = {k: [] for k in kinds}
    try:
        model = httpx.get(server.url + "/v1/models").json()["data"][0]["id"]
        ask(server, model, FREE.format("x"), 4, {})  # warm up
        for i in range(args.rounds):
            for kind, (content, max_tokens, extra) in kinds.items():
                # The round's number: nothing cached from the round before.
                stops[kind].append(ask(server, model, content.format(i), max_tokens, extra))
                rate, n = last_decode(server)
                rates[kind].append(rate)
                tokens[kind].append(n)
    finally:
        server.stop()
    free = statistics.median(rates["free text"])
    print(f"model {args.model.name}, {args.threads} threads, medians of {args.rounds}")
    print(f"{'kind':16}  {'decode tok/s':>12}  {'tokens':>6}  {'/free':>5}  stop reasons")
    for kind in kinds:
        rate = statistics.median(rates[kind])
        count = statistics.median(float(t) for t in tokens[kind])
        reasons = ", ".join(f"{s} x{stops[kind].count(s)}" for s in sorted(set(stops[kind])))
        print(f"{kind:16}  {rate:12.1f}  {count:6.0f}  {rate / free:5.2f}  {reasons}")


if __name__ == "__main__":
    main()
