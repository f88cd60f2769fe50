"""The engy server a launched client talks to: the one already running on
--host/--port when it is engy and can serve the model, else one started here
in the background (and stopped again when the client exits)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from ...backend import ModelStatus
from ...chat import ChatRequest, Message, Text
from ...client import RemoteBackend
from ...errors import EngyError, LaunchError, RemoteError

# Loading a big model from disk may take minutes; a tiny one, seconds.
START_TIMEOUT = 900.0
STOP_TIMEOUT = 30.0


@dataclass
class Server:
    url: str  # http://host:port
    model: ModelStatus  # the model the client is given, as loaded
    process: subprocess.Popen[bytes] | None = None  # started here
    log: Path | None = None  # its output, when started here

    @property
    def started_here(self) -> bool:
        return self.process is not None

    def stop(self) -> int | None:
        """Stop a server started here (Ctrl-C, then a kill); its exit code."""
        proc = self.process
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return proc.returncode


def hello(url: str) -> list[str] | None:
    """The models an engy on `url` serves (primary first), or None when
    nothing answers there or what answers is not engy."""
    try:
        r = httpx.get(url + "/api/hello", timeout=5)
        body = r.json() if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    if not isinstance(body, dict) or body.get("name") != "engy":
        return None
    models = body.get("models")
    return [str(m) for m in models] if isinstance(models, list) else []


def _matches(status: ModelStatus, name: str) -> bool:
    names = {status.id, *status.aliases}
    return name in names or name.split("/", 1)[-1] in names


def loaded(url: str, api_key: str | None, model: str) -> ModelStatus:
    """Have the server at `url` load `model` (a token count does that) and
    say what it loaded. RemoteError 404 when it cannot serve the model."""
    backend = RemoteBackend(url, "messages", api_key)
    try:
        probe = ChatRequest(model=model, messages=(Message("user", (Text("hi"),)),))
        backend.count_tokens(probe)
        found = [s for s in backend.status() if _matches(s, model)]
    finally:
        backend.close()
    if not found:
        raise LaunchError(f"{url} loaded {model} but does not list it in /engy/ps")
    return found[0]


def _running(
    url: str, api_key: str | None, name: str | None, model: str | None
) -> tuple[Server | None, str]:
    """The running engy, when it serves `name` (or the file MODEL names,
    under another name); else None and why not. One that serves it but
    cannot load it now (no room) is a LaunchError that says so."""
    if name is None:
        return None, "serves no model"
    served = name
    for attempt in ("name", "file"):
        try:
            return Server(url, loaded(url, api_key, served)), ""
        except RemoteError as exc:
            if exc.status == 401:
                raise LaunchError(
                    f"the engy on {url} needs its API key: pass --api-key or set ENGY_API_KEY"
                ) from None
            if exc.status != 404:
                # It serves the model: a second server would load it twice.
                raise LaunchError(
                    f"the engy on {url} serves {served} but cannot load it now: {exc}"
                ) from None
        same = _serving_file(url, api_key, model) if attempt == "name" and model else None
        if same is None:
            break
        served = same
    return None, f"does not serve {name}"


def _serving_file(url: str, api_key: str | None, model: str) -> str | None:
    """The id under which the engy at `url` serves the GGUF that `model`
    names here (a path, an installed id or alias, a catalog id, an `hf:`
    ref), or None when it does not serve that file."""
    from ...server.backends import resolve_model
    from ...server.options import ServeOptions

    try:
        local = resolve_model(model, ServeOptions()).options.path.resolve()
    except (EngyError, OSError):
        return None
    backend = RemoteBackend(url, "messages", api_key)
    try:
        files = backend.files()
    except RemoteError:
        return None
    finally:
        backend.close()
    for served, path in files.items():
        try:
            if Path(path).resolve() == local or os.path.samefile(path, local):
                return served
        except OSError:
            continue
    return None


def model_size(url: str, api_key: str | None, model: str) -> tuple[int | None, int | None]:
    """The parameter count and the file size of the GGUF the engy at `url`
    serves as `model`, read here (None, None when it is not a file on this
    machine, e.g. a server elsewhere; None for a count the file lacks)."""
    from ...models.ggufmeta import parameter_count

    backend = RemoteBackend(url, "messages", api_key)
    try:
        path = backend.files().get(model)
    except RemoteError:
        return None, None
    finally:
        backend.close()
    if path is None:
        return None, None
    gguf = Path(path)
    try:
        size = gguf.stat().st_size
    except OSError:
        return None, None
    try:
        return parameter_count(gguf) or None, size
    except (EngyError, OSError, ValueError):
        return None, size


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def port_taken(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def start(
    model: str | None,
    host: str,
    port: int,
    api_key: str | None,
    serve_args: list[str],
    log: Path,
) -> subprocess.Popen[bytes]:
    """`engy serve` in the background, in its own session so that Ctrl-C
    in the client's terminal does not reach it."""
    cmd = [sys.executable, "-m", "engy_local", "serve"]
    if model is not None:
        cmd.append(model)
    cmd += ["--host", host, "--port", str(port), *serve_args]
    env = dict(os.environ)
    if api_key:
        env["ENGY_API_KEY"] = api_key
    else:
        env.pop("ENGY_API_KEY", None)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        return subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def wait_ready(
    proc: subprocess.Popen[bytes], url: str, log: Path, timeout: float = START_TIMEOUT
) -> list[str]:
    """Wait until the server started here answers; its models."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace").strip().splitlines()[-5:]
            raise LaunchError(
                f"engy serve exited ({proc.returncode}) before it was ready: "
                + (" / ".join(tail) or "no output")
                + f" (log: {log})"
            )
        models = hello(url)
        if models is not None:
            return models
        time.sleep(0.25)
    raise LaunchError(f"engy serve did not answer on {url} within {timeout:.0f} s (log: {log})")


def connect(
    model: str | None,
    host: str,
    port: int,
    api_key: str | None,
    serve_args: list[str],
    log_dir: Path,
    say: Callable[[str], None],
) -> Server:
    """The running engy on host:port when it can serve `model`, else a new
    `engy serve` (on another free port when host:port is taken)."""
    url = f"http://{host}:{port}"
    models = hello(url)
    if models is not None:
        name = model or (models[0] if models else None)
        running, why = _running(url, api_key, name, model)
        if running is not None:
            return running
        say(f"the engy on {url} {why}; starting one for it")
    if models is not None or port_taken(host, port):
        port = free_port(host)
        url = f"http://{host}:{port}"
    log = log_dir / f"serve-{port}.log"
    proc = start(model, host, port, api_key, serve_args, log)
    server = Server(url, ModelStatus("", 0, "", 0, None), proc, log)
    try:
        models = wait_ready(proc, url, log)
        # Its primary model is MODEL (however MODEL named it: a path, an alias).
        server.model = loaded(url, api_key, models[0])
    except BaseException:
        server.stop()
        raise
    return server
