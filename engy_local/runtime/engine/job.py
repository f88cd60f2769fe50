"""A request as the model's thread sees it: its prompt tokens, sampling,
its family's output parser, and where its events go."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...chat import Event
from ...errors import EngyError
from ...grammar.answercheck import AnswerCheck
from ...prompt.parsing.toolparse import ToolParser
from ...prompt.prepare import SamplingParams

Sink = Callable[[Event | EngyError | None], None]


@dataclass
class Job:
    tokens: list[int]
    params: SamplingParams
    parser: ToolParser
    emit: Sink  # thread-safe; None marks the end of the job's events
    # Sends on what `emit` holds back (text between two of the sink's wakes);
    # called before a step that may take long (local.LocalGeneration).
    flush: Callable[[], None] = lambda: None
    single_call: bool = False  # stop after the first complete tool call
    media: tuple[Any, ...] = ()  # vision.Media: the images among `tokens`, in order
    marks: tuple[int, ...] = ()  # where the conversation's messages begin (a checkpoint)
    answer_start: int = 0  # where a re-rendered last answer would begin (prepare.py)
    where: Callable[[int], str] = lambda index: ""  # token index -> the request's part
    scaffold: tuple[int, ...] = ()  # a forced call's fixed start, taken without sampling
    check: AnswerCheck | None = None  # the schemas' parts no grammar held (answercheck.py)
    cancelled: threading.Event = field(default_factory=threading.Event)
    # > 0: a later run of at least this many cached tokens may be read at
    # its new position (shift.py; the request's x-engy-cache-reuse).
    cache_reuse: int = 0
    joined: bool = False  # it waited for another request reading the same prompt
    # Once the answer has ended: the tokens the next turn's prompt starts
    # with (prompt/nextturn.py); called off the model's thread.
    follow: Callable[[], list[int]] | None = None
    # No client: it reads its tokens into the cache and ends (a pre-read).
    read_only: bool = False

    def pre_read(self, tokens: list[int]) -> Job:
        """A job that reads `tokens` (this answer's next turn's start) into
        the cache while the client runs its tools. It samples nothing: its
        parser is this job's, never fed."""
        return Job(
            tokens=tokens,
            params=SamplingParams(max_tokens=1),
            parser=self.parser,
            emit=_nowhere,
            read_only=True,
        )


def _nowhere(event: Event | EngyError | None) -> None:
    pass
