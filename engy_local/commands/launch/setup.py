"""What configuring a client for a launch takes and gives: the server, the
model as loaded and the tool profile in (`Context`), the client's arguments,
environment and banner lines out (`Setup`). Each client module has one
`configure(ctx) -> Setup`; the files it writes go under `ctx.workdir`, a
temporary directory run.py removes when the client exits."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ...backend import ModelStatus
from ...server.cachereuse import HEADER as REUSE_HEADER
from .claude import PLACEHOLDER_KEY, REUSE_RUN, given, output_cap

# Every client here puts the folder it runs in early in its prompt (the
# system prompt's environment part, before the tools): a session in another
# folder reads the rest from the cache at its new place only when it asks
# (server/cachereuse.py). Measured on the tiny model: Cline read 260 of 2933
# tokens of its second session's first prompt without it.
CACHE_HEADERS = {REUSE_HEADER: str(REUSE_RUN)}


@dataclass(frozen=True)
class Context:
    url: str  # http://host:port of engy
    api_key: str | None
    model: ModelStatus  # as loaded: its id and real window
    lean: bool  # the lean tool profile (profile.py)
    workdir: Path  # the launch's own temporary directory
    user_args: tuple[str, ...] = ()  # after `--`
    base_env: Mapping[str, str] = field(default_factory=dict)  # the user's environment
    binary: Path | None = None  # the client's command (Cline's is run to configure it)
    cwd: Path = field(default_factory=Path.cwd)  # where the client runs

    @property
    def key(self) -> str:
        return self.api_key or PLACEHOLDER_KEY

    @property
    def v1(self) -> str:
        return f"{self.url}/v1"

    @property
    def cap(self) -> int:
        return output_cap(self.model.context_length)


@dataclass(frozen=True)
class Setup:
    args: list[str]  # the client's arguments (without its binary)
    env: dict[str, str]
    said: list[str] = field(default_factory=list)  # banner lines


__all__ = ["CACHE_HEADERS", "Context", "Setup", "given", "output_cap"]
