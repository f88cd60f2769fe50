"""The /v1/chat/completions protocol module: requests in, neutral types out;
events in, exact chunks out; and the shapes the openai SDK reads."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
from support.images import RED, b64, png

from engy_local import chat, errors
from engy_local.chat import (
    Answer,
    Finished,
    Image,
    JsonOutput,
    Message,
    PromptProgress,
    Sampling,
    Started,
    Text,
    TextDelta,
    Thinking,
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
from engy_local.protocols import chat_completions as cc
from engy_local.protocols.chat_completions import CompletionStream
from engy_local.protocols.images import ImageLimits

CID = "chatcmpl-abc"
CREATED = 1700000000
PNG = png(RED, 4)
DATA_URL = "data:image/png;base64," + b64(PNG)


def body(**fields: Any) -> dict[str, Any]:
    return {"model": "local-model", "messages": [{"role": "user", "content": "hi"}], **fields}


def convo(*messages: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return body(messages=list(messages), **fields)


def user(*parts: chat.Part | str) -> Message:
    return Message("user", tuple(Text(p) if isinstance(p, str) else p for p in parts))


def system(text: str) -> Message:
    return Message("system", (Text(text),))


def assistant(*parts: chat.Part) -> Message:
    return Message("assistant", parts)


def fn(name: str, **function: Any) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, **function}}


def call(call_id: str, name: str, arguments: Any = "{}") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


# ---- requests -> messages ---------------------------------------------------------

MESSAGE_CASES: list[tuple[str, dict[str, Any], tuple[Message, ...]]] = [
    ("one user string", body(), (user("hi"),)),
    (
        "system and developer are system text where they stand",
        convo(
            {"role": "system", "content": "rules"},
            {"role": "user", "content": "a"},
            {"role": "developer", "content": [{"type": "text", "text": "mid"}]},
            {"role": "user", "content": "b"},
        ),
        (system("rules"), user("a"), system("mid"), user("b")),
    ),
    (
        "empty system and user content dropped",
        convo({"role": "system", "content": ""}, {"role": "user", "content": "x"}),
        (user("x"),),
    ),
    (
        "user text parts stay parts, an image where it stands",
        convo(
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": DATA_URL, "detail": "low"}},
                    {"type": "text", "text": "what?"},
                ],
            }
        ),
        (user("look", Image("image/png", b64(PNG)), "what?"),),
    ),
    (
        "an image_url given as the bare URL",
        convo({"role": "user", "content": [{"type": "image_url", "image_url": DATA_URL}]}),
        (user(Image("image/png", b64(PNG))),),
    ),
    (
        "assistant reasoning, text and calls; tool results named by their calls",
        convo(
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": "On it.",
                "reasoning_content": "Two files.",
                "tool_calls": [call("c1", "ls", '{"d": "."}'), call("c2", "cat", {"p": "a"})],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "a b"},
            {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "A"}]},
            {"role": "user", "content": "and?"},
        ),
        (
            user("go"),
            assistant(
                Thinking("Two files."),
                Text("On it."),
                ToolCall("c1", "ls", '{"d": "."}'),
                ToolCall("c2", "cat", '{"p": "a"}'),
            ),
            Message(
                "tool",
                (ToolResult("c1", "a b", name="ls"), ToolResult("c2", "A", name="cat")),
            ),
            user("and?"),
        ),
    ),
    (
        "an assistant turn of calls only, null content, empty arguments",
        convo(
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": None, "tool_calls": [call("c1", "ls", "")]},
            {"role": "tool", "tool_call_id": "c1", "content": "x"},
            {"role": "tool", "tool_call_id": "unknown", "content": "y"},
        ),
        (
            user("go"),
            assistant(ToolCall("c1", "ls", "{}")),
            Message("tool", (ToolResult("c1", "x", name="ls"), ToolResult("unknown", "y"))),
        ),
    ),
    (
        "an empty assistant turn and a refusal part are dropped",
        convo(
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]},
            {"role": "assistant", "content": ""},
            {"role": "user", "content": "b"},
        ),
        (user("a"), user("b")),
    ),
]


@pytest.mark.parametrize(
    ("request_body", "expected"),
    [c[1:] for c in MESSAGE_CASES],
    ids=[c[0] for c in MESSAGE_CASES],
)
def test_messages(request_body: dict[str, Any], expected: tuple[Message, ...]) -> None:
    assert cc.parse_request(request_body).chat.messages == expected


SAMPLING_CASES: list[tuple[str, dict[str, Any], Sampling]] = [
    ("nothing set", body(), Sampling()),
    ("max_tokens", body(max_tokens=10), Sampling(max_tokens=10)),
    (
        "max_completion_tokens wins over max_tokens",
        body(max_tokens=10, max_completion_tokens=20),
        Sampling(max_tokens=20),
    ),
    (
        "temperature, top_p, top_k, seed",
        body(temperature=0, top_p=0.5, top_k=7, seed=42),
        Sampling(temperature=0.0, top_p=0.5, top_k=7, seed=42),
    ),
    ("seed -1 is llama.cpp's random seed", body(seed=-1), Sampling(seed=0xFFFFFFFF)),
    ("stop as a string", body(stop="END"), Sampling(stop=("END",))),
    ("stop as an array, empties dropped", body(stop=["a", "", "b"]), Sampling(stop=("a", "b"))),
]


@pytest.mark.parametrize(
    ("request_body", "expected"),
    [c[1:] for c in SAMPLING_CASES],
    ids=[c[0] for c in SAMPLING_CASES],
)
def test_sampling(request_body: dict[str, Any], expected: Sampling) -> None:
    parsed = cc.parse_request(request_body)
    assert parsed.chat.sampling == expected
    assert parsed.chat.overflow == "shrink"


def test_whole_request() -> None:
    parsed = cc.parse_request(
        convo(
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "hi"},
            model="vendor/local-model",
            tools=[fn("ls", description="list", parameters={"type": "object"})],
            tool_choice="required",
            parallel_tool_calls=False,
            max_completion_tokens=256,
            stream=True,
            stream_options={"include_usage": True},
            provider={"only": ["a"], "gpu": True},
            # ignored on purpose
            frequency_penalty=0.5,
            presence_penalty=0.1,
            logit_bias={"1": 2},
            logprobs=True,
            top_logprobs=2,
            user="u",
            metadata={"k": "v"},
            store=False,
            service_tier="auto",
            n=1,
            something_new=[1, 2],
        )
    )
    assert parsed.stream is True and parsed.include_usage is True
    assert parsed.model == "vendor/local-model"
    assert parsed.chat == chat.ChatRequest(
        model="vendor/local-model",
        messages=(system("sys"), user("hi")),
        tools=(ToolSpec("ls", "list", {"type": "object"}),),
        tool_choice=ToolChoice("any", None, parallel=False),
        sampling=Sampling(max_tokens=256),
        overflow="shrink",
        provider=chat.Provider(only=("a",), gpu=True),
    )


def test_tools() -> None:
    parsed = cc.parse_request(
        body(
            tools=[
                fn("ls"),
                {"type": "custom", "custom": {"name": "patch"}},
                fn("cat", description="Read.", parameters={"type": "object"}, strict=True),
                fn("ls", description="a second ls"),
                {"function": {"name": "grep"}},  # no type: a function
            ]
        )
    )
    assert parsed.chat.tools == (
        ToolSpec("ls", "", {"type": "object", "properties": {}}),
        ToolSpec("cat", "Read.", {"type": "object"}, strict=True),  # a schema held whole
        ToolSpec("grep", "", {"type": "object", "properties": {}}),
    )


CHOICE_CASES: list[tuple[str, Any, ToolChoice]] = [
    ("absent", None, ToolChoice("auto")),
    ("auto", "auto", ToolChoice("auto")),
    ("none", "none", ToolChoice("none")),
    ("required", "required", ToolChoice("any")),
    ("named", {"type": "function", "function": {"name": "cat"}}, ToolChoice("tool", "cat")),
    (
        "allowed_tools required",
        {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": []}},
        ToolChoice("any"),
    ),
    (
        "allowed_tools auto",
        {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": []}},
        ToolChoice("auto"),
    ),
]


@pytest.mark.parametrize(
    ("choice", "expected"), [c[1:] for c in CHOICE_CASES], ids=[c[0] for c in CHOICE_CASES]
)
def test_tool_choice(choice: Any, expected: ToolChoice) -> None:
    request_body = body(tools=[fn("ls"), fn("cat")])
    if choice is not None:
        request_body["tool_choice"] = choice
    assert cc.parse_request(request_body).chat.tool_choice == expected


FORMAT_CASES: list[tuple[str, Any, JsonOutput | None]] = [
    ("absent", None, None),
    ("text", {"type": "text"}, None),
    ("json_object", {"type": "json_object"}, JsonOutput()),
    (
        "json_schema",
        {"type": "json_schema", "json_schema": {"name": "p", "schema": {"type": "array"}}},
        JsonOutput({"type": "array"}, field="response_format.json_schema.schema"),
    ),
    ("json_schema without a schema", {"type": "json_schema", "json_schema": {}}, JsonOutput()),
]


@pytest.mark.parametrize(
    ("fmt", "expected"), [c[1:] for c in FORMAT_CASES], ids=[c[0] for c in FORMAT_CASES]
)
def test_response_format(fmt: Any, expected: JsonOutput | None) -> None:
    assert cc.parse_request(body(response_format=fmt)).chat.json_output == expected


THINKING_CASES: list[tuple[str, dict[str, Any], bool | None]] = [
    ("absent", {}, None),
    ("enable_thinking false", {"chat_template_kwargs": {"enable_thinking": False}}, False),
    ("enable_thinking true", {"chat_template_kwargs": {"enable_thinking": True}}, True),
    ("reasoning_effort none", {"reasoning_effort": "none"}, False),
    ("reasoning_effort high: the model's default", {"reasoning_effort": "high"}, None),
]


@pytest.mark.parametrize(
    ("fields", "expected"), [c[1:] for c in THINKING_CASES], ids=[c[0] for c in THINKING_CASES]
)
def test_thinking(fields: dict[str, Any], expected: bool | None) -> None:
    assert cc.parse_request(body(**fields)).chat.thinking is expected


BAD_CASES: list[tuple[Any, str]] = [
    ({"messages": [{"role": "user", "content": "hi"}]}, "model"),
    ({"model": 3, "messages": []}, "model"),
    ({"model": "m"}, "messages"),
    (body(messages={"role": "user"}), "messages"),
    (body(messages=[]), "messages"),
    (body(messages=[{"role": "system", "content": "only rules"}]), "messages"),
    (body(messages=["hi"]), "messages[0]"),
    (body(messages=[{"content": "hi"}]), "messages[0].role"),
    (body(messages=[{"role": "function", "content": "x"}]), "messages[0].role"),
    (body(messages=[{"role": "user"}]), "messages[0].content"),
    (body(messages=[{"role": "user", "content": 5}]), "messages[0].content"),
    (
        body(messages=[{"role": "user", "content": [{"type": "text", "text": 1}]}]),
        "messages[0].content[0].text",
    ),
    (
        body(messages=[{"role": "user", "content": [{"type": "input_audio"}]}]),
        "messages[0].content[0].type",
    ),
    (
        body(messages=[{"role": "user", "content": [{"type": "image_url"}]}]),
        "messages[0].content[0].image_url",
    ),
    (
        body(
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": "https://x.example/a.png"}}
                    ],
                }
            ]
        ),
        "messages[0].content[0].image_url.url",
    ),
    (
        body(
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,%%"}}
                    ],
                }
            ]
        ),
        "messages[0].content[0].image_url.url",
    ),
    (
        body(
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": "data:text/plain;base64,AA"}}
                    ],
                }
            ]
        ),
        "messages[0].content[0].image_url.url",
    ),
    (body(messages=[{"role": "tool", "content": "x"}]), "messages[0].tool_call_id"),
    (
        body(messages=[{"role": "system", "content": [{"type": "image_url"}]}]),
        "messages[0].content[0]",
    ),
    (
        body(messages=[{"role": "assistant", "tool_calls": [{"id": "c"}]}]),
        "messages[0].tool_calls[0].function",
    ),
    (
        body(messages=[{"role": "assistant", "tool_calls": [call("c", "f", 5)]}]),
        "messages[0].tool_calls[0].function.arguments",
    ),
    (body(messages=[{"role": "assistant", "tool_calls": {}}]), "messages[0].tool_calls"),
    (body(n=2), "n"),
    (body(n=0), "n"),
    (body(stream="yes"), "stream"),
    (body(stream_options=[]), "stream_options"),
    (body(stream_options={"include_usage": "yes"}), "stream_options.include_usage"),
    (body(max_tokens=0), "max_tokens"),
    (body(max_tokens="10"), "max_tokens"),
    (body(max_completion_tokens=2**31), "max_completion_tokens"),
    (body(temperature=3), "temperature"),
    (body(temperature=float("nan")), "temperature"),
    (body(top_p="1"), "top_p"),
    (body(seed=1.5), "seed"),
    (body(stop=5), "stop"),
    (body(stop=["a", 1]), "stop[1]"),
    (body(tools={}), "tools"),
    (body(tools=[5]), "tools[0]"),
    (body(tools=[{"type": "function"}]), "tools[0].function"),
    (body(tools=[fn("ls", parameters=[])]), "tools[0].function.parameters"),
    (body(tools=[{"type": "function", "function": {}}]), "tools[0].function.name"),
    (body(tool_choice="any"), "tool_choice"),
    (body(tool_choice=3), "tool_choice"),
    (body(tool_choice="required"), "tool_choice"),
    (body(tools=[fn("ls")], tool_choice={"type": "tool"}), "tool_choice.type"),
    (
        body(tools=[fn("ls")], tool_choice={"type": "function", "function": {"name": "x"}}),
        "tool_choice.function.name",
    ),
    (
        body(tools=[fn("ls")], tool_choice={"type": "allowed_tools", "allowed_tools": {"mode": 1}}),
        "tool_choice.allowed_tools.mode",
    ),
    (body(parallel_tool_calls="no"), "parallel_tool_calls"),
    (body(response_format="json"), "response_format"),
    (body(response_format={"type": "yaml"}), "response_format.type"),
    (body(response_format={"type": "json_schema"}), "response_format.json_schema"),
    (
        body(response_format={"type": "json_schema", "json_schema": {"schema": True}}),
        "response_format.json_schema.schema",
    ),
    (body(chat_template_kwargs={"enable_thinking": "no"}), "chat_template_kwargs.enable_thinking"),
    (body(reasoning_effort=1), "reasoning_effort"),
    (body(provider={"only": "a"}), "provider.only"),
]


@pytest.mark.parametrize(
    ("request_body", "param"), BAD_CASES, ids=[f"{i}-{c[1]}" for i, c in enumerate(BAD_CASES)]
)
def test_bad_requests_name_the_field(request_body: Any, param: str) -> None:
    with pytest.raises(errors.InvalidRequest) as info:
        cc.parse_request(request_body)
    assert info.value.param == param
    assert info.value.message.startswith(param)


def test_body_must_be_an_object() -> None:
    with pytest.raises(errors.InvalidRequest, match="body: expected an object, got array"):
        cc.parse_request([])


def test_images_over_the_limits_are_413() -> None:
    part = {"type": "image_url", "image_url": {"url": DATA_URL}}
    two = convo({"role": "user", "content": [part, part]})
    with pytest.raises(errors.RequestTooLarge, match="2 images"):
        cc.parse_request(two, images=ImageLimits(max_images=1))
    with pytest.raises(errors.RequestTooLarge, match="--max-image-bytes"):
        cc.parse_request(two, images=ImageLimits(max_image_bytes=10))


def test_jpg_is_jpeg() -> None:
    url = "data:image/jpg;base64," + b64(b"\xff\xd8\xff\xe0" + bytes(16))
    parsed = cc.parse_request(
        convo({"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]})
    )
    [image] = parsed.chat.messages[0].parts
    assert isinstance(image, Image) and image.media_type == "image/jpeg"


# ---- answers -> completions ---------------------------------------------------------

USAGE = Usage(prompt_tokens=20, cached_tokens=5, output_tokens=7, reasoning_tokens=2)
USAGE_JSON = {
    "prompt_tokens": 20,
    "completion_tokens": 7,
    "total_tokens": 27,
    "prompt_tokens_details": {"cached_tokens": 5},
    "completion_tokens_details": {"reasoning_tokens": 2},
}
PARSED = cc.parse_request(body(model="sent/model"))
USAGE_ASKED = cc.parse_request(body(stream=True, stream_options={"include_usage": True}))

RENDER_CASES: list[tuple[str, Answer, dict[str, Any], str]] = [
    (
        "text",
        Answer(text="Hello.", stop_reason="end", usage=USAGE),
        {"role": "assistant", "content": "Hello.", "refusal": None},
        "stop",
    ),
    (
        "cut by max_tokens",
        Answer(text="Hel", stop_reason="length", usage=USAGE),
        {"role": "assistant", "content": "Hel", "refusal": None},
        "length",
    ),
    (
        "a stop sequence",
        Answer(text="A", stop_reason="stop", usage=USAGE),
        {"role": "assistant", "content": "A", "refusal": None},
        "stop",
    ),
    (
        "thinking, whitespace then calls",
        Answer(
            text="\n\n",
            thinking="Hm.",
            calls=[ToolCall("c1", "ls", '{"d": "."}'), ToolCall("c2", "cat", "")],
            stop_reason="tool_call",
            usage=USAGE,
        ),
        {
            "role": "assistant",
            "content": None,
            "refusal": None,
            "reasoning_content": "Hm.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "ls", "arguments": '{"d": "."}'},
                },
                {"id": "c2", "type": "function", "function": {"name": "cat", "arguments": "{}"}},
            ],
        },
        "tool_calls",
    ),
    (
        "text and a call",
        Answer(text="Sure.", calls=[ToolCall("c1", "ls", "{}")], stop_reason="tool_call"),
        {
            "role": "assistant",
            "content": "Sure.",
            "refusal": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
            ],
        },
        "tool_calls",
    ),
]


@pytest.mark.parametrize(
    ("answer", "message", "finish"),
    [c[1:] for c in RENDER_CASES],
    ids=[c[0] for c in RENDER_CASES],
)
def test_render_completion(answer: Answer, message: dict[str, Any], finish: str) -> None:
    got = cc.render_completion(PARSED, answer, completion_id=CID, created=CREATED)
    assert got["choices"] == [
        {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
    ]


def test_render_completion_envelope() -> None:
    answer = Answer(text="Hi", usage=USAGE)
    assert cc.render_completion(PARSED, answer, completion_id=CID, created=CREATED) == {
        "id": CID,
        "object": "chat.completion",
        "created": CREATED,
        "model": "sent/model",
        "system_fingerprint": None,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hi", "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": USAGE_JSON,
    }


# ---- the stream ---------------------------------------------------------------------


def run_stream(events: list[chat.Event], parsed: cc.CompletionsRequest = PARSED) -> list[Any]:
    stream = CompletionStream(parsed, completion_id=CID, created=CREATED)
    out = stream.start()
    for event in events:
        out += stream.process(event)
    return out


def deltas(chunks: list[dict[str, Any]]) -> list[tuple[dict[str, Any], str | None]]:
    """(delta, finish_reason) of each chunk, after checking the envelope."""
    out = []
    for c in chunks:
        assert c["id"] == CID and c["object"] == "chat.completion.chunk"
        assert c["created"] == CREATED and c["model"] == PARSED.model
        [choice] = c["choices"]
        assert choice["index"] == 0 and choice["logprobs"] is None
        out.append((choice["delta"], choice["finish_reason"]))
    return out


ROLE = ({"role": "assistant", "content": None}, None)


def test_stream_text_exact() -> None:
    chunks = run_stream(
        [
            Started(20, 5),
            PromptProgress(10, 20),
            ThinkingDelta("Hm"),
            ThinkingDelta(""),
            TextDelta("Hel"),
            TextDelta(""),
            TextDelta("lo"),
            Finished("end", USAGE),
        ]
    )
    assert all("usage" not in c for c in chunks)  # not asked for
    assert deltas(chunks) == [
        ROLE,
        ({"reasoning_content": "Hm"}, None),
        ({"content": "Hel"}, None),
        ({"content": "lo"}, None),
        ({}, "stop"),
    ]


def test_stream_whitespace_then_parallel_calls() -> None:
    chunks = run_stream(
        [
            TextDelta("\n"),
            TextDelta(" "),
            ToolCallStart(0, "c1", "ls"),
            ToolCallDelta(0, '{"d":'),
            ToolCallDelta(0, ' "."}'),
            ToolCallEnd(0, '{"d": "."}'),
            ToolCallStart(1, "c2", "cat"),
            ToolCallDelta(1, "{"),
            ToolCallEnd(1, "{}"),  # the engine closed it: the rest is a delta
            TextDelta("\n"),
            Finished("tool_call", USAGE),
        ]
    )

    def args(index: int, piece: str) -> tuple[dict[str, Any], None]:
        return {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}, None

    def start(index: int, call_id: str, name: str) -> tuple[dict[str, Any], None]:
        head = {"index": index, "id": call_id, "type": "function"}
        return {"tool_calls": [{**head, "function": {"name": name, "arguments": ""}}]}, None

    assert deltas(chunks) == [
        ROLE,
        start(0, "c1", "ls"),
        args(0, '{"d":'),
        args(0, ' "."}'),
        start(1, "c2", "cat"),
        args(1, "{"),
        args(1, "}"),
        ({}, "tool_calls"),
    ]


def test_stream_text_after_a_call_and_an_empty_answer() -> None:
    after = run_stream(
        [
            ToolCallStart(0, "c", "ls"),
            ToolCallEnd(0, "{}"),
            TextDelta("Done."),
            Finished("end", USAGE),
        ]
    )
    assert [d for d, _ in deltas(after)][-2] == {"content": "Done."}
    empty = run_stream([Finished("length", USAGE)])
    assert deltas(empty) == [ROLE, ({}, "length")]
    spaces = run_stream([TextDelta("  "), Finished("end", USAGE)])
    assert deltas(spaces) == [ROLE, ({"content": "  "}, None), ({}, "stop")]


def test_stream_include_usage() -> None:
    chunks = run_stream([TextDelta("Hi"), Finished("end", USAGE)], USAGE_ASKED)
    *choices, last = chunks
    assert all(c["usage"] is None for c in choices)
    assert last == {
        "id": CID,
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": "local-model",
        "system_fingerprint": None,
        "choices": [],
        "usage": USAGE_JSON,
    }


def test_stream_keepalive_and_failure() -> None:
    stream = CompletionStream(PARSED, completion_id=CID, created=CREATED)
    assert deltas(stream.keepalive()) == [ROLE]  # a keep-alive first starts the stream
    assert stream.keepalive() == []  # then the transport writes a comment
    failed = stream.fail(errors.PromptTooLong(9000, 8192))
    assert failed == [
        {
            "error": {
                "message": "prompt is too long: 9000 tokens > 8192 maximum",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
        }
    ]
    assert stream.process(TextDelta("late")) == []
    assert stream.fail(errors.ServerError("again")) == []


def test_stream_after_finish_is_silent() -> None:
    stream = CompletionStream(PARSED, completion_id=CID, created=CREATED)
    stream.process(Finished("end", USAGE))
    assert stream.process(TextDelta("x")) == []
    assert stream.fail(errors.ServerError("x")) == []


# ---- errors ---------------------------------------------------------------------------

ERROR_CASES: list[tuple[errors.EngyError, int, str, str | None, str | None]] = [
    (errors.InvalidRequest("n: bad", "n"), 400, "invalid_request_error", None, "n"),
    (
        errors.PromptTooLong(9000, 8192),
        400,
        "invalid_request_error",
        "context_length_exceeded",
        "messages",
    ),
    (errors.Unauthorized("bad key"), 401, "authentication_error", "invalid_api_key", None),
    (errors.Forbidden("host not allowed"), 403, "permission_error", "forbidden", None),
    (errors.ModelNotFound("x", ("a",)), 404, "invalid_request_error", "model_not_found", "model"),
    (errors.RequestTooLarge("big"), 413, "invalid_request_error", "request_too_large", None),
    (errors.Busy("full", retry_after=3), 429, "rate_limit_error", "rate_limit_exceeded", None),
    (errors.NoWorker("none"), 503, "server_error", "server_is_overloaded", None),
    (errors.GenerationTimeout("slow"), 504, "server_error", "timeout", None),
    (errors.ServerError("boom"), 500, "server_error", "server_error", None),
]


@pytest.mark.parametrize(
    ("err", "status", "kind", "code", "param"),
    ERROR_CASES,
    ids=[type(c[0]).__name__ for c in ERROR_CASES],
)
def test_error_body(
    err: errors.EngyError, status: int, kind: str, code: str | None, param: str | None
) -> None:
    got_status, got, headers = cc.error_body(err)
    assert got_status == status
    assert got == {"error": {"message": err.message, "type": kind, "param": param, "code": code}}
    assert headers == ({"retry-after": "3"} if status == 429 else {})


def test_model_not_found_lists_what_is_served() -> None:
    err = errors.ModelNotFound("test", ("gemma-3-270m", "qwen3"))
    assert err.message == (
        "model not found: test (served here: gemma-3-270m, qwen3; `engy pull` adds more)"
    )


# ---- the official SDK reads them --------------------------------------------------------


def sdk_client(status: int, content: bytes, headers: dict[str, str]) -> openai.OpenAI:
    def handler(request: Any) -> Any:
        return httpx.Response(status, content=content, headers=headers)

    return openai.OpenAI(
        api_key="x",
        base_url="http://engy.test/v1",
        max_retries=0,
        http_client=httpx.Client(transport=httpx.MockTransport(handler)),
    )


def sse(chunks: list[dict[str, Any]]) -> bytes:
    data = b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks)
    return data + b": keep-alive\n\ndata: [DONE]\n\n"


HI: Any = [{"role": "user", "content": "hi"}]


def test_sdk_non_streaming() -> None:
    answer = Answer(
        text="",
        thinking="Hm.",
        calls=[ToolCall("c1", "ls", '{"d": "."}')],
        stop_reason="tool_call",
        usage=USAGE,
    )
    data = cc.render_completion(PARSED, answer, completion_id=CID, created=CREATED)
    with sdk_client(200, json.dumps(data).encode(), {"content-type": "application/json"}) as client:
        got = client.chat.completions.create(model="local-model", messages=HI)
    [choice] = got.choices
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    [tool_call] = choice.message.tool_calls or []
    assert tool_call.type == "function"
    assert tool_call.id == "c1" and tool_call.function.arguments == '{"d": "."}'
    assert getattr(choice.message, "reasoning_content", None) == "Hm."
    assert got.usage is not None and got.usage.prompt_tokens_details is not None
    assert got.usage.prompt_tokens_details.cached_tokens == 5


def test_sdk_stream_helper_accumulates() -> None:
    chunks = run_stream(
        [
            TextDelta("Let me look."),
            ToolCallStart(0, "c1", "ls"),
            ToolCallDelta(0, '{"d":'),
            ToolCallDelta(0, ' "."}'),
            ToolCallEnd(0, '{"d": "."}'),
            ToolCallStart(1, "c2", "cat"),
            ToolCallDelta(1, "{}"),
            ToolCallEnd(1, "{}"),
            Finished("tool_call", USAGE),
        ],
        USAGE_ASKED,
    )
    client = sdk_client(200, sse(chunks), {"content-type": "text/event-stream"})
    with client, client.chat.completions.stream(model="local-model", messages=HI) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    [choice] = final.choices
    assert choice.message.content == "Let me look."
    assert choice.finish_reason == "tool_calls"
    only_calls = run_stream(
        [ToolCallStart(0, "c1", "ls"), ToolCallEnd(0, "{}"), Finished("tool_call", USAGE)]
    )
    client = sdk_client(200, sse(only_calls), {"content-type": "text/event-stream"})
    with client, client.chat.completions.stream(model="local-model", messages=HI) as stream:
        for _ in stream:
            pass
        # content null, as in the non-streaming body
        assert stream.get_final_completion().choices[0].message.content is None
    calls = choice.message.tool_calls or []
    assert [(c.id, c.function.name, c.function.arguments) for c in calls] == [
        ("c1", "ls", '{"d": "."}'),
        ("c2", "cat", "{}"),
    ]
    assert final.usage is not None and final.usage.completion_tokens == 7


def test_sdk_raw_stream_failure() -> None:
    stream = CompletionStream(PARSED, completion_id=CID, created=CREATED)
    chunks = stream.start() + stream.fail(errors.NoWorker("server is shutting down"))
    client = sdk_client(200, sse(chunks), {"content-type": "text/event-stream"})
    with client, pytest.raises(openai.APIError, match="shutting down"):
        list(client.chat.completions.create(model="local-model", messages=HI, stream=True))


SDK_ERRORS = [
    (errors.InvalidRequest("n: only one", "n"), "BadRequestError"),
    (errors.PromptTooLong(9000, 8192), "BadRequestError"),
    (errors.Unauthorized("bad key"), "AuthenticationError"),
    (errors.ModelNotFound("nope"), "NotFoundError"),
    (errors.Busy("full", retry_after=2), "RateLimitError"),
    (errors.NoWorker("none"), "InternalServerError"),
]


@pytest.mark.parametrize(("err", "exception"), SDK_ERRORS, ids=[e for _, e in SDK_ERRORS])
def test_sdk_errors(err: errors.EngyError, exception: str) -> None:
    status, data, headers = cc.error_body(err)
    headers = {**headers, "content-type": "application/json"}
    client = sdk_client(status, json.dumps(data).encode(), headers)
    with client, pytest.raises(getattr(openai, exception)) as info:
        client.chat.completions.create(model="local-model", messages=HI)
    assert info.value.status_code == status
    assert info.value.code == data["error"]["code"]
    assert info.value.param == data["error"]["param"]
