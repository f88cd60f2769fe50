"""The default model as a new user meets it: `engy serve` with no MODEL
serves Qwen2.5-Coder-0.5B-Instruct, assembled from its wheels, and its first
answers make sense on every API, plain and streamed; `engy chat` with no
MODEL answers in a terminal."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anthropic
import openai
import pytest
from support.server import EngyServer
from support.terminal import Terminal

DEFAULT = "qwen2.5-coder:0.5b"
QUESTION = "What is the capital of France?"
TIMEOUT = 300


@pytest.fixture(scope="module")
def ant(default_server: EngyServer) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(
        base_url=default_server.url, api_key="x", max_retries=0, timeout=TIMEOUT
    ) as c:
        yield c


@pytest.fixture(scope="module")
def oai(default_server: EngyServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=default_server.url + "/v1", api_key="x", max_retries=0, timeout=TIMEOUT
    ) as c:
        yield c


def test_serve_with_no_model_serves_the_starter_and_says_what_it_is(
    default_server: EngyServer,
) -> None:
    out = default_server.output()
    assert f"engy serving {DEFAULT} (qwen2.5-coder-0.5b-instruct-q4_k_m.gguf)" in out, out
    assert "a 0.5B coding model for trying engy out, not for real work." in out, out
    assert "engy pull qwen3" in out, out  # what to pull for real work here


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_messages_answers_paris(ant: anthropic.Anthropic, stream: bool) -> None:
    kwargs = {
        "model": DEFAULT,
        "max_tokens": 40,
        "messages": [{"role": "user", "content": QUESTION}],
        # engy reads `temperature` (this SDK no longer sends it as a parameter)
        "extra_body": {"temperature": 0},
    }
    if stream:
        with ant.messages.stream(**kwargs) as s:  # type: ignore[arg-type]
            text = "".join(s.text_stream)
    else:
        msg = ant.messages.create(**kwargs)  # type: ignore[arg-type]
        text = "".join(b.text for b in msg.content if b.type == "text")
    assert "Paris" in text, text


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_responses_answers_paris(oai: openai.OpenAI, stream: bool) -> None:
    if stream:
        events = oai.responses.create(
            model=DEFAULT, input=QUESTION, max_output_tokens=40, temperature=0, stream=True
        )
        text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    else:
        r = oai.responses.create(model=DEFAULT, input=QUESTION, max_output_tokens=40, temperature=0)
        text = r.output_text
    assert "Paris" in text, text


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_chat_completions_answers_paris(oai: openai.OpenAI, stream: bool) -> None:
    ask = [{"role": "user", "content": QUESTION}]
    if stream:
        chunks = oai.chat.completions.create(
            model=DEFAULT,
            messages=ask,
            max_tokens=40,
            temperature=0,
            stream=True,  # type: ignore[arg-type]
        )
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    else:
        r = oai.chat.completions.create(
            model=DEFAULT,
            messages=ask,
            max_tokens=40,
            temperature=0,  # type: ignore[arg-type]
        )
        text = r.choices[0].message.content or ""
    assert "Paris" in text, text


def test_engy_chat_with_no_model_answers(
    default_path: Path, engy_home: Path, terminals: list[Terminal]
) -> None:
    term = Terminal(
        "--temperature", "0", "--max-tokens", "60", "--ctx-size", "4096", home=engy_home
    )
    terminals.append(term)
    assert DEFAULT in term.banner, term.banner
    out = term.run(QUESTION)
    assert "Paris" in out, out
