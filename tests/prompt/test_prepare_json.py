"""A response format and a seed through `prepare`, on the real Qwen3
template and vocabulary: the JSON grammar is in force exactly when no tool
can be called, calls or the JSON answer with tools under auto, thinking is
off under either unless asked for (then the JSON follows it), the model is
told the format where the request does not say it, and the seed reaches
the sampling parameters."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from engy_local.chat import ChatRequest, JsonOutput, Message, Sampling, Text, ToolChoice, ToolSpec
from engy_local.prompt.calls.answerformat import format_hint
from engy_local.prompt.prepare import json_answer, prepare, render
from engy_local.runtime.loading.vocab import Vocabulary

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
        # auto: a call (as the lazy grammar's) or the answer in its format
        (ask(json_output=JsonOutput(SCHEMA), tools=(LS,)), "call or json"),
        (ask(tools=(LS,)), "lazy"),
        (ask(json_output=JsonOutput(SCHEMA), tools=(LS,), tool_choice=ToolChoice("any")), "call"),
    ],
    ids=["text", "json", "json, tools off", "json, tools on auto", "tools", "forced call wins"],
)
def test_which_grammar(qwen3: Vocabulary, request_: ChatRequest, grammar: str | None) -> None:
    params = prepare(qwen3, request_, 64).params
    if grammar is None:
        assert params.grammar is None
    elif grammar == "lazy":
        assert params.grammar is not None and params.triggers and "answer ::=" not in params.grammar
    elif grammar == "call or json":
        assert params.grammar is not None and not params.triggers
        assert "answer ::=" in params.grammar and "<tool_call>" in params.grammar
    elif grammar == "json":
        assert params.grammar is not None and "answer ::=" in params.grammar
        assert '\\"a\\"' in params.grammar or request_.json_output == JsonOutput()
    else:
        assert params.grammar is not None and "tool_call" in params.grammar
        assert not params.triggers
    assert json_answer(request_) is (grammar == "json")


def test_no_thinking_under_a_json_grammar_unless_asked(qwen3: Vocabulary) -> None:
    # Qwen3's template writes an empty think block when thinking is off.
    free = render(qwen3, ask(thinking=True))[0].text
    held = render(qwen3, ask(json_output=JsonOutput()))[0].text
    assert "<think>\n\n</think>" not in free
    assert held.endswith("<think>\n\n</think>\n\n")
    with_tools = ask(json_output=JsonOutput(), tools=(LS,))
    assert render(qwen3, with_tools)[0].text.endswith("<think>\n\n</think>\n\n")
    assert "<think>" not in (prepare(qwen3, ask(json_output=JsonOutput()), 64).params.grammar or "")
    # Asked to think, it thinks first: the JSON follows the block it opens.
    for request in (
        ask(thinking=True, json_output=JsonOutput()),
        ask(thinking=True, json_output=JsonOutput(), tools=(LS,)),
    ):
        assert "<think>\n\n</think>" not in render(qwen3, request)[0].text
        grammar = prepare(qwen3, request, 64).params.grammar
        assert grammar is not None and '("<think>" reasoning-0' in grammar


def test_the_model_is_told_the_schema_once(qwen3: Vocabulary) -> None:
    hint = format_hint(JsonOutput(SCHEMA))
    system = Message("system", (Text("Be brief."),))
    told = render(qwen3, ask(json_output=JsonOutput(SCHEMA)))[0].text
    assert hint in told and json.dumps(SCHEMA) in hint
    # After the request's own system text, before the conversation.
    request = ChatRequest(model="m", messages=(system, *HI), json_output=JsonOutput(SCHEMA))
    text = render(qwen3, request)[0].text
    assert text.index("Be brief.") < text.index(hint) < text.index("hi")
    # A request that says the schema itself is not told twice.
    says = Message("user", (Text(f"Fill in {json.dumps(SCHEMA, indent=2)}"),))
    request = ChatRequest(model="m", messages=(says,), json_output=JsonOutput(SCHEMA))
    assert "JSON Schema" not in render(qwen3, request)[0].text
    # Neither without a format, nor when a call is forced.
    assert hint not in render(qwen3, ask())[0].text
    forced = ask(json_output=JsonOutput(SCHEMA), tools=(LS,), tool_choice=ToolChoice("any"))
    assert hint not in render(qwen3, forced)[0].text
    # Any object: told unless a text already says JSON.
    assert format_hint(JsonOutput()) in render(qwen3, ask(json_output=JsonOutput()))[0].text
    says_json = ChatRequest(
        model="m", messages=(Message("user", (Text("Reply in JSON."),)),), json_output=JsonOutput()
    )
    assert format_hint(JsonOutput()) not in render(qwen3, says_json)[0].text


def test_seed_reaches_the_sampling_parameters(qwen3: Vocabulary) -> None:
    assert prepare(qwen3, ask(sampling=Sampling(seed=7)), 64).params.seed == 7
    assert prepare(qwen3, ask(), 64).params.seed is None
