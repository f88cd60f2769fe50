"""From sampled tokens to text, one request at a time: UTF-8 pieces put
back together, stop sequences held back until they can be told apart, and
the reasons a generation ends. No llama.cpp calls: the scheduler samples
and hands the tokens in."""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from typing import Literal

from .model import Model

Reason = Literal["end", "length", "stop"]


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int
    temperature: float = 0.8
    top_p: float = 0.95
    top_k: int = 40
    min_p: float = 0.05
    stop: tuple[str, ...] = ()
    grammar: str | None = None  # GBNF; constrains every sampled token


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


class Output:
    """The text of one generation, token by token."""

    def __init__(self, model: Model, params: SamplingParams) -> None:
        self.model = model
        self.max_tokens = params.max_tokens
        self.produced = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._stops = StopScanner(params.stop)

    def push(self, token: int) -> tuple[str, Reason | None]:
        """The text `token` releases, and why generation ends with it, if
        it does. The end token counts as output, as hosted APIs count it."""
        self.produced += 1
        if self.model.is_end(token):
            return self.flush(), "end"
        text, stopped = self._stops.push(self._decoder.decode(self.model.piece(token)))
        if stopped:
            return text, "stop"
        if self.produced >= self.max_tokens:
            return text + self.flush(), "length"
        return text, None

    def flush(self) -> str:
        return self._decoder.decode(b"", final=True) + self._stops.flush()
