"""`RemoteBackend`: the `Backend` of `engy chat --url`, a running engy (or any
server of either API) over HTTP.

Only transport lives here: the protocols' client modules turn the neutral
request into the wire JSON and the server's SSE events back into neutral
events, so the REPL consumes exactly what it gets in-process.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from typing import Any, Literal, Protocol

import httpx

from .backend import ModelInfo, ModelStatus
from .chat import ChatRequest, Event, Started
from .errors import ModelNotFound, RemoteError
from .protocols import client_anthropic, client_responses

Api = Literal["messages", "responses"]


class _Decoder(Protocol):
    def feed(self, data: dict[str, Any]) -> list[Event]: ...
    def close(self) -> None: ...


_PATHS: dict[Api, str] = {"messages": "/v1/messages", "responses": "/v1/responses"}
_REQUESTS: dict[Api, Callable[..., dict[str, Any]]] = {
    "messages": client_anthropic.request_json,
    "responses": client_responses.request_json,
}
_DECODERS: dict[Api, Callable[[], _Decoder]] = {
    "messages": client_anthropic.MessageDecoder,
    "responses": client_responses.ResponseDecoder,
}
# Connecting must be quick; an answer may take long to start (a long prompt),
# and engy sends keepalives meanwhile.
TIMEOUT = httpx.Timeout(connect=10.0, read=None, write=60.0, pool=10.0)


def base_url(url: str) -> str:
    """`http://host:port`, from that or from `.../v1` as SDKs are given."""
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


async def _sse(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The JSON `data` of each server-sent event (`event:` lines are not
    needed: both protocols repeat the type inside the data)."""
    data: list[str] = []
    async for line in response.aiter_lines():
        if line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        elif not line and data:
            text, data = "\n".join(data), []
            if text.strip() == "[DONE]":
                return
            try:
                value = json.loads(text)
            except ValueError:
                raise RemoteError(500, "", f"the server sent bad JSON: {text[:80]}") from None
            if isinstance(value, dict):
                yield value


class RemoteGeneration:
    def __init__(self, response: httpx.Response, decoder: _Decoder) -> None:
        self.prompt_tokens = 0  # known from the first event that tells it
        self._response = response
        self._decoder = decoder
        self._cancelled = False

    def cancel(self) -> None:
        if not self._cancelled:
            self._cancelled = True
            asyncio.get_running_loop().create_task(self._response.aclose())

    async def __aiter__(self) -> AsyncIterator[Event]:
        try:
            async for data in _sse(self._response):
                for event in self._decoder.feed(data):
                    if isinstance(event, Started):
                        self.prompt_tokens = event.prompt_tokens
                    yield event
            self._decoder.close()
        except httpx.HTTPError as exc:
            if not self._cancelled:
                raise RemoteError(0, "", f"the connection broke: {exc}") from None
        finally:
            await self._response.aclose()


class RemoteBackend:
    output_cap = None  # the server's own

    def __init__(self, url: str, api: Api, api_key: str | None = None) -> None:
        self.url = base_url(url)
        self.api = api
        headers = {"anthropic-version": "2023-06-01"} if api == "messages" else {}
        if api_key:
            headers |= {"x-api-key": api_key, "authorization": f"Bearer {api_key}"}
        self._headers = headers
        self._sync = httpx.Client(base_url=self.url, headers=headers, timeout=TIMEOUT)
        self._async: httpx.AsyncClient | None = None

    def close(self) -> None:
        self._sync.close()

    async def aclose(self) -> None:
        """Close the async client, on the loop that used it."""
        if self._async is not None:
            client, self._async = self._async, None
            await client.aclose()

    def models(self) -> list[ModelInfo]:
        body = self._get_json("/v1/models")
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list):
            raise RemoteError(0, "", f"{self.url}/v1/models: the answer has no model list")
        return [_info(m, self.url) for m in data if isinstance(m, dict) and "id" in m]

    def resolve(self, model: str) -> ModelInfo:
        """The model the server lists under `model` (a leading vendor/
        segment ignored); raises ModelNotFound."""
        models = self.models()
        for candidate in dict.fromkeys((model, model.split("/", 1)[-1])):
            for info in models:
                if info.id == candidate:
                    return info
        raise ModelNotFound(model)

    def count_tokens(self, request: ChatRequest) -> int:
        """Exact, where the server counts: Messages' count_tokens, Responses'
        input_tokens. Blocking."""
        body = _REQUESTS[self.api](request, stream=False)
        body.pop("max_tokens", None)
        path = _PATHS[self.api] + ("/count_tokens" if self.api == "messages" else "/input_tokens")
        answer = self._call("POST", path, json=body)
        value = answer.get("input_tokens") if isinstance(answer, dict) else None
        if not isinstance(value, int):
            raise RemoteError(0, "", f"{path}: the answer has no input_tokens")
        return value

    async def submit(self, request: ChatRequest) -> RemoteGeneration:
        if self._async is None:
            self._async = httpx.AsyncClient(
                base_url=self.url, headers=self._headers, timeout=TIMEOUT
            )
        body = _REQUESTS[self.api](request, stream=True)
        try:
            built = self._async.build_request("POST", _PATHS[self.api], json=body)
            response = await self._async.send(built, stream=True)
        except httpx.HTTPError as exc:
            raise RemoteError(0, "", f"cannot reach {self.url}: {exc}") from None
        if response.status_code != 200:
            try:
                await response.aread()
                raise client_anthropic.error_from(response.status_code, _json(response))
            finally:
                await response.aclose()
        return RemoteGeneration(response, _DECODERS[self.api]())

    def status(self) -> list[ModelStatus]:
        """What a running engy holds (GET /engy/ps); other servers have no
        such route and answer 404."""
        body = self._get_json("/engy/ps")
        models = body.get("models") if isinstance(body, dict) else None
        if not isinstance(models, list):
            raise RemoteError(0, "", f"{self.url}/engy/ps: the answer has no model list")
        return [ModelStatus.from_json(m) for m in models if isinstance(m, dict) and "id" in m]

    def files(self) -> dict[str, str]:
        """Each served model's GGUF path, by id (GET /engy/models): how
        `engy launch` tells a running engy already serves a file."""
        body = self._get_json("/engy/models")
        data = body.get("served") if isinstance(body, dict) else None
        if not isinstance(data, list):
            raise RemoteError(0, "", f"{self.url}/engy/models: the answer has no model list")
        return {
            str(m["id"]): str(m["path"])
            for m in data
            if isinstance(m, dict) and "id" in m and "path" in m
        }

    # -- helpers --------------------------------------------------------

    def _get_json(self, path: str) -> Any:
        return self._call("GET", path)

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._sync.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise RemoteError(0, "", f"cannot reach {self.url}: {exc}") from None
        if response.status_code != 200:
            raise client_anthropic.error_from(response.status_code, _json(response))
        return _json(response)


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def _info(raw: dict[str, Any], url: str) -> ModelInfo:
    window = raw.get("max_input_tokens") or raw.get("context_length") or 0
    created = raw.get("created")
    if not isinstance(created, int):
        try:
            created = int(datetime.fromisoformat(str(raw.get("created_at"))).timestamp())
        except ValueError:
            created = 0
    return ModelInfo(
        id=str(raw["id"]),
        display_name=str(raw.get("display_name") or raw["id"]),
        path=url,
        context_length=window if isinstance(window, int) else 0,
        created=created,
        backend="remote",
        # engy lists it; another server may not: let its answers tell.
        supports_images=raw.get("supports_images") is not False,
    )
