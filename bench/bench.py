"""engy against llama-server on the same GGUF, threads and chat template.

    .venv/bin/python bench/bench.py --quick
    LLAMA_SERVER=$(bench/build_llama_server.sh) .venv/bin/python bench/bench.py

Starts `engy serve GGUF` and, when LLAMA_SERVER names a llama-server binary,
llama-server on 127.0.0.1 with engy's layout (`--parallel 4 --kv-unified`, a window
of --ctx-size for each of the 4 sequences) and the GGUF's own template
(`--chat-template-file`). Every figure is timed from the client side
(streaming): time to first token, decode tokens/s from the tokens the server
reports over the time after the first token. Workloads (--only NAME, may be
repeated):

    session      Claude Code's pattern: a long main turn, a side request with
                 another system prompt, the main turn extended
    concurrent   4 streams of 128 tokens at once (aggregate) and 1 stream
    prefill      prompt tokens/s at ~3k and ~19k tokens, nothing cached; the
                 median of 3 rounds, the servers taking turns
    forced       a forced tool call's decode tokens/s against free text
    upstream     engy in front of that llama-server (`--upstream`) against
                 llama-server straight: the overhead engy adds
    restart      a first turn with a 12k-token preamble, the server stopped and
                 started again, then a new conversation with that preamble and
                 the same first turn again (a second `engy launch`), each
                 server on a cache of its own; and the disk written per turn of
                 a growing conversation
    flows        a Claude Code conversation's turn 1, then one of: the
                 session-title side request, another conversation's turn, a
                 restart of the server, nothing; then turn 2 (turn 1, its
                 answer, a new message). Turn 2's cached tokens as a share of
                 turn 1's prompt and its time to first token (the time to a
                 one-token answer, whatever its form), for a ~2k-token
                 Claude Code-shaped conversation and (not with --quick) the
                 captured Claude Code 2.1.332 first turn (~12k tokens, read
                 from shared/fixtures/requests beside the repo, if there). The same
                 Anthropic request goes to both servers' /v1/messages;
                 llama-server has no disk tier, so its restart case is cold

Not a test and not run in CI; it takes minutes (--quick: smaller sizes).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx

REPO = Path(__file__).resolve().parents[1]
ENGY = REPO / ".venv" / "bin" / "engy"
WORKLOADS = ("session", "concurrent", "prefill", "forced", "upstream", "restart", "flows")
TIMEOUT = httpx.Timeout(1800.0, connect=10.0)
T = TypeVar("T")


# ---- servers --------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def default_model() -> Path:
    """The pretrained gemma-3-270m (sliding window) from its wheels, as
    `engy serve gemma-3-270m-base` finds it: the bench's model of record."""
    from engy_local.models.catalog import load_catalog
    from engy_local.models.embedded import locate

    return locate(load_catalog().entries["gemma-3-270m-base"])


def cpu_reports_amx() -> bool:
    try:
        return "amx_tile" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


