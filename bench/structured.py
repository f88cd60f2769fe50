"""Structured outputs: extraction cases with known answers, asked with a JSON
Schema on engy's three endpoints and, when LLAMA_SERVER names a llama-server
binary, on llama-server's chat completions (`response_format`) and its
/v1/responses (`text.format`).

    .venv/bin/python bench/structured.py \\
        --model ~/.cache/engy/real-models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
    LLAMA_SERVER=$(bench/build_llama_server.sh) .venv/bin/python bench/structured.py --model ...

For each endpoint: the share of answers that are JSON valid against the
schema, field accuracy (the known fields the answer got right, of all known
fields), and the decode rate under the schema's grammar against the same
request without a format (free text), both from the server's own figures
(engy's log line, llama-server's `timings`). Greedy, drafting off, one
request at a time. Each request says only "Extract ... from this text": the
schema reaches the model from the format alone (engy tells it in the
prompt; llama-server does not). Not a test and not run in CI.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jsonschema  # type: ignore[import-untyped]

from bench import Server, start_engy, start_llama

TIMEOUT = httpx.Timeout(600.0, connect=10.0)

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "born": {"type": "integer"},
        "kind": {
            "enum": ["mathematician", "physicist", "writer", "painter", "composer", "chemist"]
        },
        "country": {"type": "string"},
    },
    "required": ["name", "born", "kind", "country"],
    "additionalProperties": False,
}
ORDER = {
    "type": "object",
    "properties": {
        "item": {"type": "string"},
        "quantity": {"type": "integer"},
        "unit_price": {"type": "number"},
        "express": {"type": "boolean"},
    },
    "required": ["item", "quantity", "unit_price", "express"],
    "additionalProperties": False,
}
MEETING = {
    "type": "object",
    "properties": {
        "day": {"enum": ["monday", "tuesday", "wednesday", "thursday", "friday"]},
        "hour": {"type": "integer"},
        "attendees": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["day", "hour", "attendees"],
    "additionalProperties": False,
}
BUG = {
    "type": "object",
    "properties": {
        "file": {"type": "string"},
        "line": {"type": "integer"},
        "severity": {"enum": ["low", "medium", "high"]},
        "fixed": {"type": "boolean"},
    },
    "required": ["file", "line", "severity", "fixed"],
    "additionalProperties": False,
}
ADDRESS = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "home": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "postcode": {"type": "string"}},
            "required": ["city", "postcode"],
            "additionalProperties": False,
        },
        "phone": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    },
    "required": ["name", "home", "phone"],
    "additionalProperties": False,
}


@dataclass(frozen=True)
class Case:
    schema: dict[str, Any]
    text: str
    answer: dict[str, Any]  # the known fields: value, or a dict for a nested object


CASES = [
    Case(
        PERSON,
        "Ada Lovelace, born in 1815 in England, was a mathematician.",
        {"name": "Ada Lovelace", "born": 1815, "kind": "mathematician", "country": "England"},
    ),
    Case(
        PERSON,
        "The physicist Albert Einstein was born in Germany in 1879.",
        {"name": "Albert Einstein", "born": 1879, "kind": "physicist", "country": "Germany"},
    ),
    Case(
        PERSON,
        "Born 1840 in France, Claude Monet became a painter of light.",
        {"name": "Claude Monet", "born": 1840, "kind": "painter", "country": "France"},
    ),
    Case(
        PERSON,
        "Jane Austen (b. 1775, England) was a writer of six novels.",
        {"name": "Jane Austen", "born": 1775, "kind": "writer", "country": "England"},
    ),
    Case(
        PERSON,
        "Composer Antonin Dvorak was born in 1841 in Bohemia.",
        {"name": "Antonin Dvorak", "born": 1841, "kind": "composer", "country": "Bohemia"},
    ),
    Case(
        PERSON,
        "Dmitri Mendeleev, a chemist, was born in Russia in 1834.",
        {"name": "Dmitri Mendeleev", "born": 1834, "kind": "chemist", "country": "Russia"},
    ),
    Case(
        PERSON,
        "In 1707 the mathematician Leonhard Euler was born in Switzerland.",
        {"name": "Leonhard Euler", "born": 1707, "kind": "mathematician", "country": "Switzerland"},
    ),
    Case(
        PERSON,
        "Frida Kahlo was a painter, born 1907 in Mexico.",
        {"name": "Frida Kahlo", "born": 1907, "kind": "painter", "country": "Mexico"},
    ),
    Case(
        ORDER,
        "Please send 3 blue mugs at 7.5 each, express delivery.",
        {"item": "blue mugs", "quantity": 3, "unit_price": 7.5, "express": True},
    ),
    Case(
        ORDER,
        "I'd like 12 pencils, 0.25 per pencil; standard shipping is fine.",
        {"item": "pencils", "quantity": 12, "unit_price": 0.25, "express": False},
    ),
    Case(
        ORDER,
        "Order: 1 desk lamp, price 40 dollars, ship it express please.",
        {"item": "desk lamp", "quantity": 1, "unit_price": 40, "express": True},
    ),
    Case(
        ORDER,
        "Two notebooks at 4 each. No rush, regular post.",
        {"item": "notebooks", "quantity": 2, "unit_price": 4, "express": False},
    ),
    Case(
        ORDER,
        "We need 50 cables at 2.99 apiece by express courier.",
        {"item": "cables", "quantity": 50, "unit_price": 2.99, "express": True},
    ),
    Case(
        ORDER,
        "5 chairs, 85.0 per chair, normal delivery.",
        {"item": "chairs", "quantity": 5, "unit_price": 85, "express": False},
    ),
    Case(
        MEETING,
        "Let's meet on Tuesday at 14 with Anna and Ben.",
        {"day": "tuesday", "hour": 14, "attendees": ["Anna", "Ben"]},
    ),
    Case(
        MEETING,
        "Friday, 9 o'clock: Carla, Dev and Eli will join.",
        {"day": "friday", "hour": 9, "attendees": ["Carla", "Dev", "Eli"]},
    ),
    Case(
        MEETING,
        "The review is on Monday at 16; only Farid attends.",
        {"day": "monday", "hour": 16, "attendees": ["Farid"]},
    ),
    Case(
        MEETING,
        "Wednesday at 11, Grace and Hugo.",
        {"day": "wednesday", "hour": 11, "attendees": ["Grace", "Hugo"]},
    ),
    Case(
        MEETING,
        "Thursday 10:00 standup with Ivy, Jon, Kim and Lea.",
        {"day": "thursday", "hour": 10, "attendees": ["Ivy", "Jon", "Kim", "Lea"]},
    ),
    Case(
        MEETING,
        "Planning happens Monday at 13 with Max.",
        {"day": "monday", "hour": 13, "attendees": ["Max"]},
    ),
    Case(
        BUG,
        "Crash in parser.py at line 88, high severity, still open.",
        {"file": "parser.py", "line": 88, "severity": "high", "fixed": False},
    ),
    Case(
        BUG,
        "Typo in README.md line 3 (low severity), fixed yesterday.",
        {"file": "README.md", "line": 3, "severity": "low", "fixed": True},
    ),
    Case(
        BUG,
        "utils.py:120 leaks a file handle. Medium severity. Not fixed yet.",
        {"file": "utils.py", "line": 120, "severity": "medium", "fixed": False},
    ),
    Case(
        BUG,
        "A high severity race in server.go on line 412 was fixed in the last release.",
        {"file": "server.go", "line": 412, "severity": "high", "fixed": True},
    ),
    Case(
        BUG,
        "Low: app.js line 57 logs a warning twice; open.",
        {"file": "app.js", "line": 57, "severity": "low", "fixed": False},
    ),
    Case(
        BUG,
        "Fixed: main.c line 9 overflowed a buffer, a high severity bug.",
        {"file": "main.c", "line": 9, "severity": "high", "fixed": True},
    ),
    Case(
        ADDRESS,
        "Write to Olga Petrova, 12 Elm Road, Leeds LS1 4AB. Phone 0113 496 0000.",
        {
            "name": "Olga Petrova",
            "home": {"city": "Leeds", "postcode": "LS1 4AB"},
            "phone": "0113 496 0000",
        },
    ),
    Case(
        ADDRESS,
        "Paul Martin lives in Lyon, postcode 69002; he has no phone.",
        {"name": "Paul Martin", "home": {"city": "Lyon", "postcode": "69002"}, "phone": None},
    ),
    Case(
        ADDRESS,
        "Contact: Sara Lind, Uppsala 753 10, tel 018-123 45.",
        {
            "name": "Sara Lind",
            "home": {"city": "Uppsala", "postcode": "753 10"},
            "phone": "018-123 45",
        },
    ),
    Case(
        ADDRESS,
        "Tom Reed, 5 King St, Boston 02108. Call 617-555-0100.",
        {
            "name": "Tom Reed",
            "home": {"city": "Boston", "postcode": "02108"},
            "phone": "617-555-0100",
        },
    ),
]


def same(got: Any, want: Any) -> bool:
    if isinstance(want, str) and isinstance(got, str):
        return got.strip().lower() == want.lower()
    if isinstance(want, list) and isinstance(got, list):
        return sorted(str(g).strip().lower() for g in got) == sorted(w.lower() for w in want)
    if isinstance(want, bool) or isinstance(got, bool):
        return got is want
    if isinstance(want, (int, float)) and isinstance(got, (int, float)):
        return abs(got - want) < 1e-9
    return bool(got == want)


def fields_right(got: Any, want: dict[str, Any]) -> tuple[int, int]:
    """(known fields right, known fields), nested objects field by field."""
    right = total = 0
    for key, value in want.items():
        if isinstance(value, dict):
            r, t = fields_right(got.get(key) if isinstance(got, dict) else None, value)
            right, total = right + r, total + t
        else:
            total += 1
            right += isinstance(got, dict) and key in got and same(got[key], value)
    return right, total


@dataclass
class Reply:
    text: str
    tokens: int
    rate: float  # decode tokens/s, the server's own figure
    stop: str


_LINE = re.compile(r"decode=([\d.]+) tok/s .*?tokens=(\d+)")


def engy_rate(server: Server) -> tuple[float, int]:
    found = _LINE.findall(server.log.read_text(errors="replace"))
    rate, tokens = found[-1]
    return float(rate), int(tokens)


Ask = Callable[[str, dict[str, Any] | None], Reply]


def asker(server: Server, endpoint: str, engy: bool, max_tokens: int) -> Ask:
    model = httpx.get(server.url + "/v1/models").json()["data"][0]["id"]

    def post(path: str, body: dict[str, Any]) -> Any:
        r = httpx.post(server.url + path, json=body, timeout=TIMEOUT)
        r.raise_for_status()
        return r.json()

    def ask(content: str, schema: dict[str, Any] | None) -> Reply:
        messages = [{"role": "user", "content": content}]
        base = {"model": model, "temperature": 0}
        if endpoint == "messages":
            body = {**base, "max_tokens": max_tokens, "messages": messages}
            if schema is not None:
                body["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
            data = post("/v1/messages", body)
            text = "".join(b.get("text", "") for b in data["content"])
            stop = data["stop_reason"]
        elif endpoint == "responses":
            body = {**base, "max_output_tokens": max_tokens, "input": messages}
            if schema is not None:
                fmt = {"type": "json_schema", "name": "answer", "schema": schema, "strict": True}
                body["text"] = {"format": fmt}
            data = post("/v1/responses", body)
            text = "".join(
                c.get("text", "")
                for item in data["output"]
                if item["type"] == "message"
                for c in item["content"]
            )
            stop = data["status"]
        else:
            body = {**base, "max_tokens": max_tokens, "messages": messages}
            if schema is not None:
                spec = {"name": "answer", "schema": schema, "strict": True}
                body["response_format"] = {"type": "json_schema", "json_schema": spec}
            data = post("/v1/chat/completions", body)
            text = data["choices"][0]["message"].get("content") or ""
            stop = data["choices"][0]["finish_reason"]
        if engy:
            rate, tokens = engy_rate(server)
        else:  # llama-server's own figures (chat completions and responses alike)
            timings = data.get("timings") or {}
            rate = float(timings.get("predicted_per_second", 0.0))
            tokens = int(timings.get("predicted_n", 0))
        return Reply(text, tokens, rate, str(stop))

    return ask


@dataclass
class Figures:
    valid: int = 0
    right: int = 0
    fields: int = 0
    rates: list[float] | None = None
    free_rates: list[float] | None = None


def run(ask: Ask, cases: list[Case], free: bool, dump: list[dict[str, Any]]) -> Figures:
    figures = Figures(rates=[], free_rates=[])
    assert figures.rates is not None and figures.free_rates is not None
    for i, case in enumerate(cases):
        content = f"Extract the fields from this text.\n\n{case.text}"
        reply = ask(content, case.schema)
        try:
            got = json.loads(reply.text)
            jsonschema.validate(got, case.schema)
            figures.valid += 1
        except (ValueError, jsonschema.ValidationError):
            got = None
        right, total = fields_right(got, case.answer)
        dump.append({"text": case.text, "answer": reply.text, "right": right, "of": total})
        figures.right += right
        figures.fields += total
        if reply.tokens >= 8:
            figures.rates.append(reply.rate)
        if free and i % 3 == 0:  # the same request as free text, for the decode rate
            plain = ask(content + "\nAnswer in JSON.", None)
            if plain.tokens >= 8:
                figures.free_rates.append(plain.rate)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--cases", type=int, default=len(CASES), help="the first N cases")
    parser.add_argument(
        "--endpoints", default="chat,messages,responses", help="engy's, comma-separated ('': none)"
    )
    parser.add_argument("--no-free", action="store_true", help="no free-text requests")
    parser.add_argument("--dump", type=Path, help="write every answer here (JSON)")
    args = parser.parse_args()
    dump: list[dict[str, Any]] = []
    cases = CASES[: args.cases]
    logs = Path(tempfile.mkdtemp(prefix="structured-"))
    results: dict[str, Figures] = {}
    endpoints = [e for e in args.endpoints.split(",") if e]
    server = None
    if endpoints:
        server = start_engy(
            args.model, args.threads, logs, "--speculative", "off", "--ctx-size", "4096"
        )
    try:
        for endpoint in endpoints:
            assert server is not None
            ask = asker(server, endpoint, True, args.max_tokens)
            ask("Say hi.", None)  # warm up
            results[f"engy {endpoint}"] = run(ask, cases, not args.no_free, dump)
    finally:
        if server is not None:
            server.stop()
    binary = os.environ.get("LLAMA_SERVER")
    if binary:
        llama = start_llama(binary, args.model, args.threads, 4096, logs, parallel=1)
        try:
            for endpoint in ("chat", "responses"):
                ask = asker(llama, endpoint, False, args.max_tokens)
                try:
                    results[f"llama-server {endpoint}"] = run(ask, cases, not args.no_free, dump)
                except httpx.HTTPStatusError as exc:  # an endpoint this build lacks
                    print(f"llama-server {endpoint}: {exc}")
        finally:
            llama.stop()
    n = len(cases)
    print(f"model {args.model.name}, {args.threads} threads, {n} cases, greedy")
    print(f"{'endpoint':22}  {'valid':>7}  {'fields':>7}  {'tok/s':>6}  {'free':>6}  {'ratio':>5}")
    for name, f in results.items():
        assert f.rates is not None and f.free_rates is not None
        rate = statistics.median(f.rates) if f.rates else 0.0
        free = statistics.median(f.free_rates) if f.free_rates else 0.0
        ratio = rate / free if free else 0.0
        print(
            f"{name:22}  {f.valid:3}/{n:<3}  {100 * f.right / max(f.fields, 1):6.1f}%"
            f"  {rate:6.1f}  {free:6.1f}  {ratio:5.2f}"
        )
    if args.dump:
        args.dump.write_text(json.dumps(dump, indent=1))
    if not binary:
        print("llama-server: skipped (LLAMA_SERVER is not set: bench/build_llama_server.sh)")


if __name__ == "__main__":
    main()
