"""The HTTP server: a routes table, auth, SSE and error mapping.

`create_app(settings, backend)` builds everything; there is no module-level
state. Protocol modules translate, the backend generates; this module only
moves bytes between them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Literal, Protocol

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from .backend import Backend, Generation
from .chat import Answer, Event, Heartbeat, PromptProgress
from .errors import (
    EngyError,
    InvalidRequest,
    NotFoundRoute,
    RequestTooLarge,
    ServerError,
    Unauthorized,
)
from .protocols import anthropic, responses
from .protocols.anthropic_stream import MessageStream

log = logging.getLogger("engy.server")

Protocol_ = Literal["anthropic", "openai"]

# Bodies over this are refused with 413. Claude Code's and Codex's first
# turns are about 50 KB; a long agent session stays well under this.
MAX_BODY_BYTES = 32 * 1024 * 1024
# A stream quiet for this long (queued, or a long prompt being processed)
# gets an event clients ignore; Codex gives up after 300 s of silence.
KEEPALIVE_SECONDS = 10.0


@dataclass(frozen=True)
class Settings:
    api_key: str | None = None
    max_body_bytes: int = MAX_BODY_BYTES


class StreamMachine(Protocol):
    def start(self) -> list[dict[str, Any]]: ...
    def process(self, event: Event) -> list[dict[str, Any]]: ...
    def keepalive(self) -> list[dict[str, Any]]: ...
    def fail(self, err: EngyError) -> list[dict[str, Any]]: ...


def _new_id(prefix: str) -> str:
    return prefix + secrets.token_hex(12)


def _error_response(protocol: Protocol_, err: EngyError) -> Response:
    render = anthropic.error_body if protocol == "anthropic" else responses.error_body
    status, body, headers = render(err)
    if protocol == "anthropic":
        body = {**body, "request_id": _new_id("req_")}
    return JSONResponse(body, status_code=status, headers=headers)


def _sse(events: list[dict[str, Any]]) -> bytes:
    return b"".join(
        f"event: {e['type']}\ndata: {json.dumps(e, ensure_ascii=False)}\n\n".encode()
        for e in events
    )


async def _read_json(request: Request, limit: int) -> Any:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise RequestTooLarge(f"request body is over the {limit // (1024 * 1024)} MiB limit")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestTooLarge(f"request body is over the {limit // (1024 * 1024)} MiB limit")
        chunks.append(chunk)
    try:
        return json.loads(b"".join(chunks))
    except ValueError as exc:
        raise InvalidRequest(f"body: invalid JSON: {exc}") from None


async def _collect(request: Request, generation: Generation) -> Answer:
    """All events of a non-streaming request; a client that goes away
    cancels the generation."""

    async def watch() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass
        generation.cancel()

    watcher = asyncio.create_task(watch())
    try:
        answer = Answer()
        async for event in generation:
            answer.add(event)
        return answer
    finally:
        watcher.cancel()


def _stream(machine: StreamMachine, generation: Generation) -> StreamingResponse:
    async def body() -> AsyncIterator[bytes]:
        yield _sse(machine.start())
        last_write = time.monotonic()
        try:
            async for event in generation:
                if isinstance(event, (Heartbeat, PromptProgress)):
                    # Progress comes every prompt chunk; a keep-alive (a whole
                    # response object, for Responses) is only worth sending
                    # when the stream has been quiet for a while.
                    if time.monotonic() - last_write < KEEPALIVE_SECONDS:
                        continue
                    out = machine.keepalive()
                else:
                    out = machine.process(event)
                if out:
                    yield _sse(out)
                    last_write = time.monotonic()
        except EngyError as err:
            yield _sse(machine.fail(err))
        except Exception as exc:  # the stream has begun: report, then close
            log.exception("stream failed")
            yield _sse(machine.fail(ServerError(f"generation failed: {exc}")))
        finally:
            generation.cancel()  # the client may be gone: free the model

    headers = {"cache-control": "no-cache", "x-accel-buffering": "no"}
    return StreamingResponse(body(), media_type="text/event-stream", headers=headers)


def create_app(settings: Settings, backend: Backend) -> Starlette:
    def authorized(request: Request) -> bool:
        if not settings.api_key:
            return True
        # Either header may carry the key: SDKs and clients differ.
        offered = {request.headers.get("x-api-key")}
        auth = request.headers.get("authorization", "")
        if auth[:7].lower() == "bearer ":
            offered.add(auth[7:].strip())
        return settings.api_key in offered

    Handler = Callable[[Request], Awaitable[Response]]

    def endpoint(protocol: Protocol_, handler: Handler, auth: bool = True) -> Handler:
        async def run(request: Request) -> Response:
            try:
                if auth and not authorized(request):
                    raise Unauthorized("invalid or missing API key")
                return await handler(request)
            except EngyError as err:
                return _error_response(protocol, err)
            except Exception as exc:
                log.exception("request failed")
                return _error_response(protocol, ServerError(f"internal error: {exc}"))

        return run

    async def messages(request: Request) -> Response:
        parsed = anthropic.parse_request(await _read_json(request, settings.max_body_bytes))
        backend.resolve(parsed.chat.model)
        generation = await backend.submit(parsed.chat)
        message_id = _new_id("msg_")
        if parsed.stream:
            return _stream(MessageStream(parsed, message_id, generation.prompt_tokens), generation)
        answer = await _collect(request, generation)
        return JSONResponse(anthropic.render_message(parsed, answer, message_id))

    async def count_tokens(request: Request) -> Response:
        body = await _read_json(request, settings.max_body_bytes)
        parsed = anthropic.parse_request(body, counting=True)
        loop = asyncio.get_running_loop()
        n = await loop.run_in_executor(None, backend.count_tokens, parsed.chat)
        return JSONResponse({"input_tokens": n})

    async def create_response(request: Request) -> Response:
        if request.method == "GET":
            if request.headers.get("upgrade", "").lower() == "websocket":
                # Codex falls back to plain HTTP at once on 426.
                return JSONResponse(
                    responses.error_body(
                        InvalidRequest("use HTTP POST; WebSockets are not served")
                    )[1],
                    status_code=426,
                )
            raise NotFoundRoute("GET /v1/responses: use POST")
        cap = getattr(backend, "output_cap", None)
        parsed = responses.parse_request(
            await _read_json(request, settings.max_body_bytes), max_output_cap=cap
        )
        backend.resolve(parsed.chat.model)
        generation = await backend.submit(parsed.chat)
        response_id, created = _new_id("resp_"), int(time.time())
        if parsed.stream:
            machine = responses.ResponseStream(parsed, response_id=response_id, created_at=created)
            return _stream(machine, generation)
        answer = await _collect(request, generation)
        return JSONResponse(
            responses.render_response(parsed, answer, response_id=response_id, created_at=created)
        )

    async def count_response_tokens(request: Request) -> Response:
        parsed = responses.parse_request(await _read_json(request, settings.max_body_bytes))
        loop = asyncio.get_running_loop()
        n = await loop.run_in_executor(None, backend.count_tokens, parsed.chat)
        return JSONResponse({"object": "response.input_tokens", "input_tokens": n})

    async def list_models(request: Request) -> Response:
        # One list both SDKs read: Anthropic's page shape and OpenAI's list.
        data = [
            {
                "type": "model",
                "object": "model",
                "id": m.id,
                "display_name": m.display_name,
                "created_at": datetime.fromtimestamp(m.created, timezone.utc).isoformat(),
                "created": m.created,
                "owned_by": "engy",
                "max_input_tokens": m.context_length,
            }
            for m in backend.models()
        ]
        return JSONResponse(
            {
                "object": "list",
                "data": data,
                "has_more": False,
                "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None,
            }
        )

    async def hello(request: Request) -> Response:
        if request.method == "HEAD":
            return Response(status_code=200)
        return JSONResponse({"name": "engy", "models": [m.id for m in backend.models()]})

    async def not_found(request: Request) -> Response:
        raise NotFoundRoute(f"no route for {request.method} {request.url.path}")

    routes = [
        Route("/v1/messages", endpoint("anthropic", messages), methods=["POST"]),
        Route("/v1/messages/count_tokens", endpoint("anthropic", count_tokens), methods=["POST"]),
        Route("/v1/responses", endpoint("openai", create_response), methods=["POST", "GET"]),
        Route(
            "/v1/responses/input_tokens",
            endpoint("openai", count_response_tokens),
            methods=["POST"],
        ),
        Route("/v1/models", endpoint("anthropic", list_models), methods=["GET"]),
        Route("/", endpoint("anthropic", hello, auth=False), methods=["GET", "HEAD"]),
        Route("/api/hello", endpoint("anthropic", hello, auth=False), methods=["GET", "HEAD"]),
        Route(
            "/{path:path}",
            endpoint("anthropic", not_found, auth=False),
            methods=["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD"],
        ),
    ]
    return Starlette(routes=routes)
