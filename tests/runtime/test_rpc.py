"""`engy serve --rpc`: llama.cpp RPC workers as devices.

A real ggml-rpc-server, built from the llama.cpp sources vendored in the
installed llama-cpp-python's sdist (scripts/build_rpc_server.sh, cached in
~/.cache/engy/rpc-server), holds the tiny model's layers on loopback; the
answer is the same as from the local engine. Workers that cannot serve
(nothing listening, another protocol version, silent) stop the start with
one line and exit 1, never an abort."""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import llama_cpp
import pytest
from support.paths import CACHE, REPO
from support.server import EngyServer, free_port

from engy_local.commands.ps import fetch_status
from engy_local.errors import RPCError
from engy_local.runtime.loading import rpc
from engy_local.runtime.loading.rpc import Endpoint, parse_endpoints, parse_tensor_split

BUILD = REPO / "scripts" / "build_rpc_server.sh"


# ---- the option grammar, as tables ---------------------------------------------


@pytest.mark.parametrize(
    ("given", "endpoints"),
    [
        ("127.0.0.1:50052", [Endpoint("127.0.0.1", 50052)]),
        ("a:1, b:2", [Endpoint("a", 1), Endpoint("b", 2)]),
        (["a:1", "b:2,c:3"], [Endpoint("a", 1), Endpoint("b", 2), Endpoint("c", 3)]),
    ],
)
def test_endpoints_parse(given: str | list[str], endpoints: list[Endpoint]) -> None:
    assert parse_endpoints(given) == endpoints


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("localhost", "expected HOST:PORT"),
        (":50052", "expected HOST:PORT"),
        ("[::1]:50052", "expected HOST:PORT"),
        ("::1:50052", "expected HOST:PORT"),
        ("host:0", "port must be a number"),
        ("host:http", "port must be a number"),
        ("host:70000", "port must be a number"),
        ("a:1,a:1", "given twice"),
        (",", "at least one"),
        (",".join(f"h:{p}" for p in range(1, 18)), "at most 16"),
    ],
)
def test_endpoints_refused(given: str, message: str) -> None:
    with pytest.raises(RPCError, match=message):
        parse_endpoints(given)


@pytest.mark.parametrize(
    ("given", "weights"), [(None, ()), ("3,1", (3.0, 1.0)), ("0.5, 0.5", (0.5, 0.5))]
)
def test_split_parses(given: str | None, weights: tuple[float, ...]) -> None:
    assert parse_tensor_split(given) == weights


@pytest.mark.parametrize(
    ("given", "message"),
    [("a,b", "expected numbers"), ("1,-1", ">= 0"), ("0,0", "not all 0"), ("nan", ">= 0")],
)
def test_split_refused(given: str, message: str) -> None:
    with pytest.raises(RPCError, match=message):
        parse_tensor_split(given)


# ---- workers that cannot serve --------------------------------------------------


class FakeWorker:
    """A TCP listener on loopback that answers llama.cpp's HELLO with the
    given protocol version, or never answers (`version=None`)."""

    def __init__(self, version: tuple[int, int, int] | None) -> None:
        self.version = version
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.endpoint = Endpoint("127.0.0.1", self.port)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._client, args=(conn,), daemon=True).start()

    def _client(self, conn: socket.socket) -> None:
        with conn:
            try:
                header = conn.recv(9)  # command byte, u64 size
                if self.version is None or len(header) < 9:
                    time.sleep(60)
                    return
                (size,) = struct.unpack("<Q", header[1:])
                conn.recv(size)
                caps = bytes(24)
                body = bytes(self.version) + b"\0" + caps  # major minor patch padding caps
                conn.sendall(struct.pack("<Q", len(body)) + body)
                time.sleep(5)
            except OSError:
                pass

    def close(self) -> None:
        self.sock.close()


