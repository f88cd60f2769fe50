"""`engy launch` for the agents beside Claude Code and Codex: opencode,
Kilo, Qwen Code, Cline, Continue's CLI, Aider and mini-swe-agent, each
installed by this module from its registry at the version engy launch is
made for, run for real through `engy launch` on the running engy.

Each runs its one-shot form on a two-turn model (support.ggufs): on a fresh
conversation it calls the client's own shell tool with COMMAND (Aider, which
makes no calls, writes the file in its `whole` edit format); once that is
in the context it answers AFTER. A client that leaves proof.txt has read
the call, run it and (for the tool-calling ones) sent the result back; the
turn after it reads the first turn's prompt from the cache; a second
session in another folder reads most of its first prompt from the cache;
and nothing is written in HOME: what the client keeps goes to launch's
temporary directory, which is gone afterwards. Each client's first request
is kept (support.captured, outside the tree) for the cache's promise over
its prompts (tests/runtime/test_cache_clients.py).

Measured here (2 cores): every client's second session read 95% or more
of its first prompt from the cache only with x-engy-cache-reuse where the
folder's path comes early (opencode: 1885 of 5228 tokens without it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import agents, captured
from support.clients import base_env
from support.paths import CACHE, need_fixtures
from support.server import EngyServer

COMMAND = "echo Zebra > proof.txt"
AFTER = "All done, the command ran"
TIMEOUT = 300


@pytest.fixture(scope="module")
def agents_path() -> str:
    return agents.install()


@dataclass(frozen=True)
class Agent:
    first: str  # what the two-turn model says first: a call, or Aider's edit
    ask: tuple[str, ...]  # the one-shot form, after `--`
    then: str = AFTER
    # How much of the second session's first prompt is read from the cache
    # at least (measured on the tiny model, with x-engy-cache-reuse).
    reread: float = 0.9


def call(name: str, arguments: str) -> str:
    """A Llama 3.1 JSON call (the two-turn model's template), spaced so that
    no token repeats."""
    return '{"name": "' + name + '","parameters":{' + arguments + "}}"


TASK = "Make proof.txt"
AGENTS = {
    # Each script's arguments in its schema's order, as the call grammar
    # holds them (opencode 1.18.33's bash has no description; Kilo's has it
    # last, and optional).
    "opencode": Agent(call("bash", '"command":"' + COMMAND + '"'), ("run", TASK)),
    "kilo": Agent(call("bash", '"command":"' + COMMAND + '"'), ("run", "--auto", TASK)),
    "qwen": Agent(call("run_shell_command", '"command":"' + COMMAND + '"'), (TASK,)),
    "cline": Agent(call("run_commands", '"commands":["' + COMMAND + '"]'), (TASK,)),
    # Continue's first prompt differs by more than the folder's path after
    # its tools: 1363 of 1988 tokens (69%) were read.
    "continue": Agent(call("Bash", '"command":"' + COMMAND + '"'), ("-p", TASK), reread=0.6),
    "mini-swe-agent": Agent(
        call("bash", '"command":"' + COMMAND + '"'),
        (
            "--task",
            TASK,
            "--yolo",
            "--exit-immediately",
            "--config",
            "mini.yaml",
            "--config",
            "agent.step_limit=3",
        ),
    ),
    # Aider's `whole` format: the file's name, then its text in a fence
    # (left open: a closing fence would repeat a token, and Aider takes an
    # open one as closed by the answer's end).
    "aider": Agent("proof.txt\n```\nZebra", ("--message", TASK, "--yes-always")),
}


@pytest.fixture(scope="module")
def home_dirs() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="engy-agents-") as tmp:
        yield Path(tmp)


def requests(log: str) -> list[dict[str, str]]:
    """Each request's figures in the server log: prompt=, cached=, ..."""
    return [
        dict(f.split("=", 1) for f in line.split() if "=" in f)
        for line in log.splitlines()
        if " prompt=" in line
    ]


def launch(
    client: str, port: int, ask: tuple[str, ...], env: dict[str, str], cwd: Path
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "engy_local", "launch", client, "--port", str(port), "--", *ask],
        env=env, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=TIMEOUT,
    )  # fmt: skip


def why(r: subprocess.CompletedProcess[str], server: EngyServer) -> str:
    return (
        f"exit {r.returncode}\n--- stdout ---\n{r.stdout[-4000:]}\n--- stderr ---\n"
        f"{r.stderr[-6000:]}\n--- server ---\n{server.output()[-5000:]}"
    )


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("client", list(AGENTS))
def test_launched_agent_makes_the_file_and_its_prompts_are_read_from_the_cache(
    agents_path: str, tmp_path: Path, client: str
) -> None:
    need_fixtures()
    from support.ggufs import two_turn_gguf_cached

    agent = AGENTS[client]
    model = two_turn_gguf_cached(CACHE / "ggufs", first=agent.first, then=agent.then, marker="ebra")
    home = tmp_path / "home"
    home.mkdir()
    env = base_env(home)
    env["PATH"] = f"{agents_path}{os.pathsep}{env['PATH']}"
    env["TMPDIR"] = str(tmp_path / "tmp")
    (tmp_path / "tmp").mkdir()
    # Greedy: off its script the tiny model is unsure, and sampled it came
    # back to it only now and then. mini-swe-agent asks for tool_choice
    # required, whose grammar holds the call to Llama 3.1's own spacing,
    # not the script's (spaced so that no token repeats): sampled, its bash
    # command came out as `{` in 4 of 6 direct requests (greedy: 0 of 6).
    server = EngyServer(str(model), "--temp", "0")
    recorder = captured.Recorder(server.url)  # the client's requests, kept
    try:
        firsts = []
        for folder in ("one", "two"):
            work = tmp_path / folder
            work.mkdir()
            before = len(server.output())
            sent = len(recorder.bodies)
            started = time.monotonic()
            r = launch(client, recorder.port, agent.ask, env, work)
            took = time.monotonic() - started
            proof = work / "proof.txt"
            assert proof.is_file() and proof.read_text().strip() == "Zebra", why(r, server)
            turns = requests(server.output()[before:])
            assert turns, why(r, server)
            print(f"{client} in {folder}: {took:.1f} s, requests {turns}")
            firsts.append(turns[0])
            body = recorder.first_turn(sent)
            assert body is not None, recorder.bodies
            if folder == "one":
                captured.save(client, body)
            if client != "aider":  # one request: the edit is in its answer
                # The turn after the call (Kilo asks something on the side
                # between): its prompt is the first one and more, read
                # from the cache.
                after = next(t for t in turns[1:] if int(t["prompt"]) > int(turns[0]["prompt"]))
                assert int(after["cached"]) >= 0.9 * int(turns[0]["prompt"]), turns
        second = firsts[1]
        assert int(second["cached"]) >= agent.reread * int(second["prompt"]), firsts
    finally:
        recorder.stop()
        server.stop()
    # Nothing in HOME, and launch's temporary directory is gone (the
    # clients' own scratch files in TMPDIR are theirs).
    assert files_under(home) == [], files_under(home)
    left = [f for f in files_under(tmp_path / "tmp") if f.startswith("engy-launch-")]
    assert left == [], left
