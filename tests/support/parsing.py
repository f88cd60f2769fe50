"""Feeding output to a parser whole, at every split and a character at a time."""

from __future__ import annotations

import json
import random
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from engy_local.chat import (
    Event,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from engy_local.prompt.families import make_parser
from engy_local.prompt.families.qwen3_coder import Qwen3CoderParser
from engy_local.prompt.parsing.loosecalls import LooseCallParser
from engy_local.prompt.parsing.toolparse import ToolParser

TOOLS = ("Bash", "Read", "Write", "get_goal")


@dataclass
class Result:
    text: str = ""
    thinking: str = ""
    calls: list[tuple[str, str, str]] = field(default_factory=list)  # id, name, arguments


def parse(
    chunks: Iterable[str],
    *,
    thinking: bool = False,
    family: str = "hermes",
    tools: Collection[str] | Mapping[str, Any] = TOOLS,
    loose: bool = False,
) -> Result:
    """`loose`: as under tool_choice auto, where calls written as JSON
    outside the family's syntax are read too (LooseCallParser)."""
    counter = iter(range(1000))

    def new_id() -> str:
        return f"call_{next(counter)}"

    parser: ToolParser = make_parser(family, tools=tools, thinking=thinking, new_id=new_id)
    if loose:  # with Qwen3-Coder's tags read, as prepare.py has it
        parser = LooseCallParser(parser, tools, new_id, Qwen3CoderParser)
    events: list[Event] = []
    for chunk in chunks:
        events += parser.feed(chunk)
    events += parser.finish()
    assert parser.finish() == [] and parser.feed("more") == []
    return fold(events)


def assert_parses(output: str, expected: Result, **kwargs: Any) -> None:
    for chunks in splits(output):
        got = parse(chunks, **kwargs)
        assert got == expected, f"split {[len(c) for c in chunks]}"


def calls(*pairs: tuple[str, str]) -> list[tuple[str, str, str]]:
    return [(f"call_{i}", name, args) for i, (name, args) in enumerate(pairs)]


def random_value(rng: random.Random, depth: int = 0) -> object:
    kind = rng.randrange(6 if depth < 3 else 4)
    if kind == 0:
        return rng.choice([True, False, None])
    if kind == 1:
        return rng.choice([0, -12, 3.25, 1e-7])
    if kind in (2, 3):
        return "".join(rng.choice('ab "\\\n}{<>/\u00e9') for _ in range(rng.randrange(6)))
    if kind == 4:
        return [random_value(rng, depth + 1) for _ in range(rng.randrange(3))]
    return {f"k{i}": random_value(rng, depth + 1) for i in range(rng.randrange(3))}


def fold(events: Iterable[Event]) -> Result:
    """Folds events into a result, checking the stream's own rules."""
    result = Result()
    open_call: int | None = None
    deltas = ""
    for ev in events:
        if isinstance(ev, (TextDelta, ThinkingDelta)):
            assert open_call is None, f"{ev} inside call {open_call}"
            assert ev.text, "empty delta"
            if isinstance(ev, TextDelta):
                result.text += ev.text
            else:
                result.thinking += ev.text
        elif isinstance(ev, ToolCallStart):
            assert open_call is None
            assert ev.index == len(result.calls), "calls are numbered 0, 1, ..."
            open_call, deltas = ev.index, ""
            result.calls.append((ev.id, ev.name, ""))
        elif isinstance(ev, ToolCallDelta):
            assert ev.index == open_call and ev.arguments
            deltas += ev.arguments
        elif isinstance(ev, ToolCallEnd):
            assert ev.index == open_call
            assert ev.arguments == deltas, "deltas must add up to the arguments"
            assert isinstance(json.loads(ev.arguments), dict)
            call_id, name, _ = result.calls[ev.index]
            result.calls[ev.index] = (call_id, name, ev.arguments)
            open_call = None
        else:  # pragma: no cover
            raise AssertionError(f"unexpected event {ev}")
    assert open_call is None, "a call never ended"
    return result


def splits(text: str) -> Iterable[list[str]]:
    """The text whole, at every split point, character by character, and in
    a few random pieces."""
    yield [text]
    for i in range(len(text) + 1):
        yield [text[:i], text[i:]]
    yield list(text)
    rng = random.Random(text)
    for _ in range(10):
        cuts = sorted(rng.sample(range(len(text) + 1), min(8, len(text) + 1)))
        yield [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