class Server:
    def __init__(self, name: str, cmd: list[str], port: int, health: str, log: Path) -> None:
        self.name = name
        self.url = f"http://127.0.0.1:{port}"
        self.log = log
        self._log = log.open("wb")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                sys.exit(f"{name} exited:\n{log.read_text(errors='replace')[-3000:]}")
            try:
                if httpx.get(self.url + health, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        self.stop()
        sys.exit(f"{name} did not start; see {log}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(2)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def engy() -> list[str]:
    """The repo's engy; on a machine the tree was copied to without its
    virtual environment (a GPU box), this Python's engy_local."""
    return [str(ENGY)] if ENGY.exists() else [sys.executable, "-m", "engy_local"]


def start_engy(model: Path, threads: int, logs: Path, *extra: str) -> Server:
    port = free_port()
    cmd = [*engy(), "serve", str(model), "--port", str(port), "--threads", str(threads)]
    return Server("engy", [*cmd, *extra], port, "/api/hello", logs / f"engy-{port}.log")


def chat_template(model: Path) -> str | None:
    """The template engy renders with: the catalog's for GGUFs that carry
    none (gemma-3-270m is one), else the GGUF's own."""
    from engy_local.models.ggufmeta import read_metadata
    from engy_local.server.backends import resolve_model
    from engy_local.server.options import ServeOptions

    served = resolve_model(str(model), ServeOptions())
    template = served.options.chat_template or read_metadata(model).get("tokenizer.chat_template")
    return template if isinstance(template, str) else None


def start_llama(
    binary: str, model: Path, threads: int, ctx: int, logs: Path, *extra: str, parallel: int = 4
) -> Server:
    template = chat_template(model)
    port = free_port()
    cmd = [binary, "-m", str(model), "--host", "127.0.0.1", "--port", str(port)]
    # engy's layout: `parallel` sequences in one unified cache, each up to a
    # whole window (-c 32768 --parallel 4 alone gives each slot 8192 tokens).
    cmd += ["-t", str(threads), "--parallel", str(parallel), "-c", str(parallel * ctx)]
    cmd += ["--kv-unified"] if parallel > 1 else []
    cmd += ["--jinja", *extra]
    if template:
        path = logs / "chat_template.jinja"
        path.write_text(template)
        cmd += ["--chat-template-file", str(path)]
    if cpu_reports_amx():
        cmd.append("--no-repack")  # AMX kernels crash on such VMs (issue 9)
    return Server("llama-server", cmd, port, "/health", logs / f"llama-server-{port}.log")


# ---- one streamed request, timed from the client ---------------------------------


@dataclass
class Run:
    ttft: float  # seconds to the first generated token
    total: float  # seconds to the end
    prompt: int
    cached: int
    produced: int

    @property
    def decode(self) -> float:
        """Tokens/s after the first token."""
        after = self.total - self.ttft
        return (self.produced - 1) / after if self.produced > 1 and after > 0 else 0.0

    @property
    def prefill(self) -> float:
        return (self.prompt - self.cached) / self.ttft if self.ttft > 0 else 0.0


def _sse(response: httpx.Response) -> Iterator[tuple[str, Any]]:
    event = ""
    for line in response.iter_lines():
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            payload = line[5:].strip()
            if payload != "[DONE]":
                yield event, json.loads(payload)


Ask = Callable[[str, list[dict[str, Any]], int, dict[str, Any]], tuple[Run, str]]


def post_messages(
    url: str,
    body: dict[str, Any],
    headers: dict[str, str] | None = None,
    blocks: list[dict[str, Any]] | None = None,
) -> tuple[Run, str]:
    """POST an Anthropic Messages body (streaming) to engy or llama-server,
    which both serve /v1/messages and report cache_read_input_tokens. The
    first token is the answer's first block (its start: a call's name may
    come before its arguments); `blocks` gets the answer's text and tool_use
    blocks, as a client sends them back."""
    t0 = time.monotonic()
    got: list[dict[str, Any]] = []
    first, prompt, cached, produced, text = 0.0, 0, 0, 0, []
    with httpx.stream(
        "POST", url + "/v1/messages", json=body, headers=headers, timeout=TIMEOUT
    ) as r:
        if r.status_code >= 400:
            raise RuntimeError(r.read().decode())
        for event, data in _sse(r):
            if event == "message_start":
                usage = data["message"]["usage"]
                prompt = usage["input_tokens"] + usage.get("cache_read_input_tokens", 0)
                cached = usage.get("cache_read_input_tokens", 0)
            elif event == "content_block_start":
                first = first or time.monotonic()
                got.append(dict(data["content_block"]))
            elif event == "content_block_delta":
                first = first or time.monotonic()
                delta = data["delta"]
                text.append(delta.get("text", ""))
                if got and delta.get("type") == "text_delta":
                    got[-1]["text"] = got[-1].get("text", "") + delta["text"]
                elif got and delta.get("type") == "input_json_delta":
                    got[-1]["json"] = got[-1].get("json", "") + delta["partial_json"]
            elif event == "message_delta":
                usage = data["usage"]
                produced = usage["output_tokens"]
                if "cache_read_input_tokens" in usage:
                    cached = usage["cache_read_input_tokens"]
                    prompt = usage.get("input_tokens", prompt - cached) + cached
            elif event == "error":
                raise RuntimeError(data)
    end = time.monotonic()
    if blocks is not None:
        blocks += [_sent_back(b) for b in got if b.get("type") in ("text", "tool_use")]
    return Run((first or end) - t0, end - t0, prompt, cached, produced), "".join(text)


def _sent_back(block: dict[str, Any]) -> dict[str, Any]:
    """A streamed block as the client sends it back: a call's input parsed
    (one cut short by the token limit: empty)."""
    streamed = block.pop("json", "")
    if block["type"] == "tool_use" and streamed:
        try:
            block["input"] = json.loads(streamed)
        except json.JSONDecodeError:
            block["input"] = {}
    return block


def model_id(url: str) -> str:
    model: str = httpx.get(url + "/v1/models").json()["data"][0]["id"]
    return model


def ask_engy(url: str) -> Ask:
    """POST /v1/messages, streaming."""

    model = model_id(url)

    def ask(
        system: str, messages: list[dict[str, Any]], max_tokens: int, extra: dict[str, Any]
    ) -> tuple[Run, str]:
        body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "stream": True}
        body |= {"messages": messages, "temperature": 0, **extra}
        if system:
            body["system"] = system
        return post_messages(url, body)

    return ask


def ask_llama(url: str) -> Ask:
    """POST /v1/chat/completions, streaming, with llama-server's prompt cache."""

    def ask(
        system: str, messages: list[dict[str, Any]], max_tokens: int, extra: dict[str, Any]
    ) -> tuple[Run, str]:
        msgs = ([{"role": "system", "content": system}] if system else []) + messages
        body: dict[str, Any] = {"messages": msgs, "max_tokens": max_tokens, "stream": True}
        body |= {"temperature": 0, "cache_prompt": True, **extra}
        body["stream_options"] = {"include_usage": True}
        t0 = time.monotonic()
        first, prompt, cached, produced, text = 0.0, 0, 0, 0, []
        with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=TIMEOUT) as r:
            if r.status_code >= 400:
                raise RuntimeError(r.read().decode())
            for _, data in _sse(r):
                for choice in data.get("choices") or []:
                    delta = choice.get("delta") or {}
                    if delta.get("content") or delta.get("tool_calls"):
                        first = first or time.monotonic()
                        text.append(delta.get("content") or "")
                timings = data.get("timings")
                if timings and data.get("usage"):
                    prompt = timings.get("prompt_n", 0) + timings.get("cache_n", 0)
                    cached = timings.get("cache_n", 0)
                    produced = timings.get("predicted_n", 0)
        end = time.monotonic()
        return Run((first or end) - t0, end - t0, prompt, cached, produced), "".join(text)

    return ask


