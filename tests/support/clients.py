"""The real Claude Code and Codex from npm: installing, running, diagnosing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from support.paths import CACHE
from support.server import EngyServer

CLAUDE_CODE = "@anthropic-ai/claude-code@2.1.332"


CODEX = "@openai/codex@0.171.0"


NPM_DIR = CACHE / "npm"


CLIENT_TIMEOUT = 300  # seconds for one client run


@dataclass(frozen=True)
class Clients:
    claude: Path
    codex: Path


def versions_match(bin_dir: Path) -> bool:
    def version(package: str) -> str:
        manifest = bin_dir.parent / package / "package.json"
        try:
            found: str = json.loads(manifest.read_text())["version"]
        except (OSError, ValueError, KeyError):
            return ""
        return found

    return (
        version("@anthropic-ai/claude-code") == CLAUDE_CODE.rsplit("@", 1)[1]
        and version("@openai/codex") == CODEX.rsplit("@", 1)[1]
    )


@pytest.fixture(scope="session")
def clients() -> Clients:
    """Both CLIs, installed once from the npm registry into CACHE/npm and
    reused while the pinned versions are what is there."""
    bins = NPM_DIR / "node_modules" / ".bin"
    found = Clients(claude=bins / "claude", codex=bins / "codex")
    if found.claude.exists() and found.codex.exists() and versions_match(bins):
        return found
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed: cannot install Claude Code and Codex from npm")
    NPM_DIR.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    r = subprocess.run(
        [npm, "install", "--prefix", str(NPM_DIR), "--no-audit", "--no-fund", CLAUDE_CODE, CODEX],
        capture_output=True,
        text=True,
        timeout=900,
    )
    took = time.monotonic() - started
    assert r.returncode == 0, f"npm install failed ({took:.0f} s):\n{r.stdout}\n{r.stderr}"
    assert found.claude.exists() and found.codex.exists(), (
        f"npm install left no binaries in {bins}:\n{r.stdout}\n{r.stderr}"
    )
    print(f"npm install of {CLAUDE_CODE} and {CODEX}: {took:.1f} s")
    return found


@dataclass(frozen=True)
class Run:
    returncode: int
    stdout: str
    stderr: str
    seconds: float


def run_client(
    cmd: list[str | Path], env: dict[str, str], cwd: Path, timeout: float = CLIENT_TIMEOUT
) -> Run:
    started = time.monotonic()
    try:
        r = subprocess.run(
            [str(c) for c in cmd],
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:

        def text(b: bytes | str | None) -> str:
            return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")

        return Run(-1, text(exc.stdout), text(exc.stderr), time.monotonic() - started)
    return Run(r.returncode, r.stdout, r.stderr, time.monotonic() - started)


def diagnose(what: str, run: Run, server: EngyServer) -> str:
    status = "timed out" if run.returncode == -1 else f"exit {run.returncode}"
    return (
        f"{what}: {status} after {run.seconds:.0f} s\n"
        f"--- stdout ---\n{run.stdout[-4000:]}\n--- stderr ---\n{run.stderr[-8000:]}\n"
        f"--- server log ---\n{server.output()[-8000:]}"
    )


def model_id(server: EngyServer) -> str:
    """The id the server serves its model under (the GGUF's file stem)."""
    models = httpx.get(server.url + "/api/hello", timeout=30).json()["models"]
    served: str = models[0]
    return served


def base_env(home: Path) -> dict[str, str]:
    """A clean environment: no proxies, no keys or settings from outside.
    PYTHONPATH stays: `python -m engy_local` in a child must be the code
    under test (a worktree's), not whatever the environment installed."""
    keep = ("PATH", "LANG", "LC_ALL", "TZ", "TMPDIR", "PYTHONPATH")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env["HOME"] = str(home)
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    # A small model may follow a right call with `sleep 600000` (its Bash
    # tool's text mentions sleeps): Claude Code then ran it in the
    # background and, past --max-turns, waited for it, so the test ran out
    # of time. Commands run in the foreground, each for 30 s at most.
    env["CLAUDE_CODE_DISABLE_BACKGROUND_TASKS"] = "1"
    env["BASH_DEFAULT_TIMEOUT_MS"] = env["BASH_MAX_TIMEOUT_MS"] = "30000"
    return env


# ---- Chat Completions clients: opencode and Continue's CLI --------------------------

OPENCODE = "opencode-ai@1.18.33"
CONTINUE = "@continuedev/cli@1.5.47"
CHAT_NPM_DIR = CACHE / "npm-chat"


@dataclass(frozen=True)
class ChatClients:
    opencode: Path
    cn: Path


@pytest.fixture(scope="session")
def chat_clients() -> ChatClients:
    """opencode and Continue's `cn`, installed once from the npm registry
    into CACHE/npm-chat (opencode's install script puts its platform's
    binary in place)."""
    bins = CHAT_NPM_DIR / "node_modules" / ".bin"
    found = ChatClients(opencode=bins / "opencode", cn=bins / "cn")

    def version(package: str) -> str:
        manifest = CHAT_NPM_DIR / "node_modules" / package / "package.json"
        try:
            got: str = json.loads(manifest.read_text())["version"]
        except (OSError, ValueError, KeyError):
            return ""
        return got

    pinned = (
        version("opencode-ai") == OPENCODE.rsplit("@", 1)[1]
        and version("@continuedev/cli") == CONTINUE.rsplit("@", 1)[1]
    )
    if found.opencode.exists() and found.cn.exists() and pinned:
        return found
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed: cannot install opencode and Continue from npm")
    CHAT_NPM_DIR.mkdir(parents=True, exist_ok=True)
    install = ["install", "--prefix", str(CHAT_NPM_DIR), "--no-audit", "--no-fund"]
    r = subprocess.run(
        [npm, *install, OPENCODE, CONTINUE],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, f"npm install failed:\n{r.stdout}\n{r.stderr}"
    assert found.opencode.exists() and found.cn.exists(), r.stdout + r.stderr
    return found
