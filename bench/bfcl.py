"""Tool calls on a real model, scored by the Berkeley Function Calling
Leaderboard's own AST checker: engy's three endpoints beside llama-server's
/v1/chat/completions (--jinja) on the same GGUF, temperature 0.

    .venv/bin/pip install --no-deps bfcl-eval==2026.3.23 tree_sitter==0.21.3 \\
        tree-sitter-java==0.21.0 tree-sitter-javascript==0.21.4
    LLAMA_SERVER=$(bench/build_llama_server.sh) .venv/bin/python bench/bfcl.py \\
        --model ~/.cache/engy/real-models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf

Categories: simple_python, multiple, parallel, parallel_multiple (a call is
right when BFCL's checker says so) and irrelevance (right when no call comes;
under `required` a call is forced, so that category runs under auto only).
The default is a subsample that runs in minutes: every k-th case of each
category so that --cases (10) are spread over it; --full runs them all.
Each case goes through engy's /v1/chat/completions, /v1/messages and
/v1/responses and llama-server's /v1/chat/completions, under tool_choice
auto and required. Also counted: request errors, and answers whose text
holds a call (call markup, or a JSON object naming an offered tool) that
reached the client as text. Not a test and not run in CI.

BFCL's checker module imports the package's registry of model handlers,
which pulls in every vendor's SDK; a stand-in for that registry
(bfcl_eval.constants.model_config) is installed here before the checker is
imported: the checker reads one flag of it, which says that dots in
function names became underscores (as here: tool names may not hold dots).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
import types
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai

from bench import Server, free_port, start_engy

CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance")
ENDPOINTS = ("engy-chat", "engy-messages", "engy-responses", "llama-chat")
CHOICES = ("auto", "required")
MODEL_NAME = "engy-bench"  # the checker's name for the model
SERVED = {"id": "x"}  # the served model's id, set once a server is up
MAX_TOKENS = 512
# A call written in an answer's text: the name it gives.
CALL_AS_TEXT = re.compile(r'(?:<tool_call>|```json)?\s*\{\s*"name"\s*:\s*"([^"]*)"')


# ---- BFCL's data and checker ---------------------------------------------------------


def checker() -> Callable[..., dict[str, Any]]:
    @dataclass
    class Config:
        underscore_to_dot: bool = True

    stand_in = types.ModuleType("bfcl_eval.constants.model_config")
    stand_in.MODEL_CONFIG_MAPPING = {MODEL_NAME: Config()}  # type: ignore[attr-defined]
    sys.modules["bfcl_eval.constants.model_config"] = stand_in
    from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker

    return ast_checker  # type: ignore[no-any-return]


def load(category: str, cases: int | None) -> list[dict[str, Any]]:
    import bfcl_eval

    data = Path(bfcl_eval.__file__).parent / "data"
    rows = [json.loads(line) for line in (data / f"BFCL_v4_{category}.json").open()]
    answers: dict[str, Any] = {}
    answer_file = data / "possible_answer" / f"BFCL_v4_{category}.json"
    if answer_file.is_file():
        for line in answer_file.open():
            row = json.loads(line)
            answers[row["id"]] = row["ground_truth"]
    for row in rows:
        row["ground_truth"] = answers.get(row["id"])
    if cases is not None and cases < len(rows):
        step = len(rows) / cases
        rows = [rows[int(i * step)] for i in range(cases)]
    return rows


def schema(value: Any) -> Any:
    """BFCL's Python-flavoured types as JSON Schema's."""
    if not isinstance(value, dict):
        return value
    out = dict(value)
    kind = out.get("type")
    if isinstance(kind, str):
        out["type"] = {"dict": "object", "float": "number", "tuple": "array"}.get(kind, kind)
        if kind == "any":
            out.pop("type")
    if isinstance(out.get("properties"), dict):
        out["properties"] = {k: schema(v) for k, v in out["properties"].items()}
    for key in ("items", "additionalProperties"):
        if isinstance(out.get(key), dict):
            out[key] = schema(out[key])
    return out


def tool_name(name: str) -> str:
    return name.replace(".", "_")


# ---- the requests --------------------------------------------------------------------


@dataclass
class Answer:
    calls: list[dict[str, Any]]  # [{name: arguments}], BFCL's model output
    text: str
    error: str = ""


def ask_chat(client: openai.OpenAI, case: dict[str, Any], choice: str) -> Answer:
    tools = [
        {
            "type": "function",
            "function": {
                "name": tool_name(f["name"]),
                "description": f.get("description", ""),
                "parameters": schema(f["parameters"]),
            },
        }
        for f in case["function"]
    ]
    r = client.chat.completions.create(
        model=SERVED["id"],
        messages=case["question"][0],
        tools=tools,  # type: ignore[arg-type]
        tool_choice=choice,  # type: ignore[arg-type]
        temperature=0,
        max_tokens=MAX_TOKENS,
    )
    message = r.choices[0].message
    calls = [
        {c.function.name: json.loads(c.function.arguments or "{}")}
        for c in message.tool_calls or []
        if c.type == "function"
    ]
    return Answer(calls, message.content or "")


def ask_messages(client: anthropic.Anthropic, case: dict[str, Any], choice: str) -> Answer:
    tools = [
        {
            "name": tool_name(f["name"]),
            "description": f.get("description", ""),
            "input_schema": schema(f["parameters"]),
        }
        for f in case["function"]
    ]
    system = "\n".join(m["content"] for m in case["question"][0] if m["role"] == "system")
    messages = [m for m in case["question"][0] if m["role"] != "system"]
    extra: dict[str, Any] = {"system": system} if system else {}
    r = client.messages.create(
        model=SERVED["id"],
        messages=messages,  # type: ignore[arg-type]
        tools=tools,  # type: ignore[arg-type]
        tool_choice={"type": "any" if choice == "required" else "auto"},
        max_tokens=MAX_TOKENS,
        extra_body={"temperature": 0},  # this SDK has no temperature argument; the API takes it
        **extra,
    )
    calls = [{b.name: b.input} for b in r.content if b.type == "tool_use"]
    text = "".join(b.text for b in r.content if b.type == "text")
    return Answer(calls, text)


def ask_responses(client: openai.OpenAI, case: dict[str, Any], choice: str) -> Answer:
    tools = [
        {
            "type": "function",
            "name": tool_name(f["name"]),
            "description": f.get("description", ""),
            "parameters": schema(f["parameters"]),
        }
        for f in case["function"]
    ]
    r = client.responses.create(
        model=SERVED["id"],
        input=case["question"][0],
        tools=tools,  # type: ignore[arg-type]
        tool_choice=choice,  # type: ignore[arg-type]
        temperature=0,
        max_output_tokens=MAX_TOKENS,
    )
    calls = [
        {item.name: json.loads(item.arguments or "{}")}
        for item in r.output
        if item.type == "function_call"
    ]
    return Answer(calls, r.output_text)


def ask(endpoint: str, url: str, case: dict[str, Any], choice: str) -> Answer:
    try:
        if endpoint.endswith("messages"):
            with anthropic.Anthropic(base_url=url, api_key="x", max_retries=0, timeout=900) as c:
                return ask_messages(c, case, choice)
        with openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=900) as o:
            if endpoint.endswith("responses"):
                return ask_responses(o, case, choice)
            return ask_chat(o, case, choice)
    except (openai.APIError, anthropic.APIError, json.JSONDecodeError) as exc:
        return Answer([], "", f"{type(exc).__name__}: {str(exc)[:200]}")


# ---- scoring -------------------------------------------------------------------------


@dataclass
class Score:
    right: int = 0
    total: int = 0
    errors: int = 0
    as_text: int = 0  # answers holding a call to an offered tool as text: a call lost
    unoffered: int = 0  # answers holding a call to a tool that was not offered, as text

    def line(self) -> str:
        pct = 100 * self.right / self.total if self.total else 0.0
        return f"{pct:5.1f}"


def right(
    check: Callable[..., dict[str, Any]], case: dict[str, Any], category: str, a: Answer
) -> bool:
    if a.error:
        return False
    if category == "irrelevance":
        return not a.calls
    if not a.calls:
        return False
    functions = [{**f, "name": tool_name(f["name"])} for f in case["function"]]
    truth = [{tool_name(k): v for k, v in t.items()} for t in case["ground_truth"]]
    from bfcl_eval.constants.enums import Language

    result = check(functions, a.calls, truth, Language.PYTHON, category, MODEL_NAME)
    return bool(result["valid"])


def run(args: argparse.Namespace) -> None:
    check = checker()
    logs = Path(tempfile.mkdtemp(prefix="bfcl-"))
    servers: dict[str, Server] = {}
    scores: dict[tuple[str, str, str], Score] = defaultdict(Score)
    timing: Counter[str] = Counter()
    failures: list[str] = []
    cases = {c: load(c, None if args.full else args.cases) for c in args.categories}
    endpoints = [e for e in ENDPOINTS if e in args.endpoints]
    groups = [("engy", [e for e in endpoints if e.startswith("engy")])]
    if os.environ.get("LLAMA_SERVER"):
        groups.append(("llama-server", [e for e in endpoints if e.startswith("llama")]))
    for server_name, names in groups:
        if not names:
            continue
        if server_name == "engy":
            server = start_engy(args.model, args.threads, logs, "--ctx-size", "8192", *args.engy)
        else:
            port = free_port()
            cmd = [os.environ["LLAMA_SERVER"], "-m", str(args.model), "--port", str(port)]
            cmd += ["--host", "127.0.0.1", "-t", str(args.threads), "-c", "8192", "--jinja"]
            server = Server("llama-server", cmd, port, "/health", logs / "llama-server.log")
        servers[server_name] = server
        SERVED["id"] = httpx.get(server.url + "/v1/models").json()["data"][0]["id"]
        try:
            for category, rows in cases.items():
                for case in rows:
                    for choice in CHOICES:
                        if choice == "required" and category == "irrelevance":
                            continue
                        for endpoint in names:
                            started = time.monotonic()
                            answer = ask(endpoint, server.url, case, choice)
                            timing[endpoint] += time.monotonic() - started
                            score = scores[(endpoint, choice, category)]
                            score.total += 1
                            ok = right(check, case, category, answer)
                            score.right += ok
                            score.errors += bool(answer.error)
                            named = {tool_name(n) for n in CALL_AS_TEXT.findall(answer.text)}
                            offered = {tool_name(f["name"]) for f in case["function"]}
                            score.as_text += bool(named & offered)
                            score.unoffered += bool(named - offered)
                            if not ok and args.verbose:
                                failures.append(
                                    f"{endpoint} {choice} {case['id']}: {answer.calls} "
                                    f"{answer.text[:120]!r} {answer.error}"
                                )
        finally:
            server.stop()
    print_table(args, scores, endpoints, timing)
    for line in failures:
        print(line)


def print_table(
    args: argparse.Namespace,
    scores: dict[tuple[str, str, str], Score],
    endpoints: list[str],
    timing: Counter[str],
) -> None:
    print(f"model {args.model.name}, {'all' if args.full else args.cases} cases a category")
    head = ["endpoint", "choice", *args.categories, "overall", "errors", "as text", "unoffered"]
    head.append("seconds")
    rows = [head]
    for endpoint in endpoints:
        for choice in CHOICES:
            cells = [scores.get((endpoint, choice, c)) for c in args.categories]
            if not any(cells):
                continue
            done = [s for s in cells if s is not None]
            right_ = sum(s.right for s in done)
            total = sum(s.total for s in done)
            rows.append(
                [
                    endpoint,
                    choice,
                    *(s.line() if s else "-" for s in cells),
                    f"{100 * right_ / total:5.1f}" if total else "-",
                    str(sum(s.errors for s in done)),
                    str(sum(s.as_text for s in done)),
                    str(sum(s.unoffered for s in done)),
                    f"{timing[endpoint]:.0f}",
                ]
            )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    for i, row in enumerate(rows):
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
        if i == 0:
            print("  ".join("-" * w for w in widths))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--cases", type=int, default=10, help="cases a category (default 10)")
    parser.add_argument("--full", action="store_true", help="every case of each category")
    parser.add_argument("--categories", nargs="+", default=list(CATEGORIES))
    parser.add_argument("--endpoints", nargs="+", default=list(ENDPOINTS))
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument(
        "--engy", nargs=argparse.REMAINDER, default=[], help="more `engy serve` options (last)"
    )
    parser.add_argument("--verbose", action="store_true", help="print each wrong answer")
    run(parser.parse_args())


if __name__ == "__main__":
    main()