# ---- prompts ---------------------------------------------------------------------

_SENTENCES = (
    "the build runs tests on every commit and reports which files changed in the tree",
    "a function returns the parsed value or raises an error with the line number",
    "the parser stopped while the server keeps one cache per conversation of the client",
)
WORDS = [w for sentence in _SENTENCES for w in sentence.split()]


def filler(tokens: int, seed: int) -> str:
    """Text of about `tokens` tokens (one word is about 1.3 tokens)."""
    rng = random.Random(seed)
    words = [rng.choice(WORDS) for _ in range(int(tokens / 1.3))]
    lines = [" ".join(words[i : i + 12]) + "." for i in range(0, len(words), 12)]
    return "\n".join(lines)


def system_prompt(tokens: int, seed: int) -> str:
    head = f"You are a coding agent (session {seed}). Follow the rules below.\n"
    return head + filler(tokens, seed)


STORY = [{"role": "user", "content": "Write a long story about a lighthouse keeper."}]


def fresh_round(
    ask: Ask, prompt: int, story: list[dict[str, Any]], decode: int
) -> tuple[float, float]:
    """(prefill tok/s, decode tok/s): a system prompt of about `prompt`
    tokens that no cache holds (engy's disk tier outlives a server: a fixed
    prompt would be read from it), then `decode` tokens of `story`."""
    seed = random.randrange(1 << 30)
    run, _ = ask(system_prompt(prompt, seed), story, 1, {})
    prefill = run.prefill
    fresh = [{"role": "user", "content": f"{seed}: " + story[0]["content"]}]
    run, _ = ask("", fresh, decode, {})
    return prefill, run.decode


