"""Where `engy chat` gets its answers: the model loaded in-process (the
same loading as `engy serve`), or a running server with `--url`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ...backend import Backend, ModelInfo
from ...client import Api, RemoteBackend
from ...errors import CatalogError, ConversationFileError, EngyError, RemoteError


class ChatBackend(Backend, Protocol):
    def close(self) -> None: ...


@dataclass(frozen=True)
class ChatOptions:
    model: str | None = None  # a GGUF path, catalog id or alias; with url: the server's id
    url: str | None = None  # talk to this server instead of loading the model
    api: Api = "messages"
    api_key: str | None = None
    system: str | None = None
    thinking: bool | None = None  # None: the model's default
    show_thinking: bool = True
    max_tokens: int | None = None
    temperature: float | None = None
    ctx_size: int | None = 32768
    gpu_layers: int | None = None
    threads: int | None = None
    history: Path | None = None  # where typed lines are kept across runs
    mmproj: Path | None = None  # vision projector of the model loaded in-process


# Errors that are one line to the user: what a model, a file or a server said.
USER_ERRORS = (EngyError, CatalogError, ConversationFileError, OSError)


def open_backend(options: ChatOptions, model: str | None) -> tuple[ChatBackend, ModelInfo]:
    """Load `model` in-process, or connect to `options.url`. Blocking."""
    if options.url:
        remote = RemoteBackend(options.url, options.api, options.api_key)
        try:
            return remote, remote_model(remote, model)
        except BaseException:
            remote.close()
            raise
    from ...server.backends import build_backend
    from ...server.options import ServeOptions

    serve = ServeOptions(
        model=model,
        ctx_size=options.ctx_size,
        gpu_layers=options.gpu_layers,
        threads=options.threads,
        mmproj=options.mmproj,
        timeout=None,
        keep_alive=None,  # the model stays loaded while the user is here
    )
    local = build_backend(serve)
    return local, local.models()[0]


def remote_model(remote: RemoteBackend, model: str | None) -> ModelInfo:
    try:
        if model is None:
            listed = remote.models()
            if not listed:
                raise RemoteError(0, "", f"{remote.url} lists no models: name one")
            return listed[0]
        return remote.resolve(model)
    except RemoteError as exc:
        if model is None or exc.status != 404:
            raise
        # No model list on this server: trust the name; requests will tell.
        return ModelInfo(id=model, display_name=model, path=remote.url, context_length=0, created=0)