def serve_exits(model: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "engy_local", "serve", str(model), "--port"]
    cmd += [str(free_port()), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1, done.stdout + done.stderr
    lines = [ln for ln in (done.stdout + done.stderr).splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


def need_rpc_build() -> None:
    assert rpc.build_has_rpc(), (
        "llama-cpp-python was built without RPC: install it as the README's test command "
        'does (CMAKE_ARGS="-DGGML_RPC=on")'
    )


def test_unreachable_worker_is_one_line_and_exit_1(tiny_qwen3: Path) -> None:
    need_rpc_build()
    port = free_port()  # nothing listens there
    line = one_error_line(serve_exits(tiny_qwen3, "--rpc", f"127.0.0.1:{port}"))
    assert f"RPC worker 127.0.0.1:{port} is not reachable" in line
    assert "refused" in line.lower()


def test_worker_of_another_protocol_is_refused_without_an_abort(tiny_qwen3: Path) -> None:
    """ggml aborts on a version mismatch; the child process takes it."""
    need_rpc_build()
    worker = FakeWorker((99, 0, 0))
    try:
        line = one_error_line(serve_exits(tiny_qwen3, "--rpc", str(worker.endpoint)))
    finally:
        worker.close()
    assert f"RPC worker {worker.endpoint} refused the handshake" in line
    assert "99.0.0" in line  # ggml's own word on the worker's version
    assert llama_cpp.__version__ in line


def test_silent_worker_times_out() -> None:
    need_rpc_build()
    worker = FakeWorker(None)
    try:
        with pytest.raises(RPCError, match="did not answer within 2 s"):
            rpc.handshake(worker.endpoint, timeout=2)
    finally:
        worker.close()


def test_bad_option_is_one_line(tiny_qwen3: Path) -> None:
    line = one_error_line(serve_exits(tiny_qwen3, "--rpc", "localhost"))
    assert "--rpc 'localhost': expected HOST:PORT" in line
    line = one_error_line(serve_exits(tiny_qwen3, "--tensor-split", "1,1"))
    assert "--tensor-split has 2 weights for 0 devices" in line


# ---- a real worker ---------------------------------------------------------------


@pytest.fixture(scope="module")
def rpc_server_binary() -> Path:
    need_rpc_build()
    done = subprocess.run(
        ["bash", str(BUILD), llama_cpp.__version__],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if done.returncode != 0:
        pytest.skip(f"ggml-rpc-server could not be built: {done.stderr[-500:]}")
    return Path(done.stdout.strip().splitlines()[-1])


class RPCWorker:
    def __init__(self, binary: Path) -> None:
        self.port = free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        self.log = CACHE / f"rpc-server-{self.port}.log"
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = self.log.open("wb")
        cmd = [str(binary), "-H", "127.0.0.1", "-p", str(self.port), "-t", "2"]
        self.proc = subprocess.Popen(cmd, stdout=self._log_file, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.output()
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"ggml-rpc-server did not listen: {self.output()}")

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log_file.close()


@pytest.fixture(scope="module")
def worker(rpc_server_binary: Path) -> Iterator[RPCWorker]:
    w = RPCWorker(rpc_server_binary)
    yield w
    w.stop()


def ask(server: EngyServer) -> str:
    model = httpx.get(server.url + "/v1/models", timeout=30).json()["data"][0]["id"]
    body = {
        "model": model,
        "max_tokens": 12,
        "temperature": 0,
        "messages": [{"role": "user", "content": "Say something about the sea."}],
    }
    r = httpx.post(server.url + "/v1/messages", json=body, timeout=120)
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["usage"]["output_tokens"] == 12
    return "".join(b.get("text", "") for b in data["content"])


def test_model_layers_on_a_real_worker(tiny_qwen3: Path, worker: RPCWorker) -> None:
    local = EngyServer(str(tiny_qwen3), "--parallel", "1", "--cache-ram", "0")
    try:
        expected = ask(local)
        (here,) = fetch_status(local.url, None)
    finally:
        local.stop()
    server = EngyServer(
        str(tiny_qwen3), "--rpc", worker.endpoint, "--parallel", "1", "--cache-ram", "0"
    )
    try:
        out = server.output()
        assert f"device    RPC0 ({worker.endpoint})" in out, out
        assert "backend   RPC" in out, out
        # every layer (and the output layer) on the worker, its weights there
        split = next(ln for ln in out.splitlines() if ln.strip().startswith("split"))
        assert "layers offloaded" in split
        done, total = split.split()[1].split("/")
        assert done == total, split
        assert f"RPC0[{worker.endpoint}]" in split, split
        assert ask(server) == expected  # the same greedy answer as run here
        (status,) = fetch_status(server.url, None)
        assert f"RPC0[{worker.endpoint}]" in status.split and status.offloaded == 2
        assert status.backend == "RPC"
        # the output layer's weights are on the worker: not counted here
        assert 0 < status.cost < here.cost * 0.75, (status.cost, here.cost)
        assert "Accepted client connection" in worker.output()
    finally:
        assert server.stop() == 0


def test_doctor_names_the_worker_that_fails(tiny_qwen3: Path) -> None:
    need_rpc_build()
    port = free_port()
    cmd = [sys.executable, "-m", "engy_local", "doctor", str(tiny_qwen3), "--json"]
    done = subprocess.run(
        [*cmd, "--rpc", f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    assert checks["devices"]["status"] == "fail"
    assert f"127.0.0.1:{port} is not reachable" in checks["devices"]["figure"]
    assert checks["model loads"]["status"] == "fail"
    assert "RPC workers (--rpc): built in" in checks["backend"]["figure"]


def test_ps_shows_the_split_once_a_model_offloads() -> None:
    from rich.console import Console

    from engy_local.backend import ModelStatus
    from engy_local.commands.ps import status_table

    def rendered(split: str, offloaded: int) -> str:
        console = Console(width=400, record=True)
        m = ModelStatus(id="m", context_length=8, backend="RPC", cost=1, keep_alive_left=None)
        console.print(status_table([replace(m, split=split, offloaded=offloaded)]))
        return console.export_text()

    shown = rendered("2/2 layers offloaded, CPU_Mapped 9.3 MiB, RPC0[10.0.0.2:50052] 9.3 MiB", 2)
    assert "SPLIT" in shown and "RPC0[10.0.0.2:50052] 9.3 MiB" in shown
    assert "SPLIT" not in rendered("0/2 layers offloaded, CPU_Mapped 18.6 MiB", 0)


@pytest.mark.parametrize(
    ("log", "line", "remote"),
    [
        (
            "load_tensors: offloaded 2/2 layers to GPU\n"
            "load_tensors:   CPU_Mapped model buffer size =     9.29 MiB\n"
            "load_tensors: RPC0[127.0.0.1:50052] model buffer size =    27.87 MiB\n",
            "2/2 layers offloaded, CPU_Mapped 9.3 MiB, RPC0[127.0.0.1:50052] 27.9 MiB",
            0.75,
        ),
        (
            "load_tensors: offloaded 0/19 layers to GPU\n"
            "load_tensors:   CPU_Mapped model buffer size =   241.41 MiB\n"
            "load_tensors:   CPU_REPACK model buffer size =    36.00 MiB\n",
            "0/19 layers offloaded, CPU_Mapped 241.4 MiB, CPU_REPACK 36.0 MiB",
            0.0,
        ),
        ("load_tensors:   CPU model buffer size =    1.00 MiB\n", "CPU 1.0 MiB", 0.0),
        ("", "", 0.0),
    ],
)
def test_the_split_from_the_load_log(log: str, line: str, remote: float) -> None:
    from engy_local.runtime.loading.llamalog import parse_split

    split = parse_split(log)
    assert split.line() == line
    assert split.remote_share == pytest.approx(remote, abs=0.01)


def test_a_worker_that_goes_away_ends_engy_with_one_line(
    tiny_qwen3: Path, rpc_server_binary: Path
) -> None:
    """llama.cpp cannot go on without a worker's layers and aborts; engy
    says so in one line and exits 1 instead of a backtrace and SIGABRT."""
    lost = RPCWorker(rpc_server_binary)
    server = EngyServer(str(tiny_qwen3), "--rpc", lost.endpoint, "--parallel", "1")
    try:
        ask(server)
        lost.stop()
        with pytest.raises(httpx.HTTPError):  # the connection ends with the process
            ask(server)
        assert server.proc.wait(timeout=30) == 1
        out = server.output()
        line = next(ln for ln in out.splitlines() if ln.startswith("error: llama.cpp stopped"))
        assert "Remote RPC server crashed or returned malformed response" in line, out
        assert f"RPC workers ({lost.endpoint})" in line and ".cpp:" not in line
        assert "Traceback" not in out and "backtrace" not in out.lower()
    finally:
        server.stop()
        lost.stop()
