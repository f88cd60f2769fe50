"""What the tests of the tag-per-parameter families (test_family_qwen3_coder,
test_family_glm, test_family_minimax_m2) share: tools with realistic schemas,
rendering through `prepare.render`, a random walk through a forced-call
grammar, and the forced-call round trips on a tiny model's server."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anthropic
import jsonschema
import llama_cpp
import openai
import pytest

from engy_local.chat import (
    ChatRequest,
    Message,
    Text,
    TextDelta,
    Thinking,
    ToolCall,
    ToolCallEnd,
    ToolCallStart,
    ToolResult,
    ToolSpec,
)
from engy_local.prompt.families import get, make_parser
from engy_local.prompt.prepare import render
from engy_local.prompt.template import ChatTemplate
from support.grammar import Vocab
from support.paths import FIXTURES

TEMPLATES = FIXTURES / "chat-templates"
# This machine is small and shared: generous timeouts, never timed assertions.
TIMEOUT = 300


def template(name: str) -> ChatTemplate:
    path = TEMPLATES / name
    if not path.is_file():
        pytest.skip(f"chat template fixture not found: {path}")
    return ChatTemplate(path.read_text())


# ---- tools ------------------------------------------------------------------------

WRITE = ToolSpec(
    "Write",
    "Write a file.",
    {
        "type": "object",
        "properties": {"file_path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["file_path", "content"],
        "additionalProperties": False,
    },
)
BASH = ToolSpec(
    "Bash",
    "Run a command.",
    {
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "The command"},
            "timeout": {"type": "number"},
            "options": {
                "type": "object",
                "properties": {
                    "env": {"type": "object", "additionalProperties": {"type": "string"}},
                    "retries": {"type": "array", "items": {"type": "number"}},
                    "verbose": {"type": "boolean"},
                },
            },
            "run_in_background": {"type": "boolean"},
            "mode": {"type": "string", "enum": ["fast", "safe"]},
        },
        "required": ["command"],
        "additionalProperties": False,
    },
)
GET_GOAL = ToolSpec("get_goal", "The current goal.", {"type": "object", "properties": {}})
FREE = ToolSpec("Free", "Takes anything.", {"type": "object"})
TOOLS = (WRITE, BASH, GET_GOAL, FREE)
# What the parser gets: each offered tool's parameters schema, by name.
SCHEMAS = {t.name: t.parameters for t in TOOLS}


def prompt(template_name: str, family: str, messages: tuple[Message, ...], **kwargs: Any) -> str:
    """The prompt `prepare.render` makes with the real template."""
    model = SimpleNamespace(
        path=Path("tiny.gguf"),
        template=template(template_name),
        family=get(family),
        projector=None,  # a text-only model
    )
    request = ChatRequest(model="m", messages=messages, tools=TOOLS, **kwargs)
    placed, _ = render(model, request)  # type: ignore[arg-type]
    return placed.text


def parsed_calls(family: str, output: str, *, thinking: bool = False) -> list[tuple[str, Any]]:
    """The calls in `output`, as (name, arguments decoded)."""
    parser = make_parser(family, tools=SCHEMAS, thinking=thinking, new_id=lambda: "id")
    events = parser.feed(output) + parser.finish()
    names = [e.name for e in events if isinstance(e, ToolCallStart)]
    args = [json.loads(e.arguments) for e in events if isinstance(e, ToolCallEnd)]
    return list(zip(names, args, strict=True))


# ---- grammars -----------------------------------------------------------------------


def random_call(vocab: Vocab, gbnf: str, closers: tuple[str, ...], rng: random.Random) -> str:
    """A random text the grammar allows, one character token at a time. Free
    text would wander for ever, so after a while the walk prefers whatever
    continues one of the `closers` (the value's close tag, `"`, `}`)."""
    sampler = vocab.sampler(gbnf)
    text = ""
    try:
        for _ in range(3000):
            allowed = vocab.allowed(sampler, [*vocab.char_tokens, vocab.eos])
            if vocab.eos in allowed:
                return text
            assert allowed, f"dead end after {text!r}"
            if len(text) > 150 and rng.random() < 0.8:
                score = {t: _closing(text + vocab.char_tokens[t], closers) for t in allowed}
                allowed = [t for t in allowed if score[t] == max(score.values())]
            token = rng.choice(allowed)
            llama_cpp.llama_sampler_accept(sampler, token)
            text += vocab.char_tokens[token]
        raise AssertionError(f"the walk did not finish: {text!r}")
    finally:
        llama_cpp.llama_sampler_free(sampler)


def _closing(text: str, closers: tuple[str, ...]) -> int:
    """How much of a closer `text` ends with."""
    return max(
        (k for c in closers for k in range(len(c), 0, -1) if text.endswith(c[:k])), default=0
    )


def check_random_calls(vocab: Vocab, family: str, closers: tuple[str, ...], seed: int) -> None:
    """Whatever the forced-call grammar lets a model write parses into one
    call whose arguments validate against the tool's schema."""
    from engy_local.prompt.forced import forced_call_grammar

    rng = random.Random(seed)
    text = random_call(vocab, forced_call_grammar(TOOLS, family), closers, rng)
    parser = make_parser(family, tools=SCHEMAS, thinking=False, new_id=lambda: "id")
    events = parser.feed(text) + parser.finish()
    starts = [e for e in events if isinstance(e, ToolCallStart)]
    ends = [e for e in events if isinstance(e, ToolCallEnd)]
    assert len(starts) == len(ends) == 1, text
    assert not [e for e in events if isinstance(e, TextDelta)], text
    jsonschema.validate(json.loads(ends[0].arguments), SCHEMAS[starts[0].name])


# ---- round trips on a tiny model ------------------------------------------------------


def read_file_schema(path: dict[str, Any]) -> dict[str, Any]:
    """A realistic schema: a string (as `path` says), an enum, an integer, a
    nested object with its own required field, an array of strings."""
    return {
        "type": "object",
        "properties": {
            "path": {**path, "description": "Absolute path of the file"},
            "mode": {"type": "string", "enum": ["text", "binary", "lines"]},
            "limit": {"type": "integer", "description": "How many lines at most"},
            "options": {
                "type": "object",
                "properties": {
                    "follow_symlinks": {"type": "boolean"},
                    "encoding": {"type": "string"},
                },
                "required": ["follow_symlinks"],
                "additionalProperties": False,
            },
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["path", "mode", "limit", "options", "tags"],
        "additionalProperties": False,
    }


def anthropic_tools(schema: dict[str, Any]) -> list[Any]:
    return [
        {"name": "read_file", "description": "Read a file.", "input_schema": schema},
        {"name": "list_dir", "description": "List a directory.", "input_schema": LIST_DIR},
    ]


def function_tools(schema: dict[str, Any]) -> list[Any]:
    return [
        {"type": "function", "name": t["name"], "description": t["description"]}
        | {"parameters": t["input_schema"]}
        for t in anthropic_tools(schema)
    ]


LIST_DIR: dict[str, Any] = {
    "type": "object",
    "properties": {"path": {"type": "string"}},
    "required": ["path"],
}
HELLO: list[Any] = [{"role": "user", "content": "Read /etc/hostname for me."}]


def messages_round_trip(
    claude: anthropic.Anthropic, model: str, schema: dict[str, Any], stream: bool
) -> None:
    """A forced call through /v1/messages whose input validates, then a
    follow-up carrying the call and its result, answered."""
    tools = anthropic_tools(schema)
    kwargs: Any = {
        "model": model,
        "max_tokens": 400,
        "messages": HELLO,
        "tools": tools,
        "tool_choice": {"type": "tool", "name": "read_file"},
    }
    if stream:
        with claude.messages.stream(**kwargs) as s:
            events = list(s)
            msg = s.get_final_message()
        partial = [
            e.delta.partial_json
            for e in events
            if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
        ]
        assert len(partial) > 1  # the input streams as it is generated
    else:
        msg = claude.messages.create(**kwargs)
    assert msg.stop_reason == "tool_use", msg
    [call] = [b for b in msg.content if b.type == "tool_use"]
    assert call.name == "read_file"
    jsonschema.validate(call.input, schema)
    if stream:
        assert json.loads("".join(partial)) == call.input

    def follow_up(result: str) -> Any:
        return [
            *HELLO,
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Reading it."},
                    {"type": "tool_use", "id": call.id, "name": call.name, "input": call.input},
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": call.id, "content": result}],
            },
        ]

    kwargs = {"model": model, "max_tokens": 16, "messages": follow_up("host-7"), "tools": tools}
    if stream:
        with claude.messages.stream(**kwargs) as s:
            answer = s.get_final_message()
    else:
        answer = claude.messages.create(**kwargs)
    assert answer.stop_reason in ("end_turn", "max_tokens"), answer
    assert [b.type for b in answer.content] == ["text"]
    # The call and its result are in the prompt the answer was made from.
    count = claude.messages.count_tokens(model=model, messages=follow_up("host-7"), tools=tools)
    used = answer.usage.input_tokens + (answer.usage.cache_read_input_tokens or 0)
    assert used == count.input_tokens
    more = claude.messages.count_tokens(
        model=model, messages=follow_up("host-7 " * 20), tools=tools
    )
    assert more.input_tokens > count.input_tokens + 20


def responses_round_trip(
    gpt: openai.OpenAI, model: str, schema: dict[str, Any], stream: bool
) -> None:
    """A forced call through /v1/responses whose arguments validate, then a
    follow-up carrying the call and its output, answered."""
    tools = function_tools(schema)
    kwargs: Any = {
        "model": model,
        "input": "Read /etc/hostname for me.",
        "tools": tools,
        "tool_choice": {"type": "function", "name": "read_file"},
        "max_output_tokens": 400,
    }
    if stream:
        with gpt.responses.stream(**kwargs) as s:
            events = list(s)
            r = s.get_final_response()
        deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
        [done] = [e for e in events if e.type == "response.function_call_arguments.done"]
        assert len(deltas) > 1 and "".join(deltas) == done.arguments
    else:
        r = gpt.responses.create(**kwargs)
    assert r.status == "completed", r
    [call] = [item for item in r.output if item.type == "function_call"]
    assert call.name == "read_file"
    jsonschema.validate(json.loads(call.arguments), schema)

    def ask(output: str) -> Any:
        follow_up: Any = [
            {"role": "user", "content": "Read /etc/hostname for me."},
            {
                "type": "function_call",
                "call_id": call.call_id,
                "name": call.name,
                "arguments": call.arguments,
            },
            {"type": "function_call_output", "call_id": call.call_id, "output": output},
        ]
        answer_kwargs: Any = {
            "model": model,
            "input": follow_up,
            "tools": tools,
            "max_output_tokens": 16,
        }
        if stream:
            with gpt.responses.stream(**answer_kwargs) as s:
                return s.get_final_response()
        return gpt.responses.create(**answer_kwargs)

    answer = ask("host-7")
    assert answer.status in ("completed", "incomplete")
    assert "message" in [item.type for item in answer.output]
    assert not [item for item in answer.output if item.type == "function_call"]
    longer = ask("host-7 " * 20)
    assert answer.usage is not None and longer.usage is not None
    assert longer.usage.input_tokens > answer.usage.input_tokens + 20


# ---- a conversation to render ---------------------------------------------------------

BASH_ARGS = {
    "command": "ls -la",
    "timeout": 30,
    "options": {"env": {"CI": "1"}, "verbose": False},
    "run_in_background": True,
}
WRITE_ARGS = {"file_path": "/tmp/a.py", "content": "print('<hi>')\n"}


def user(text: str) -> Message:
    return Message("user", (Text(text),))


CONVERSATION = (
    Message("system", (Text("SYSTEM-TEXT"),)),
    user("USER-ONE"),
    Message("assistant", (Thinking("EARLY-THOUGHT"), Text("Hello."))),
    user("USER-TWO"),
    Message(
        "assistant",
        (
            Thinking("I will look."),
            Text("Let me look."),
            ToolCall("toolu_1", "Bash", json.dumps(BASH_ARGS)),
            ToolCall("toolu_2", "Write", json.dumps(WRITE_ARGS)),
        ),
    ),
    Message("tool", (ToolResult("toolu_1", "a.txt b.txt"), ToolResult("toolu_2", "written"))),
)
RENDERED_CALLS = [("Bash", BASH_ARGS), ("Write", WRITE_ARGS)]


# ---- damaged outputs ------------------------------------------------------------------


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(6 if depth < 2 else 4)
    if kind == 0:
        return rng.choice([True, False, None, 0, -12, 3.25])
    if kind in (1, 2, 3):
        return "".join(rng.choice('ab "\\\n}{<>/=\u00e9') for _ in range(rng.randrange(8)))
    if kind == 4:
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(3))]
    return {f"k{i}": _random_value(rng, depth + 1) for i in range(rng.randrange(3))}


