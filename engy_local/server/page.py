"""The page: `GET /` in a browser, its files, and what it reads.

    GET  /                      the page (for `Accept: text/html`; else the hello JSON)
    GET  /engy/page/NAME        its files: page.css, page.js, ... (package data, no build step)
    GET  /engy/status           everything at once: requests, sessions, figures, models, pulls
    GET  /engy/events           the same as server-sent events: `snapshot` first, then
                                `update` (requests and sessions that changed), `models`
                                (every 2 s), `pulls` (while one runs)
    GET  /engy/models           served, loaded and installed models
    POST /engy/models/load      {"model"}      POST /engy/models/unload   {"model"}
    POST /engy/models/pull      {"ref"}        POST /engy/models/rm       {"model"}

The page and its files need no key (they hold no data); everything else
follows the API's rules (`app.endpoint`: the key when one is set; `guard`:
loopback Host, no foreign Origin). Prompt text (a request's last user
text, an answer's start, a session's title) goes only to a reader on
loopback or one that gave the key (`reveal`). The page's answers carry a
Content-Security-Policy that allows nothing but this origin.

With no page open nothing here runs; an open page's stream wakes four
times a second and asks the record what changed.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import webbrowser
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from typing import Any, TypeVar

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from ..backend import Backend, Manages
from ..errors import InvalidRequest, NotFoundRoute
from .activity import Activity
from .guard import is_loopback
from .manage import Pulls, StoreHooks, installed_json, load, rm, unload
from .shutdown import Drain

T = TypeVar("T")
Handler = Callable[[Request], Awaitable[Response]]

TICK = 0.25  # seconds between looks at the record while a page is open
MODELS_EVERY = 2.0  # seconds between the loaded models' status
PING_EVERY = 15.0  # a comment on a quiet stream, so proxies keep it open
FILES = {
    "index.html": "text/html; charset=utf-8",
    "page.css": "text/css; charset=utf-8",
    "page.js": "text/javascript; charset=utf-8",
    "chat.js": "text/javascript; charset=utf-8",
    "charts.js": "text/javascript; charset=utf-8",
    "util.js": "text/javascript; charset=utf-8",
    "icon.svg": "image/svg+xml",
}
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-resource-policy": "same-origin",
}
NO_STORE = {"cache-control": "no-store", **SECURITY_HEADERS}


def _sse(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def _file(name: str) -> bytes:
    return (resources.files("engy_local.server") / "static" / name).read_bytes()


def page_url(host: str, port: int) -> str:
    """Where a browser on this machine finds the page: a server bound to
    every address is opened on 127.0.0.1, whose origin the guard accepts."""
    if host in ("0.0.0.0", "::", "[::]", ""):
        host = "127.0.0.1"
    elif ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


def open_when_ready(url: str, timeout: float = 60.0) -> None:
    """`engy serve --open`: open the page at `url` in the browser once the
    server answers (on a thread of its own; gives up quietly)."""

    def wait_and_open() -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                httpx.head(url + "/api/hello", timeout=1.0)
            except httpx.HTTPError:
                time.sleep(0.2)
                continue
            webbrowser.open(url + "/")
            return

    threading.Thread(target=wait_and_open, name="engy-open", daemon=True).start()


class Page:
    """The page's routes over the server's record, backend and store."""

    def __init__(
        self,
        activity: Activity,
        backend: Backend,
        drain: Drain,
        *,
        keyed: bool,
        hooks: StoreHooks | None = None,
    ) -> None:
        self.activity = activity
        self.backend = backend
        self.drain = drain
        self.keyed = keyed  # an API key is set (and so was checked)
        self.hooks = hooks
        self.pulls = Pulls(hooks)
        self.started = time.time()
        # The page's blocking calls (status, the store) wait on their own
        # thread, never on the one requests are loaded and tokenized on.
        self._executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="engy-page")
        self._files: dict[str, bytes] = {}

    def reveal(self, request: Request) -> bool:
        """Whether this reader may see prompt text."""
        return self.keyed or (request.client is not None and is_loopback(request.client.host))

    async def _off_loop(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    # -- the page and its files -----------------------------------------

    def wants_page(self, request: Request) -> bool:
        return request.method == "GET" and "text/html" in request.headers.get("accept", "")

    async def index(self, request: Request) -> Response:
        return self._serve("index.html")

    async def asset(self, request: Request) -> Response:
        name = request.path_params.get("name", "")
        if name not in FILES or name == "index.html":
            raise NotFoundRoute(f"no route for GET {request.url.path}")
        return self._serve(name)

    def _serve(self, name: str) -> Response:
        if name not in self._files:
            self._files[name] = _file(name)
        headers = {"cache-control": "no-cache", **SECURITY_HEADERS}
        return Response(self._files[name], media_type=FILES[name], headers=headers)

    # -- what it reads --------------------------------------------------

    def _models(self) -> dict[str, Any]:
        return {
            "served": [
                {
                    "id": m.id,
                    "path": m.path,  # `engy launch` finds a model served here by its file
                    "context_length": m.context_length,
                    "backend": m.backend,
                    "images": m.supports_images,
                    "quantization": m.quantization,
                }
                for m in self.backend.models()
            ],
            "loaded": [s.to_json() for s in self.backend.status()],
        }

    async def _status(self, reveal: bool) -> dict[str, Any]:
        models = await self._off_loop(self._models)
        return {
            "server": {
                "started": self.started,
                "keyed": self.keyed,
                "reveal": reveal,
                "manage": isinstance(self.backend, Manages),
            },
            **self.activity.snapshot(reveal),
            **models,
            "pulls": self.pulls.to_json(),
        }

    async def status(self, request: Request) -> Response:
        return JSONResponse(await self._status(self.reveal(request)), headers=NO_STORE)

    async def models(self, request: Request) -> Response:
        models = await self._off_loop(self._models)
        installed = await self._off_loop(installed_json, self.backend)
        return JSONResponse({**models, "installed": installed}, headers=NO_STORE)

    async def events(self, request: Request) -> Response:
        reveal = self.reveal(request)

        async def stream() -> AsyncIterator[bytes]:
            since = self.activity.clock
            yield _sse("snapshot", await self._status(reveal))
            now = time.monotonic()
            last_models = last_write = now
            pulls_seen = self.pulls.version
            while not self.drain.started:
                await asyncio.sleep(TICK)
                out = []
                update, since = self.activity.updates(since, reveal)
                if update is not None:
                    out.append(_sse("update", update))
                now = time.monotonic()
                if now - last_models >= MODELS_EVERY:
                    last_models = now
                    out.append(_sse("models", await self._off_loop(self._models)))
                if self.pulls.active() or self.pulls.version != pulls_seen:
                    pulls_seen = self.pulls.version
                    out.append(_sse("pulls", self.pulls.to_json()))
                if not out and now - last_write >= PING_EVERY:
                    out.append(b": ping\n\n")
                if out:
                    last_write = now
                    yield b"".join(out)

        headers = {"x-accel-buffering": "no", **NO_STORE}
        return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)

    # -- what it does ---------------------------------------------------

    async def _field(self, request: Request, name: str) -> str:
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            raise InvalidRequest("send application/json")  # never a form, never text/plain
        try:
            body = json.loads(await request.body())
        except ValueError:
            raise InvalidRequest("body: invalid JSON") from None
        value = body.get(name) if isinstance(body, dict) else None
        if not isinstance(value, str) or not value.strip():
            raise InvalidRequest(f"{name}: expected a non-empty string", param=name)
        return value.strip()

    async def load(self, request: Request) -> Response:
        model = await self._field(request, "model")
        return JSONResponse(await self._off_loop(load, self.backend, model), headers=NO_STORE)

    async def unload(self, request: Request) -> Response:
        model = await self._field(request, "model")
        return JSONResponse(await self._off_loop(unload, self.backend, model), headers=NO_STORE)

    async def pull(self, request: Request) -> Response:
        job = self.pulls.start(await self._field(request, "ref"))
        return JSONResponse(job.to_json(), status_code=202, headers=NO_STORE)

    async def rm(self, request: Request) -> Response:
        model = await self._field(request, "model")
        done = await self._off_loop(rm, self.backend, self.hooks, model)
        return JSONResponse(done, headers=NO_STORE)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
