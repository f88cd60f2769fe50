"""A real `engy serve` process on 127.0.0.1."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from support.paths import CACHE


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class EngyServer:
    """A real `engy serve` process on 127.0.0.1. Unless `args` name a
    --cache-disk, its disk tier is a directory of its own, removed when it
    stops: one server's stored prompts are never another test's hits."""

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
        self.cache_disk: Path | None = None
        if "--cache-disk" not in args:
            self.cache_disk = CACHE / "kvcache" / f"serve-{self.port}"
            shutil.rmtree(self.cache_disk, ignore_errors=True)
            cmd += ["--cache-disk", str(self.cache_disk)]
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
        if self.cache_disk is not None:
            shutil.rmtree(self.cache_disk, ignore_errors=True)
        # No request anywhere in the suite may meet a full KV cache.
        assert "llama_decode failed" not in self.output(), self.output()[-4000:]
        return self.proc.returncode