def take_turns(asks: list[Ask], rounds: int, one: Callable[[Ask], T]) -> list[list[T]]:
    """`one` for each server in turn, `rounds` times: one result a round for
    each. Only one computes at a time, so a noisy machine's slow spell falls
    on both alike; who goes first alternates, so neither always runs on a
    machine the other has just warmed or left."""
    got: list[list[T]] = [[] for _ in asks]
    order = list(range(len(asks)))
    for _ in range(rounds):
        for i in order:
            got[i].append(one(asks[i]))
        order.reverse()
    return got


# ---- workloads -------------------------------------------------------------------

Row = tuple[str, str, float | None, float | None, str]  # workload, metric, engy, llama, unit


def session(ask: Ask, quick: bool) -> dict[str, float]:
    main = system_prompt(4000 if quick else 12000, 1)
    side = "You write session titles. " + filler(700, 2)
    turn1 = [{"role": "user", "content": "Read the rules and say which comes first."}]
    r1, answer = ask(main, turn1, 32, {})
    ask(side, [{"role": "user", "content": "Title for: fix the parser"}], 16, {})
    turn2 = [
        *turn1,
        {"role": "assistant", "content": answer or "ok"},
        {"role": "user", "content": "And which comes last?"},
    ]
    r2, _ = ask(main, turn2, 32, {})
    return {
        "turn 1 s": r1.total,
        "turn 2 s": r2.total,
        "turn2/turn1": r2.total / r1.total,
        "turn 2 cached tokens": float(r2.cached),
        "turn 2 prompt tokens": float(r2.prompt),
    }


def concurrent(ask: Ask, quick: bool) -> dict[str, float]:
    n = 4

    def one(i: int) -> tuple[Run, float, float]:
        start = time.monotonic()
        prompt = [{"role": "user", "content": f"Story {i}: write about a harbour at night."}]
        run, _ = ask("", prompt, 128, {})
        return run, start, time.monotonic()

    with ThreadPoolExecutor(n) as pool:
        results = list(pool.map(one, range(n)))
    begin = min(s for _, s, _ in results)
    end = max(e for _, _, e in results)
    aggregate = sum(r.produced for r, _, _ in results) / (end - begin)
    single, _ = ask("", STORY, 128, {})
    return {"4 streams aggregate tok/s": aggregate, "1 stream decode tok/s": single.decode}


def prefill(asks: list[Ask], quick: bool) -> list[dict[str, float]]:
    """Prompt tokens/s of a prompt nothing has cached, for each server in
    turn (the order alternating), in rounds: the median of each. This
    machine's speed drifts by 10% and more within minutes; interleaving
    puts both servers under the same drift."""
    sizes = (1500, 6000) if quick else (3000, 19000)
    named = [f"prefill ~{size / 1000:g}k" for size in sizes]

    def one(ask: Ask) -> list[Run]:
        # a new start each run: nothing cached
        return [
            ask(system_prompt(size, random.randrange(1 << 30)), STORY, 1, {})[0] for size in sizes
        ]

    figures = []
    for runs in take_turns(asks, 1 if quick else 3, one):
        speed = {
            f"{n} tok/s": statistics.median(r[k].prefill for r in runs) for k, n in enumerate(named)
        }
        last = runs[-1]
        read = {f"{n} tokens": float(last[k].prompt - last[k].cached) for k, n in enumerate(named)}
        figures.append(speed | read)
    return figures


READ_FILE = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}},
    "required": ["path", "limit"],
}


