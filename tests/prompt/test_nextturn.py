"""The next turn's start (prompt/nextturn.py), on real chat templates and
vocabularies: what the engine reads in after an answer is a prefix of the
prompt the next request renders, once the client sends the answer back and
adds a tool's result or the user's words; it holds the answer as the
template writes it (a bare-JSON call as Qwen's <tool_call> block); nothing
where it cannot be known."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

import pytest
from support.paths import FIXTURES

from engy_local.chat import (
    Answer,
    ChatRequest,
    Image,
    Message,
    Text,
    ToolCall,
    ToolResult,
    ToolSpec,
)
from engy_local.prompt.nextturn import next_turn
from engy_local.prompt.prepare import prepare
from engy_local.runtime.loading.vocab import Vocabulary

READ = ToolSpec(
    "Read",
    "Read a file.",
    {"type": "object", "properties": {"file_path": {"type": "string"}}, "required": ["file_path"]},
)
ASKED = (
    Message("system", (Text("You are a coding agent."),)),
    Message("user", (Text("What does setup.py say?"),)),
)
# As a model may write it (engy reads the bare JSON as the call); the
# client sends the object back and the template spaces it its own way.
CALL = ToolCall("call_1", "Read", '{"file_path":"setup.py"}')


def call_answer(text: str = "") -> Answer:
    return Answer(text=text, calls=[CALL], stop_reason="tool_call")


TEXT_ANSWER = Answer(text="It installs the package.", stop_reason="end")


@dataclass(frozen=True)
class Case:
    vocab: str
    template: str
    answer: Answer
    rendered: str  # in the text read in after the prompt ("" for a text answer)
    thinking: bool | None = None


CASES = {
    "qwen2.5, a call": Case(
        "qwen2", "Qwen-Qwen2.5-7B-Instruct.jinja", call_answer(), "<tool_call>"
    ),
    "qwen2.5, text then a call": Case(
        "qwen2", "Qwen-Qwen2.5-7B-Instruct.jinja", call_answer("Reading it."), "<tool_call>"
    ),
    "qwen2.5, text": Case("qwen2", "Qwen-Qwen2.5-7B-Instruct.jinja", TEXT_ANSWER, ""),
    # As the client got it: the client sends back the text max_tokens cut.
    "qwen2.5, text cut short": Case(
        "qwen2", "Qwen-Qwen2.5-7B-Instruct.jinja", Answer("It inst", stop_reason="length"), ""
    ),
    "hermes 3, a call": Case(
        "llama-bpe",
        "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
        call_answer(),
        "<tool_call>",
    ),
    "llama 3.1, a call": Case(
        "llama-bpe", "meta-llama-Llama-3.1-8B-Instruct.jinja", call_answer(), '"name": "Read"'
    ),
    "llama 3.1, text": Case("llama-bpe", "meta-llama-Llama-3.1-8B-Instruct.jinja", TEXT_ANSWER, ""),
    "qwen3, a call": Case("qwen2", "Qwen-Qwen3-0.6B.jinja", call_answer(), "<tool_call>"),
    "qwen3 thinking off, a call": Case(
        "qwen2", "Qwen-Qwen3-0.6B.jinja", call_answer(), "<tool_call>", thinking=False
    ),
}


@pytest.fixture(scope="module", params=list(CASES))
def case(request: pytest.FixtureRequest) -> Iterator[tuple[Case, Vocabulary]]:
    c = CASES[request.param]
    vocab_path = FIXTURES / "vocab" / f"ggml-vocab-{c.vocab}.gguf"
    template = FIXTURES / "chat-templates" / c.template
    if not vocab_path.is_file() or not template.is_file():
        pytest.skip(f"fixture not found: {vocab_path} or {template}")
    v = Vocabulary(vocab_path, chat_template=template.read_text(encoding="utf-8"))
    yield c, v
    v.close()


def answered(request: ChatRequest, answer: Answer, then: Message) -> ChatRequest:
    """The next request: the answer sent back as a message, then `then`."""
    parts = ([Text(answer.text)] if answer.text else []) + list(answer.calls)
    said = Message("assistant", tuple(parts))
    return replace(request, messages=(*request.messages, said, then))


def read(vocab: Vocabulary, tokens: list[int]) -> str:
    return b"".join(vocab.piece(t) for t in tokens).decode("utf-8")


def test_the_next_turn_starts_with_it(case: tuple[Case, Vocabulary]) -> None:
    c, vocab = case
    request = ChatRequest(model="m", messages=ASKED, tools=(READ,), thinking=c.thinking)
    prompt = prepare(vocab, request, 64).tokens
    start = next_turn(vocab, request, c.answer)
    if c.answer.calls:
        then = Message("tool", (ToolResult("call_1", "setup(name='x')", name="Read"),))
    else:
        then = Message("user", (Text("And the tests?"),))
    following = prepare(vocab, answered(request, c.answer, then), 64).tokens
    assert start and following[: len(start)] == start
    # The answer as the template writes it (the marker beside the ones the
    # tools' instructions hold), and the next message's header after it.
    text, asked = read(vocab, start), read(vocab, prompt)
    assert text.count(c.rendered or c.answer.text) > asked.count(c.rendered or c.answer.text)
    assert c.answer.text in text
    assert len(start) > len(prompt) + 3
    if c.thinking is False:
        # Qwen3's prompt ends in an empty think block the rendered answer
        # drops: it does not extend the prompt (the engine reads nothing in).
        assert start[: len(prompt)] != prompt
    else:
        assert start[: len(prompt)] == prompt and len(start) > len(prompt)


@pytest.mark.parametrize(
    ("answer", "messages"),
    [
        (Answer(stop_reason="end"), ASKED),  # nothing said
        (replace(TEXT_ANSWER, thinking="Plan."), ASKED),  # sent back or not: the client's choice
        (TEXT_ANSWER, (Message("user", (Image("image/png", "iVBORw0KGgo="),)),)),  # images
    ],
    ids=["empty", "thought", "images"],
)
def test_nothing_where_it_cannot_be_known(answer: Answer, messages: tuple[Message, ...]) -> None:
    path = FIXTURES / "vocab" / "ggml-vocab-qwen2.gguf"
    template = FIXTURES / "chat-templates" / "Qwen-Qwen2.5-7B-Instruct.jinja"
    if not path.is_file() or not template.is_file():
        pytest.skip(f"fixture not found: {path} or {template}")
    vocab = Vocabulary(path, chat_template=template.read_text(encoding="utf-8"))
    try:
        assert next_turn(vocab, ChatRequest(model="m", messages=messages), answer) == []
    finally:
        vocab.close()
