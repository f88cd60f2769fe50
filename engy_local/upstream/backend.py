"""`Backend` on an upstream engine (llama-server, vLLM, SGLang) that takes
token ids: engy renders and tokenizes the prompt exactly as the local engine
does (prompt/prepare.py, on the model's own vocabulary and template), sends
the ids to the upstream's completions endpoint, and feeds what comes back
to the same family parser, so the layers above see the same events as from
the local pool.

One request, streaming from the upstream always:

    submit      prepare() -> tokens, sampling, grammar, parser; POST and wait
                for the upstream's status (errors: HTTP errors of our own)
    iterate     SSE chunks -> token ids decoded here (or the upstream's text)
                -> parser events; Started once the upstream starts; Finished
                with the upstream's counts of cached prompt tokens
    cancel      closes the upstream's stream, which stops its generation
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Protocol

import httpx

from ..backend import ModelInfo, ModelStatus, provider_failure
from ..chat import ChatRequest, Event, PromptProgress, Started
from ..errors import Busy, EngyError, ModelNotFound, NoWorker, UpstreamLost
from ..events import Queue, drain
from ..models.catalog import quant_of
from ..prompt.parsing.assemble import AnswerAssembler
from ..prompt.parsing.detokenize import Pieces, TextEnd, TokenText
from ..prompt.prepare import Prepared, PromptModel, count_tokens, prepare
from .errors import from_status, from_transport
from .options import UpstreamOptions
from .wire import ENDPOINTS, Chunk, Grammar, grammar_dialect, parse_chunk, request_body


class Vocabulary(PromptModel, Pieces, Protocol):
    """The tokenizer engy renders an upstream's prompts with: a GGUF's
    vocabulary alone (runtime/loading/vocab.py) or a Hugging Face one (prompt/hfvocab.py).
    Its window is the upstream's, once asked."""

    n_ctx: int

    def close(self) -> None: ...


log = logging.getLogger("engy.requests")


class UpstreamGeneration:
    """One request's stream from the upstream, as `Generation`."""

    def __init__(
        self,
        backend: UpstreamBackend,
        prepared: Prepared,
        response: httpx.Response,
        heartbeat: float,
    ) -> None:
        self.prompt_tokens = len(prepared.tokens)
        self._backend = backend
        self._prepared = prepared
        self._response = response
        self._heartbeat = heartbeat
        self._cancelled = False
        self._closed = False
        self._pump: asyncio.Task[None] | None = None
        self._closing: asyncio.Task[None] | None = None

    def cancel(self) -> None:
        """Stops reading and closes the upstream's stream at once, which
        stops its generation. Once only: a second cancel of the pump would
        interrupt httpcore closing the connection on the first."""
        if self._cancelled:
            return
        self._cancelled = True
        if self._pump is not None:
            self._pump.cancel()  # its last word (None) ends the iteration
        if self._closing is None:
            with contextlib.suppress(RuntimeError):  # no loop: nothing is open
                self._closing = asyncio.get_running_loop().create_task(self._close())

    async def __aiter__(self) -> AsyncIterator[Event]:
        if self._cancelled:
            return
        queue: Queue = asyncio.Queue()
        self._pump = asyncio.create_task(self._run(queue))
        try:
            async for event in drain(queue, lambda: self._heartbeat):
                if self._cancelled:
                    return
                yield event
        finally:
            # No await here: a cancelled consumer (the client went away) is
            # cancelled again at every await, and the upstream's stream must
            # be closed all the same, so a task of its own closes it.
            self.cancel()

    async def _close(self) -> None:
        if not self._closed:
            self._closed = True
            self._backend.release()
            # The pump's read ends first (httpcore closes the connection as
            # the read is interrupted); closed from here meanwhile, the
            # socket would stay open and the upstream generate into it.
            if self._pump is not None:
                await asyncio.wait({self._pump}, timeout=5)
            with contextlib.suppress(httpx.HTTPError):
                await self._response.aclose()

    async def _run(self, queue: Queue) -> None:
        try:
            async for event in self._events():
                queue.put_nowait(event)
        except EngyError as exc:
            queue.put_nowait(exc)
        except httpx.HTTPError as exc:
            queue.put_nowait(from_transport(self._backend.url, exc, streaming=True))
        except Exception as exc:  # one request's failure stays its own
            log.exception("upstream stream failed")
            queue.put_nowait(UpstreamLost(f"upstream stream failed: {exc}"))
        finally:
            queue.put_nowait(None)

    async def _chunks(self) -> AsyncIterator[Chunk]:
        kind = self._backend.options.kind
        async for line in self._response.aiter_lines():
            if not line.startswith("data:"):
                continue  # blank lines, comments (pings), event names
            payload = line[5:].strip()
            if payload == "[DONE]":
                return
            try:
                data = json.loads(payload)
            except ValueError:
                bad = payload[:200]
                raise UpstreamLost(f"upstream sent a chunk that is not JSON: {bad}") from None
            if isinstance(data, dict) and "error" in data:
                raise UpstreamLost(f"upstream error mid-answer: {data['error']}")
            if isinstance(data, dict):
                yield parse_chunk(kind, data)

    async def _events(self) -> AsyncIterator[Event]:
        prepared = self._prepared
        text = TokenText(self._backend.vocab, prepared.params.stop)
        answer = AnswerAssembler(prepared.new_parser(), prepared.single_call, prepared.check)
        n_prompt = self.prompt_tokens
        started, cached = False, 0
        counted: int | None = None  # output tokens as the upstream counts them
        end: TextEnd | None = None
        t_start, t_first = time.monotonic(), 0.0

        async for chunk in self._chunks():
            cached = cached if chunk.cached_tokens is None else chunk.cached_tokens
            counted = counted if chunk.output_tokens is None else chunk.output_tokens
            if not started:
                started = True
                yield Started(n_prompt, cached)
            if chunk.progress is not None and chunk.progress[0] < chunk.progress[1]:
                yield PromptProgress(*chunk.progress)
            if end is not None:
                continue  # the answer has ended: only counts follow
            if chunk.has_tokens:
                pieces = [text.push_token(t) for t in chunk.tokens]
            else:
                pieces = [text.push_text(chunk.text)] if chunk.text else []
            cut = False
            for piece, why in pieces:
                t_first = t_first or time.monotonic()
                for event in answer.feed(piece):
                    yield event
                # A stop string, or the one call asked for: engy ends the
                # answer itself and closes the stream (the upstream stops).
                cut = why == "stop" or (answer.done and why is None)
                if why is not None or cut:
                    end = why or "end"
                    break
            if cut:
                break
            if end is None:
                end = chunk.finish
            # After an end the upstream still sends its counts (llama-server's
            # final chunk, OpenAI's usage chunk): read on to the stream's end.
        if end is None:
            raise UpstreamLost(f"upstream {self._backend.url} ended the stream before the answer")
        tail = text.flush()
        if tail:
            for event in answer.feed(tail):
                yield event
        produced = text.produced or counted or 0
        for event in answer.finish(end, n_prompt, cached, produced):
            yield event
        finished = time.monotonic()
        log.info(
            "%s upstream prompt=%d cached=%d ttft=%.2fs decode=%.1f tok/s tokens=%d stop=%s",
            self._backend.options.id,
            n_prompt,
            cached,
            (t_first or finished) - t_start,
            max(0, produced - 1) / max(1e-6, finished - (t_first or finished)),
            produced,
            answer.stop_reason,
        )


