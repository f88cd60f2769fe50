"""The shapes of a family's test data: what each shared test of
tests/families/test_families*.py reads from a `Case`.

A case is one family module's worth of data (DeepSeek's case covers its four
variants); rows name their family when it is not the case's own. Rows that
render or compute something hold a function, called by the test, so that a
missing fixture skips that test and nothing else."""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engy_local.chat import Event, ToolSpec
from engy_local.prompt.parsing.toolparse import ToolParser
from support.parsing import Result


@dataclass(frozen=True)
class Rendered:
    """A prompt (what `text` returns) and what it must show. `in_order`:
    each piece found after the end of the one before; each of `orders`: the
    pieces' first occurrences in this order; `ends` may name several endings."""

    name: str
    text: Callable[[], str]
    equals: str | None = None
    same_as: Callable[[], str] | None = None
    starts: str | None = None
    ends: str | tuple[str, ...] | None = None
    contains: tuple[str, ...] = ()
    absent: tuple[str, ...] = ()
    in_order: tuple[str, ...] = ()
    orders: tuple[tuple[str, ...], ...] = ()
    counts: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class ParseBack:
    """Turns as the template writes them (`turns` cuts them out of a prompt)
    read back by the parser at every split: each turn's calls, arguments
    decoded; `text` each turn's text, when given; `exact` the whole result,
    arguments as written, when given."""

    name: str
    turns: Callable[[], list[str]]
    family: str
    tools: Collection[str]
    calls: tuple[tuple[tuple[str, Any], ...], ...]
    text: str | None = None
    exact: Result | None = None


@dataclass(frozen=True)
class Output:
    """A model's output and what the parser must make of it at every split;
    family and tools default to the case's."""

    name: str
    text: str
    expected: Result
    family: str | None = None
    thinking: bool = False
    tools: Collection[str] | None = None


@dataclass(frozen=True)
class Stream:
    """The exact events for each chunk fed, then those `finish` gives."""

    name: str
    parser: Callable[[], ToolParser]
    steps: Sequence[tuple[str, Sequence[Event]]]
    finish: Sequence[Event] = ()


@dataclass(frozen=True)
class Damage:
    """Random outputs, damaged: `samples` yields each with where to cut it.
    The parser must never fail, read it the same whole, a character at a
    time and cut in two, and start a call in more than `min_started` of
    them. When none starts and `keeps_text` holds, the output is all text
    (`lead_dropped`: but the whitespace it starts with)."""

    family: str
    samples: Callable[[], Iterator[tuple[str, int]]]
    tools: Collection[str]
    min_started: int
    keeps_text: Callable[[str], bool] = lambda output: True
    lead_dropped: bool = False


@dataclass(frozen=True)
class Compiles:
    """Every tool of a captured client request compiles alone, and all of
    them together, in the family's forced-call grammar."""

    family: str
    request: str
    reasoning_each: bool = False
    reasoning_all: bool = False


@dataclass(frozen=True)
class Accepts:
    """Whether the forced-call grammar for `tools` lets a model write
    exactly `text`; `parsed`: the one call it then parses into (name,
    arguments), the parser given the tools' names."""

    family: str
    tools: Sequence[ToolSpec]
    text: str
    ok: bool
    reasoning: bool = False
    parsed: tuple[str, dict[str, Any]] | None = None


@dataclass(frozen=True)
class OwnCalls:
    """Calls cut out of a prompt the real template wrote, each with the
    tools whose forced-call grammar must accept it."""

    family: str
    calls: Callable[[], list[tuple[Sequence[ToolSpec], str]]]


@dataclass(frozen=True)
class RandomCalls:
    """Random walks through the forced-call grammar, one per seed: each
    that finishes (at least `min_finished`) parses into exactly one call
    whose arguments follow its tool's schema. `parse_tools` is what the
    parser is given (names, or schemas by name)."""

    family: str
    tools: Sequence[ToolSpec]
    parse_tools: Collection[str]
    seeds: range
    walk: Callable[[Any, str, random.Random], str | None]
    min_finished: int


@dataclass(frozen=True)
class RoundTrip:
    """A forced call through both endpoints on a tiny GGUF (`template`
    None: the real gemma-3-270m-base), then a follow-up carrying it. The
    arguments must follow `schema`. `answer_is_text`: the follow-up's answer
    is exactly one text block (one message item) and ends the turn or hits
    the limit; else it is some content and may call again."""

    name: str
    template: str | None
    schema: dict[str, Any]
    vocab: str = "qwen2"
    answer: str | None = None
    end_token: str | None = None
    ctx_size: int = 8192
    answer_is_text: bool = False


@dataclass(frozen=True)
class Case:
    """One family module's data for the shared tests. `detected`: template
    file -> the family detected from it; `not_taken`: templates no family
    starting with `prefix` (default: `family`) may be detected from, or
    `no_other`: none outside `detected`; `untooled`: (family, output) pairs
    that are all text when no tools are offered."""

    name: str
    family: str
    tools: Collection[str]
    detected: Mapping[str, str]
    prefix: str | None = None
    not_taken: tuple[str, ...] = ()
    no_other: bool = False
    catalog_prefix: str | None = None
    renders: tuple[Rendered, ...] = ()
    thinking: tuple[Rendered, ...] = ()
    parse_back: tuple[ParseBack, ...] = ()
    outputs: tuple[Output, ...] = ()
    bad: tuple[Output, ...] = ()
    untooled: tuple[tuple[str, str], ...] = ()
    streams: tuple[Stream, ...] = ()
    damage: tuple[Damage, ...] = ()
    compiles: tuple[Compiles, ...] = ()
    accepts: tuple[Accepts, ...] = ()
    own_calls: tuple[OwnCalls, ...] = ()
    random_calls: tuple[RandomCalls, ...] = ()
    round_trips: tuple[RoundTrip, ...] = ()
