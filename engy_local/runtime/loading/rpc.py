"""llama.cpp RPC workers (`ggml-rpc-server` on other machines) as devices.

`engy serve --rpc HOST:PORT,...` registers each worker in ggml's backend
registry before any model loads; llama.cpp then spreads the layers over
the workers and the local GPUs (`--tensor-split` weighs them).

ggml aborts the whole process when a worker cannot be reached or speaks
another RPC protocol, so each worker is checked first: a TCP connect with a
timeout, then the real handshake in a child process (`python -m
engy_local.runtime.loading.rpc HOST:PORT`), whose abort costs nothing but a clear
error. A worker serves one client at a time, and the child has let go of
it before this process connects.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import llama_cpp

from ...errors import RPCError
from . import devices
from .devices import Device

MAX_WORKERS = 16  # GGML_RPC_MAX_SERVERS
CONNECT_TIMEOUT = 3.0
HANDSHAKE_TIMEOUT = 30.0
BUILD_HINT = (
    'reinstall it with RPC: CMAKE_ARGS="-DGGML_RPC=on" pip install --force-reinstall '
    "--no-cache-dir llama-cpp-python"
)


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def parse_endpoints(text: str | Sequence[str]) -> list[Endpoint]:
    """`HOST:PORT[,HOST:PORT...]` (or several such strings), in order."""
    items = [text] if isinstance(text, str) else list(text)
    out: list[Endpoint] = []
    for item in (part.strip() for chunk in items for part in chunk.split(",")):
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        # ggml splits an endpoint at its first colon: no IPv6 literals.
        if not sep or not host or ":" in host or host.startswith("["):
            raise RPCError(f"--rpc {item!r}: expected HOST:PORT (an IPv4 address or a name)")
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise RPCError(f"--rpc {item!r}: the port must be a number from 1 to 65535")
        endpoint = Endpoint(host, int(port))
        if endpoint in out:
            raise RPCError(f"--rpc {item!r} is given twice")
        out.append(endpoint)
    if not out:
        raise RPCError("--rpc needs at least one HOST:PORT")
    if len(out) > MAX_WORKERS:
        raise RPCError(f"--rpc takes at most {MAX_WORKERS} workers, not {len(out)}")
    return out


def parse_tensor_split(text: str | None) -> tuple[float, ...]:
    """`--tensor-split 3,1`: how much of the model each device takes, in
    llama.cpp's device order (RPC workers as given, then local GPUs)."""
    if not text:
        return ()
    try:
        weights = tuple(float(part) for part in text.split(","))
    except ValueError:
        raise RPCError(f"--tensor-split {text!r}: expected numbers, e.g. 3,1") from None
    if any(w < 0 or w != w for w in weights) or not any(weights):
        raise RPCError(f"--tensor-split {text!r}: weights are >= 0 and not all 0")
    limit = int(llama_cpp.llama_max_devices())
    if len(weights) > limit:
        raise RPCError(f"--tensor-split {text!r}: this build takes at most {limit} devices")
    return weights


def build_has_rpc() -> bool:
    return bool(llama_cpp.llama_supports_rpc())


def check_reachable(endpoint: Endpoint, timeout: float = CONNECT_TIMEOUT) -> None:
    try:
        socket.create_connection((endpoint.host, endpoint.port), timeout=timeout).close()
    except TimeoutError:
        raise RPCError(f"RPC worker {endpoint} did not answer within {timeout:g} s") from None
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise RPCError(f"RPC worker {endpoint} is not reachable: {reason}") from None


def handshake(endpoint: Endpoint, timeout: float = HANDSHAKE_TIMEOUT) -> list[Device]:
    """Connect as llama.cpp will, in a child process; the worker's devices."""
    command = [sys.executable, "-m", "engy_local.runtime.loading.rpc", str(endpoint)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RPCError(
            f"RPC worker {endpoint} took the connection but did not answer within "
            f"{timeout:g} s (a worker serves one client at a time: is another using it?)"
        ) from None
    if done.returncode != 0:
        lines = [ln.strip() for ln in done.stderr.splitlines() if ln.strip()]
        said = next((ln for ln in lines if "mismatch" in ln), lines[-1] if lines else "")
        detail = f" ({said})" if said else ""
        raise RPCError(
            f"RPC worker {endpoint} refused the handshake{detail}: run a ggml-rpc-server "
            f"built from the same llama.cpp as llama-cpp-python {llama_cpp.__version__} "
            "(scripts/build_rpc_server.sh builds one)"
        )
    try:
        return [Device(**d) for d in json.loads(done.stdout.strip().splitlines()[-1])]
    except (ValueError, TypeError, IndexError):
        raise RPCError(f"RPC worker {endpoint}: unexpected handshake output") from None


_registered: dict[Endpoint, list[Device]] = {}
# ggml_backend_reg_t ggml_backend_rpc_add_server(const char * endpoint)
_ADD_SERVER = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)


def register(endpoint: Endpoint) -> list[Device]:
    """Add the worker's devices to this process's registry (once)."""
    if endpoint in _registered:
        return _registered[endpoint]
    rpc = devices.reg_by_name(b"RPC")
    address = devices.reg_proc_address(rpc, b"ggml_backend_rpc_add_server") if rpc else None
    if not address:
        raise RPCError(f"this llama-cpp-python has no RPC backend: {BUILD_HINT}")
    add_server = _ADD_SERVER(address)
    reg = add_server(str(endpoint).encode())
    if not reg:
        raise RPCError(f"RPC worker {endpoint} offers no devices")
    devices.register(reg)
    found = [devices.device(devices.reg_dev_get(reg, i)) for i in range(devices.reg_dev_count(reg))]
    _registered[endpoint] = found
    return found


def attach(endpoints: Sequence[Endpoint]) -> list[Device]:
    """Check every worker, then register them all: a bad one stops the
    start before any is used, with one line saying which and why."""
    if not build_has_rpc():
        raise RPCError(f"--rpc: this llama-cpp-python was built without RPC; {BUILD_HINT}")
    for endpoint in endpoints:
        if endpoint not in _registered:
            check_reachable(endpoint)
            handshake(endpoint)
    found: list[Device] = []
    for endpoint in endpoints:
        found += register(endpoint)
    devices.set_abort_callback(ctypes.cast(_on_abort, ctypes.c_void_p))
    return found


# void (*ggml_abort_callback_t)(const char * error_message)
_ABORT = ctypes.CFUNCTYPE(None, ctypes.c_char_p)


@_ABORT  # type: ignore[untyped-decorator]
def _on_abort(message: bytes | None) -> None:
    """ggml aborts the process when a worker goes away mid-answer (nothing
    can go on without its layers): one line saying so, and exit 1, instead
    of a backtrace and SIGABRT."""
    # ggml's message starts with its source file and line: what follows says it
    said = re.sub(r"^.*?:\d+: ", "", (message or b"").decode("utf-8", "replace")).strip()
    workers = ", ".join(str(e) for e in _registered) or "none"
    sys.stderr.write(
        f"error: llama.cpp stopped ({said}); with RPC workers ({workers}) that is most often "
        "one that went away: start it again, then engy\n"
    )
    sys.stderr.flush()
    os._exit(1)


def main(argv: list[str]) -> int:
    """The child side of `handshake`: register one worker, print its devices."""
    (endpoint,) = parse_endpoints(argv)
    print(json.dumps([asdict(d) for d in register(endpoint)]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
