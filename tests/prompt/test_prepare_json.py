"""A response format and a seed through `prepare`, on the real Qwen3
template and vocabulary: the JSON grammar is in force exactly when no tool
can be called, thinking is off under it, and the seed reaches the sampling
parameters."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from engy_local.chat import ChatRequest, JsonOutput, Message, Sampling, Text, ToolChoice, ToolSpec
from engy_local.prompt.prepare import json_answer, prepare, render
from engy_local.runtime.vocab import Vocabulary

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
LS = ToolSpec("ls", "List files.", {"type": "object"})
HI = (Message("user", (Text("hi"),)),)


@pytest.fixture(scope="module")
def qwen3(tiny_qwen3: Path) -> Iterator[Vocabulary]:
    vocab = Vocabulary(tiny_qwen3)
    yield vocab
    vocab.close()


def ask(**fields: object) -> ChatRequest:
    return ChatRequest(model="m", messages=HI, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("request_", "grammar"),
    [
        (ask(), None),
        (ask(json_output=JsonOutput(SCHEMA)), "json"),
        (ask(json_output=JsonOutput(), tools=(LS,), tool_choice=ToolChoice("none")), "json"),
        # auto: the model chooses; a call it starts follows the lazy call grammar
        (ask(json_output=JsonOutput(SCHEMA), tools=(LS,)), "lazy"),
        (ask(json_output=JsonOutput(SCHEMA), tools=(LS,), tool_choice=ToolChoice("any")), "call"),
    ],
    ids=["text", "json", "json, tools off", "json, tools on auto", "forced call wins"],
)
def test_which_grammar(qwen3: Vocabulary, request_: ChatRequest, grammar: str | None) -> None:
    params = prepare(qwen3, request_, 64).params
    if grammar is None:
        assert params.grammar is None
    elif grammar == "lazy":
        assert params.grammar is not None and params.triggers and "answer ::=" not in params.grammar
    elif grammar == "json":
        assert params.grammar is not None and "answer ::=" in params.grammar
        assert '\\"a\\"' in params.grammar or request_.json_output == JsonOutput()
    else:
        assert params.grammar is not None and "tool_call" in params.grammar
        assert not params.triggers
    assert json_answer(request_) is (grammar == "json")


def test_no_thinking_under_a_json_grammar(qwen3: Vocabulary) -> None:
    # Qwen3's template writes an empty think block when thinking is off.
    free = render(qwen3, ask(thinking=True))[0].text
    held = render(qwen3, ask(thinking=True, json_output=JsonOutput()))[0].text
    assert "<think>\n\n</think>" not in free
    assert held.endswith("<think>\n\n</think>\n\n")


def test_seed_reaches_the_sampling_parameters(qwen3: Vocabulary) -> None:
    assert prepare(qwen3, ask(sampling=Sampling(seed=7)), 64).params.seed == 7
    assert prepare(qwen3, ask(), 64).params.seed is None
