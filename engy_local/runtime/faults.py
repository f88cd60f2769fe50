"""Faults raised on purpose inside the engine's phases, for tests only.

Each phase the model's thread runs calls `check(phase, job)` where a real
fault could strike (llama.cpp refusing a restore, a copy or a decode that
raises, a save that runs out of memory). Nothing arms a fault but a test
calling `inject`: no option, request field or route reaches this module, and
unarmed a check is one dict lookup.

The phases, and what the engine promises when one fails (scheduler.py):
- admit-self, admit-copy, admit-ram, admit-disk: taking a cached prefix
  from each source; the job is answered with an error, its sequence cleared.
- admit: the rest of admission (before the prefix is taken).
- prompt: a chunk of the job's prompt put in a step; that job fails alone.
- decode: one llama_decode for every sequence in the step: cells past what
  each sequence holds are dropped and the step runs again once; a second
  failure fails the step's jobs.
- sample, verify: drawing a job's token, checking its draft; that job fails.
- save: a state to the RAM cache or the disk tier, a checkpoint: the entry is
  not kept, and the request goes on as if it had never been tried.
- next-turn: reading an ended answer's next turn in (no client waits on it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

PHASES = (
    "admit",
    "admit-self",
    "admit-copy",
    "admit-ram",
    "admit-disk",
    "prompt",
    "decode",
    "sample",
    "verify",
    "save",
    "next-turn",
)


class Injected(RuntimeError):
    """A fault a test asked for."""

    def __init__(self, phase: str) -> None:
        super().__init__(f"fault injected in {phase}")
        self.phase = phase


class _Armed:
    def __init__(self, times: int, when: Callable[[Any], bool] | None) -> None:
        self.times = times
        self.when = when
        self.raised = 0


_armed: dict[str, _Armed] = {}
_lock = threading.Lock()


def check(phase: str, job: Any = None) -> None:
    """Raises `Injected` where a test armed `phase` (for this job)."""
    if not _armed:
        return
    with _lock:
        armed = _armed.get(phase)
        if armed is None or armed.times <= 0:
            return
        if armed.when is not None and not armed.when(job):
            return
        armed.times -= 1
        armed.raised += 1
    raise Injected(phase)


@contextmanager
def inject(
    phase: str, times: int = 1, when: Callable[[Any], bool] | None = None
) -> Iterator[_Armed]:
    """Within the block, the next `times` checks of `phase` (for jobs that
    `when` picks) raise; the yielded object counts how many did."""
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}")
    armed = _Armed(times, when)
    with _lock:
        _armed[phase] = armed
    try:
        yield armed
    finally:
        with _lock:
            _armed.pop(phase, None)
