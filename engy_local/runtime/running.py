"""What the scheduler keeps of each request it runs, and what one request
put in a step's batch."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ..prompt.assemble import AnswerAssembler
from ..prompt.detokenize import TokenText
from .job import Job
from .sampling import Sampler
from .slots import Slot
from .speculate import Drafter


@dataclass
class Running:
    job: Job
    slot: Slot
    sampler: Sampler
    text: TokenText
    answer: AnswerAssembler
    cached: int
    media: dict[int, Any]  # start index -> vision.Media
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


@dataclass(frozen=True)
class Fed:
    """What one request put in a step's batch."""

    running: Running
    tokens: list[int]
    reading: bool  # prompt tokens (else the token it sampled last)
