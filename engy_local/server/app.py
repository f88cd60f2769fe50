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
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Literal, Protocol

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Scope

from ..backend import Backend, Generation
from ..chat import Answer, ChatRequest, Event, Heartbeat, PromptProgress
from ..errors import (
    EngyError,
    Forbidden,
    InvalidRequest,
    ModelNotFound,
    NotFoundRoute,
    NoWorker,
    RequestTooLarge,
    ServerError,
    Unauthorized,
)
from ..protocols import anthropic, chat_completions, responses
from ..protocols.anthropic_stream import MessageStream
from ..protocols.images import ImageLimits
from ..protocols.sessions import Api
from .activity import Activity
from .cachereuse import HEADER as REUSE_HEADER
from .cachereuse import with_cache_reuse
from .guard import AccessMiddleware, AccessPolicy, key_matches
from .hiding import HEADER as HIDE_HEADER
from .hiding import hide
from .manage import StoreHooks
from .metrics import CountRequests, Metrics, Tracked
from .page import Page
from .shutdown import Drain

log = logging.getLogger("engy.server")

# Whose error format a route answers in: Anthropic's, or OpenAI's for
# /v1/responses ("openai") and /v1/chat/completions ("chat").
Protocol_ = Literal["anthropic", "openai", "chat"]

# Bodies over this are refused with 413. Claude Code's and Codex's first
# turns are about 50 KB; a long agent session stays well under this.
MAX_BODY_BYTES = 32 * 1024 * 1024
# A stream quiet for this long (queued, or a long prompt being processed)
# gets an event clients ignore; Codex gives up after 300 s of silence.
KEEPALIVE_SECONDS = 10.0
# Bodies nested deeper than this (arrays and objects, the body itself at 1)
# are refused with 400. Claude Code's and Codex's deepest tool schemas are
# about 12 levels into the body.
MAX_DEPTH = 64


@dataclass(frozen=True)
class Settings:
    api_key: str | None = None
    max_body_bytes: int = MAX_BODY_BYTES
    access: AccessPolicy = field(default_factory=AccessPolicy)
    images: ImageLimits = field(default_factory=ImageLimits)  # per request, 413 over
    store: StoreHooks | None = None  # what a pull or rm from the page changes in the backend
    temperature: float | None = None  # for requests that set none (engy serve --temp)


class StreamMachine(Protocol):
    def start(self) -> list[dict[str, Any]]: ...
    def process(self, event: Event) -> list[dict[str, Any]]: ...
    def keepalive(self) -> list[dict[str, Any]]: ...
    def fail(self, err: EngyError) -> list[dict[str, Any]]: ...


def _new_id(prefix: str) -> str:
    return prefix + secrets.token_hex(12)


_ERROR_BODIES = {
    "anthropic": anthropic.error_body,
    "openai": responses.error_body,
    "chat": chat_completions.error_body,
}


def _error_response(protocol: Protocol_, err: EngyError) -> Response:
    status, body, headers = _ERROR_BODIES[protocol](err)
    if protocol == "anthropic":
        body = {**body, "request_id": _new_id("req_")}
    return JSONResponse(body, status_code=status, headers=headers)


def _sse(events: list[dict[str, Any]]) -> bytes:
    return b"".join(
        f"event: {e['type']}\ndata: {json.dumps(e, ensure_ascii=False)}\n\n".encode()
        for e in events
    )


def _data(events: list[dict[str, Any]]) -> bytes:
    return b"".join(f"data: {json.dumps(e, ensure_ascii=False)}\n\n".encode() for e in events)


@dataclass(frozen=True)
class Framing:
    """How a protocol's stream events become SSE bytes: `encode` them,
    write `idle` when a keep-alive has no event to send, `end` last."""

    encode: Callable[[list[dict[str, Any]]], bytes] = _sse
    idle: bytes = b""
    end: bytes = b""


# Messages and Responses name each event; Chat Completions sends bare data
# lines and ends with [DONE] (after an error too, as vLLM does).
NAMED_EVENTS = Framing()
DATA_ONLY = Framing(_data, idle=b": keep-alive\n\n", end=b"data: [DONE]\n\n")


def _protocol_of(path: str) -> Protocol_:
    if path.startswith("/v1/chat/"):
        return "chat"
    return "openai" if path.startswith("/v1/responses") else "anthropic"