class UpstreamBackend:
    """One upstream model as a `Backend`."""

    def __init__(
        self,
        options: UpstreamOptions,
        vocab: Vocabulary,
        *,
        output_cap: int = 8192,
        queue_size: int = 16,
        timeout: float | None = 600.0,
        heartbeat: float = 10.0,
        parallel: int = 4,
    ) -> None:
        self.options = options
        self.url = options.url.rstrip("/")
        self.output_cap = output_cap
        self.heartbeat = heartbeat
        self.limit = parallel + queue_size  # requests in flight before 429
        self.in_flight = 0
        self.vocab = vocab
        self.quantization = options.quantization
        self._headers = {"authorization": f"Bearer {options.key}"} if options.key else {}
        self._timeout = httpx.Timeout(connect=5.0, read=timeout, write=30.0, pool=5.0)
        # One client per event loop (the server has one; tests may make more).
        self._client: httpx.AsyncClient | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None
        self.window_source = "trained"
        self.grammar: Grammar = "grammar"  # decided by _discover
        self._discover(self._headers)

    def _discover(self, headers: dict[str, str]) -> None:
        """The upstream's window (llama-server's /props, vLLM's max_model_len),
        capped by ctx_size; unreachable now: the trained one, said in the log."""
        window: int | None = None
        model = self.options.model
        try:
            if self.options.kind == "llamacpp":
                props = httpx.get(f"{self.url}/props", headers=headers, timeout=5).json()
                settings = props.get("default_generation_settings") or {}
                window = settings.get("n_ctx") or (settings.get("params") or {}).get("n_ctx")
                served_file = Path(str(props.get("model_path") or "")).name
                self.quantization = self.quantization or quant_of(served_file) or ""
            else:
                listed = httpx.get(f"{self.url}/v1/models", headers=headers, timeout=5).json()
                for entry in listed.get("data") or []:
                    if model is None or entry.get("id") == model:
                        model = model or entry.get("id")
                        window = entry.get("max_model_len")
                        break
            answered = True
        except (httpx.HTTPError, ValueError, AttributeError) as exc:
            answered = False
            log.warning("upstream %s: cannot ask for its window (%s)", self.url, exc)
        # As configured; else asked of the engine (not reached now: `grammar`).
        if self.options.grammar:
            self.grammar = self.options.grammar
        elif answered:
            self.grammar = self._find_grammar(headers)
        if self.grammar == "none":
            log.warning(
                "upstream %s takes no grammar: forced tool calls are parsed as the model "
                "writes them, not constrained",
                self.url,
            )
        self.upstream_model = model
        if isinstance(window, int) and window > 0:
            self.window_source = "upstream"
            self.vocab.n_ctx = window
        if self.options.ctx_size:
            self.vocab.n_ctx = min(self.vocab.n_ctx, self.options.ctx_size)

    def _find_grammar(self, headers: dict[str, str]) -> Grammar:
        """Where this upstream reads a grammar, when --upstream does not say."""
        if self.options.kind == "llamacpp":
            return "grammar"
        engine, version = self._engine(headers)
        if not engine:
            log.warning(
                "upstream %s is neither vLLM nor SGLang: forced tool calls send "
                "`grammar` (set grammar= in --upstream if it takes another, or none)",
                self.url,
            )
        return grammar_dialect(engine, version)

    def _engine(self, headers: dict[str, str]) -> tuple[str, str]:
        """Which engine serves the openai kind, and its version: SGLang
        answers /get_server_info, vLLM /version; ("", "") when neither."""
        for path, engine in (("/get_server_info", "sglang"), ("/version", "vllm")):
            try:
                r = httpx.get(f"{self.url}{path}", headers=headers, timeout=5)
                data = r.json() if r.status_code == 200 else None
            except (httpx.HTTPError, ValueError):
                continue
            if isinstance(data, dict):
                return engine, str(data.get("version") or "")
        return "", ""

    # -- Backend --------------------------------------------------------

    @property
    def info(self) -> ModelInfo:
        path = self.options.tokenizer
        return ModelInfo(
            id=self.options.id,
            display_name=self.options.id,
            path=str(path),
            context_length=self.vocab.n_ctx,
            created=int(path.stat().st_mtime) if path.exists() else 0,
            quantization=self.quantization,
            backend=self.options.backend,
            gpu=self.options.gpu,
        )

    def models(self) -> list[ModelInfo]:
        return [self.info]

    def owns(self, model: str) -> bool:
        names = {self.options.id, *self.options.aliases}
        return model in names or model.split("/", 1)[-1] in names

    def resolve(self, model: str) -> ModelInfo:
        if not self.owns(model):
            raise ModelNotFound(model)
        return self.info

    def count_tokens(self, request: ChatRequest) -> int:
        self.resolve(request.model)
        return count_tokens(self.vocab, request)

    async def submit(self, request: ChatRequest) -> UpstreamGeneration:
        info = self.resolve(request.model)
        if request.provider is not None:
            failure = provider_failure(request.provider, info)
            if failure:
                raise NoWorker(f"no worker meets the provider requirements: {failure}")
        loop = asyncio.get_running_loop()
        prepared = await loop.run_in_executor(None, prepare, self.vocab, request, self.output_cap)
        if self.in_flight >= self.limit:
            raise Busy(f"too many requests for the upstream ({self.limit} in flight)", 2)
        kind, model = self.options.kind, self.upstream_model
        body = request_body(kind, prepared.tokens, prepared.params, model, self.grammar)
        self.in_flight += 1
        try:
            response = await self._send(body)
        except BaseException:
            self.release()
            raise
        return UpstreamGeneration(self, prepared, response, self.heartbeat)

    async def _send(self, body: dict[str, Any]) -> httpx.Response:
        """POSTs and waits for the status: a refusal is an error of ours
        before any byte of the answer."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            self._client = httpx.AsyncClient(
                base_url=self.url, headers=self._headers, timeout=self._timeout
            )
            self._client_loop = loop
        req = self._client.build_request("POST", ENDPOINTS[self.options.kind], json=body)
        try:
            response = await self._client.send(req, stream=True)
        except httpx.HTTPError as exc:
            raise from_transport(self.url, exc, streaming=False) from None
        if response.status_code >= 400:
            try:
                raw = await response.aread()
                detail: Any = json.loads(raw) if raw else {}
            except (httpx.HTTPError, ValueError):
                detail = {}
            finally:
                await response.aclose()
            raise from_status(self.url, response.status_code, detail)
        return response

    def release(self) -> None:
        self.in_flight = max(0, self.in_flight - 1)

    def status(self) -> list[ModelStatus]:
        family, template = self.vocab.family, self.vocab.template
        return [
            ModelStatus(
                id=self.options.id,
                context_length=self.vocab.n_ctx,
                backend=self.options.backend,
                cost=0,  # its memory is the upstream's
                keep_alive_left=None,
                busy=self.in_flight > 0,
                family=family.name,
                thinking=family.thinking is not None or template.thinking_switch is not None,
                quantization=self.quantization,
                aliases=self.options.aliases,
            )
        ]

    def close(self) -> None:
        # The client's connections belong to the server's loop, which has
        # ended by now: nothing to await, the sockets close with it.
        self._client = None
        self.vocab.close()
