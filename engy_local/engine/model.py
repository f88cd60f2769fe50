"""Loading a GGUF with llama.cpp and the few model facts the rest needs."""

from __future__ import annotations

import ctypes
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import llama_cpp
from llama_cpp._logger import set_verbose

from ..errors import EngyError
from ..models.ggufmeta import NotGGUF, read_metadata, trained_context
from .families import detect, get
from .template import ChatTemplate

# Prompts are evaluated in chunks of this many tokens; between chunks the
# worker checks for cancellation and reports progress.
BATCH = 512


# llama.cpp logs every load at length; keep errors only.
set_verbose(False)


class ModelLoadError(EngyError):
    pass


@dataclass(frozen=True)
class LoadOptions:
    path: Path
    ctx_size: int | None = None  # cap on the model's trained context
    gpu_layers: int | None = None  # None: all when the build offloads, else 0
    threads: int | None = None
    chat_template: str | None = None  # overrides tokenizer.chat_template
    family: str | None = None  # overrides the tool-call family detection


def gpu_backend() -> str | None:
    """The offload backend this llama.cpp build has, or None for CPU only."""
    if not llama_cpp.llama_supports_gpu_offload():
        return None
    info = llama_cpp.llama_print_system_info().decode("utf-8", "replace").upper()
    for name in ("CUDA", "METAL", "VULKAN", "HIP", "SYCL"):
        if f"{name} :" in info or f"{name} =" in info or name in info:
            return "Metal" if name == "METAL" else name
    return "Metal" if sys.platform == "darwin" else "GPU"


class Model:
    """One loaded GGUF. Only the worker thread that owns it may decode;
    tokenizing and rendering are safe from any thread."""

    def __init__(self, options: LoadOptions) -> None:
        path = options.path
        if not path.is_file():
            raise ModelLoadError(f"model file not found: {path}")
        backend = gpu_backend()
        gpu_layers = options.gpu_layers
        if gpu_layers is None:
            gpu_layers = -1 if backend else 0
        self.backend = backend if backend and gpu_layers != 0 else "CPU"
        threads = options.threads or max(1, (os.cpu_count() or 2))
        train_ctx = _trained_context(path)
        n_ctx = min(train_ctx, options.ctx_size) if options.ctx_size else train_ctx
        try:
            self.llm = llama_cpp.Llama(
                model_path=str(path),
                n_ctx=n_ctx,
                n_batch=BATCH,
                n_ubatch=BATCH,
                n_gpu_layers=gpu_layers,
                n_threads=threads,
                n_threads_batch=threads,
                verbose=False,
            )
        except ValueError as exc:  # llama-cpp-python's "Failed to load model"
            raise ModelLoadError(f"could not load {path}: {exc}") from exc
        self.path = path
        self.n_ctx: int = self.llm.n_ctx()
        self.gpu_layers = gpu_layers
        vocab = self.llm._model.vocab
        self._vocab = vocab
        self.add_bos = bool(llama_cpp.llama_vocab_get_add_bos(vocab))
        self.bos_text = self._token_text(llama_cpp.llama_vocab_bos(vocab))
        self.eos_text = self._token_text(llama_cpp.llama_vocab_eos(vocab))
        self.metadata: dict[str, str] = dict(self.llm.metadata)
        source = options.chat_template or self.metadata.get("tokenizer.chat_template")
        if not source:
            raise ModelLoadError(
                f"{path.name} has no chat template; give one in models.toml (chat_template)"
            )
        self.template = ChatTemplate(source, bos_token=self.bos_text, eos_token=self.eos_text)
        self.family = get(options.family) if options.family else detect(source)

    def _token_text(self, token: int) -> str:
        if token < 0:
            return ""
        return self.piece(token).decode("utf-8", "replace")

    def tokenize(self, text: str) -> list[int]:
        """Tokens of a rendered prompt. Templates usually write the BOS text
        themselves; it is dropped here and added as the real token instead,
        so there is exactly one."""
        if self.add_bos and self.bos_text and text.startswith(self.bos_text):
            text = text[len(self.bos_text) :]
        tokens: list[int] = self.llm.tokenize(
            text.encode("utf-8"), add_bos=self.add_bos, special=True
        )
        return tokens

    def piece(self, token: int) -> bytes:
        """The bytes of one token, special tokens rendered as their text."""
        size = 64
        while True:
            buf = ctypes.create_string_buffer(size)
            n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, size, 0, True)
            if n >= 0:
                return buf.raw[:n]
            size = -n

    def is_end(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(self._vocab, token))

    def close(self) -> None:
        self.llm.close()


def _trained_context(path: Path) -> int:
    try:
        meta = read_metadata(path)
    except (OSError, NotGGUF) as exc:
        raise ModelLoadError(f"cannot read {path}: {exc}") from None
    return trained_context(meta) or 4096
