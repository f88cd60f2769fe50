"""The code stays clean: ruff and strict mypy are part of the suite."""

from __future__ import annotations

import subprocess
import sys

from support.paths import REPO


def test_ruff_is_clean() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "."], cwd=REPO, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy_is_clean() -> None:
    r = subprocess.run([sys.executable, "-m", "mypy"], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_ci_runs_the_readme_test_command() -> None:
    readme = (REPO / "README.md").read_text()
    ci = (REPO / ".ci" / "run").read_text()
    command = ci.strip().splitlines()[-1]
    assert command in readme
