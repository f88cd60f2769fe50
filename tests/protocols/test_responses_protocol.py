"""The /v1/responses protocol module: requests in, neutral types out; events
in, exact Responses events out; and the shapes checked by the openai SDK."""

from __future__ import annotations

import json
from typing import Any

import pytest
from support.paths import FIXTURES

from engy_local import chat, errors
from engy_local.chat import (
    Answer,
    Finished,
    Message,
    PromptProgress,
    Sampling,
    Started,
    Text,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolChoice,
    ToolResult,
    ToolSpec,
    Usage,
)
from engy_local.protocols import responses
from engy_local.protocols.responses import InputDecoder, ResponseStream

FIXTURES = FIXTURES / "requests"
RID = "resp_abc"
CREATED = 1700000000


def body(**fields: Any) -> dict[str, Any]:
    return {"model": "local-model", "input": "hi", **fields}


def user(text: str) -> Message:
    return Message("user", (Text(text),))


def system(*texts: str) -> Message:
    return Message("system", tuple(Text(t) for t in texts))


def assistant(*parts: chat.Part) -> Message:
    return Message("assistant", parts)


def fn(name: str, **extra: Any) -> dict[str, Any]:
    return {"type": "function", "name": name, **extra}


# ---- requests -> messages ---------------------------------------------------

MESSAGE_CASES: list[tuple[str, dict[str, Any], tuple[Message, ...]]] = [
    ("string input", body(), (user("hi"),)),
    (
        "instructions lead",
        body(instructions="Be brief."),
        (system("Be brief."), user("hi")),
    ),
    (
        "empty instructions dropped",
        body(instructions=""),
        (user("hi"),),
    ),
    (
        "roles, string and part content, developer is system in place",
        body(
            input=[
                {"type": "message", "role": "developer", "content": "rules"},
                {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "a"}],
                },
                {"role": "assistant", "content": [{"type": "output_text", "text": "b"}]},
                {"type": "message", "role": "system", "content": "mid"},
                {"type": "message", "id": "msg_1", "role": "user", "content": "c"},
            ]
        ),
        (system("rules"), user("a"), assistant(Text("b")), system("mid"), user("c")),
    ),
    (
        "several text parts stay parts; images and unknown parts ignored",
        body(
            input=[
                {
                    "type": "message",
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "one"},
                        {"type": "input_image", "image_url": "data:image/png;base64,AA"},
                        {"type": "input_text", "text": "two"},
                        {"type": "something_new"},
                    ],
                }
            ]
        ),
        (Message("user", (Text("one"), Text("two"))),),
    ),
    (
        "reasoning, item references, unknown items and image-only messages ignored",
        body(
            input=[
                {
                    "type": "reasoning",
                    "id": "rs_1",
                    "summary": [],
                    "content": None,
                    "encrypted_content": None,
                },
                {"type": "item_reference", "id": "msg_0"},
                {"type": "web_search_call", "status": "completed"},
                {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_image", "image_url": "http://x/y.png"}],
                },
                {"type": "message", "role": "user", "content": "hello"},
            ]
        ),
        (user("hello"),),
    ),
    (
        "calls join the assistant text; outputs make one tool turn",
        body(
            input=[
                {"type": "message", "role": "user", "content": "go"},
                {"type": "message", "role": "assistant", "content": "running"},
                {"type": "reasoning", "summary": [], "content": None},
                {
                    "type": "function_call",
                    "id": "fc_1",
                    "call_id": "c1",
                    "name": "ls",
                    "arguments": '{"d": "."}',
                    "status": "completed",
                },
                {"type": "function_call", "call_id": "c2", "name": "cat", "arguments": ""},
                {"type": "function_call_output", "id": "fco_1", "call_id": "c1", "output": "a b"},
                {
                    "type": "function_call_output",
                    "call_id": "c2",
                    "output": [
                        {"type": "input_text", "text": "x"},
                        {"type": "input_image", "image_url": "data:,"},
                        {"type": "input_text", "text": "y"},
                    ],
                },
                {"type": "message", "role": "assistant", "content": "done"},
            ]
        ),
        (
            user("go"),
            assistant(
                Text("running"),
                ToolCall("c1", "ls", '{"d": "."}'),
                ToolCall("c2", "cat", "{}"),
            ),
            Message(
                "tool", (ToolResult("c1", "a b", name="ls"), ToolResult("c2", "xy", name="cat"))
            ),
            assistant(Text("done")),
        ),
    ),
    (
        "assistant text after a call starts a new turn",
        body(
            input=[
                {"type": "message", "role": "user", "content": "go"},
                {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"},
                {"type": "message", "role": "assistant", "content": "hm"},
            ]
        ),
        (user("go"), assistant(ToolCall("c1", "ls", "{}")), assistant(Text("hm"))),
    ),
    (
        "custom and namespaced calls map to model-visible names",
        body(
            input=[
                {"type": "message", "role": "user", "content": "patch"},
                {
                    "type": "custom_tool_call",
                    "id": "ctc_1",
                    "call_id": "c1",
                    "name": "apply_patch",
                    "input": "*** Begin Patch\n\u00e9\n",
                    "status": "completed",
                },
                {
                    "type": "custom_tool_call_output",
                    "id": "ctco_1",
                    "call_id": "c1",
                    "output": "ok",
                },
                {
                    "type": "function_call",
                    "call_id": "c2",
                    "name": "spawn_agent",
                    "namespace": "multi_agent_v1",
                    "arguments": '{"m": 1}',
                },
                {"type": "function_call_output", "call_id": "c2", "output": "spawned"},
                {"type": "function_call_output", "call_id": "orphan", "output": "?"},
            ]
        ),
        (
            user("patch"),
            assistant(ToolCall("c1", "apply_patch", '{"input": "*** Begin Patch\\n\u00e9\\n"}')),
            Message("tool", (ToolResult("c1", "ok", name="apply_patch"),)),
            assistant(ToolCall("c2", "multi_agent_v1__spawn_agent", '{"m": 1}')),
            Message(
                "tool",
                (
                    ToolResult("c2", "spawned", name="multi_agent_v1__spawn_agent"),
                    ToolResult("orphan", "?"),
                ),
            ),
        ),
    ),
]