def check_random_outputs(
    family: str,
    write: Callable[[str, dict[str, Any]], str],
    pieces: Sequence[str],
    *,
    lead_dropped: bool = False,
) -> None:
    """Plausible outputs (`write` gives one call in the family's syntax),
    then damaged a little: the parser never fails, gives the same result
    however the output is split, and loses nothing when no call started
    (`lead_dropped`: but the whitespace the answer starts with)."""
    from support.parsing import parse

    rng = random.Random(family)
    names = [*SCHEMAS, "nope"]
    keys = ["command", "timeout", "options", "content", "file_path", "x"]
    started = 0
    for _ in range(400):
        parts = []
        for _ in range(rng.randrange(4)):
            if rng.random() < 0.4:
                parts.append(rng.choice(["Sure.", "a < b\n", " ok ", "\n"]))
            else:
                args = {k: _random_value(rng) for k in rng.sample(keys, rng.randrange(3))}
                parts.append(write(rng.choice(names), args))
        output = "".join(parts)
        for _ in range(rng.randrange(4)):
            at, kind = rng.randint(0, len(output)), rng.random()
            if kind < 0.4:
                output = output[:at] + output[at + rng.randint(1, 5) :]
            elif kind < 0.8:
                output = output[:at] + rng.choice(pieces) + output[at:]
            else:
                output = output[:at]
        whole = parse([output], family=family, tools=SCHEMAS)
        started += bool(whole.calls)
        assert parse(list(output), family=family, tools=SCHEMAS) == whole, output
        cut = rng.randint(0, len(output))
        assert parse([output[:cut], output[cut:]], family=family, tools=SCHEMAS) == whole, output
        if not whole.calls and "<think>" not in output:
            assert whole.text == (output.lstrip() if lead_dropped else output), output
    assert started > 100
