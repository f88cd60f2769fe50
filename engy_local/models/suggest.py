"""Which catalog model to pull for real work, for the memory a machine has.

The default model is a starter (0.5B): every part of engy works on it, but
it is no model to code with. The banner and the README name the largest of
a few tool-calling models that fits: its weights plus room for a long
conversation's KV cache and compute buffers, within most of the memory
(the system and other programs keep the rest).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .catalog import Catalog, Entry

# Largest first: the first that fits is named.
LADDER = ("qwen3-coder:30b", "qwen3:14b", "qwen3:8b", "qwen3:4b")
ROOM = 3 << 30  # KV cache at a 32k window, compute buffers, the process itself
SHARE = 0.8  # of the machine's memory that a model may take


@dataclass(frozen=True)
class Suggestion:
    entry: Entry
    need: int  # bytes of memory it takes to run, about


def need(entry: Entry) -> int | None:
    """About how much memory `entry` takes at its default quant."""
    return None if entry.size is None else entry.size + ROOM


def for_real_work(catalog: Catalog, memory: int) -> Suggestion | None:
    """The largest model of LADDER that fits in `memory` bytes; None when
    none does."""
    for model_id in LADDER:
        entry = catalog.entries.get(model_id)
        wanted = need(entry) if entry else None
        if entry is not None and wanted is not None and wanted <= memory * SHARE:
            return Suggestion(entry, wanted)
    return None


def machine_memory() -> int:
    """This machine's RAM in bytes (0 where the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover
        return 0
