"""The agent CLIs engy launch runs beside Claude Code and Codex, installed
from their registries at the versions engy launch is made for (once, into
CACHE; reused): `install()` gives a PATH with all of them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import CACHE

NPM = {
    "opencode-ai": "1.18.33",
    "@kilocode/cli": "7.7.7",
    "@qwen-code/qwen-code": "0.24.4",
    "cline": "3.0.65",
    "@continuedev/cli": "1.5.47",
}
PYPI = {"aider-chat": "0.86.2", "mini-swe-agent": "2.4.6"}
NPM_DIR = CACHE / "npm-agents"
PY_DIR = CACHE / "agents-venv"


def _installed(manifest: Path, version: str) -> bool:
    try:
        return bool(json.loads(manifest.read_text())["version"] == version)
    except (OSError, ValueError, KeyError):
        return False


def install() -> str:
    """A PATH with every client at its pinned version: the npm ones in
    CACHE/npm-agents, the PyPI ones in a venv of their own (their pins
    would clash with engy's), each installed once and reused."""
    modules = NPM_DIR / "node_modules"
    if not all(_installed(modules / p / "package.json", v) for p, v in NPM.items()):
        npm = shutil.which("npm")
        if npm is None:
            pytest.skip("npm is not installed: cannot install the agent CLIs")
        NPM_DIR.mkdir(parents=True, exist_ok=True)
        pins = [f"{p}@{v}" for p, v in NPM.items()]
        r = subprocess.run(
            [npm, "install", "--prefix", str(NPM_DIR), "--no-audit", "--no-fund", *pins],
            capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        assert r.returncode == 0, f"npm install failed:\n{r.stdout}\n{r.stderr}"
    pip = PY_DIR / "bin" / "pip"
    check = subprocess.run(
        [str(pip), "freeze"], capture_output=True, text=True
    ) if pip.exists() else None  # fmt: skip
    pins = [f"{p}=={v}" for p, v in PYPI.items()]
    if check is None or not all(p in check.stdout for p in pins):
        subprocess.run([sys.executable, "-m", "venv", str(PY_DIR)], check=True)
        r = subprocess.run(
            [str(pip), "install", "-q", *pins], capture_output=True, text=True, timeout=900
        )
        assert r.returncode == 0, f"pip install failed:\n{r.stdout}\n{r.stderr}"
    return f"{modules / '.bin'}{os.pathsep}{PY_DIR / 'bin'}"
