"""A GGUF's tokenizer, chat template and family without its weights.

What a backend that does not run the model here (an upstream engine that
takes token ids, see `engy_local.upstream`) needs to turn a request into
exactly the tokens the local engine would feed llama.cpp, and the tokens it
gets back into text. It satisfies `prepare.PromptModel`, so rendering and
tokenizing are the local engine's own code, not a copy.

It lives in engine/ because it is llama.cpp code: nothing outside engine/
imports llama_cpp.
"""

from __future__ import annotations

from pathlib import Path

import llama_cpp

from ...errors import ModelLoadError, NotGGUF
from ...models.ggufmeta import read_metadata, trained_context
from ...prompt.families import Family, detect, get
from ...prompt.render.template import ChatTemplate
from .model import Tokens


class Vocabulary(Tokens):
    """A GGUF loaded with `vocab_only`: a few MB, whatever the model's size.
    `projector` is always None: images go to the local engine only."""

    projector = None

    def __init__(
        self,
        path: Path,
        *,
        n_ctx: int | None = None,
        chat_template: str | None = None,
        family: str | None = None,
    ) -> None:
        if not path.is_file():
            raise ModelLoadError(f"tokenizer file not found: {path}")
        try:
            meta = read_metadata(path)
        except (OSError, NotGGUF) as exc:
            raise ModelLoadError(f"cannot read {path}: {exc}") from None
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        handle = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
        if not handle:
            raise ModelLoadError(f"could not load the vocabulary of {path}")
        self.handle: llama_cpp.llama_model_p | None = handle
        self.path = path
        self.trained_context = trained_context(meta) or 4096
        # The window is the upstream's; until it says, the trained one.
        self.n_ctx = n_ctx or self.trained_context
        self._vocab = llama_cpp.llama_model_get_vocab(handle)
        self.add_bos = bool(llama_cpp.llama_vocab_get_add_bos(self._vocab))
        self.bos_text = self._token_text(llama_cpp.llama_vocab_bos(self._vocab))
        self.eos_text = self._token_text(llama_cpp.llama_vocab_eos(self._vocab))
        source = chat_template or meta.get("tokenizer.chat_template")
        if not isinstance(source, str) or not source:
            self.close()
            raise ModelLoadError(f"{path.name} has no chat template; give one (chat_template)")
        self.template = ChatTemplate(source, bos_token=self.bos_text, eos_token=self.eos_text)
        self.family: Family = get(family) if family else detect(source)

    def close(self) -> None:
        if self.handle:
            llama_cpp.llama_model_free(self.handle)
            self.handle = None
