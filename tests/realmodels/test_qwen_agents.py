"""Claude Code and Codex on a real model: `engy launch` with no MODEL, on
the default Qwen2.5-Coder-0.5B-Instruct (from its wheels), runs a shell command
through the client's own tool, the client sends the result back, and the
file the command wrote is there afterwards.

Both run as a user would, with no MODEL and no tool flags, and the banner
says which profile `engy launch` picked: lean for Claude Code on a 0.5B
model (Bash alone), Codex's defaults for Codex (on lean, its command tool
and apply_patch with no extras, this model filled every optional field of
exec_command, escalation included, and the call was refused: 2026-12-05,
docs/benchmarks.md). Claude Code gets two turns, the call and the answer
to its result; Codex, which has no turn limit, is stopped once its result
has come back.
The server decodes greedily (`--temp 0`: the clients send no temperature)
and each run has the same project and home paths (Claude Code writes them
into its prompt), so a run's prompts are the same each time. Each
first turn reads a 2-10k-token preamble on the CPU: these take minutes.

Structured outputs through the same clients: `codex exec --output-schema`
leaves JSON valid against its schema, and an interactive Claude Code's
session-title side request (output_config.format, {title: string}) gets
JSON it keeps as the session's title."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import jsonschema  # type: ignore[import-untyped]
import pytest
from support.clients import Clients, Run, base_env, run_client
from support.server import EngyServer, free_port

from engy_local.commands.launch.claude import claude_args, claude_env
from engy_local.commands.launch.server import loaded

TIMEOUT = 1200  # one launch: the server's start and every turn on 2 cores
ASK = "Run this shell command: echo Zebra > proof.txt"
# What may run without asking (it does not change which tools are offered).
ALLOWED = "Bash"
# A small model may go on calling after the task is done (rewriting the
# file it made): two turns are the call and the answer to its result.
TURNS = "2"


def project(clients: Clients, client: str) -> tuple[Path, dict[str, str]]:
    """A fresh project for `client` at a fixed path (the same prompts each
    run), outside the repository (Claude Code writes a git repository's
    status and recent commits into its prompt); its directory and the
    environment the client runs in (engy's files under it too)."""
    root = Path(tempfile.gettempdir()) / "engy-test-agents" / client
    shutil.rmtree(root, ignore_errors=True)
    home, work = root / "home", root / "project"
    for d in (home, work):
        d.mkdir(parents=True)
    env = {**base_env(home), "ENGY_HOME": str(root / "engy-home")}
    where = (clients.claude.parent, Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([*map(str, where), env["PATH"]])
    return work, env


def turns(log: Path) -> list[dict[str, str]]:
    """engy's request lines: prompt=, cached=, stop=, ..."""
    return [
        dict(f.split("=", 1) for f in line.split() if "=" in f)
        for line in log.read_text().splitlines()
        if " prompt=" in line
    ]


def why(r: Run, log: Path) -> str:
    server = log.read_text()[-4000:] if log.exists() else "(no log)"
    return (
        f"exit {r.returncode}\n--- stdout ---\n{r.stdout[-3000:]}\n--- stderr ---\n"
        f"{r.stderr[-3000:]}\n--- server ---\n{server}"
    )


def check_round_trip(log: Path, r: Run) -> None:
    """A call, then the turn with its result, read mostly from the cache."""
    seen = turns(log)
    called = next((i for i, t in enumerate(seen) if t["stop"] == "tool_call"), None)
    assert called is not None and called + 1 < len(seen), why(r, log)
    after = seen[called + 1]
    assert int(after["cached"]) >= 0.9 * int(seen[called]["prompt"]), seen


def test_claude_code_writes_a_file_on_qwen(clients: Clients, default_path: Path) -> None:
    work, env = project(clients, "claude")
    port = free_port()
    engy = [sys.executable, "-m", "engy_local", "launch", "claude"]  # no MODEL: the default
    claude = ["-p", ASK, "--allowedTools", ALLOWED, "--max-turns", TURNS]
    r = run_client([*engy, "--port", str(port), "--temp", "0", "--", *claude], env, work, TIMEOUT)
    log = Path(env["ENGY_HOME"]) / "logs" / f"serve-{port}.log"
    assert r.returncode == 0 or "max turns" in r.stdout + r.stderr, why(r, log)
    assert "tools: lean (auto:" in r.stderr, r.stderr  # no flag: lean on 0.5B
    assert (work / "proof.txt").read_text().strip() == "Zebra", why(r, log)
    check_round_trip(log, r)


def test_codex_writes_a_file_on_qwen(clients: Clients, default_path: Path, tmp_path: Path) -> None:
    """Codex has no turn limit, and after its result this model goes on
    writing a call to each of Codex's tools in turn: the test watches the
    server it started for the round trip (the call, its result sent back
    and read from the cache), then stops the client."""
    codex_home = tmp_path / "codex-home"
    codex_home.mkdir()
    work, env = project(clients, "codex")
    env["CODEX_HOME"] = str(codex_home)
    server = EngyServer(None, "--temp", "0", home=Path(env["ENGY_HOME"]))  # the default
    bypass = "--dangerously-bypass-approvals-and-sandbox"  # no sandbox to build here
    launch = ["launch", "codex", "--port", str(server.port)]  # no MODEL, no tool flags
    engy = [sys.executable, "-m", "engy_local", *launch]
    codex = ["exec", "--skip-git-repo-check", bypass, ASK]
    proc = subprocess.Popen(
        [*engy, "--", *codex],
        env=env,
        cwd=work,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # the client goes with it
    )
    try:
        second = round_trip(server, proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        out = proc.communicate(timeout=60)[0].decode(errors="replace")
        server.stop()
    assert second is not None, f"{out[-3000:]}\n--- server ---\n{server.output()[-4000:]}"
    assert "tools: full (auto: Codex" in out, out[-3000:]
    assert (work / "proof.txt").read_text().strip() == "Zebra", out[-3000:]
    assert second["cached_tokens"] >= 0.9 * second["prev_prompt"], second
    # The file came from Codex's own tool (its command tool or apply_patch),
    # and the tool's output came back.
    items = [
        json.loads(line).get("payload", {})
        for session in (codex_home / "sessions").rglob("*.jsonl")
        for line in session.read_text().splitlines()
    ]
    kinds = [i.get("type") for i in items]
    assert ("function_call" in kinds and "function_call_output" in kinds) or (
        "custom_tool_call" in kinds and "custom_tool_call_output" in kinds
    ), kinds


def round_trip(server: EngyServer, proc: subprocess.Popen[bytes]) -> dict[str, Any] | None:
    """The page's record of the turn that sent a call's result back, once
    it has been read (None if the client ended, or time ran out, first)."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline and proc.poll() is None:
        requests = httpx.get(server.url + "/engy/status", timeout=30).json()["requests"]
        later = [r for r in requests if r["turn"] >= 2 and r["state"] in ("generating", "done")]
        if later and first_turn_called(requests[0]):
            found: dict[str, Any] = later[0]
            return found
        time.sleep(2)
    return None


def first_turn_called(first: dict[str, Any]) -> bool:
    return bool(first["state"] == "done" and first["stop"] == "tool_call")


PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "born": {"type": "integer"}},
    "required": ["name", "born"],
    "additionalProperties": False,
}
EXTRACT = (
    "Extract the person's name and birth year from this text; do not run any command.\n\n"
    "Ada Lovelace was born in 1815 in London. She was a mathematician and writer."
)


def test_codex_exec_output_schema_on_qwen(
    clients: Clients, default_path: Path, tmp_path: Path
) -> None:
    """`codex exec --output-schema FILE` sends the schema as the Responses
    `text.format` (json_schema, strict, named codex_output_schema) beside
    Codex's tools; the last message it writes is JSON valid against it."""
    codex_home = tmp_path / "codex-home"
    codex_home.mkdir()
    work, env = project(clients, "codex-schema")
    env["CODEX_HOME"] = str(codex_home)
    schema, last = tmp_path / "person.schema.json", tmp_path / "last.txt"
    schema.write_text(json.dumps(PERSON))
    port = free_port()
    engy = [sys.executable, "-m", "engy_local", "launch", "codex", "--port", str(port)]
    bypass = "--dangerously-bypass-approvals-and-sandbox"  # no sandbox to build here
    codex = ["exec", "--skip-git-repo-check", bypass, "--output-schema", str(schema)]
    codex += ["--output-last-message", str(last), EXTRACT]
    r = run_client([*engy, "--temp", "0", "--", *codex], env, work, TIMEOUT)
    log = Path(env["ENGY_HOME"]) / "logs" / f"serve-{port}.log"
    assert r.returncode == 0, why(r, log)
    answer = json.loads(last.read_text())
    jsonschema.validate(answer, PERSON)
    assert "Ada" in answer["name"] and answer["born"] == 1815, answer


def test_claude_codes_session_title_on_qwen(clients: Clients, default_path: Path) -> None:
    """Interactive Claude Code names the session with a side request whose
    `output_config.format` is json_schema {title: string}; it keeps the
    title (an `ai-title` entry in the session's transcript) only when the
    answer parses as that JSON. `engy launch claude` turns this side
    traffic off (CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC), and `-p` never
    sends it, so the test runs the real binary in a terminal (tmux) with
    the environment engy launch gives it, that one variable left out."""
    tmux = shutil.which("tmux")
    if tmux is None:
        pytest.skip("tmux is not installed: cannot run Claude Code interactively")
    work, env = project(clients, "claude-title")
    home = Path(env["HOME"])
    server = EngyServer(None, "--temp", "0", home=Path(env["ENGY_HOME"]))  # the default
    socket = f"engy-title-{server.port}"
    try:
        [served] = httpx.get(server.url + "/api/hello", timeout=30).json()["models"][:1]
        env = claude_env(env, server.url, None, loaded(server.url, None, served), lean=True)
        env.pop("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC")
        # What an interactive first start asks (onboarding, the key, trust
        # in the folder), answered as shared/reference/clients.md says.
        (home / ".claude.json").write_text(
            json.dumps(
                {
                    "hasCompletedOnboarding": True,
                    "customApiKeyResponses": {"approved": [env["ANTHROPIC_AUTH_TOKEN"]]},
                    "projects": {str(work): {"hasTrustDialogAccepted": True}},
                }
            )
        )
        claude = [str(clients.claude), *claude_args(True, [])]
        start = [tmux, "-L", socket, "new-session", "-d", "-x", "120", "-y", "40"]
        subprocess.run([*start, "-c", str(work), shlex.join(claude)], env=env, check=True)
        keys = [tmux, "-L", socket, "send-keys", "-t", "0"]
        wait_for_screen(tmux, socket, ("shift+tab to cycle", "for shortcuts"))
        subprocess.run([*keys, "-l", TITLE_ASK], check=True)
        subprocess.run([*keys, "Enter"], check=True)
        title = ai_title(home / ".claude" / "projects", TITLE_WAIT)
        screen = subprocess.run(
            [tmux, "-L", socket, "capture-pane", "-p", "-t", "0"], capture_output=True, text=True
        ).stdout
    finally:
        subprocess.run([tmux, "-L", socket, "kill-server"], capture_output=True)
        server.stop()
    assert title is not None, f"{screen}\n--- server ---\n{server.output()[-4000:]}"
    assert title.strip(), title


TITLE_ASK = "Explain in one sentence what a Python list comprehension is."
TITLE_WAIT = 300  # seconds: the first turn's preamble and the title request on 2 cores


def wait_for_screen(tmux: str, socket: str, texts: tuple[str, ...], timeout: float = 120) -> None:
    """Until the terminal shows one of `texts` (Claude Code's prompt is up)."""
    deadline = time.monotonic() + timeout
    screen = ""
    while time.monotonic() < deadline:
        show = [tmux, "-L", socket, "capture-pane", "-p", "-t", "0"]
        screen = subprocess.run(show, capture_output=True, text=True).stdout
        if any(t in screen for t in texts):
            return
        time.sleep(1)
    raise AssertionError(f"none of {texts} on the screen:\n{screen}")


def ai_title(projects: Path, timeout: float) -> str | None:
    """The title Claude Code wrote into a session transcript, once it has."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for session in projects.rglob("*.jsonl"):
            for line in session.read_text().splitlines():
                try:
                    entry = json.loads(line)
                except ValueError:  # a line being written
                    continue
                if isinstance(entry, dict) and entry.get("type") == "ai-title":
                    title: str = entry["aiTitle"]
                    return title
        time.sleep(2)
    return None
