"""`x-engy-cache-reuse: N`: a request may read a run of N or more tokens
from the cache at another position than the cached prompt had it
(runtime/cache/shift.py), as llama-server's --cache-reuse does for all.

A prompt that leaves a cached one early is otherwise read again from there
to its end, however much of the rest the cache holds. Reading a later run
at its new place trades exactness (its keys and values were computed after
other tokens) for a shorter read, so engy does it only where asked: `engy
launch claude` asks, for a new session in another folder. 0 or no header:
off.
"""

from __future__ import annotations

from dataclasses import replace

from ..chat import ChatRequest
from ..errors import InvalidRequest

HEADER = "x-engy-cache-reuse"
# Shorter runs match by chance (a few common tokens) and save nothing.
LEAST = 16


def with_cache_reuse(chat: ChatRequest, value: str | None) -> ChatRequest:
    """`chat` with the header's run length (`value` None or empty: as is)."""
    if value is None or not value.strip():
        return chat
    text = value.strip()
    if not (text.isascii() and text.isdigit()) or (0 < int(text) < LEAST):
        raise InvalidRequest(
            f"header {HEADER}: {value!r} is not 0 (off) or a number of tokens of at least {LEAST}",
            param=HEADER,
        )
    return replace(chat, cache_reuse=int(text))