@pytest.mark.parametrize(
    ("request_body", "expected"), [c[1:] for c in MESSAGE_CASES], ids=[c[0] for c in MESSAGE_CASES]
)
def test_messages(request_body: dict[str, Any], expected: tuple[Message, ...]) -> None:
    assert responses.parse_request(request_body).chat.messages == expected


SAMPLING_CASES: list[tuple[str, dict[str, Any], int | None, Sampling, str]] = [
    ("nothing, no cap", body(), None, Sampling(), "shrink"),
    ("cap applies when unset", body(), 4096, Sampling(max_tokens=4096), "shrink"),
    ("smaller ask kept", body(max_output_tokens=100), 4096, Sampling(max_tokens=100), "reject"),
    # The window check is on the ask itself; the engine applies the cap after it.
    ("larger ask kept", body(max_output_tokens=9000), 4096, Sampling(max_tokens=9000), "reject"),
    ("ask without cap", body(max_output_tokens=50), None, Sampling(max_tokens=50), "reject"),
    (
        "temperature and top_p",
        body(temperature=0.2, top_p=1),
        None,
        Sampling(temperature=0.2, top_p=1.0),
        "shrink",
    ),
]


@pytest.mark.parametrize(
    ("request_body", "cap", "sampling", "overflow"),
    [c[1:] for c in SAMPLING_CASES],
    ids=[c[0] for c in SAMPLING_CASES],
)
def test_sampling_and_overflow(
    request_body: dict[str, Any], cap: int | None, sampling: Sampling, overflow: str
) -> None:
    parsed = responses.parse_request(request_body, max_output_cap=cap)
    assert parsed.chat.sampling == sampling
    assert parsed.chat.overflow == overflow


def test_echo_is_the_effective_limit() -> None:
    parsed = responses.parse_request(body(max_output_tokens=9000), max_output_cap=4096)
    assert parsed.echo["max_output_tokens"] == 4096
    assert responses.parse_request(body(), max_output_cap=4096).echo["max_output_tokens"] == 4096


def test_whole_request() -> None:
    parsed = responses.parse_request(
        body(
            stream=True,
            instructions="sys",
            tools=[fn("ls", description="list", parameters={"type": "object"})],
            tool_choice="required",
            parallel_tool_calls=False,
            provider={"only": ["a"], "gpu": True},
            # accepted, no effect:
            store=False,
            previous_response_id="resp_0",
            reasoning={"effort": "high"},
            text={"verbosity": "low"},
            prompt_cache_key="k",
            include=["x"],
            client_metadata={"a": "b"},
            metadata={"k": "v"},
            something_new={"x": 1},
        ),
        max_output_cap=256,
    )
    assert parsed.stream is True
    assert parsed.chat == chat.ChatRequest(
        model="local-model",
        messages=(system("sys"), user("hi")),
        tools=(ToolSpec("ls", "list", {"type": "object"}),),
        tool_choice=ToolChoice("any", None, parallel=False),
        sampling=Sampling(max_tokens=256),
        overflow="shrink",
        provider=chat.Provider(only=("a",), gpu=True),
    )


APPLY_PATCH = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Edit files.",
    "format": {"type": "grammar", "syntax": "lark", "definition": "start: 'x'"},
}
NAMESPACE = {
    "type": "namespace",
    "name": "agents",
    "description": "Sub-agents.",
    "tools": [
        fn("spawn", parameters={"type": "object", "properties": {"m": {}}}),
        {"type": "custom", "name": "note"},
    ],
}
HOSTED = [
    {"type": "web_search", "external_web_access": False},
    {"type": "tool_search", "execution": "client", "parameters": {}},
    {"type": "image_generation", "output_format": "png"},
    {"type": "local_shell"},
    {"type": "file_search", "vector_store_ids": []},
]


def test_tools_mapping() -> None:
    parsed = responses.parse_request(
        body(tools=[fn("ls"), *HOSTED, APPLY_PATCH, NAMESPACE, fn("ls", description="dup")])
    )
    names = [t.name for t in parsed.chat.tools]
    assert names == ["ls", "apply_patch", "agents__spawn", "agents__note"]
    ls, patch, spawn, note = parsed.chat.tools
    assert ls == ToolSpec("ls", "", {"type": "object", "properties": {}})
    assert patch.description == "Edit files."
    assert patch.parameters["required"] == ["input"]
    assert patch.parameters["properties"]["input"]["type"] == "string"
    assert "start: 'x'" in patch.parameters["properties"]["input"]["description"]
    assert note.parameters["properties"]["input"]["type"] == "string"
    assert spawn.parameters == {"type": "object", "properties": {"m": {}}}
    assert parsed.origins == {
        "ls": responses.ToolOrigin("function", "ls"),
        "apply_patch": responses.ToolOrigin("custom", "apply_patch"),
        "agents__spawn": responses.ToolOrigin("function", "spawn", "agents"),
        "agents__note": responses.ToolOrigin("custom", "note", "agents"),
    }
    # The echo lists what the model was offered, as sent.
    assert parsed.echo["tools"] == [fn("ls"), APPLY_PATCH, NAMESPACE]


CHOICE_CASES: list[tuple[str, Any, ToolChoice]] = [
    ("absent", None, ToolChoice("auto")),
    ("auto", "auto", ToolChoice("auto")),
    ("none", "none", ToolChoice("none")),
    ("required", "required", ToolChoice("any")),
    ("function", {"type": "function", "name": "ls"}, ToolChoice("tool", "ls")),
    ("custom", {"type": "custom", "name": "apply_patch"}, ToolChoice("tool", "apply_patch")),
    (
        "namespaced",
        {"type": "function", "name": "spawn", "namespace": "agents"},
        ToolChoice("tool", "agents__spawn"),
    ),
    (
        "allowed_tools required",
        {"type": "allowed_tools", "mode": "required", "tools": [fn("ls")]},
        ToolChoice("any"),
    ),
]


