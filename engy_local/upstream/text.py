"""Token ids (or text) from the upstream back to the answer's text, as the
local engine's decoding does: UTF-8 pieces put together, special tokens as
their text, the end token seen as such, stop strings held back until they
can be told apart from text and cut off where they match."""

from __future__ import annotations

import codecs
from typing import Protocol

from ..engine.decode import StopScanner
from .wire import Reason


class Pieces(Protocol):
    """A vocabulary: the GGUF one (engine/vocab.py) or a Hugging Face one
    (engine/hfvocab.py)."""

    def piece(self, token: int) -> bytes: ...
    def is_end(self, token: int) -> bool: ...


class AnswerText:
    def __init__(self, vocab: Pieces, stops: tuple[str, ...]) -> None:
        self.vocab = vocab
        self.produced = 0  # token ids seen (the end token counts, as hosted APIs count it)
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._stops = StopScanner(stops)

    def push_token(self, token: int) -> tuple[str, Reason | None]:
        self.produced += 1
        if self.vocab.is_end(token):
            return self.flush(), "end"
        return self.push_text(self._decoder.decode(self.vocab.piece(token)))

    def push_text(self, text: str) -> tuple[str, Reason | None]:
        out, stopped = self._stops.push(text)
        return out, "stop" if stopped else None

    def flush(self) -> str:
        return self._decoder.decode(b"", final=True) + self._stops.flush()
