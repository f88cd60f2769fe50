"""The coding agents `engy launch` runs: where their binaries are, which
version is installed, and the package (npm or PyPI) that works when one is
missing."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ...errors import LaunchError

ClientName = Literal[
    "claude", "codex", "opencode", "kilo", "qwen", "cline", "continue", "aider", "mini-swe-agent"
]


@dataclass(frozen=True)
class ClientSpec:
    name: ClientName
    title: str
    package: str  # on the npm registry, or PyPI's
    tested: tuple[int, int, int]  # the version engy launch's config is tested with
    binary: str = ""  # the command (default: the name)
    pypi: bool = False

    @property
    def command(self) -> str:
        return self.binary or self.name

    @property
    def install(self) -> str:
        version = ".".join(map(str, self.tested))
        if self.pypi:
            return f"pipx install {self.package}=={version}"
        return f"npm install -g {self.package}@{version}"


CLIENTS: dict[ClientName, ClientSpec] = {
    "claude": ClientSpec("claude", "Claude Code", "@anthropic-ai/claude-code", (2, 1, 332)),
    "codex": ClientSpec("codex", "Codex", "@openai/codex", (0, 171, 0)),
    "opencode": ClientSpec("opencode", "opencode", "opencode-ai", (1, 18, 33)),
    # 7.8.1's platform package is missing from the registry.
    "kilo": ClientSpec("kilo", "Kilo Code CLI", "@kilocode/cli", (7, 7, 7)),
    "qwen": ClientSpec("qwen", "Qwen Code", "@qwen-code/qwen-code", (0, 24, 4)),
    "cline": ClientSpec("cline", "Cline CLI", "cline", (3, 0, 65)),
    "continue": ClientSpec("continue", "Continue CLI", "@continuedev/cli", (1, 5, 47), "cn"),
    "aider": ClientSpec("aider", "Aider", "aider-chat", (0, 86, 2), pypi=True),
    "mini-swe-agent": ClientSpec(
        "mini-swe-agent", "mini-swe-agent", "mini-swe-agent", (2, 4, 6), "mini", pypi=True
    ),
}


@dataclass(frozen=True)
class Client:
    spec: ClientSpec
    path: Path
    version: tuple[int, int, int] | None  # None: it did not say

    @property
    def version_text(self) -> str:
        return ".".join(map(str, self.version)) if self.version else "unknown version"

    def too_old(self) -> str | None:
        """A warning when this client is older than what the config needs."""
        if self.version is None or self.version >= self.spec.tested:
            return None
        tested = ".".join(map(str, self.spec.tested))
        return (
            f"{self.spec.title} {self.version_text} is older than {tested}, the version "
            f"engy launch's settings are made for; update: {self.spec.install}"
        )


def parse_version(text: str) -> tuple[int, int, int] | None:
    """`2.1.332 (Claude Code)`, `codex-cli 0.171.0`, `aider 0.86.2` -> (2, 1, 332) ..."""
    found = re.search(r"(\d+)\.(\d+)\.(\d+)", text)
    if found is None:
        return None
    major, minor, patch = (int(g) for g in found.groups())
    return major, minor, patch


def installed_version(path: Path) -> tuple[int, int, int] | None:
    """What `path --version` says, run in a throwaway HOME: some clients
    set up their folders (caches, config, a plugin) on any start."""
    with tempfile.TemporaryDirectory(prefix="engy-version-") as home:
        env = dict(os.environ, HOME=home)
        for xdg in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
            env.pop(xdg, None)
        try:
            r = subprocess.run(
                [str(path), "--version"],
                capture_output=True,
                text=True,
                timeout=60,
                stdin=subprocess.DEVNULL,
                env=env,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
    return parse_version(r.stdout or r.stderr)


def find_client(name: ClientName, path: str | None = None) -> Client:
    """The client on PATH (or `path`); LaunchError naming the package that
    works when it is not installed."""
    spec = CLIENTS[name]
    found = shutil.which(spec.command, path=path)
    if found is None:
        raise LaunchError(
            f"{spec.title} is not installed ({spec.command} is not on PATH): {spec.install}"
        )
    binary = Path(found)
    return Client(spec, binary, installed_version(binary))


def known(path: str | None = None) -> list[tuple[ClientSpec, Path | None]]:
    """Every client engy launch knows, with where it is installed (None: not
    on PATH). Versions are not asked: that runs each binary."""
    found = []
    for spec in CLIENTS.values():
        where = shutil.which(spec.command, path=path)
        found.append((spec, Path(where) if where else None))
    return found
