"""Shared helpers of the DeepSeek and Kimi family tests: prompts rendered
the way the engine renders them, a byte-level random walk through a
forced-call grammar, and a forced tool call round trip on a tiny GGUF
through both endpoints (`ForcedRoundTrip`, subclassed per template)."""

from __future__ import annotations

import ctypes
import json
import random
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import anthropic
import httpx
import jsonschema  # type: ignore[import-untyped]
import llama_cpp
import openai
import pytest

from engy_local.chat import (
    ChatRequest,
    Message,
    Text,
    Thinking,
    ToolCall,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolResult,
    ToolSpec,
)
from engy_local.prompt.families import detect, make_parser
from engy_local.prompt.prepare import render
from engy_local.prompt.template import ChatTemplate
from support.grammar import Vocab
from support.paths import CACHE, FIXTURES, need_fixtures
from support.server import EngyServer

TEMPLATES = FIXTURES / "chat-templates"


def template_source(name: str) -> str:
    path = TEMPLATES / name
    if not path.is_file():
        pytest.skip(f"chat template fixture not found: {path}")
    return path.read_text(encoding="utf-8")


def prompt(
    name: str, messages: list[Message], tools: tuple[ToolSpec, ...], thinking: bool | None
) -> str:
    """The prompt the engine renders for a model with this template."""
    source = template_source(name)
    model = SimpleNamespace(
        template=ChatTemplate(source, bos_token="<BOS>", eos_token="<EOS>"),
        family=detect(source),
        path=Path(name),
        projector=None,  # a text-only model
    )
    request = ChatRequest(model="m", messages=tuple(messages), tools=tools, thinking=thinking)
    placed, _ = render(model, request)  # type: ignore[arg-type]
    text = placed.text
    return text


# An agent conversation: reasoning, text and two calls with string, number
# and nested arguments; both results; an answer; the next question.
TOOLS = (
    ToolSpec(
        "Read",
        "Read a file.",
        {
            "type": "object",
            "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["path"],
        },
    ),
    ToolSpec(
        "Write",
        "Write a file.",
        {
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "content": {"type": "string"},
                "options": {"type": "object"},
            },
        },
    ),
)
READ_ARGS = '{"path": "/etc/hosts", "limit": 20}'
WRITE_ARGS = '{"path": "/tmp/a.py", "content": "x = 1\\nprint(x)", "options": {"mode": 420}}'
CONVERSATION = [
    Message("system", (Text("SYSTEM-TEXT"),)),
    Message("user", (Text("USER-ONE"),)),
    Message(
        "assistant",
        (
            Thinking("THINK-ONE"),
            Text("TEXT-ONE"),
            ToolCall("toolu_1", "Read", READ_ARGS),
            ToolCall("toolu_2", "Write", WRITE_ARGS),
        ),
    ),
    Message("tool", (ToolResult("toolu_1", "RESULT-ONE"), ToolResult("toolu_2", "RESULT-TWO"))),
    Message("assistant", (Thinking("THINK-TWO"), Text("TEXT-TWO"))),
    Message("user", (Text("USER-TWO"),)),
]
# The same loop before its answer: the last message is the tool results.
LOOP = CONVERSATION[:4]


# ---- forced-call grammars -------------------------------------------------------------


class ByteVocab(Vocab):
    """The qwen2 vocabulary walked one token at a time, with the tokens of
    `texts` (markers split into byte tokens) besides the single characters."""

    def __init__(self, path: Path, texts: list[str]) -> None:
        super().__init__(path)
        self.pieces: dict[int, bytes] = {t: c.encode() for t, c in self.char_tokens.items()}
        for text in texts:
            for token in self.tokenize(text):
                self.pieces.setdefault(token, self.piece(token))

    def piece(self, token: int) -> bytes:
        buf = ctypes.create_string_buffer(64)
        n = llama_cpp.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, True)
        return buf.raw[:n]

    def walk(self, gbnf: str, rng: random.Random, limit: int = 900) -> str | None:
        """A random text the grammar allows (None if it did not end within
        `limit` tokens); late in a long walk, closing characters are favoured."""
        sampler = self.sampler(gbnf)
        closers = {t for t, c in self.char_tokens.items() if c in '"}]<'}
        out = b""
        try:
            for step in range(limit):
                allowed = self.allowed(sampler, [*self.pieces, self.eos])
                if self.eos in allowed:
                    return out.decode()
                assert allowed, f"dead end after {out!r}"
                closing = [t for t in allowed if t in closers]
                late = step > 150 and rng.random() < 0.7
                token = rng.choice(closing if closing and late else allowed)
                llama_cpp.llama_sampler_accept(sampler, token)
                out += self.pieces[token]
            return None
        finally:
            llama_cpp.llama_sampler_free(sampler)


