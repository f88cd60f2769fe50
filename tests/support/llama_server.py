"""A real llama-server (bench/build_llama_server.sh builds it) on loopback,
for the upstream tests."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from support.paths import CACHE
from support.server import free_port

DEFAULT_BUILD = Path.home() / ".cache" / "engy" / "llama-server"


def need_llama_server() -> Path:
    binary = llama_server_binary()
    if binary is None:
        pytest.skip(
            "llama-server not built: run bench/build_llama_server.sh "
            "(and export LLAMA_SERVER=its output)"
        )
    return binary


class LlamaServer:
    """A real llama-server on 127.0.0.1 serving `gguf`."""

    def __init__(self, gguf: Path, ctx: int = 8192) -> None:
        binary = need_llama_server()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = CACHE / f"llama-server-{self.port}.log"
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = self.log.open("wb")
        cmd = [str(binary), "-m", str(gguf), "--host", "127.0.0.1"]
        cmd += ["--port", str(self.port), "-c", str(ctx), "-np", "2", "-t", "2"]
        self.proc = subprocess.Popen(cmd, stdout=self._log_file, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited: {self.log.read_text(errors='replace')}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("llama-server did not start")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if not self._log_file.closed:
            self._log_file.close()


def llama_server_binary() -> Path | None:
    env = os.environ.get("LLAMA_SERVER")
    if env:
        return Path(env) if Path(env).is_file() else None
    builds = sorted(DEFAULT_BUILD.glob("build-*/bin/llama-server"))
    return builds[-1] if builds else None
