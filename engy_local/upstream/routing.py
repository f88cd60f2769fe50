"""Several backends behind one server: local models (the pool) and
upstreams, each request routed by its `model` to the first backend that
knows it. `GET /v1/models` and `engy ps` list them all."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ..backend import Backend, Generation, Manages, ModelInfo, ModelStatus
from ..chat import ChatRequest
from ..errors import ModelNotFound


class Served(Backend, Protocol):
    """A backend `engy serve` runs: it has a primary model and is closed at
    the end (ModelPool, UpstreamBackend, Routed)."""

    @property
    def info(self) -> ModelInfo: ...

    def close(self) -> None: ...


class Routed:
    def __init__(self, backends: Sequence[Served], output_cap: int = 8192) -> None:
        if not backends:
            raise ValueError("Routed needs at least one backend")
        self.backends = list(backends)
        self.output_cap = output_cap

    @property
    def info(self) -> ModelInfo:
        """The first backend's primary model."""
        return self.backends[0].info

    def _route(self, model: str) -> Served:
        for backend in self.backends:
            try:
                backend.resolve(model)
            except ModelNotFound:
                continue
            return backend
        raise ModelNotFound(model)

    def models(self) -> list[ModelInfo]:
        seen: set[str] = set()
        out: list[ModelInfo] = []
        for backend in self.backends:
            for info in backend.models():
                if info.id not in seen:
                    seen.add(info.id)
                    out.append(info)
        return out

    def resolve(self, model: str) -> ModelInfo:
        return self._route(model).resolve(model)

    def count_tokens(self, request: ChatRequest) -> int:
        return self._route(request.model).count_tokens(request)

    async def submit(self, request: ChatRequest) -> Generation:
        return await self._route(request.model).submit(request)

    def status(self) -> list[ModelStatus]:
        return [s for backend in self.backends for s in backend.status()]

    def load(self, model_id: str) -> ModelInfo:
        """`backend.Manages`: an upstream's model is always there."""
        backend = self._route(model_id)
        return backend.load(model_id) if isinstance(backend, Manages) else backend.resolve(model_id)

    def unload(self, model_id: str) -> bool:
        backend = self._route(model_id)
        return backend.unload(model_id) if isinstance(backend, Manages) else False

    def close(self) -> None:
        for backend in self.backends:
            backend.close()
