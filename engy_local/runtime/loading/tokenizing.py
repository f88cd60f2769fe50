"""Tokenizing a prompt that starts like one tokenized before: only the rest.

llama.cpp cuts a text at its special tokens and tokenizes each piece
between them alone (an SPM vocabulary's space prefix goes by whether a
special token came just before, which a cut just after one keeps). So the
tokens of a text are those of its part up to the end of a special token,
then those of the rest read alone, without a BOS. An agent's next turn is
its last prompt and more: reading a 12k-token prompt again costs llama.cpp
18 ms (Qwen2.5's vocabulary) to 38 ms (Gemma 3's) on a 2-core VM, more as
the conversation grows; the rest is the turn's new messages.

Special tokens that take the spaces beside them (lstrip, rstrip) are not
cut after. The first reading from a cut, per vocabulary, is checked against
a whole reading; where they differ the vocabulary is read whole from then on.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

log = logging.getLogger("engy")


def common_prefix(a: Sequence[Any], b: Sequence[Any]) -> int:
    """How long a prefix `a` and `b` share (token lists, or texts)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


KEEP = 8  # prompts remembered, the latest used first
MIN_REUSE = 2048  # characters a reuse must cover to be worth the bookkeeping


@dataclass(frozen=True)
class _Read:
    text: str
    tokens: list[int]
    # (character just after a special token, tokens up to it), in order
    cuts: list[tuple[int, int]]


class PrefixTokenizer:
    """`whole(text, first)`: llama.cpp's tokens of `text` (`first`: as a
    prompt's start, with its BOS). `cut_after(token)`: the text of a special
    token a cut may follow, else None. `bos`: the token a first reading
    begins with that the text may not hold (-1: none)."""

    def __init__(
        self,
        whole: Callable[[str, bool], list[int]],
        cut_after: Callable[[int], str | None],
        bos: int = -1,
        bos_text: str = "",
    ) -> None:
        self._whole = whole
        self._cut_after = cut_after
        self._bos, self._bos_text = bos, bos_text
        self._asked: set[int] = set()  # tokens cut_after was asked about
        self._specials: dict[int, str] = {}  # those it said a cut may follow, and their text
        self._reads: list[_Read] = []
        self._lock = threading.Lock()
        self._checked: bool | None = None  # None: no reading from a cut checked yet

    def tokenize(self, text: str) -> list[int]:
        with self._lock:
            reads = list(self._reads)
        best, cut = None, (0, 0)
        for read in reads if self._checked is not False else ():
            n = common_prefix(read.text, text)
            near = max((c for c in read.cuts if c[0] <= n), default=(0, 0))
            if near[0] > cut[0]:
                best, cut = read, near
        if best is None or cut[0] < MIN_REUSE:
            return self._read_whole(text)
        at, count = cut
        rest = self._whole(text[at:], False)
        tokens = best.tokens[:count] + rest
        if self._checked is None:
            self._checked = tokens == self._whole(text, True)
            if not self._checked:
                log.warning("this vocabulary reads a prompt whole (a cut read it otherwise)")
                return self._read_whole(text)
        head = [c for c in best.cuts if c <= cut]
        self._remember(_Read(text, tokens, head + self._cuts(text, tokens, count, at)))
        return tokens

    def _read_whole(self, text: str) -> list[int]:
        tokens = self._whole(text, True)
        if len(text) >= MIN_REUSE:  # a marker's or a title's tokens are not kept
            self._remember(_Read(text, tokens, self._cuts(text, tokens, 0, 0, first=True)))
        return tokens

    def _cuts(
        self, text: str, tokens: list[int], start: int, pos: int, first: bool = False
    ) -> list[tuple[int, int]]:
        """Where each special token of tokens[start:] ends in text[pos:], in
        order: llama.cpp reads every occurrence of a special token's text
        as that token, so the next occurrence is the next such token."""
        out: list[tuple[int, int]] = []
        if first and tokens and tokens[0] == self._bos:
            # The BOS llama.cpp adds stands for the text's own, if it has one.
            if self._bos_text and text.startswith(self._bos_text):
                pos = len(self._bos_text)
                out.append((pos, 1))
            start = 1
        rest = np.asarray(tokens[start:], dtype=np.int64)
        with self._lock:
            for t in np.unique(rest).tolist():
                if t not in self._asked:
                    self._asked.add(t)
                    if (special := self._cut_after(t)) is not None:
                        self._specials[t] = special
            specials = dict(self._specials)
        at = np.flatnonzero(np.isin(rest, np.fromiter(specials, np.int64, len(specials))))
        for i in (start + at).tolist():
            special = specials[tokens[i]]
            found = text.find(special, pos)
            if found < 0:
                break  # not where it should be: no cuts from here on
            pos = found + len(special)
            out.append((pos, i + 1))
        return out

    def _remember(self, read: _Read) -> None:
        with self._lock:
            others = [r for r in self._reads if r.text != read.text]
            self._reads = [read, *others[: KEEP - 1]]