def byte_vocab(texts: list[str]) -> Iterator[ByteVocab]:
    path = FIXTURES / "vocab" / "ggml-vocab-qwen2.gguf"
    if not path.is_file():
        pytest.skip(f"vocab fixture not found: {path}")
    vocab = ByteVocab(path, texts)
    yield vocab
    llama_cpp.llama_model_free(vocab.model)


def parse_one_call(family: str, text: str, tools: list[ToolSpec]) -> tuple[str, Any]:
    """The one call `text` holds, and nothing else: (name, arguments)."""
    parser = make_parser(family, tools=[t.name for t in tools], thinking=False, new_id=lambda: "x")
    events = parser.feed(text) + parser.finish()
    start, *deltas, end = events
    assert isinstance(start, ToolCallStart) and isinstance(end, ToolCallEnd), (text, events)
    assert all(isinstance(e, ToolCallDelta) for e in deltas), (text, events)
    return start.name, json.loads(end.arguments)


def assert_random_calls_valid(
    vocab: ByteVocab, family: str, tools: list[ToolSpec], seeds: range
) -> None:
    """Whatever the family's forced grammar lets a model write parses into
    one call whose arguments follow the tool's schema."""
    from engy_local.prompt.forced import forced_call_grammar

    gbnf = forced_call_grammar(tools, family)
    schemas = {t.name: t.parameters for t in tools}
    finished = 0
    for seed in seeds:
        text = vocab.walk(gbnf, random.Random(seed))
        if text is None:
            continue
        finished += 1
        name, arguments = parse_one_call(family, text, tools)
        jsonschema.validate(arguments, schemas[name])
    assert finished >= len(seeds) // 2


def captured_tools(name: str) -> list[ToolSpec]:
    from support.grammar import captured_tools as read

    return read(name)


# ---- a forced call end to end -----------------------------------------------------------

TIMEOUT = 600  # this machine is small and shared: generous, never asserted on
ASK = "Read /etc/hostname for me."


