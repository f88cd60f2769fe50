"""What the scheduler keeps of each request it runs, and what one request
put in a step's batch."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ...prompt.parsing.assemble import AnswerAssembler
from ...prompt.parsing.detokenize import TokenText
from ..cache.shift import Shift
from ..cache.slots import Slot
from .job import Job
from .sampling import Sampler
from .speculate import Drafter


@dataclass
class Running:
    job: Job
    slot: Slot
    sampler: Sampler
    text: TokenText
    answer: AnswerAssembler
    cached: int
    media: dict[int, Any]  # start index -> vision.Media, or a shift.Shift
    next_token: int | None = None  # sampled, to be decoded next step
    miss: str = ""  # where the prompt left the longest cached prefix (see Started)
    points: tuple[int, ...] = ()  # prompt positions to checkpoint at (prefixes.points)
    drafter: Drafter | None = None  # its own tokens, for drafts (None: no drafting)
    draft: list[int] = field(default_factory=list)  # this step's draft
    pending: list[int] = field(default_factory=list)  # output, still to feed before next_token
    scaffold: bool = False  # its forced call's fixed start was output
    drafted: int = 0
    accepted: int = 0
    t_start: float = field(default_factory=time.monotonic)
    t_prefilled: float = 0.0
    t_first: float = 0.0

    @property
    def prompt(self) -> list[int]:
        return self.job.tokens

    def summary(self, model: str, stop: str) -> str:
        """The request's line in the log, once it ends."""
        end = time.monotonic()
        prefill = len(self.prompt) - self.cached
        prefill_s = max(1e-6, (self.t_prefilled or end) - self.t_start)
        decode_s = max(1e-6, end - (self.t_first or end))
        moved = sum(m.n_tokens for m in self.media.values() if isinstance(m, Shift))
        return (
            f"{model} seq={self.slot.id} prompt={len(self.prompt)} cached={self.cached} "
            f"prefill={prefill / prefill_s:.1f} tok/s "
            f"decode={max(0, self.text.produced - 1) / decode_s:.1f} tok/s "
            f"ttft={(self.t_first or end) - self.t_start:.2f}s tokens={self.text.produced} "
            f"stop={stop}"
            + (f" drafted={self.drafted} accepted={self.accepted}" if self.drafted else "")
            + (f" shifted={moved}" if moved else "")
            + (" joined" if self.job.joined else "")
            + (f" diverged={self.miss!r}" if self.miss else "")
        )


@dataclass(frozen=True)
class Fed:
    """What one request put in a step's batch."""

    running: Running
    tokens: list[int]
    reading: bool  # prompt tokens (else the token it sampled last)
