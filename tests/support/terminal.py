"""`engy chat` in a real pseudo-terminal."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest

from support.paths import CACHE, REPO

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[()=>][0-9A-Za-z]?|[\x08\r]")


# prompt_toolkit switches bracketed paste on when it shows the prompt and off
# when a line is accepted: the terminal's own marks of "input starts/ends".
INPUT_ON, INPUT_OFF = "\x1b[?2004h", "\x1b[?2004l"


WAIT = 180  # seconds; the machine is small and noisy


def clean(raw: str) -> str:
    return _ANSI.sub("", raw)


class Terminal:
    """`engy chat ARGS` in a pseudo-terminal, 40 x 120."""

    def __init__(self, *args: str, home: Path) -> None:
        env = dict(os.environ)
        env.update(
            ENGY_HOME=str(home),
            TERM="xterm-256color",
            LANG="C.UTF-8",
            # pexpect answers no cursor-position requests
            PROMPT_TOOLKIT_NO_CPR="1",
        )
        env.pop("ENGY_API_KEY", None)
        self.child = pexpect.spawn(
            sys.executable,
            ["-m", "engy_local", "chat", *args],
            cwd=str(REPO),
            env=env,
            encoding="utf-8",
            codec_errors="replace",
            dimensions=(40, 120),
            timeout=WAIT,
        )
        self.log = CACHE / f"chat-{self.child.pid}.log"
        self.child.logfile_read = self.log.open("w")
        self.banner = self.ready()

    def ready(self) -> str:
        """Wait for the prompt; what came before it, cleaned."""
        self.child.expect_exact(INPUT_ON)
        return clean(self.child.before)

    def send(self, line: str) -> None:
        """Type `line` and Enter; return once the line was accepted."""
        self.child.send(line + "\r")
        self.child.expect_exact(INPUT_OFF)

    def run(self, line: str) -> str:
        """Type `line`, wait for the next prompt, return the output between."""
        self.send(line)
        return self.ready()

    def raw_until_prompt(self) -> str:
        self.child.expect_exact(INPUT_ON)
        return str(self.child.before)

    def leave(self) -> int:
        self.child.sendcontrol("d")
        self.child.expect(pexpect.EOF)
        self.child.close()
        assert self.child.exitstatus is not None
        return self.child.exitstatus

    def close(self) -> None:
        if self.child.isalive():
            self.child.terminate(force=True)
        self.child.close()
        if self.child.logfile_read is not None:
            self.child.logfile_read.close()


@pytest.fixture
def terminals(tmp_path: Path) -> Iterator[list[Terminal]]:
    opened: list[Terminal] = []
    yield opened
    for t in opened:
        t.close()


def serve_banner(*args: str, home: Path, until: str, columns: int = 80) -> str:
    """`engy serve ARGS` in a pseudo-terminal `columns` wide: everything it
    wrote until `until` appeared, then Ctrl-C; cleaned of escapes, each
    carriage return (the spinner redrawing) a line break."""
    env = dict(os.environ)
    env.update(ENGY_HOME=str(home), TERM="xterm-256color", LANG="C.UTF-8", COLUMNS=str(columns))
    env.pop("ENGY_API_KEY", None)
    child = pexpect.spawn(
        sys.executable,
        ["-m", "engy_local", "serve", *args],
        cwd=str(REPO),
        env=env,
        encoding="utf-8",
        codec_errors="replace",
        dimensions=(40, columns),
        timeout=WAIT,
    )
    seen: list[str] = []
    try:
        child.expect_exact(until)
        seen.append(str(child.before) + until)
        child.sendintr()
        child.expect(pexpect.EOF)
        seen.append(str(child.before))
    finally:
        if child.isalive():
            child.terminate(force=True)
        child.close()
    raw = "".join(seen)
    return (
        re.sub(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[()=>][0-9A-Za-z]?|\x08", "", raw)
        .replace("\r\n", "\n")
        .replace("\r", "\n")
    )