class ForcedRoundTrip:
    """A forced call through /v1/messages (anthropic SDK) and /v1/responses
    (openai SDK), streaming and not, on a tiny GGUF with `template`; then a
    follow-up carrying the call and its result. The model's weights are zero,
    so what it writes is whatever the family's grammar allows: the arguments
    must still validate against `schema`."""

    template: ClassVar[str]
    schema: ClassVar[dict[str, Any]]

    @pytest.fixture(scope="class")
    @classmethod
    def server(cls) -> Iterator[EngyServer]:
        need_fixtures()
        from support.ggufs import tiny_gguf_cached

        path = tiny_gguf_cached(CACHE / "ggufs", vocab="qwen2", template=cls.template)
        server = EngyServer(str(path), "--ctx-size", "8192")
        yield server
        server.stop()

    @pytest.fixture(scope="class")
    @classmethod
    def model(cls, server: EngyServer) -> str:
        with httpx.Client(timeout=TIMEOUT) as http:
            name: str = http.get(server.url + "/v1/models").json()["data"][0]["id"]
        return name

    @pytest.fixture(scope="class")
    @classmethod
    def claude(cls, server: EngyServer) -> Iterator[anthropic.Anthropic]:
        with anthropic.Anthropic(
            base_url=server.url, api_key="unused", max_retries=0, timeout=TIMEOUT
        ) as client:
            yield client

    @pytest.fixture(scope="class")
    @classmethod
    def gpt(cls, server: EngyServer) -> Iterator[openai.OpenAI]:
        with openai.OpenAI(
            base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=TIMEOUT
        ) as client:
            yield client

    @classmethod
    def anthropic_tools(cls) -> list[Any]:
        return [{"name": "read_file", "description": "Read a file.", "input_schema": cls.schema}]

    @classmethod
    def function_tools(cls) -> list[Any]:
        return [
            {
                "type": "function",
                "name": "read_file",
                "description": "Read a file.",
                "parameters": cls.schema,
                "strict": False,
            }
        ]

    # /v1/messages

    @pytest.fixture(scope="class")
    @classmethod
    def forced_message(cls, claude: anthropic.Anthropic, model: str) -> Any:
        return claude.messages.create(
            model=model,
            max_tokens=400,
            messages=[{"role": "user", "content": ASK}],
            tools=cls.anthropic_tools(),
            tool_choice={"type": "tool", "name": "read_file"},
        )

    def test_messages_forced_call(self, forced_message: Any) -> None:
        assert forced_message.stop_reason == "tool_use"
        assert [b.type for b in forced_message.content] == ["tool_use"]
        [call] = forced_message.content
        assert call.name == "read_file" and call.id
        jsonschema.validate(call.input, self.schema)

    def test_messages_forced_call_streams(self, claude: anthropic.Anthropic, model: str) -> None:
        with claude.messages.stream(
            model=model,
            max_tokens=400,
            messages=[{"role": "user", "content": ASK}],
            tools=self.anthropic_tools(),
            tool_choice={"type": "tool", "name": "read_file"},
        ) as stream:
            events = list(stream)
            final = stream.get_final_message()
        starts = [e for e in events if e.type == "content_block_start"]
        assert [s.content_block.type for s in starts] == ["tool_use"]
        partial = [
            e.delta.partial_json
            for e in events
            if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
        ]
        assert len(partial) > 1  # the input streams as it is generated
        streamed = json.loads("".join(partial))
        jsonschema.validate(streamed, self.schema)
        assert final.stop_reason == "tool_use"
        [call] = final.content
        assert call.type == "tool_use" and call.input == streamed

    def test_messages_follow_up_renders_and_is_answered(
        self, claude: anthropic.Anthropic, model: str, forced_message: Any
    ) -> None:
        [call] = forced_message.content

        def conversation(result: str) -> list[Any]:
            return [
                {"role": "user", "content": ASK},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_use", "id": call.id, "name": call.name, "input": call.input}
                    ],
                },
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": call.id, "content": result}],
                },
            ]

        tools = self.anthropic_tools()
        answer = claude.messages.create(
            model=model, max_tokens=8, messages=conversation("build-host-7"), tools=tools
        )
        assert answer.role == "assistant" and answer.content
        assert answer.stop_reason in ("end_turn", "max_tokens", "tool_use")
        # The result is in the prompt: a longer result makes a longer prompt.
        short = claude.messages.count_tokens(
            model=model, messages=conversation("build-host-7"), tools=tools
        )
        long = claude.messages.count_tokens(
            model=model, messages=conversation("build-host-7 " * 20), tools=tools
        )
        assert long.input_tokens > short.input_tokens + 20

    # /v1/responses

    @pytest.fixture(scope="class")
    @classmethod
    def forced_response(cls, gpt: openai.OpenAI, model: str) -> Any:
        return gpt.responses.create(
            model=model,
            input=ASK,
            tools=cls.function_tools(),
            tool_choice={"type": "function", "name": "read_file"},
            max_output_tokens=400,
        )

    def test_responses_forced_call(self, forced_response: Any) -> None:
        assert forced_response.status == "completed"
        assert [item.type for item in forced_response.output] == ["function_call"]
        [call] = forced_response.output
        assert call.name == "read_file" and call.call_id
        jsonschema.validate(json.loads(call.arguments), self.schema)

    def test_responses_forced_call_streams(self, gpt: openai.OpenAI, model: str) -> None:
        with gpt.responses.stream(
            model=model,
            input=ASK,
            tools=self.function_tools(),
            tool_choice={"type": "function", "name": "read_file"},
            max_output_tokens=400,
        ) as stream:
            events = list(stream)
            final = stream.get_final_response()
        deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
        [done] = [e for e in events if e.type == "response.function_call_arguments.done"]
        assert len(deltas) > 1  # the arguments stream as they are generated
        assert "".join(deltas) == done.arguments
        jsonschema.validate(json.loads(done.arguments), self.schema)
        [call] = [item for item in final.output if item.type == "function_call"]
        assert call.arguments == done.arguments and final.status == "completed"

    def test_responses_follow_up_renders_and_is_answered(
        self, gpt: openai.OpenAI, model: str, forced_response: Any
    ) -> None:
        [call] = forced_response.output

        def ask(output: str) -> Any:
            return gpt.responses.create(
                model=model,
                input=[
                    {"role": "user", "content": ASK},
                    {
                        "type": "function_call",
                        "call_id": call.call_id,
                        "name": call.name,
                        "arguments": call.arguments,
                    },
                    {"type": "function_call_output", "call_id": call.call_id, "output": output},
                ],
                tools=self.function_tools(),
                max_output_tokens=8,
            )

        answer = ask("build-host-7")
        assert answer.status in ("completed", "incomplete") and answer.output
        assert answer.usage is not None and answer.usage.output_tokens > 0
        longer = ask("build-host-7 " * 20)
        assert longer.usage is not None
        assert longer.usage.input_tokens > answer.usage.input_tokens + 20


# ---- random damaged outputs ---------------------------------------------------------------


def damaged_outputs(good: list[str], pieces: list[str], n: int, seed: int) -> Iterator[str]:
    """`n` outputs: realistic ones spliced together, then damaged a little
    (cut, pieces deleted, markers and junk inserted)."""
    rng = random.Random(seed)
    for _ in range(n):
        output = "".join(rng.choice(good) for _ in range(rng.randint(1, 2)))
        for _ in range(rng.randrange(5)):
            at, kind = rng.randint(0, len(output)), rng.random()
            if kind < 0.35:
                output = output[:at] + output[at + rng.randint(1, 8) :]
            elif kind < 0.8:
                output = output[:at] + rng.choice(pieces) + output[at:]
            else:
                output = output[:at]
        yield output
