"""`LocalBackend`: the `Backend` that runs models in this process."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from ..backend import ModelInfo
from ..chat import ChatRequest, Event, Heartbeat
from ..errors import EngyError, GenerationTimeout, ModelNotFound
from .model import LoadOptions, Model
from .prepare import count_tokens, prepare
from .worker import Job, Worker


@dataclass(frozen=True)
class ServedModel:
    """A model this server can serve, under its id and aliases."""

    id: str
    options: LoadOptions
    aliases: tuple[str, ...] = ()
    quantization: str = ""


class LocalGeneration:
    """The async side of one job: events arrive from the worker thread."""

    def __init__(self, prompt_tokens: int, timeout: float | None, heartbeat: float) -> None:
        self.prompt_tokens = prompt_tokens
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[Event | EngyError | None] = asyncio.Queue()
        self._deadline = time.monotonic() + timeout if timeout else None
        self._timeout = timeout
        self._heartbeat = heartbeat
        self.job: Job | None = None

    def emit(self, item: Event | EngyError | None) -> None:
        """Called from the worker thread."""
        self._loop.call_soon_threadsafe(self._queue.put_nowait, item)

    def cancel(self) -> None:
        if self.job is not None:
            self.job.cancelled.set()

    async def __aiter__(self) -> AsyncIterator[Event]:
        try:
            while True:
                wait = self._heartbeat
                if self._deadline is not None:
                    remaining = self._deadline - time.monotonic()
                    if remaining <= 0:
                        raise GenerationTimeout(
                            f"generation did not finish within {self._timeout:g} s"
                        )
                    wait = min(wait, remaining)
                try:
                    item = await asyncio.wait_for(self._queue.get(), wait)
                except asyncio.TimeoutError:
                    yield Heartbeat()
                    continue
                if item is None:
                    return
                if isinstance(item, EngyError):
                    raise item
                yield item
        finally:
            # However the consumer leaves (done, error, client gone), the
            # model is released at once.
            self.cancel()


class LocalBackend:
    """Serves one loaded model (several come with the models issue)."""

    def __init__(
        self,
        served: ServedModel,
        *,
        output_cap: int = 8192,
        queue_size: int = 16,
        timeout: float | None = None,
        heartbeat: float = 10.0,
    ) -> None:
        self.heartbeat = heartbeat
        self.served = served
        self.model = Model(served.options)
        self.worker = Worker(self.model, queue_size=queue_size)
        self.output_cap = output_cap
        self.timeout = timeout
        path = served.options.path
        self.info = ModelInfo(
            id=served.id,
            display_name=served.id,
            path=str(path),
            context_length=self.model.n_ctx,
            created=int(path.stat().st_mtime),
            quantization=served.quantization,
            backend=self.model.backend,
        )

    def close(self) -> None:
        self.worker.close()
        self.model.close()

    def models(self) -> list[ModelInfo]:
        return [self.info]

    def resolve(self, model: str) -> ModelInfo:
        # A leading vendor/ segment is ignored ("engy/qwen3" is "qwen3").
        name = model.split("/", 1)[1] if "/" in model else model
        served = self.served
        if model in (served.id, *served.aliases) or name in (served.id, *served.aliases):
            return self.info
        raise ModelNotFound(model)

    def count_tokens(self, request: ChatRequest) -> int:
        self.resolve(request.model)
        return count_tokens(self.model, request)

    async def submit(self, request: ChatRequest) -> LocalGeneration:
        self.resolve(request.model)
        # Rendering and tokenizing a long prompt takes a while: off the loop.
        loop = asyncio.get_running_loop()
        prepared = await loop.run_in_executor(None, prepare, self.model, request, self.output_cap)
        generation = LocalGeneration(len(prepared.tokens), self.timeout, self.heartbeat)
        job = Job(
            tokens=prepared.tokens,
            params=prepared.params,
            parser=prepared.new_parser(),
            emit=generation.emit,
            single_call=prepared.single_call,
        )
        generation.job = job
        self.worker.submit(job)
        return generation
