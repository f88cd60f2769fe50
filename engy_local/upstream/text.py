"""Token ids (or text) from the upstream back to the answer's text, as the
local engine's decoding does: UTF-8 pieces put together, special tokens as
their text, the end token seen as such, stop strings held back until they
can be told apart from text and cut off where they match."""

from __future__ import annotations

import codecs

from ..engine.vocab import Vocabulary
from .wire import Reason


class StopStrings:
    """Holds back text that may be the start of a stop string."""

    def __init__(self, stops: tuple[str, ...]) -> None:
        self.stops = tuple(s for s in stops if s)
        self.pending = ""

    def push(self, text: str) -> tuple[str, bool]:
        """(text safe to release, stopped)."""
        if not self.stops:
            return text, False
        buf = self.pending + text
        found = [i for i in (buf.find(s) for s in self.stops) if i >= 0]
        if found:
            self.pending = ""
            return buf[: min(found)], True
        keep = max(
            (
                k
                for s in self.stops
                for k in range(1, min(len(s), len(buf) + 1))
                if buf.endswith(s[:k])
            ),
            default=0,
        )
        self.pending = buf[len(buf) - keep :]
        return buf[: len(buf) - keep], False

    def flush(self) -> str:
        out, self.pending = self.pending, ""
        return out


class AnswerText:
    def __init__(self, vocab: Vocabulary, stops: tuple[str, ...]) -> None:
        self.vocab = vocab
        self.produced = 0  # token ids seen (the end token counts, as hosted APIs count it)
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._stops = StopStrings(stops)

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