def _depth_ok(value: Any, limit: int) -> bool:
    """Whether `value` nests at most `limit` arrays and objects deep
    (iterative: a hostile body must not exhaust the stack here either)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > limit:
                return False
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return True


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
    too_deep = InvalidRequest(f"body: nested deeper than {MAX_DEPTH} levels", param="body")
    try:
        body = json.loads(b"".join(chunks))
    except RecursionError:
        raise too_deep from None
    except ValueError as exc:
        raise InvalidRequest(f"body: invalid JSON: {exc}") from None
    if not _depth_ok(body, MAX_DEPTH):
        raise too_deep
    return body


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


def _stream(
    machine: StreamMachine, generation: Generation, framing: Framing = NAMED_EVENTS
) -> StreamingResponse:
    encode = framing.encode

    async def body() -> AsyncIterator[bytes]:
        yield encode(machine.start())
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
                    if not out and framing.idle:
                        yield framing.idle
                        last_write = time.monotonic()
                        continue
                else:
                    out = machine.process(event)
                if out:
                    yield encode(out)
                    last_write = time.monotonic()
        except EngyError as err:
            yield encode(machine.fail(err))
        except Exception as exc:  # the stream has begun: report, then close
            log.exception("stream failed")
            yield encode(machine.fail(ServerError(f"generation failed: {exc}")))
        finally:
            generation.cancel()  # the client may be gone: free the model
        if framing.end:
            yield framing.end

    headers = {"cache-control": "no-cache", "x-accel-buffering": "no"}
    return StreamingResponse(body(), media_type="text/event-stream", headers=headers)


def create_app(settings: Settings, backend: Backend) -> Starlette:
    metrics, drain, activity = Metrics(), Drain(), Activity()
    page = Page(activity, backend, drain, keyed=bool(settings.api_key), hooks=settings.store)

    def authorized(request: Request) -> bool:
        if not settings.api_key:
            return True
        # Either header may carry the key: SDKs and clients differ.
        offered = [request.headers.get("x-api-key")]
        auth = request.headers.get("authorization", "")
        if auth[:7].lower() == "bearer ":
            offered.append(auth[7:].strip())
        return key_matches(settings.api_key, offered)

    def refuse(scope: Scope, message: str) -> ASGIApp:
        return _error_response(_protocol_of(scope["path"]), Forbidden(message))

    async def submit(api: Api, request: Request, body: Any, chat: ChatRequest) -> Generation:
        """Submit `chat`, counted in /metrics and recorded for the page from
        its first moment: every API's route submits through here."""
        if settings.temperature is not None and chat.sampling.temperature is None:
            sampling = replace(chat.sampling, temperature=settings.temperature)
            chat = replace(chat, sampling=sampling)
        chat = hide(chat, request.headers.get(HIDE_HEADER))
        chat = with_cache_reuse(chat, request.headers.get(REUSE_HEADER))
        entry = activity.begin(api, request.url.path, request.headers, body, chat)
        try:
            generation = await backend.submit(chat)
        except BaseException as exc:
            entry.fail(exc)
            raise
        return Tracked(generation, metrics, drain, entry)

    Handler = Callable[[Request], Awaitable[Response]]

    def endpoint(protocol: Protocol_, handler: Handler, auth: bool = True) -> Handler:
        async def run(request: Request) -> Response:
            try:
                if auth and not authorized(request):
                    raise Unauthorized("invalid or missing API key")
                if drain.started:
                    raise NoWorker("server is shutting down")
                return await handler(request)
            except ModelNotFound as err:
                # Say what is served, so the client (or its user) can pick one.
                served = err.served or tuple(m.id for m in backend.models())
                return _error_response(protocol, ModelNotFound(err.model, served))
            except EngyError as err:
                return _error_response(protocol, err)
            except Exception as exc:
                log.exception("request failed")
                return _error_response(protocol, ServerError(f"internal error: {exc}"))

        return run

    async def messages(request: Request) -> Response:
        body = await _read_json(request, settings.max_body_bytes)
        parsed = anthropic.parse_request(body, images=settings.images)
        backend.resolve(parsed.chat.model)
        generation = await submit("anthropic", request, body, parsed.chat)
        message_id = _new_id("msg_")
        if parsed.stream:
            return _stream(MessageStream(parsed, message_id, generation.prompt_tokens), generation)
        answer = await _collect(request, generation)
        return JSONResponse(anthropic.render_message(parsed, answer, message_id))

    async def count_tokens(request: Request) -> Response:
        body = await _read_json(request, settings.max_body_bytes)
        parsed = anthropic.parse_request(body, counting=True, images=settings.images)
        chat = hide(parsed.chat, request.headers.get(HIDE_HEADER))
        loop = asyncio.get_running_loop()
        n = await loop.run_in_executor(None, backend.count_tokens, chat)
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
        body = await _read_json(request, settings.max_body_bytes)
        parsed = responses.parse_request(body, max_output_cap=backend.output_cap)
        backend.resolve(parsed.chat.model)
        generation = await submit("openai", request, body, parsed.chat)
        response_id, created = _new_id("resp_"), int(time.time())
        if parsed.stream:
            machine = responses.ResponseStream(parsed, response_id=response_id, created_at=created)
            return _stream(machine, generation)
        answer = await _collect(request, generation)
        return JSONResponse(
            responses.render_response(parsed, answer, response_id=response_id, created_at=created)
        )

    async def complete_chat(request: Request) -> Response:
        body = await _read_json(request, settings.max_body_bytes)
        parsed = chat_completions.parse_request(body, images=settings.images)
        backend.resolve(parsed.chat.model)
        generation = await submit("chat", request, body, parsed.chat)
        completion_id, created = _new_id("chatcmpl-"), int(time.time())
        if parsed.stream:
            machine = chat_completions.CompletionStream(
                parsed, completion_id=completion_id, created=created
            )
            return _stream(machine, generation, DATA_ONLY)
        answer = await _collect(request, generation)
        return JSONResponse(
            chat_completions.render_completion(
                parsed, answer, completion_id=completion_id, created=created
            )
        )

    async def count_response_tokens(request: Request) -> Response:
        parsed = responses.parse_request(await _read_json(request, settings.max_body_bytes))
        chat = hide(parsed.chat, request.headers.get(HIDE_HEADER))
        loop = asyncio.get_running_loop()
        n = await loop.run_in_executor(None, backend.count_tokens, chat)
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
                "supports_images": m.supports_images,
                "quantization": m.quantization or None,
                "backend": m.backend,
                "gpu": m.gpu,
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
        if request.url.path == "/" and page.wants_page(request):
            return await page.index(request)  # a browser: the page
        return JSONResponse({"name": "engy", "models": [m.id for m in backend.models()]})

    async def ps(request: Request) -> Response:
        # Read-only: what is loaded now (`engy ps`); the key is required.
        models = [m.to_json() for m in backend.status()]
        return JSONResponse({"object": "engy.ps", "models": models})

    async def prometheus(request: Request) -> Response:
        status = backend.status()
        loaded = [m.id for m in status]
        caches = [(m.id, c) for m in status for c in m.caches]
        return PlainTextResponse(
            metrics.render(loaded, caches), media_type="text/plain; version=0.0.4; charset=utf-8"
        )

    async def not_found(request: Request) -> Response:
        # In the format of the API the path belongs to (GET /v1/chat/completions
        # is an OpenAI client's mistake).
        err = NotFoundRoute(f"no route for {request.method} {request.url.path}")
        return _error_response(_protocol_of(request.url.path), err)

    routes = [
        Route("/v1/messages", endpoint("anthropic", messages), methods=["POST"]),
        Route("/v1/messages/count_tokens", endpoint("anthropic", count_tokens), methods=["POST"]),
        Route("/v1/responses", endpoint("openai", create_response), methods=["POST", "GET"]),
        Route(
            "/v1/responses/input_tokens",
            endpoint("openai", count_response_tokens),
            methods=["POST"],
        ),
        Route("/v1/chat/completions", endpoint("chat", complete_chat), methods=["POST"]),
        Route("/v1/models", endpoint("anthropic", list_models), methods=["GET"]),
        Route("/", endpoint("anthropic", hello, auth=False), methods=["GET", "HEAD"]),
        Route("/api/hello", endpoint("anthropic", hello, auth=False), methods=["GET", "HEAD"]),
        Route("/metrics", endpoint("anthropic", prometheus), methods=["GET"]),
        Route("/engy/ps", endpoint("anthropic", ps), methods=["GET"]),
        # The page (server/page.py): its files need no key, its data does.
        Route("/engy/page/{name}", endpoint("anthropic", page.asset, auth=False), methods=["GET"]),
        Route("/engy/status", endpoint("anthropic", page.status), methods=["GET"]),
        Route("/engy/events", endpoint("anthropic", page.events), methods=["GET"]),
        Route("/engy/models", endpoint("anthropic", page.models), methods=["GET"]),
        Route("/engy/models/load", endpoint("anthropic", page.load), methods=["POST"]),
        Route("/engy/models/unload", endpoint("anthropic", page.unload), methods=["POST"]),
        Route("/engy/models/pull", endpoint("anthropic", page.pull), methods=["POST"]),
        Route("/engy/models/rm", endpoint("anthropic", page.rm), methods=["POST"]),
        Route(
            "/{path:path}",
            endpoint("anthropic", not_found, auth=False),
            methods=["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD"],
        ),
    ]
    # Outermost first: every answer is counted, refusals included.
    middleware = [
        Middleware(CountRequests, metrics=metrics, paths={r.path for r in routes[:-1]}),
        Middleware(AccessMiddleware, policy=settings.access, refuse=refuse),
    ]
    app = Starlette(routes=routes, middleware=middleware)
    app.state.drain = drain  # `engy serve` starts the drain on SIGINT / SIGTERM
    app.state.activity = activity
    return app
