"""Client requests captured by the tests that run the real clients, kept
outside the clone's tree (CACHE/captured, git-ignored) for the tests that
replay them: the cache's promise over a launched client's own prompts
(tests/runtime/test_cache_clients.py). Never copied into the repo.

- `Recorder`: a loopback proxy in front of a server that keeps every POST
  body it forwards (answers pass through as they stream); `transcript()`
  says what the model did in the last conversation, for a failing test.
- `save(client, body)` / `load(client)`: one client's first request;
  `present()`: all there are.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from support.paths import CACHE
from support.server import free_port

CAPTURED = CACHE / "captured"
# Headers that belong to one hop of the connection, not the request.
_HOP = {"host", "content-length", "transfer-encoding", "connection"}


class Recorder:
    """Forwards 127.0.0.1:port to `upstream`; `bodies` holds each POST's
    JSON body with its path, in the order they came."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.port = free_port()
        self.bodies: list[tuple[str, dict[str, Any]]] = []
        methods = ["GET", "POST", "HEAD", "PUT", "DELETE", "OPTIONS"]
        app = Starlette(routes=[Route("/{path:path}", self.forward, methods=methods)])
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.05)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

    async def forward(self, request: Request) -> Response:
        raw = await request.body()
        if request.method == "POST":
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
            if isinstance(body, dict):
                self.bodies.append((request.url.path, body))
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        url = self.upstream + request.url.path
        if request.url.query:
            url += "?" + request.url.query
        # A client per request, closed with its answer: one shared by the
        # server's loop would outlive it, unclosed.
        client = httpx.AsyncClient(timeout=httpx.Timeout(900.0, connect=10.0))
        sent = client.build_request(request.method, url, headers=headers, content=raw)
        try:
            answer = await client.send(sent, stream=True)
        except BaseException:
            await client.aclose()
            raise
        out = {k: v for k, v in answer.headers.items() if k.lower() not in _HOP}

        async def relay() -> AsyncIterator[bytes]:
            try:
                async for chunk in answer.aiter_raw():
                    yield chunk
            finally:
                await answer.aclose()
                await client.aclose()

        return StreamingResponse(relay(), answer.status_code, out)

    def first_turn(self, since: int = 0) -> dict[str, Any] | None:
        """The first Chat Completions request after `since` bodies that
        offers tools (a side request, such as a title, offers none), else
        the first one at all (Aider offers none)."""
        chats = [b for p, b in self.bodies[since:] if p.endswith("/chat/completions")]
        return next((b for b in chats if b.get("tools")), chats[0] if chats else None)

    def transcript(self, since: int = 0, width: int = 300) -> str:
        """The last Chat Completions request's turns after its first user
        message, a line each (calls with their arguments, tool results and
        text cut to `width`): what the model did, where a test says it
        did not do what it was asked."""
        chats = [b for p, b in self.bodies[since:] if p.endswith("/chat/completions")]
        if not chats:
            return "(no Chat Completions request)"
        messages = chats[-1].get("messages") or []
        first = next((i for i, m in enumerate(messages) if m.get("role") == "user"), 0)
        lines = []
        for m in messages[first + 1 :]:
            said = _text(m.get("content"))
            calls = [
                f"{c.get('function', {}).get('name')}({c.get('function', {}).get('arguments')})"
                for c in m.get("tool_calls") or []
            ]
            lines.append(f"{m.get('role')}: {' '.join([said, *calls]).strip()[:width]}")
        return "\n".join(lines) or "(nothing after the first user message)"


def _text(content: Any) -> str:
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def save(client: str, body: dict[str, Any]) -> None:
    CAPTURED.mkdir(parents=True, exist_ok=True)
    path = CAPTURED / f"{client}.json"
    part = path.with_suffix(".part")
    part.write_text(json.dumps(body))
    part.replace(path)


def present() -> list[dict[str, Any]]:
    """Every captured first request there is, by client name (none: [])."""
    out = []
    for path in sorted(CAPTURED.glob("*.json")) if CAPTURED.is_dir() else []:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            out.append(data)
    return out


def load(client: str) -> dict[str, Any]:
    """The client's captured first request; skips saying how to capture it."""
    path = CAPTURED / f"{client}.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        pytest.skip(
            f"no captured request of {client} at {path}: "
            "tests/commands/test_launch_agents.py captures it (run it first)"
        )
    assert isinstance(data, dict)
    return data