def forced(ask: Ask, quick: bool, dialect: str) -> dict[str, float]:
    prompt = [{"role": "user", "content": "Read the file /etc/hostname, all of it."}]
    if dialect == "engy":
        tools = [{"name": "read_file", "description": "Read a file.", "input_schema": READ_FILE}]
        extra: dict[str, Any] = {"tools": tools, "tool_choice": {"type": "any"}}
    else:
        fn = {"name": "read_file", "description": "Read a file.", "parameters": READ_FILE}
        extra = {"tools": [{"type": "function", "function": fn}], "tool_choice": "required"}
    free, _ = ask("", STORY, 64, {})
    call, _ = ask("", prompt, 64, extra)
    return {
        "free text decode tok/s": free.decode,
        "forced call decode tok/s": call.decode,
        "forced/free": call.decode / free.decode if free.decode else 0.0,
        "forced call tokens": float(call.produced),
    }


def upstream_overhead(llama: Ask, via: Ask, quick: bool) -> tuple[dict[str, float], ...]:
    """The same prompts straight to llama-server and through engy in front
    of it, alternated, medians of 3 (5 without --quick)."""
    direct: list[Run] = []
    fronted: list[Run] = []
    size = 500 if quick else 1000
    for i in range(3 if quick else 5):
        for ask, runs in (
            ((llama, direct), (via, fronted)) if i % 2 else ((via, fronted), (llama, direct))
        ):
            # a new start each time: neither finds the other's prompt cached
            run, _ = ask(system_prompt(size, random.randrange(1 << 30)), STORY, 128, {})
            runs.append(run)

    def figures(runs: list[Run]) -> dict[str, float]:
        return {
            "TTFT s": statistics.median(r.ttft for r in runs),
            "decode tok/s": statistics.median(r.decode for r in runs),
        }

    return figures(fronted), figures(direct)


def restart(start: Callable[[], tuple[Server, Ask]], quick: bool) -> dict[str, float]:
    """A cold first turn; then, each on a server started again: a new
    conversation with the same preamble, and the same first turn again."""
    preamble = system_prompt(4000 if quick else 12000, random.randrange(1 << 30))
    first = [{"role": "user", "content": "Read the rules and say which comes first."}]
    other = [{"role": "user", "content": "Which rule mentions the parser?"}]

    def once(messages: list[dict[str, Any]]) -> Run:
        server, ask = start()
        try:
            return ask(preamble, messages, 16, {})[0]
        finally:
            server.stop()

    cold, new, again = once(first), once(other), once(first)
    return {
        "cold first turn TTFT s": cold.ttft,
        "after restart, new conversation TTFT s": new.ttft,
        "new/cold TTFT": new.ttft / cold.ttft,
        "new conversation cached %": 100.0 * new.cached / max(1, new.prompt),
        "same first turn again TTFT s": again.ttft,
        "same first turn again cached %": 100.0 * again.cached / max(1, again.prompt),
    }


def disk_per_turn(
    start: Callable[[], tuple[Server, Ask]], cache: Path, turns: int
) -> dict[str, float]:
    """MB the disk tier holds after each turn of a growing conversation,
    the server stopped (and its states written) after each."""
    history: list[dict[str, Any]] = []
    sizes = []
    system = system_prompt(2000, 5)
    for i in range(turns):
        history.append({"role": "user", "content": filler(300, 100 + i)})
        server, ask = start()
        try:
            _, answer = ask(system, history, 32, {})
        finally:
            server.stop()
        history.append({"role": "assistant", "content": answer or "ok"})
        sizes.append(sum(f.stat().st_size for f in cache.rglob("*.kv")) / 1e6)
    grown = [b - a for a, b in itertools.pairwise(sizes)]
    return {
        "disk after turn 1 MB": sizes[0],
        "disk written per later turn MB": statistics.mean(grown) if grown else 0.0,
        f"disk after turn {turns} MB": sizes[-1],
    }


# ---- flows: a Claude Code turn, something between, the next turn ----------------

