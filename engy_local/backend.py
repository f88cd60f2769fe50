"""What the HTTP server and the REPL need from whatever runs the model.

`engine.pool.ModelPool` implements it on llama.cpp; protocol tests may use a
scripted one. Nothing here imports llama_cpp.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from .chat import ChatRequest, Event


@dataclass(frozen=True)
class ModelInfo:
    id: str
    display_name: str
    path: str
    context_length: int  # the window as loaded (n_ctx)
    created: int  # unix seconds (the file's mtime)
    quantization: str = ""
    backend: str = "CPU"  # CPU / CUDA / Metal
    supports_images: bool = False


class Generation(Protocol):
    """One submitted request. Iterate it for events; `cancel()` stops it
    within one token and frees the model."""

    prompt_tokens: int  # exact prompt size, known once the request is accepted

    def __aiter__(self) -> AsyncIterator[Event]: ...

    def cancel(self) -> None: ...


class Backend(Protocol):
    def models(self) -> list[ModelInfo]: ...

    def resolve(self, model: str) -> ModelInfo:
        """The model a request's `model` names; raises ModelNotFound."""
        ...

    def count_tokens(self, request: ChatRequest) -> int:
        """Exact prompt size of `request` through its template and tokenizer.
        Blocking: call it off the event loop."""
        ...

    async def submit(self, request: ChatRequest) -> Generation:
        """Validate (PromptTooLong, InvalidRequest), then queue (Busy)."""
        ...