@pytest.mark.parametrize(
    ("choice", "expected"), [c[1:] for c in CHOICE_CASES], ids=[c[0] for c in CHOICE_CASES]
)
def test_tool_choice(choice: Any, expected: ToolChoice) -> None:
    request_body = body(tools=[fn("ls"), APPLY_PATCH, NAMESPACE])
    if choice is not None:
        request_body["tool_choice"] = choice
    assert responses.parse_request(request_body).chat.tool_choice == expected


def test_parallel_tool_calls_false() -> None:
    parsed = responses.parse_request(body(tools=[fn("ls")], parallel_tool_calls=False))
    assert parsed.chat.tool_choice == ToolChoice("auto", parallel=False)


BAD_CASES: list[tuple[Any, str]] = [
    ({"input": "hi"}, "model"),
    ({"model": 3, "input": "hi"}, "model"),
    ({"model": "m"}, "input"),
    (body(input=5), "input"),
    (body(input=[]), "input"),
    (body(input=["hi"]), "input[0]"),
    (body(input=[{"type": "message", "role": "tool", "content": "x"}]), "input[0].role"),
    (body(input=[{"type": "message", "role": "user"}]), "input[0].content"),
    (body(input=[{"type": "message", "role": "user", "content": 1}]), "input[0].content"),
    (
        body(input=[{"role": "user", "content": [{"type": "input_text", "text": 1}]}]),
        "input[0].content[0].text",
    ),
    (body(input=[{"role": "user", "content": ["x"]}]), "input[0].content[0]"),
    (body(input=[{"type": "function_call", "name": "f", "arguments": "{}"}]), "input[0].call_id"),
    (
        body(input=[{"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}]),
        "input[0].arguments",
    ),
    (
        body(input=[{"type": "function_call_output", "call_id": "c", "output": 3}]),
        "input[0].output",
    ),
    (body(input=[{"type": 7}]), "input[0].type"),
    (body(instructions=["x"]), "instructions"),
    (body(max_output_tokens="10"), "max_output_tokens"),
    (body(max_output_tokens=0), "max_output_tokens"),
    (body(stream="yes"), "stream"),
    (body(temperature="hot"), "temperature"),
    (body(temperature=3), "temperature"),
    (body(top_p=True), "top_p"),
    (body(tools={}), "tools"),
    (body(tools=["ls"]), "tools[0]"),
    (body(tools=[{"name": "ls"}]), "tools[0].type"),
    (body(tools=[{"type": "function"}]), "tools[0].name"),
    (body(tools=[fn("ls", parameters="{}")]), "tools[0].parameters"),
    (body(tools=[fn("ls", description=1)]), "tools[0].description"),
    (
        body(tools=[{"type": "namespace", "name": "n", "tools": [{"type": "function"}]}]),
        "tools[0].tools[0].name",
    ),
    (body(tool_choice="sometimes"), "tool_choice"),
    (body(tool_choice=1), "tool_choice"),
    (body(tool_choice="required"), "tool_choice"),
    (body(tools=[fn("ls")], tool_choice={"type": "function", "name": "rm"}), "tool_choice.name"),
    (body(tools=[fn("ls")], tool_choice={"type": "custom", "name": "ls"}), "tool_choice.name"),
    (body(tools=[fn("ls")], tool_choice={"type": "function"}), "tool_choice.name"),
    (body(tools=[fn("ls")], tool_choice={"type": "web_search"}), "tool_choice.type"),
    (body(tools=[fn("ls")], parallel_tool_calls="no"), "parallel_tool_calls"),
    (body(provider={"gpu": "yes"}), "provider.gpu"),
    (body(provider=[]), "provider"),
]


@pytest.mark.parametrize(
    ("request_body", "param"),
    BAD_CASES,
    ids=[p + "-" + str(i) for i, (_, p) in enumerate(BAD_CASES)],
)
def test_bad_requests_name_the_field(request_body: Any, param: str) -> None:
    with pytest.raises(errors.InvalidRequest) as info:
        responses.parse_request(request_body)
    assert info.value.param == param
    assert param in info.value.message


def test_body_must_be_an_object() -> None:
    with pytest.raises(errors.InvalidRequest):
        responses.parse_request([])


# ---- the captured Codex requests ----------------------------------------------


def codex_body(name: str) -> dict[str, Any]:
    path = FIXTURES / name
    if not path.exists():
        pytest.skip(f"{path} is absent")
    captured = json.loads(path.read_text())
    return dict(captured["body"])


def test_codex_first_turn() -> None:
    parsed = responses.parse_request(codex_body("codex-0.171.0-first-turn.json"), 4096)
    names = [t.name for t in parsed.chat.tools]
    assert names[:4] == ["exec_command", "write_stdin", "request_user_input", "view_image"]
    assert "multi_agent_v1__spawn_agent" in names  # namespace flattened
    assert not any("web_search" in n for n in names)
    assert parsed.origins["multi_agent_v1__spawn_agent"] == responses.ToolOrigin(
        "function", "spawn_agent", "multi_agent_v1"
    )
    assert [m.role for m in parsed.chat.messages] == ["system", "system", "user", "user"]
    assert parsed.stream is True
    assert parsed.chat.tool_choice == ToolChoice("auto")
    assert parsed.chat.sampling.max_tokens == 4096
    assert parsed.chat.overflow == "shrink"
    assert parsed.echo["model"] == "some-local-model"


def test_codex_gpt55_slug() -> None:
    parsed = responses.parse_request(codex_body("codex-0.171.0-first-turn-gpt-5.5-slug.json"))
    names = [t.name for t in parsed.chat.tools]
    assert "apply_patch" in names
    assert "tool_search" not in names and "web_search" not in names
    assert parsed.origins["apply_patch"].kind == "custom"
    patch = next(t for t in parsed.chat.tools if t.name == "apply_patch")
    assert "begin_patch" in patch.parameters["properties"]["input"]["description"]
    assert len(parsed.chat.messages[1].parts) == 3  # developer parts kept as parts


# ---- render_response --------------------------------------------------------

USAGE = Usage(prompt_tokens=20, cached_tokens=5, output_tokens=7, reasoning_tokens=2)
USAGE_JSON = {
    "input_tokens": 20,
    "input_tokens_details": {"cached_tokens": 5, "cache_write_tokens": 15},
    "output_tokens": 7,
    "output_tokens_details": {"reasoning_tokens": 2},
    "total_tokens": 27,
}


def parsed_with_tools(**extra: Any) -> responses.ResponsesRequest:
    return responses.parse_request(
        body(tools=[fn("ls"), APPLY_PATCH, NAMESPACE], instructions="sys", **extra)
    )


def message(text: str, index: int = 0, status: str = "completed") -> dict[str, Any]:
    return {
        "id": f"msg_abc_{index}",
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
    }


def fcall(index: int, call_id: str, name: str, arguments: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": f"fc_abc_{index}",
        "type": "function_call",
        "status": "completed",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        **extra,
    }


def ccall(index: int, call_id: str, name: str, text: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": f"ctc_abc_{index}",
        "type": "custom_tool_call",
        "status": "completed",
        "call_id": call_id,
        "name": name,
        "input": text,
        **extra,
    }


RENDER_CASES: list[tuple[str, Answer, str, list[dict[str, Any]]]] = [
    ("text", Answer(text="Paris.", thinking="hmm", usage=USAGE), "completed", [message("Paris.")]),
    ("empty answer keeps a message", Answer(), "completed", [message("")]),
    (
        "text then calls",
        Answer(
            text="Let me look.",
            calls=[
                ToolCall("c1", "ls", '{"d":"."}'),
                ToolCall("c2", "apply_patch", '{"input": "*** Begin\\n"}'),
                ToolCall("c3", "agents__spawn", "{}"),
                ToolCall("c4", "agents__note", '{"input": "n"}'),
                ToolCall("c5", "made_up", "{}"),
            ],
            stop_reason="tool_call",
        ),
        "completed",
        [
            message("Let me look."),
            fcall(1, "c1", "ls", '{"d":"."}'),
            ccall(2, "c2", "apply_patch", "*** Begin\n"),
            fcall(3, "c3", "spawn", "{}", namespace="agents"),
            ccall(4, "c4", "note", "n", namespace="agents"),
            fcall(5, "c5", "made_up", "{}"),
        ],
    ),
    (
        "whitespace before a call is no message",
        Answer(text="\n\n", calls=[ToolCall("c1", "ls", "{}")], stop_reason="tool_call"),
        "completed",
        [fcall(0, "c1", "ls", "{}")],
    ),
    (
        "cut by max tokens",
        Answer(text="Once upon", stop_reason="length"),
        "incomplete",
        [message("Once upon", status="incomplete")],
    ),
]


@pytest.mark.parametrize(
    ("answer", "status", "output"), [c[1:] for c in RENDER_CASES], ids=[c[0] for c in RENDER_CASES]
)
def test_render_response(answer: Answer, status: str, output: list[dict[str, Any]]) -> None:
    out = responses.render_response(
        parsed_with_tools(), answer, response_id=RID, created_at=CREATED
    )
    assert out["status"] == status
    assert out["output"] == output
    assert out["incomplete_details"] == (
        {"reason": "max_output_tokens"} if status == "incomplete" else None
    )
    validate_response(out)


def test_render_response_envelope() -> None:
    parsed = responses.parse_request(
        body(
            model="vendor/m",
            instructions="sys",
            max_output_tokens=64,
            temperature=0.5,
            metadata={"k": "v"},
            tool_choice="auto",
        )
    )
    out = responses.render_response(
        parsed, Answer(text="ok", usage=USAGE), response_id=RID, created_at=CREATED
    )
    assert out == {
        "id": RID,
        "object": "response",
        "created_at": CREATED,
        "status": "completed",
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": "sys",
        "max_output_tokens": 64,
        "model": "vendor/m",
        "output": [message("ok")],
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "store": False,
        "temperature": 0.5,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": None,
        "truncation": "disabled",
        "usage": USAGE_JSON,
        "user": None,
        "metadata": {"k": "v"},
    }


# ---- streaming --------------------------------------------------------------


def run_stream(
    events: list[chat.Event], parsed: responses.ResponsesRequest | None = None
) -> list[dict[str, Any]]:
    stream = ResponseStream(parsed or parsed_with_tools(), response_id=RID, created_at=CREATED)
    out = stream.start()
    for event in events:
        out += stream.process(event)
    assert [e["sequence_number"] for e in out] == list(range(len(out)))
    assert all(
        "error" not in e or e["type"] == "error" for e in out if e["type"] != "response.failed"
    )
    return out


def brief(events: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """(type, output_index, delta-or-text) per event, for sequence tables."""
    rows = []
    for e in events:
        payload = e.get("delta", e.get("text", e.get("arguments", e.get("input"))))
        rows.append((e["type"], e.get("output_index"), payload))
    return rows


FINISHED = Finished("end", USAGE)


def test_stream_text_exact() -> None:
    out = run_stream(
        [
            Started(20, 5),
            PromptProgress(10, 20),
            ThinkingDelta("hmm"),
            TextDelta("Hel"),
            TextDelta("lo"),
            FINISHED,
        ],
        responses.parse_request(body()),
    )
    item = {
        "id": "msg_abc_0",
        "type": "message",
        "status": "in_progress",
        "role": "assistant",
        "content": [],
    }
    part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    where = {"item_id": "msg_abc_0", "output_index": 0, "content_index": 0}
    assert [e["type"] for e in out[:3]] == [
        "response.created",
        "response.in_progress",
        "response.in_progress",
    ]
    assert out[0]["response"]["status"] == "in_progress"
    assert out[0]["response"]["output"] == [] and out[0]["response"]["usage"] is None
    assert out[3:-1] == [
        {
            "type": "response.output_item.added",
            "sequence_number": 3,
            "output_index": 0,
            "item": item,
        },
        {"type": "response.content_part.added", "sequence_number": 4, **where, "part": part},
        {
            "type": "response.output_text.delta",
            "sequence_number": 5,
            **where,
            "delta": "Hel",
            "logprobs": [],
        },
        {
            "type": "response.output_text.delta",
            "sequence_number": 6,
            **where,
            "delta": "lo",
            "logprobs": [],
        },
        {
            "type": "response.output_text.done",
            "sequence_number": 7,
            **where,
            "text": "Hello",
            "logprobs": [],
        },
        {
            "type": "response.content_part.done",
            "sequence_number": 8,
            **where,
            "part": {**part, "text": "Hello"},
        },
        {
            "type": "response.output_item.done",
            "sequence_number": 9,
            "output_index": 0,
            "item": message("Hello"),
        },
    ]
    completed = out[-1]
    assert completed["type"] == "response.completed"
    assert completed["response"]["status"] == "completed"
    assert completed["response"]["output"] == [message("Hello")]
    assert completed["response"]["usage"] == USAGE_JSON
    assert completed["response"] == responses.render_response(
        responses.parse_request(body()),
        Answer(text="Hello", usage=USAGE),
        response_id=RID,
        created_at=CREATED,
    )
    validate_events(out)


def test_stream_text_and_function_call() -> None:
    args = '{"d": "src", "all": true}'
    out = run_stream(
        [
            TextDelta("\n"),
            TextDelta("Looking."),
            ToolCallStart(0, "c1", "ls"),
            ToolCallDelta(0, '{"d": '),
            ToolCallDelta(0, '"src", '),
            ToolCallDelta(0, '"all": true}'),
            ToolCallEnd(0, args),
            Finished("tool_call", USAGE),
        ]
    )
    assert brief(out)[2:] == [
        ("response.output_item.added", 0, None),
        ("response.content_part.added", 0, None),
        ("response.output_text.delta", 0, "\nLooking."),
        ("response.output_text.done", 0, "\nLooking."),
        ("response.content_part.done", 0, None),
        ("response.output_item.done", 0, None),
        ("response.output_item.added", 1, None),
        ("response.function_call_arguments.delta", 1, '{"d": '),
        ("response.function_call_arguments.delta", 1, '"src", '),
        ("response.function_call_arguments.delta", 1, '"all": true}'),
        ("response.function_call_arguments.done", 1, args),
        ("response.output_item.done", 1, None),
        ("response.completed", None, None),
    ]
    added = out[8]["item"]
    assert added == {
        "id": "fc_abc_1",
        "type": "function_call",
        "status": "in_progress",
        "call_id": "c1",
        "name": "ls",
        "arguments": "",
    }
    assert out[12]["name"] == "ls" and out[12]["item_id"] == "fc_abc_1"
    final = [message("\nLooking."), fcall(1, "c1", "ls", args)]
    assert out[13]["item"] == final[1]
    assert out[-1]["response"]["output"] == final
    validate_events(out)


def test_stream_whitespace_then_call_and_namespaced_call() -> None:
    out = run_stream(
        [
            TextDelta(" \n"),
            ToolCallStart(0, "c1", "agents__spawn"),
            ToolCallEnd(0, '{"m": 1}'),
            ToolCallStart(1, "c2", "ls"),
            ToolCallDelta(1, "{"),
            ToolCallEnd(1, "{}"),
            Finished("tool_call", USAGE),
        ]
    )
    assert brief(out)[2:] == [
        ("response.output_item.added", 0, None),
        ("response.function_call_arguments.delta", 0, '{"m": 1}'),  # the rest, from the end
        ("response.function_call_arguments.done", 0, '{"m": 1}'),
        ("response.output_item.done", 0, None),
        ("response.output_item.added", 1, None),
        ("response.function_call_arguments.delta", 1, "{"),
        ("response.function_call_arguments.delta", 1, "}"),
        ("response.function_call_arguments.done", 1, "{}"),
        ("response.output_item.done", 1, None),
        ("response.completed", None, None),
    ]
    assert out[-1]["response"]["output"] == [
        fcall(0, "c1", "spawn", '{"m": 1}', namespace="agents"),
        fcall(1, "c2", "ls", "{}"),
    ]
    validate_events(out)


PATCH = '*** Begin Patch\n*** Add File: caf\u00e9.txt\n+say "hi" \\ \t\U0001f600\n*** End Patch\n'


@pytest.mark.parametrize("ascii_only", [True, False], ids=["escaped", "raw-utf8"])
def test_stream_custom_call_split_everywhere(ascii_only: bool) -> None:
    arguments = json.dumps({"input": PATCH}, ensure_ascii=ascii_only)
    for cut in range(len(arguments) + 1):
        pieces = [p for p in (arguments[:cut], arguments[cut:]) if p]
        out = run_stream(
            [
                ToolCallStart(0, "c1", "apply_patch"),
                *(ToolCallDelta(0, p) for p in pieces),
                ToolCallEnd(0, arguments),
                Finished("tool_call", USAGE),
            ]
        )
        kinds = [e["type"] for e in out]
        deltas = [e["delta"] for e in out if e["type"] == "response.custom_tool_call_input.delta"]
        assert "".join(deltas) == PATCH, cut
        assert all(deltas)
        assert kinds[2] == "response.output_item.added"
        assert kinds[-3:] == [
            "response.custom_tool_call_input.done",
            "response.output_item.done",
            "response.completed",
        ]
        assert out[2]["item"] == {
            "id": "ctc_abc_0",
            "type": "custom_tool_call",
            "status": "in_progress",
            "call_id": "c1",
            "name": "apply_patch",
            "input": "",
        }
        assert out[-3]["input"] == PATCH
        assert out[-2]["item"] == ccall(0, "c1", "apply_patch", PATCH)
        assert out[-1]["response"]["output"] == [ccall(0, "c1", "apply_patch", PATCH)]
    validate_events(out)


def test_stream_custom_call_one_character_at_a_time() -> None:
    arguments = json.dumps({"input": PATCH})
    out = run_stream(
        [
            ToolCallStart(0, "c1", "apply_patch"),
            *(ToolCallDelta(0, c) for c in arguments),
            ToolCallEnd(0, arguments),
            FINISHED,
        ]
    )
    deltas = [e["delta"] for e in out if e["type"] == "response.custom_tool_call_input.delta"]
    assert "".join(deltas) == PATCH


DECODER_CASES = [
    ("plain", {"input": "a"}, "a"),
    ("escapes", {"input": 'q"\\/\b\f\n\r\t\u00e9\U0001f600'}, 'q"\\/\b\f\n\r\t\u00e9\U0001f600'),
    ("key not first, nested decoys", {"a": {"input": "no"}, "b": ["input"], "input": "yes"}, "yes"),
    ("empty", {"input": ""}, ""),
    ("no input key", {"patch": "x"}, ""),
    ("non-string input", {"input": {"x": "y"}}, ""),
]


@pytest.mark.parametrize(
    ("value", "expected"), [c[1:] for c in DECODER_CASES], ids=[c[0] for c in DECODER_CASES]
)
def test_input_decoder_any_two_cuts(value: dict[str, Any], expected: str) -> None:
    for ascii_only in (True, False):
        text = json.dumps(value, ensure_ascii=ascii_only)
        for i in range(len(text) + 1):
            for j in range(i, len(text) + 1):
                decoder = InputDecoder()
                got = decoder.feed(text[:i]) + decoder.feed(text[i:j]) + decoder.feed(text[j:])
                assert got == expected, (text, i, j)


def test_input_decoder_lenient() -> None:
    decoder = InputDecoder()
    # raw newlines (invalid JSON, common from models) pass through; a lone
    # surrogate becomes U+FFFD; the rest after the value is ignored
    got = (
        decoder.feed('{"input": "a\nb\\ud83d')
        + decoder.feed('x\\udc00"')
        + decoder.feed(', "z": 1}')
    )
    assert got == "a\nb\ufffdx\ufffd"


def test_stream_custom_call_with_other_key_uses_the_end() -> None:
    out = run_stream(
        [
            ToolCallStart(0, "c1", "apply_patch"),
            ToolCallDelta(0, '{"patch": "P"}'),
            ToolCallEnd(0, '{"patch": "P"}'),
            FINISHED,
        ]
    )
    assert not any(e["type"] == "response.custom_tool_call_input.delta" for e in out)
    assert out[-3] == {
        "type": "response.custom_tool_call_input.done",
        "sequence_number": 3,
        "item_id": "ctc_abc_0",
        "output_index": 0,
        "input": "P",
    }


def test_stream_max_tokens_is_incomplete() -> None:
    out = run_stream([TextDelta("Once"), TextDelta(" upon"), Finished("length", USAGE)])
    done = out[-2]
    assert done["type"] == "response.output_item.done"
    assert done["item"] == message("Once upon", status="incomplete")
    response = out[-1]["response"]
    assert out[-1]["type"] == "response.completed"
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert response["output"] == [message("Once upon", status="incomplete")]
    validate_events(out)


def test_stream_max_tokens_inside_a_call() -> None:
    out = run_stream(
        [ToolCallStart(0, "c1", "ls"), ToolCallDelta(0, '{"d": "sr'), Finished("length", USAGE)]
    )
    assert brief(out)[-3:] == [
        ("response.function_call_arguments.done", 0, '{"d": "sr'),
        ("response.output_item.done", 0, None),
        ("response.completed", None, None),
    ]
    assert out[-2]["item"]["status"] == "incomplete"
    assert out[-1]["response"]["status"] == "incomplete"
    validate_events(out)


@pytest.mark.parametrize(
    ("name", "closed"),
    [("ls", '{"d": "sr"}'), ("apply_patch", '{"input": "*** Begin"}')],
)
@pytest.mark.parametrize("reason", ["length", "tool_call"])
def test_stream_call_ended_then_cut_matches_render(name: str, closed: str, reason: str) -> None:
    # What the engine sends when max_tokens cuts a call: the parser closes
    # the arguments at finish (ToolCallEnd), then Finished.
    parsed = parsed_with_tools()
    events = [
        ToolCallStart(0, "c1", name),
        ToolCallDelta(0, closed[:-2]),
        ToolCallEnd(0, closed),
        Finished(reason, USAGE),  # type: ignore[arg-type]
    ]
    out = run_stream(events, parsed)
    status = "incomplete" if reason == "length" else "completed"
    assert out[-2]["type"] == "response.output_item.done"
    assert out[-2]["item"]["status"] == status
    answer = Answer(calls=[ToolCall("c1", name, closed)], stop_reason=reason, usage=USAGE)  # type: ignore[arg-type]
    rendered = responses.render_response(parsed, answer, response_id=RID, created_at=CREATED)
    assert out[-1]["response"] == rendered
    validate_events(out)


def test_stream_ended_call_is_done_before_what_follows() -> None:
    out = run_stream(
        [
            ToolCallStart(0, "c1", "ls"),
            ToolCallEnd(0, "{}"),
            ToolCallStart(1, "c2", "ls"),
            ToolCallEnd(1, '{"d": "x"}'),
            FINISHED,
        ]
    )
    assert brief(out)[2:] == [
        ("response.output_item.added", 0, None),
        ("response.function_call_arguments.delta", 0, "{}"),
        ("response.function_call_arguments.done", 0, "{}"),
        ("response.output_item.done", 0, None),
        ("response.output_item.added", 1, None),
        ("response.function_call_arguments.delta", 1, '{"d": "x"}'),
        ("response.function_call_arguments.done", 1, '{"d": "x"}'),
        ("response.output_item.done", 1, None),
        ("response.completed", None, None),
    ]
    stream = ResponseStream(parsed_with_tools(), response_id=RID, created_at=CREATED)
    stream.start()
    stream.process(ToolCallStart(0, "c1", "ls"))
    stream.process(ToolCallEnd(0, "{}"))
    failed = stream.fail(errors.ServerError("gone"))
    assert [e["type"] for e in failed] == [
        "response.function_call_arguments.done",
        "response.output_item.done",
        "error",
        "response.failed",
    ]
    assert failed[1]["item"]["status"] == "completed"


def test_stream_empty_answer_and_text_after_call() -> None:
    empty = run_stream([TextDelta("  "), FINISHED])
    assert brief(empty)[2:] == [
        ("response.output_item.added", 0, None),
        ("response.content_part.added", 0, None),
        ("response.output_text.delta", 0, "  "),
        ("response.output_text.done", 0, "  "),
        ("response.content_part.done", 0, None),
        ("response.output_item.done", 0, None),
        ("response.completed", None, None),
    ]
    nothing = run_stream([FINISHED])
    assert nothing[-1]["response"]["output"] == [message("")]
    after = run_stream(
        [ToolCallStart(0, "c1", "ls"), ToolCallEnd(0, "{}"), TextDelta("ok"), FINISHED]
    )
    assert [(i["type"], i["id"]) for i in after[-1]["response"]["output"]] == [
        ("function_call", "fc_abc_0"),
        ("message", "msg_abc_1"),
    ]
    validate_events(empty + nothing + after)


def test_stream_keepalive_and_failure() -> None:
    stream = ResponseStream(parsed_with_tools(), response_id=RID, created_at=CREATED)
    out = stream.start()
    out += stream.keepalive()
    out += stream.process(TextDelta("Hi"))
    out += stream.keepalive()
    out += stream.fail(errors.ServerError("the engine crashed"))
    assert brief(out) == [
        ("response.created", None, None),
        ("response.in_progress", None, None),
        ("response.in_progress", None, None),
        ("response.output_item.added", 0, None),
        ("response.content_part.added", 0, None),
        ("response.output_text.delta", 0, "Hi"),
        ("response.in_progress", None, None),
        ("error", None, None),
        ("response.failed", None, None),
    ]
    assert out[-2] == {
        "type": "error",
        "sequence_number": 7,
        "code": "server_error",
        "message": "the engine crashed",
        "param": None,
    }
    failed = out[-1]["response"]
    assert failed["status"] == "failed"
    assert failed["error"] == {"code": "server_error", "message": "the engine crashed"}
    assert failed["id"] == RID and failed["usage"] is None
    # terminal: nothing more comes out
    assert stream.process(TextDelta("more")) == []
    assert stream.keepalive() == [] and stream.fail(errors.ServerError("x")) == []
    validate_events(out)


FAIL_CODES = [
    (errors.PromptTooLong(9000, 8192), "context_length_exceeded"),
    (errors.InvalidRequest("bad", "input"), "invalid_prompt"),
    (errors.Busy("full"), "rate_limit_exceeded"),
    (errors.NoWorker("none fits"), "server_is_overloaded"),
    (errors.GenerationTimeout("too slow"), "server_error"),
    (errors.ServerError("boom"), "server_error"),
]


@pytest.mark.parametrize(("err", "code"), FAIL_CODES, ids=[c for _, c in FAIL_CODES])
def test_fail_codes(err: errors.EngyError, code: str) -> None:
    stream = ResponseStream(parsed_with_tools(), response_id=RID, created_at=CREATED)
    out = stream.fail(err)  # before start: created/in_progress come first
    assert [e["type"] for e in out] == [
        "response.created",
        "response.in_progress",
        "error",
        "response.failed",
    ]
    assert out[-1]["response"]["error"] == {"code": code, "message": err.message}
    assert out[-2]["code"] == code


# ---- HTTP errors ------------------------------------------------------------

ERROR_CASES: list[tuple[errors.EngyError, int, str, str | None, str | None]] = [
    (
        errors.InvalidRequest("tools[0].name: field required", "tools[0].name"),
        400,
        "invalid_request_error",
        "tools[0].name",
        None,
    ),
    (
        errors.PromptTooLong(9000, 8192),
        400,
        "invalid_request_error",
        "input",
        "context_length_exceeded",
    ),
    (errors.Unauthorized("bad key"), 401, "authentication_error", None, "invalid_api_key"),
    (errors.ModelNotFound("nope"), 404, "invalid_request_error", "model", "model_not_found"),
    (errors.NotFoundRoute("no route"), 404, "invalid_request_error", None, None),
    (errors.RequestTooLarge("too big"), 413, "invalid_request_error", None, "request_too_large"),
    (
        errors.Busy("queue full", retry_after=3),
        429,
        "rate_limit_error",
        None,
        "rate_limit_exceeded",
    ),
    (errors.NoWorker("no worker"), 503, "server_error", None, "server_is_overloaded"),
    (errors.GenerationTimeout("timed out"), 504, "server_error", None, "timeout"),
    (errors.ServerError("boom"), 500, "server_error", None, "server_error"),
    (errors.EngyError("plain"), 500, "server_error", None, "server_error"),
]


@pytest.mark.parametrize(
    ("err", "status", "kind", "param", "code"),
    ERROR_CASES,
    ids=[type(c[0]).__name__ for c in ERROR_CASES],
)
def test_error_body(
    err: errors.EngyError, status: int, kind: str, param: str | None, code: str | None
) -> None:
    got_status, got_body, headers = responses.error_body(err)
    assert got_status == status == err.status
    assert got_body == {
        "error": {"message": err.message, "type": kind, "param": param, "code": code}
    }
    assert headers == ({"retry-after": "3"} if isinstance(err, errors.Busy) else {})


# ---- the openai SDK reads these shapes ---------------------------------------

openai = pytest.importorskip("openai")


def validate_response(data: dict[str, Any]) -> None:
    from openai.types.responses import Response

    Response.model_validate(data)


def validate_events(events: list[dict[str, Any]]) -> None:
    from openai.types.responses import ResponseStreamEvent
    from pydantic import TypeAdapter

    adapter: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
    for event in events:
        adapter.validate_python(event)


def sse(events: list[dict[str, Any]]) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


def sdk_client(status: int, content: bytes, headers: dict[str, str]) -> Any:
    """An openai client whose transport answers with the given bytes."""
    import openai._base_client as base

    # the HTTP library the SDK is built on: httpx2 (openai 3.x) or httpx
    httpx: Any = vars(base).get("httpx2") or vars(base)["httpx"]

    def handler(request: Any) -> Any:
        return httpx.Response(status, content=content, headers=headers)

    return openai.OpenAI(
        api_key="x",
        base_url="http://engy.test/v1",
        max_retries=0,
        http_client=httpx.Client(transport=httpx.MockTransport(handler)),
    )


def test_sdk_non_streaming() -> None:
    parsed = parsed_with_tools()
    answer = Answer(
        text="Sure.",
        calls=[
            ToolCall("c1", "ls", '{"d": "."}'),
            ToolCall("c2", "apply_patch", '{"input": "P\\n"}'),
        ],
        stop_reason="tool_call",
        usage=USAGE,
    )
    data = responses.render_response(parsed, answer, response_id=RID, created_at=CREATED)
    with sdk_client(200, json.dumps(data).encode(), {"content-type": "application/json"}) as client:
        got = client.responses.create(model="local-model", input="hi")
    assert got.id == RID and got.output_text == "Sure."
    assert [o.type for o in got.output] == ["message", "function_call", "custom_tool_call"]
    assert got.output[2].input == "P\n"
    assert got.usage is not None and got.usage.input_tokens_details.cached_tokens == 5


def test_sdk_stream_helper() -> None:
    out = run_stream(
        [
            TextDelta("Hel"),
            TextDelta("lo"),
            ToolCallStart(0, "c1", "ls"),
            ToolCallDelta(0, '{"d":'),
            ToolCallDelta(0, ' "."}'),
            ToolCallEnd(0, '{"d": "."}'),
            ToolCallStart(1, "c2", "apply_patch"),
            ToolCallDelta(1, '{"input": "a\\'),
            ToolCallDelta(1, 'nb"}'),
            ToolCallEnd(1, '{"input": "a\\nb"}'),
            Finished("tool_call", USAGE),
        ]
    )
    headers = {"content-type": "text/event-stream"}
    client = sdk_client(200, sse(out), headers)
    with client, client.responses.stream(model="local-model", input="hi") as stream:
        seen = [event.type for event in stream]
        final = stream.get_final_response()
    assert seen[0] == "response.created" and seen[-1] == "response.completed"
    assert final.output_text == "Hello"
    assert final.status == "completed"
    assert [o.type for o in final.output] == ["message", "function_call", "custom_tool_call"]
    assert final.output[1].arguments == '{"d": "."}'
    assert final.output[2].input == "a\nb"


def test_sdk_stream_incomplete() -> None:
    out = run_stream([TextDelta("Once"), Finished("length", USAGE)])
    client = sdk_client(200, sse(out), {"content-type": "text/event-stream"})
    with client, client.responses.stream(model="local-model", input="hi") as stream:
        final = stream.get_final_response()
    assert final.status == "incomplete"
    assert final.incomplete_details is not None
    assert final.incomplete_details.reason == "max_output_tokens"


def test_sdk_raw_stream_failure() -> None:
    stream = ResponseStream(parsed_with_tools(), response_id=RID, created_at=CREATED)
    out = stream.start() + stream.fail(errors.PromptTooLong(9000, 8192))
    with sdk_client(200, sse(out), {"content-type": "text/event-stream"}) as client:
        events = list(client.responses.create(model="local-model", input="hi", stream=True))
    assert [e.type for e in events] == [
        "response.created",
        "response.in_progress",
        "error",
        "response.failed",
    ]
    assert events[-1].response.status == "failed"
    # Codex reads this code; the SDK keeps it even though its enum lacks it.
    assert events[-1].response.error.code == "context_length_exceeded"


SDK_ERRORS = [
    (errors.InvalidRequest("model: field required", "model"), "BadRequestError"),
    (errors.PromptTooLong(9000, 8192), "BadRequestError"),
    (errors.Unauthorized("bad key"), "AuthenticationError"),
    (errors.ModelNotFound("nope"), "NotFoundError"),
    (errors.Busy("full", retry_after=2), "RateLimitError"),
    (errors.NoWorker("none"), "InternalServerError"),
]


@pytest.mark.parametrize(("err", "exception"), SDK_ERRORS, ids=[e for _, e in SDK_ERRORS])
def test_sdk_errors(err: errors.EngyError, exception: str) -> None:
    status, data, headers = responses.error_body(err)
    headers = {**headers, "content-type": "application/json"}
    client = sdk_client(status, json.dumps(data).encode(), headers)
    with client, pytest.raises(getattr(openai, exception)) as info:
        client.responses.create(model="local-model", input="hi")
    assert info.value.status_code == status
    assert info.value.code == data["error"]["code"]
    assert info.value.param == data["error"]["param"]
    assert info.value.type == data["error"]["type"]