CAPTURED = REPO.parent / "shared" / "fixtures" / "requests" / "claude-code-2.1.332-first-turn.json"
BETWEEN = ("side request", "another conversation", "restart", "nothing")
FIRST_MESSAGES = (
    "Say hi",
    "What does this project do?",
    "Which test is the slowest?",
    "Explain the build in two lines.",
    "Where is the config read?",
    "Name the entry point.",
    "What changed last?",
    "Is there a linter?",
)
CLAUDE_CODE_TOOLS = [
    {
        "name": "Read",
        "description": "Reads a file from the local filesystem. The file_path parameter must "
        "be an absolute path. By default it reads up to 2000 lines from the beginning.",
        "input_schema": {
            "type": "object",
            "properties": {
                "file_path": {"type": "string", "description": "The absolute path"},
                "offset": {"type": "integer", "description": "The line to start at"},
                "limit": {"type": "integer", "description": "The number of lines"},
            },
            "required": ["file_path"],
        },
    },
    {
        "name": "Bash",
        "description": "Executes a bash command in a persistent shell session with an "
        "optional timeout. Use it for git, tests and builds; not for reading files.",
        "input_schema": {
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The command to run"},
                "timeout": {"type": "integer", "description": "Milliseconds"},
            },
            "required": ["command"],
        },
    },
]
# body, headers, the answer's blocks (filled) -> the run, its text
Post = Callable[[dict[str, Any], dict[str, str], list[dict[str, Any]]], tuple[Run, str]]
Conversation = tuple[dict[str, str], dict[str, Any]]  # headers, the first turn's body


def claude_code_headers(session: str) -> dict[str, str]:
    return {
        "user-agent": "claude-cli/2.1.332 (external, sdk-cli)",
        "x-claude-code-session-id": session,
        "anthropic-version": "2023-06-01",
    }


def captured_conversation(n: int) -> Conversation:
    """The captured Claude Code 2.1.332 first turn (~12.9k tokens: its
    system prompt, tools and reminders), as conversation `n`: a session
    id and a first message of its own, greedy, 24 tokens."""
    raw = json.loads(CAPTURED.read_text())
    body: dict[str, Any] = raw["body"]
    session = f"bench-{n}-{random.randrange(1 << 30)}"
    body["metadata"] = {"user_id": json.dumps({"session_id": session})}
    body["messages"][0]["content"][-1]["text"] = FIRST_MESSAGES[n % len(FIRST_MESSAGES)]
    body |= {"max_tokens": 24, "temperature": 0, "stream": True}
    return claude_code_headers(session), body


