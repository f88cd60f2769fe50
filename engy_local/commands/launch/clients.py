"""The coding agents `engy launch` runs: where their binaries are, which
version is installed, and the npm package that works when one is missing."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ...errors import LaunchError

ClientName = Literal["claude", "codex"]


@dataclass(frozen=True)
class ClientSpec:
    name: ClientName
    title: str
    package: str  # on the npm registry
    tested: tuple[int, int, int]  # the version engy launch's config is tested with

    @property
    def install(self) -> str:
        version = ".".join(map(str, self.tested))
        return f"npm install -g {self.package}@{version}"


CLIENTS: dict[ClientName, ClientSpec] = {
    "claude": ClientSpec("claude", "Claude Code", "@anthropic-ai/claude-code", (2, 1, 332)),
    "codex": ClientSpec("codex", "Codex", "@openai/codex", (0, 171, 0)),
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
    """`2.1.332 (Claude Code)`, `codex-cli 0.171.0` -> (2, 1, 332), (0, 171, 0)."""
    found = re.search(r"(\d+)\.(\d+)\.(\d+)", text)
    if found is None:
        return None
    major, minor, patch = (int(g) for g in found.groups())
    return major, minor, patch


def installed_version(path: Path) -> tuple[int, int, int] | None:
    try:
        r = subprocess.run(
            [str(path), "--version"],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_version(r.stdout or r.stderr)


def find_client(name: ClientName, path: str | None = None) -> Client:
    """The client on PATH (or `path`); LaunchError naming the npm package
    that works when it is not installed."""
    spec = CLIENTS[name]
    found = shutil.which(name, path=path)
    if found is None:
        raise LaunchError(f"{spec.title} is not installed ({name} is not on PATH): {spec.install}")
    binary = Path(found)
    return Client(spec, binary, installed_version(binary))
