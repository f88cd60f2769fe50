"""A recording proxy between a coding agent and a server (bench/agent.py):
it forwards every request as it came and every answer as it streams, and
notes per POST what the client saw: status, time to the first generated
token, prompt and cached tokens as the server reported them, the calls
answered, API errors, and what the client sent back about earlier calls
(a tool result saying the call was malformed).

Messages, Responses and Chat Completions alike. A streamed Chat Completions
request that does not ask for usage is sent on asking for it (both servers
report prompt and cached tokens only then), and the usage chunk it did not
ask for is kept from the client."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

# What Claude Code and Codex send back for a call they could not run as
# written: a tool it does not have, arguments that fail its schema or JSON.
MALFORMED = re.compile(
    r"InputValidationError|No such tool available|unsupported call|"
    r"failed to parse function arguments|missing field|invalid type",
)
# A call that reached the client as text.
CALL_AS_TEXT = re.compile(r"<tool_call>|</tool_call>|```json\s*\{\s*\"name\"|\{\s*\"name\"\s*:")
_HOP = {"host", "content-length", "transfer-encoding", "connection", "accept-encoding"}
# Deltas that mean a token was generated (text, a call's input, reasoning).
_FIRST = ("delta",)


@dataclass
class Exchange:
    path: str
    tools: int  # tools offered: 0 is a side request (title, compaction)
    status: int = 0
    started: float = 0.0
    first: float | None = None  # seconds to the first generated token (unstreamed: the answer)
    took: float = 0.0
    prompt: int | None = None  # prompt tokens, cached ones included
    cached: int | None = None
    calls: list[str] = field(default_factory=list)
    text: str = ""
    error: str = ""  # an HTTP error status or an error event, as the client got it
    malformed: int = 0  # earlier calls this request reports back as malformed


def _results(body: dict[str, Any]) -> list[str]:
    """The tool results a request carries (Messages and Responses)."""
    out: list[str] = []
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                inner = block.get("content")
                out.append(inner if isinstance(inner, str) else json.dumps(inner))
    for message in body.get("messages") or []:  # Chat Completions
        if isinstance(message, dict) and message.get("role") == "tool":
            inner = message.get("content")
            out.append(inner if isinstance(inner, str) else json.dumps(inner))
    for item in body.get("input") or []:
        if isinstance(item, dict) and item.get("type", "").endswith("_call_output"):
            inner = item.get("output")
            out.append(inner if isinstance(inner, str) else json.dumps(inner))
    return out


class Usage:
    """Reads an answer (an SSE stream or one JSON body) into an Exchange."""

    def __init__(self, ex: Exchange) -> None:
        self.ex = ex
        self.buffer = b""
        self.event = ""
        self.text: list[str] = []

    def feed(self, chunk: bytes) -> None:
        self.buffer += chunk
        while b"\n" in self.buffer:
            line, self.buffer = self.buffer.split(b"\n", 1)
            self.line(line.decode(errors="replace").rstrip("\r"))

    def line(self, line: str) -> None:
        if line.startswith("event:"):
            self.event = line[6:].strip()
            return
        if not line.startswith("data:"):
            return
        try:
            data = json.loads(line[5:])
        except ValueError:
            return
        if isinstance(data, dict):
            if "choices" in data:
                self.chat(data)
            else:
                self.data(self.event or str(data.get("type", "")), data)

    def chat(self, data: dict[str, Any]) -> None:
        """A Chat Completions chunk."""
        ex = self.ex
        for choice in data.get("choices") or []:
            delta = choice.get("delta") or {}
            if ex.first is None and (delta.get("content") or delta.get("tool_calls")):
                ex.first = time.monotonic() - ex.started
            self.text.append(str(delta.get("content") or ""))
            for call in delta.get("tool_calls") or []:
                name = (call.get("function") or {}).get("name")
                if name:
                    ex.calls.append(str(name))
        if data.get("usage"):
            self.chat_usage(data["usage"])
        if "error" in data:
            ex.error = ex.error or f"error: {json.dumps(data['error'])[:300]}"
        ex.text = "".join(self.text)

    def chat_usage(self, usage: dict[str, Any]) -> None:
        if "prompt_tokens" not in usage:
            return
        self.ex.prompt = int(usage["prompt_tokens"])
        details = usage.get("prompt_tokens_details") or {}
        if "cached_tokens" in details:
            self.ex.cached = int(details["cached_tokens"])

    def data(self, event: str, data: dict[str, Any]) -> None:
        ex = self.ex
        if ex.first is None and any(k in event for k in _FIRST) and "thinking" not in event:
            ex.first = time.monotonic() - ex.started
        if event == "message_start":
            self.messages_usage(data.get("message", {}).get("usage") or {})
        elif event == "message_delta":
            self.messages_usage(data.get("usage") or {})
        elif event == "content_block_start":
            block = data.get("content_block") or {}
            if block.get("type") == "tool_use":
                ex.calls.append(str(block.get("name")))
        elif event == "content_block_delta":
            self.text.append(str((data.get("delta") or {}).get("text", "")))
        elif event == "response.output_item.done":
            item = data.get("item") or {}
            if item.get("type") in ("function_call", "custom_tool_call"):
                ex.calls.append(str(item.get("name")))
            elif item.get("type") == "message":
                for part in item.get("content") or []:
                    self.text.append(str(part.get("text", "")))
        elif event in ("response.completed", "response.incomplete"):
            self.responses_usage((data.get("response") or {}).get("usage") or {})
        elif event in ("error", "response.failed"):
            error = data.get("error") or (data.get("response") or {}).get("error") or data
            ex.error = ex.error or f"{event}: {json.dumps(error)[:300]}"
        ex.text = "".join(self.text)

    def messages_usage(self, usage: dict[str, Any]) -> None:
        if "input_tokens" not in usage:
            return
        cached = int(usage.get("cache_read_input_tokens") or 0)
        created = int(usage.get("cache_creation_input_tokens") or 0)
        self.ex.prompt = int(usage["input_tokens"]) + cached + created
        self.ex.cached = cached if "cache_read_input_tokens" in usage else self.ex.cached

    def responses_usage(self, usage: dict[str, Any]) -> None:
        if "input_tokens" not in usage:
            return
        self.ex.prompt = int(usage["input_tokens"])
        details = usage.get("input_tokens_details") or {}
        if "cached_tokens" in details:
            self.ex.cached = int(details["cached_tokens"])

    def body(self, raw: bytes) -> None:
        """A whole JSON answer (stream false)."""
        try:
            data = json.loads(raw)
        except ValueError:
            return
        if not isinstance(data, dict):
            return
        usage = data.get("usage") or {}
        if "choices" in data:
            self.chat_usage(usage)
            for choice in data["choices"]:
                message = choice.get("message") or {}
                self.ex.text += str(message.get("content") or "")
                for call in message.get("tool_calls") or []:
                    self.ex.calls.append(str((call.get("function") or {}).get("name")))
        elif "output" in data:
            self.responses_usage(usage)
            for item in data["output"]:
                if item.get("type") in ("function_call", "custom_tool_call"):
                    self.ex.calls.append(str(item.get("name")))
        else:
            self.messages_usage(usage)
            for block in data.get("content") or []:
                if block.get("type") == "tool_use":
                    self.ex.calls.append(str(block.get("name")))
                elif block.get("type") == "text":
                    self.ex.text += str(block.get("text", ""))


class Proxy:
    """Forwards 127.0.0.1:port to `upstream`, recording each POST."""

    def __init__(self, upstream: str, port: int, save: Path | None = None) -> None:
        self.upstream = upstream
        self.save = save  # where each POST's body and answer go, numbered
        self.url = f"http://127.0.0.1:{port}"
        self.exchanges: list[Exchange] = []
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(3600.0, connect=10.0))
        app = Starlette(routes=[Route("/{path:path}", self.forward, methods=_METHODS)])
        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
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
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        url = self.upstream + request.url.path
        if request.url.query:
            url += "?" + request.url.query
        body = _json(raw) if request.method == "POST" else {}
        hidden = _ask_usage(body)  # a usage chunk to keep from the client
        content = json.dumps(body).encode() if hidden else raw
        sent = self.client.build_request(request.method, url, headers=headers, content=content)
        ex: Exchange | None = None
        if request.method == "POST" and not request.url.path.endswith("count_tokens"):
            ex = Exchange(request.url.path, len(body.get("tools") or []), started=time.monotonic())
            ex.malformed = sum(bool(MALFORMED.search(r)) for r in _results(body))
            self.exchanges.append(ex)
        answer = await self.client.send(sent, stream=True)
        out = {k: v for k, v in answer.headers.items() if k.lower() not in _HOP}
        if ex is None:
            content = await answer.aread()
            await answer.aclose()
            return Response(content, answer.status_code, out)
        ex.status = answer.status_code
        reader = Usage(ex)
        streaming = "text/event-stream" in answer.headers.get("content-type", "")

        async def relay() -> AsyncIterator[bytes]:
            whole = b""
            held = b""
            try:
                async for chunk in answer.aiter_raw():
                    if streaming:
                        reader.feed(chunk)
                    whole += chunk
                    if not hidden:
                        yield chunk
                        continue
                    held += chunk
                    *events, held = held.split(b"\n\n")
                    kept = [e for e in events if not _usage_only(e)]
                    if kept:
                        yield b"".join(e + b"\n\n" for e in kept)
                if held:
                    yield held
            finally:
                if self.save is not None:
                    self.save.mkdir(parents=True, exist_ok=True)
                    n = len(self.exchanges)
                    (self.save / f"{n:03d}-request.json").write_bytes(raw)
                    (self.save / f"{n:03d}-answer.txt").write_bytes(whole)
                await answer.aclose()
                if not streaming:
                    reader.body(whole)
                    ex.first = time.monotonic() - ex.started  # the answer, all at once
                if answer.status_code >= 400:
                    ex.error = ex.error or f"HTTP {answer.status_code}: {whole[:300]!r}"
                ex.took = time.monotonic() - ex.started

        return StreamingResponse(relay(), answer.status_code, out)


_METHODS = ["GET", "POST", "HEAD", "PUT", "DELETE", "OPTIONS"]


def _ask_usage(body: dict[str, Any]) -> bool:
    """Ask a streamed Chat Completions request for usage where it does not;
    True when it did not (the answer's usage chunk is then kept back)."""
    if not body.get("stream") or "messages" not in body:
        return False
    options = body.get("stream_options") or {}
    if options.get("include_usage"):
        return False
    body["stream_options"] = {**options, "include_usage": True}
    return True


def _usage_only(event: bytes) -> bool:
    """The usage chunk of a Chat Completions stream: no choices."""
    for line in event.split(b"\n"):
        if line.startswith(b"data:"):
            data = _json(line[5:])
            return bool(data) and data.get("choices") == [] and "usage" in data
    return False


def _json(raw: bytes) -> dict[str, Any]:
    try:
        data = json.loads(raw)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}