def shaped_conversation(n: int) -> Conversation:
    """A ~2k-token Claude Code-shaped first turn: a system prompt of its
    blocks, two tools, a user message; conversation `n` as above."""
    session = f"bench-{n}-{random.randrange(1 << 30)}"
    system = [
        {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.332.0b8;"},
        {"type": "text", "text": "You are an interactive CLI coding agent."},
        {"type": "text", "text": system_prompt(1500, 7), "cache_control": {"type": "ephemeral"}},
    ]
    question = f"{FIRST_MESSAGES[n % len(FIRST_MESSAGES)]}\n{filler(150, 100 + n)}"
    body: dict[str, Any] = {
        "system": system,
        "tools": CLAUDE_CODE_TOOLS,
        "messages": [{"role": "user", "content": [{"type": "text", "text": question}]}],
        "metadata": {"user_id": json.dumps({"session_id": session})},
        "max_tokens": 24,
        "temperature": 0,
        "stream": True,
    }
    return claude_code_headers(session), body


def next_turn(body: dict[str, Any], answer: list[dict[str, Any]]) -> dict[str, Any]:
    """Turn 2: turn 1, its answer as it came (text, calls), a new user
    message after the calls' results."""
    said = {"role": "assistant", "content": answer or [{"type": "text", "text": "ok"}]}
    results = [
        {"type": "tool_result", "tool_use_id": b["id"], "content": "done"}
        for b in answer
        if b["type"] == "tool_use"
    ]
    asked = {"role": "user", "content": [*results, {"type": "text", "text": "Now say it shorter."}]}
    return body | {"messages": [*body["messages"], said, asked]}


def title_request(body: dict[str, Any]) -> dict[str, Any]:
    """The session-title side request: a short system prompt of its own,
    no tools, the user's first message."""
    first = body["messages"][0]["content"][-1]["text"]
    system = (
        "Decide whether this message starts a new topic; if it does, give it a "
        "title of two to five words. Answer as JSON with the fields isNewTopic and title."
    )
    return {
        "system": [{"type": "text", "text": system}],
        "messages": [{"role": "user", "content": first}],
        "max_tokens": 16,
        "temperature": 0,
        "stream": True,
    }


def flows(
    start: Callable[[], tuple[Server, Post]], conversation: Callable[[int], Conversation]
) -> dict[str, float]:
    """For each of BETWEEN on one server: a new conversation's turn 1, then
    that, then its turn 2. Turn 2's cached tokens as a share of turn 1's
    prompt, and its time to first token (the time to a one-token answer).
    One server throughout (but for the restart), so the flows also meet the
    states the ones before left."""
    server, post = start()
    figures: dict[str, float] = {}
    try:
        for i, between in enumerate(BETWEEN):
            headers, body = conversation(2 * i)
            answer: list[dict[str, Any]] = []
            r1, _ = post(body, headers, answer)
            if between == "side request":
                post(title_request(body), headers, [])
            elif between == "another conversation":
                other_headers, other = conversation(2 * i + 1)
                post(other, other_headers, [])
            elif between == "restart":
                server.stop()
                server, post = start()
            # One token: its time is the prompt's read and the first token,
            # whatever the answer (engy sends a call written as JSON once
            # it is whole; llama-server streams it as text).
            r2, _ = post(next_turn(body, answer) | {"max_tokens": 1}, headers, [])
            if i == 0:
                figures["turn 1 prompt tokens"] = float(r1.prompt)
                figures["cold turn 1 TTFT s"] = r1.ttft
            figures[f"{between}: turn 2 cached % of turn 1"] = 100.0 * r2.cached / r1.prompt
            figures[f"{between}: turn 2 TTFT s"] = r2.total
    finally:
        server.stop()
    return figures


# ---- main ------------------------------------------------------------------------


def table(rows: list[Row]) -> str:
    head = ("workload", "metric", "engy", "llama-server", "engy/llama")
    lines = [head]
    for workload, metric, a, b, _ in rows:
        ratio = f"{a / b:.2f}" if a is not None and b else "-"
        lines.append(
            (
                workload,
                metric,
                "-" if a is None else f"{a:.2f}",
                "-" if b is None else f"{b:.2f}",
                ratio,
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(5)]
    out = ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) for line in lines]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", type=Path, help="GGUF (default: gemma-3-270m from PyPI)")
    ap.add_argument("--only", action="append", choices=WORKLOADS, help="run only this workload")
    ap.add_argument("--quick", action="store_true", help="smaller prompts")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    model: Path = args.model or default_model()
    only = args.only or list(WORKLOADS)
    binary = os.environ.get("LLAMA_SERVER")
    logs = Path(tempfile.mkdtemp(prefix="engy-bench-"))
    print(f"model {model.name}, {args.threads} threads, logs in {logs}", flush=True)
    ctx = 32768
    servers: list[Server] = []
    rows: list[Row] = []

    def add(workload: str, a: dict[str, float], b: dict[str, float] | None) -> None:
        for metric, value in a.items():
            rows.append((workload, metric, value, None if b is None else b.get(metric), ""))
        print(table(rows[-len(a) :]), "\n", flush=True)

    try:
        # A disk tier of this run's own: no prompt is found from an earlier run.
        main_cache = ("--cache-disk", str(logs / "kvcache-main"))
        engy = start_engy(model, args.threads, logs, "--ctx-size", str(ctx), *main_cache)
        servers.append(engy)
        llama = start_llama(binary, model, args.threads, ctx, logs) if binary else None
        if llama:
            servers.append(llama)
        e_ask = ask_engy(engy.url)
        l_ask = ask_llama(llama.url) if llama else None
        e_ask("", STORY, 4, {})  # warm up both (first-request costs aside)
        if l_ask:
            l_ask("", STORY, 4, {})
        simple: dict[str, Callable[[Ask, bool], dict[str, float]]] = {
            "session": session,
            "concurrent": concurrent,
        }
        for name, fn in simple.items():
            if name in only:
                print(f"== {name}", flush=True)
                add(name, fn(e_ask, args.quick), fn(l_ask, args.quick) if l_ask else None)
        if "prefill" in only:
            print("== prefill", flush=True)
            figures = prefill([e_ask, l_ask] if l_ask else [e_ask], args.quick)
            add("prefill", figures[0], figures[1] if l_ask else None)
        if "forced" in only:
            print("== forced", flush=True)
            theirs: dict[str, float] | None = None
            if l_ask:
                try:
                    theirs = forced(l_ask, args.quick, "llama")
                except RuntimeError as exc:
                    print(f"llama-server: no forced call ({str(exc)[:200]})")
            add("forced", forced(e_ask, args.quick, "engy"), theirs)
        if "upstream" in only and llama and l_ask:
            print("== upstream", flush=True)
            # Straight to llama-server, and through a second engy in front of it.
            via = start_engy(model, args.threads, logs, "--upstream", llama.url)
            servers.append(via)
            fronted, direct = upstream_overhead(l_ask, ask_engy(via.url), args.quick)
            add("upstream (engy in front)", fronted, direct)
        elif "upstream" in only:
            print("== upstream: needs LLAMA_SERVER")
        if "restart" in only:
            print("== restart", flush=True)
            cache = logs / "kvcache"

            def engy_once() -> tuple[Server, Ask]:
                server = start_engy(
                    model, args.threads, logs, "--ctx-size", str(ctx), "--cache-disk", str(cache)
                )
                return server, ask_engy(server.url)

            def llama_once() -> tuple[Server, Ask]:
                assert binary is not None
                server = start_llama(binary, model, args.threads, ctx, logs)
                return server, ask_llama(server.url)

            add(
                "restart",
                restart(engy_once, args.quick),
                restart(llama_once, args.quick) if binary else None,
            )
            per_turn = logs / "kvcache-turns"

            def engy_turn() -> tuple[Server, Ask]:
                extra = ("--ctx-size", str(ctx), "--cache-disk", str(per_turn))
                server = start_engy(model, args.threads, logs, *extra)
                return server, ask_engy(server.url)

            turns = 3 if args.quick else 6
            add("restart (disk per turn)", disk_per_turn(engy_turn, per_turn, turns), None)
        if "flows" in only:
            print("== flows", flush=True)
            flow_cache = logs / "kvcache-flows"

            def posting(server: Server) -> tuple[Server, Post]:
                name = model_id(server.url)

                def post(
                    body: dict[str, Any], headers: dict[str, str], blocks: list[dict[str, Any]]
                ) -> tuple[Run, str]:
                    return post_messages(server.url, body | {"model": name}, headers, blocks)

                return server, post

            def engy_flows() -> tuple[Server, Post]:
                extra = ("--ctx-size", str(ctx), "--cache-disk", str(flow_cache))
                return posting(start_engy(model, args.threads, logs, *extra))

            def llama_flows() -> tuple[Server, Post]:
                assert binary is not None
                return posting(start_llama(binary, model, args.threads, ctx, logs))

            shapes = [("~2k tokens", shaped_conversation)]
            if not args.quick and CAPTURED.exists():
                shapes.append(("captured Claude Code", captured_conversation))
            elif not args.quick:
                print(f"flows: no {CAPTURED}: the ~2k flows alone", flush=True)
            for shape, conversation in shapes:
                add(
                    f"flows, {shape}",
                    flows(engy_flows, conversation),
                    flows(llama_flows, conversation) if binary else None,
                )
    finally:
        for server in reversed(servers):
            server.stop()
    print("== all figures\n" + table(rows))


if __name__ == "__main__":
    main()
