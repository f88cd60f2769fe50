"""From generated token ids (or text) to the answer's text: UTF-8 pieces put
back together, special tokens as their text, the end token seen as such,
stop strings held back until they can be told apart from text and cut off
where they match, and the output limit. One class for the local engine and
for an upstream that sends ids; no llama.cpp here: the vocabulary is handed
in (the loaded model, a GGUF vocabulary alone, or a Hugging Face one)."""

from __future__ import annotations

import codecs
from typing import Literal, Protocol

# Why the text ends at a token; the answer assembler (answer.py) turns an
# "end" after tool calls into the neutral "tool_call".
TextEnd = Literal["end", "length", "stop"]


class Pieces(Protocol):
    def piece(self, token: int) -> bytes: ...
    def is_end(self, token: int) -> bool: ...


class StopScanner:
    """Holds back text that may be the start of a stop sequence."""

    def __init__(self, stops: tuple[str, ...]) -> None:
        self.stops = tuple(s for s in stops if s)
        self.pending = ""

    def push(self, text: str) -> tuple[str, bool]:
        """Returns (text safe to release, stopped)."""
        if not self.stops:
            return text, False
        buf = self.pending + text
        hits = [(buf.find(s), s) for s in self.stops if s in buf]
        if hits:
            at = min(i for i, _ in hits)
            self.pending = ""
            return buf[:at], True
        keep = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(buf)), 0, -1):
                if buf.endswith(s[:k]):
                    keep = max(keep, k)
                    break
        self.pending = buf[len(buf) - keep :]
        return buf[: len(buf) - keep], False

    def flush(self) -> str:
        out, self.pending = self.pending, ""
        return out


class TokenText:
    """The text of one generation, token by token. `max_tokens`: the
    generation ends with "length" at that many tokens (None: whoever runs
    the tokens enforces it, as an upstream does). `ends`: tokens that end it
    as the vocabulary's end tokens do."""

    def __init__(
        self,
        vocab: Pieces,
        stops: tuple[str, ...],
        max_tokens: int | None = None,
        ends: tuple[int, ...] = (),
    ) -> None:
        self.vocab = vocab
        self.max_tokens = max_tokens
        self.ends = frozenset(ends)
        self.produced = 0  # ids seen (the end token counts, as hosted APIs count it)
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._stops = StopScanner(stops)

    @property
    def left(self) -> int:
        """Tokens it may still produce (a large number without a limit)."""
        return (self.max_tokens - self.produced) if self.max_tokens is not None else 1 << 30

    def push_token(self, token: int) -> tuple[str, TextEnd | None]:
        """The text `token` releases, and why generation ends with it, if
        it does."""
        self.produced += 1
        if self.vocab.is_end(token) or token in self.ends:
            return self.flush(), "end"
        text, end = self.push_text(self._decoder.decode(self.vocab.piece(token)))
        if end is None and self.max_tokens is not None and self.produced >= self.max_tokens:
            return text + self.flush(), "length"
        return text, end

    def push_text(self, text: str) -> tuple[str, TextEnd | None]:
        """Text that came as text (an upstream without ids)."""
        out, stopped = self._stops.push(text)
        return out, "stop" if stopped else None

    def flush(self) -> str:
        return self._decoder.decode(b"", final=True) + self._stops.flush()
