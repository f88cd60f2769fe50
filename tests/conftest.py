"""Shared fixtures: the real models the tests run, and real `engy serve`
processes to talk to."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
FIXTURES = SHARED / "fixtures"
# Built models and installed clients persist here between local runs (the
# directory is git-ignored; CI starts from a clean clone).
CACHE = REPO / ".engy-test"


def need_fixtures() -> Path:
    if not FIXTURES.is_dir():
        pytest.skip(f"shared fixtures not found at {FIXTURES}")
    return FIXTURES


@pytest.fixture(scope="session")
def engy_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store of our own, so tests never touch the user's."""
    home = CACHE / "home"
    home.mkdir(parents=True, exist_ok=True)
    return home


@pytest.fixture(scope="session")
def gemma_path(engy_home: Path) -> Path:
    """The real gemma-3-270m GGUF from its PyPI package, as `engy serve`
    finds it by default."""
    os.environ["ENGY_HOME"] = str(engy_home)
    from engy_local.models.catalog import load_catalog
    from engy_local.models.store import locate

    catalog = load_catalog()
    return locate(catalog.entries[catalog.default])


@pytest.fixture(scope="session")
def tiny_qwen3() -> Path:
    """A tiny GGUF with the qwen2 vocabulary and the real Qwen3 template."""
    need_fixtures()
    from ggufs import tiny_gguf_cached

    return tiny_gguf_cached(CACHE / "ggufs", vocab="qwen2", template="Qwen-Qwen3-0.6B.jinja")


ANSWER = "Hello from engy."


@pytest.fixture(scope="session")
def tiny_answer() -> Path:
    """A tiny Qwen3-template GGUF that answers ANSWER and ends its turn,
    whatever the prompt (for the real Claude Code and Codex)."""
    need_fixtures()
    from ggufs import tiny_gguf_cached

    return tiny_gguf_cached(
        CACHE / "ggufs", vocab="qwen2", template="Qwen-Qwen3-0.6B.jinja", answer=ANSWER
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class EngyServer:
    """A real `engy serve` process on 127.0.0.1."""

    def __init__(self, model: str | None, *args: str, home: Path | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ)
        if home is not None:
            env["ENGY_HOME"] = str(home)
        env.pop("ENGY_API_KEY", None)
        cmd = [sys.executable, "-m", "engy_local", "serve", "--port", str(self.port)]
        if model is not None:
            cmd.insert(4, model)
        self.log = CACHE / f"serve-{self.port}.log"
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = self.log.open("wb")
        self.proc = subprocess.Popen(
            [*cmd, *args], env=env, stdout=self._log_file, stderr=subprocess.STDOUT
        )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"engy serve exited: {self.output()}")
            try:
                if httpx.head(self.url + "/api/hello", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"engy serve did not start: {self.output()}")

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(2)  # Ctrl-C: a clean stop
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not self._log_file.closed:
            self._log_file.close()
        return self.proc.returncode


@pytest.fixture(scope="session")
def gemma_server(gemma_path: Path, engy_home: Path) -> Iterator[EngyServer]:
    """`engy serve` with no MODEL argument, exactly as a user runs it: the
    catalog's default model."""
    server = EngyServer(None, home=engy_home)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def tiny_server(tiny_qwen3: Path) -> Iterator[EngyServer]:
    server = EngyServer(str(tiny_qwen3), "--ctx-size", "8192")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def answer_server(tiny_answer: Path) -> Iterator[EngyServer]:
    server = EngyServer(str(tiny_answer))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def tiny_vision() -> tuple[Path, Path]:
    """(model, projector): the tiny answer model that also sees colours,
    and the tiny mlp projector made for it (see ggufs.build_tiny_projector).
    It answers ANSWER to text, " red" to a red image, " blue" to a blue one."""
    need_fixtures()
    from ggufs import tiny_gguf_cached, tiny_projector_cached

    model = tiny_gguf_cached(
        CACHE / "ggufs",
        vocab="qwen2",
        template="Qwen-Qwen3-0.6B.jinja",
        answer=ANSWER,
        colours=True,
    )
    return model, tiny_projector_cached(CACHE / "ggufs")
