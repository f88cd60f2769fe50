"""Hardening, against a real `engy serve` on a tiny GGUF: DNS rebinding and
foreign origins are 403 on every route, CORS answers allowed origins only,
keys and /metrics, bad input is a 400 in the protocol's format (never a
500), and a forced call cut by the token limit is a call."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from support.server import EngyServer
from typer.testing import CliRunner

from engy_local.chat import TextDelta, ToolCallEnd, ToolCallStart
from engy_local.commands.cli import app
from engy_local.prompt.families import make_parser
from engy_local.prompt.parsing.toolparse import ForcedCallParser
from engy_local.server.guard import AccessPolicy, key_matches

KEY = "sk-local-test"
AUTH = {"x-api-key": KEY}
TIMEOUT = 300
# Every route, by method (HEAD / and /api/hello need no key).
ROUTES = [
    ("POST", "/v1/messages"),
    ("POST", "/v1/messages/count_tokens"),
    ("POST", "/v1/responses"),
    ("POST", "/v1/responses/input_tokens"),
    ("POST", "/v1/chat/completions"),
    ("GET", "/v1/models"),
    ("GET", "/metrics"),
    ("HEAD", "/"),
    ("GET", "/api/hello"),
    ("GET", "/no/such/route"),
]


@pytest.fixture(scope="module")
def server(tiny_qwen3: Path) -> Iterator[EngyServer]:
    s = EngyServer(
        str(tiny_qwen3),
        "--ctx-size",
        "4096",
        "--max-output-tokens",
        "4",
        "--api-key",
        KEY,
        "--allow-host",
        "engy.lan, other.lan",
        "--allow-origin",
        "https://app.example",
    )
    yield s
    s.stop()


@pytest.fixture(scope="module")
def http(server: EngyServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=TIMEOUT, headers=AUTH) as client:
        yield client


@pytest.fixture(scope="module")
def claude(server: EngyServer) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=server.url, api_key=KEY, timeout=TIMEOUT) as client:
        yield client


@pytest.fixture(scope="module")
def gpt(server: EngyServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, timeout=TIMEOUT) as client:
        yield client


@pytest.fixture(scope="module")
def model(http: httpx.Client) -> str:
    name: str = http.get("/v1/models").json()["data"][0]["id"]
    return name


def assert_error(r: httpx.Response, status: int, path: str) -> dict[str, Any]:
    """The protocol's own error format, with this status."""
    assert r.status_code == status, r.text
    if r.request.method == "HEAD":
        return {}
    body: dict[str, Any] = r.json()
    if path.startswith(("/v1/responses", "/v1/chat/")):  # OpenAI's format
        assert set(body) == {"error"}
        assert {"message", "type", "param", "code"} <= set(body["error"])
    else:
        assert body["type"] == "error" and body["request_id"].startswith("req_")
        assert isinstance(body["error"]["type"], str) and body["error"]["message"]
    return body


# ---- Host and Origin ------------------------------------------------------------

REBOUND = ["attacker.example", "evil.localhost", "x.local", "0.0.0.0", "localhost.", "127.0.0.2"]


@pytest.mark.parametrize("host", REBOUND)
@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_rebound_host_is_403_on_every_route(
    http: httpx.Client, server: EngyServer, host: str, method: str, path: str
) -> None:
    r = http.request(method, path, headers={"host": f"{host}:{server.port}"}, content=b"{}")
    body = assert_error(r, 403, path)
    if body:
        assert "host not allowed" in json.dumps(body)


@pytest.mark.parametrize(
    "host", ["localhost", "127.0.0.1", "[::1]", "localhost:1234", "engy.lan", "OTHER.lan:9"]
)
def test_loopback_and_allowed_hosts_pass(http: httpx.Client, host: str) -> None:
    assert http.get("/v1/models", headers={"host": host}).status_code == 200


FOREIGN = [
    "https://evil.example",
    "http://localhost.evil.example",
    "null",
    "http://127.0.0.1.nip.io",
]


@pytest.mark.parametrize("origin", FOREIGN)
@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_foreign_origin_is_403_preflighted_or_not(
    http: httpx.Client, origin: str, method: str, path: str
) -> None:
    # The request a page sends without a preflight: text/plain, no key header.
    simple = {"origin": origin, "content-type": "text/plain", "x-api-key": ""}
    r = http.request(method, path, headers=simple, content=b"{}")
    assert_error(r, 403, path)
    assert "access-control-allow-origin" not in r.headers
    preflight = {
        "origin": origin,
        "access-control-request-method": "POST",
        "access-control-request-headers": "content-type, x-api-key",
    }
    r = http.options(path, headers=preflight)
    assert r.status_code == 403
    assert "access-control-allow-origin" not in r.headers


@pytest.mark.parametrize("origin", ["https://app.example", "http://localhost:5173"])
def test_allowed_origins_get_cors_with_their_origin(
    http: httpx.Client, model: str, origin: str
) -> None:
    preflight = {"origin": origin, "access-control-request-method": "POST"}
    r = http.options("/v1/messages", headers=preflight)
    assert r.status_code == 204
    assert r.headers["access-control-allow-origin"] == origin  # never "*"
    assert "x-api-key" in r.headers["access-control-allow-headers"]
    body = {"model": model, "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}
    r = http.post("/v1/messages", json=body, headers={"origin": origin})
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] == origin


def test_the_sdks_still_work(claude: anthropic.Anthropic, gpt: openai.OpenAI, model: str) -> None:
    msg = claude.messages.create(
        model=model, max_tokens=2, messages=[{"role": "user", "content": "hi"}]
    )
    assert msg.stop_reason == "max_tokens"
    assert gpt.responses.create(model=model, input="hi", max_output_tokens=16).status
    done = gpt.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}])
    assert done.choices[0].finish_reason == "length"  # --max-output-tokens 4
    assert done.usage is not None and done.usage.completion_tokens == 4


# ---- keys and exposure ----------------------------------------------------------------


def test_the_key_is_required_in_either_header(http: httpx.Client) -> None:
    assert http.get("/v1/models", headers={"x-api-key": "wrong"}).status_code == 401
    assert http.get("/v1/models", headers={"x-api-key": KEY[:-1]}).status_code == 401
    bearer = {"x-api-key": "", "authorization": f"Bearer {KEY}"}
    assert http.get("/v1/models", headers=bearer).status_code == 200
    assert http.get("/metrics", headers={"x-api-key": ""}).status_code == 401


def test_key_matches_compares_every_candidate() -> None:
    assert key_matches("k", [None, "x", "k"])
    assert not key_matches("k", [None, "", "kk", "K"])
    assert not key_matches("k", [])


def test_serving_off_loopback_without_a_key_refuses_to_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ENGY_API_KEY", raising=False)
    result = CliRunner().invoke(app, ["serve", "--host", "0.0.0.0", "/nonexistent.gguf"])
    assert result.exit_code == 1
    [line] = (result.stdout + result.stderr).strip().splitlines()  # one line says why
    assert "reachable from other machines" in line and "--no-api-key" in line
    # With --no-api-key it goes on, to the next check (the missing file).
    result = CliRunner().invoke(
        app, ["serve", "--host", "0.0.0.0", "--no-api-key", "/nonexistent.gguf"]
    )
    assert result.exit_code == 1 and "no such file" in result.stdout + result.stderr


def test_access_policy_table() -> None:
    local = AccessPolicy.build("127.0.0.1", ["a.lan,b.lan"], ["https://app.example/"])
    assert [local.host_allowed(h) for h in ("[::1]:1", "a.lan", "b.lan:2", "c.lan")] == [
        True,
        True,
        True,
        False,
    ]
    assert local.origin_allowed("https://APP.example")
    assert local.origin_allowed("http://[::1]:8080")
    assert not local.origin_allowed("http://localhost:notaport")
    assert not local.origin_allowed("file://localhost")
    assert AccessPolicy.build("127.0.0.1", ["*"]).host_allowed("anything")
    assert AccessPolicy.build("192.168.1.5").host_allowed("anything")  # a key guards it


# ---- /metrics ---------------------------------------------------------------------------


def test_metrics_in_prometheus_text(http: httpx.Client, model: str) -> None:
    body = {"model": model, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
    assert http.post("/v1/messages", json=body).status_code == 200
    r = http.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    assert samples['engy_requests_total{endpoint="/v1/messages",status="200"}'] >= 1
    assert samples["engy_prompt_tokens_total"] > 0
    assert samples["engy_generated_tokens_total"] >= 2
    assert samples["engy_time_to_first_token_seconds_count"] >= 1
    assert samples['engy_time_to_first_token_seconds_bucket{le="+Inf"}'] >= 1
    assert "engy_requests_waiting" in samples and "engy_requests_generating" in samples
    assert "# TYPE engy_decode_tokens_per_second histogram" in text
    assert samples[f'engy_model_loaded{{model="{model}"}}'] == 1
    # Unknown paths are one label, so a scan cannot grow the table.
    http.get("/scan/a")
    http.get("/scan/b")
    assert 'endpoint="/scan' not in http.get("/metrics").text


# ---- bad input is a 400 -------------------------------------------------------------------


def nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "path", ["/v1/messages", "/v1/responses", "/v1/messages/count_tokens", "/v1/chat/completions"]
)
def test_deep_nesting_is_400(http: httpx.Client, path: str) -> None:
    raw = b"[" * 100_000 + b"]" * 100_000
    body = assert_error(http.post(path, content=raw), 400, path)
    assert "nested deeper than 64" in json.dumps(body)
    deep_schema = {"type": "object", "properties": {"a": nested(600)}}
    tools = [{"name": "t", "input_schema": deep_schema, "parameters": deep_schema}]
    tools += [{"type": "function", "function": {"name": "f", "parameters": deep_schema}}]
    body = {"model": "m", "max_tokens": 1, "input": "x", "messages": [], "tools": tools}
    assert_error(http.post(path, json=body), 400, path)


def messages_body(model: str, fields: dict[str, Any]) -> dict[str, Any]:
    base = {"model": model, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
    return {**base, **fields}


# (case, fields merged into a valid body)
BAD_MESSAGES = [
    ("max_tokens huge", {"max_tokens": 10**30}),
    ("max_tokens float", {"max_tokens": 2.5}),
    ("max_tokens string", {"max_tokens": "2"}),
    ("max_tokens negative", {"max_tokens": -1}),
    ("top_k huge", {"top_k": 2**40}),
    ("top_k bool", {"top_k": True}),
    ("temperature NaN", {"temperature": float("nan")}),
    ("temperature infinite", {"temperature": float("inf")}),
    ("top_p object", {"top_p": {}}),
    ("stream string", {"stream": "yes"}),
    ("model number", {"model": 7}),
    ("content number", {"messages": [{"role": "user", "content": 7}]}),
    (
        "block text number",
        {"messages": [{"role": "user", "content": [{"type": "text", "text": 1}]}]},
    ),
    ("role number", {"messages": [{"role": 1, "content": "hi"}]}),
    ("system list of numbers", {"system": [1, 2]}),
    ("tools not a list", {"tools": {"name": "x"}}),
    ("tool name number", {"tools": [{"name": 5, "input_schema": {}}]}),
    ("stop_sequences numbers", {"stop_sequences": [1]}),
    ("provider min_context huge", {"provider": {"min_context": 10**40}}),
    ("thinking type number", {"thinking": {"type": 5}}),
    ("messages a string", {"messages": "hi"}),
]


@pytest.mark.parametrize("fields", [c[1] for c in BAD_MESSAGES], ids=[c[0] for c in BAD_MESSAGES])
def test_bad_messages_fields_are_400(
    http: httpx.Client, model: str, fields: dict[str, Any]
) -> None:
    raw = json.dumps(messages_body(model, fields), allow_nan=True)
    r = http.post("/v1/messages", content=raw, headers={"content-type": "application/json"})
    assert_error(r, 400, "/v1/messages")


BAD_RESPONSES = [
    ("max_output_tokens huge", {"max_output_tokens": 10**30}),
    ("max_output_tokens string", {"max_output_tokens": "8"}),
    ("temperature NaN", {"temperature": float("nan")}),
    ("input number", {"input": 5}),
    ("input item content number", {"input": [{"role": "user", "content": 5}]}),
    (
        "input text part number",
        {"input": [{"role": "user", "content": [{"type": "input_text", "text": 5}]}]},
    ),
    ("instructions list", {"instructions": ["a"]}),
    ("tools object", {"tools": {}}),
    ("function name number", {"tools": [{"type": "function", "name": 1}]}),
    ("parallel_tool_calls string", {"parallel_tool_calls": "no"}),
    ("provider only numbers", {"provider": {"only": [1]}}),
]


@pytest.mark.parametrize("fields", [c[1] for c in BAD_RESPONSES], ids=[c[0] for c in BAD_RESPONSES])
def test_bad_responses_fields_are_400(
    http: httpx.Client, model: str, fields: dict[str, Any]
) -> None:
    body = {"model": model, "input": "hi", "max_output_tokens": 2, **fields}
    raw = json.dumps(body, allow_nan=True)
    r = http.post("/v1/responses", content=raw, headers={"content-type": "application/json"})
    assert_error(r, 400, "/v1/responses")


HI = [{"role": "user", "content": "hi"}]
PNG_URL = "data:image/png;base64,iVBORw0KGgo="  # a PNG's signature, not an image
BAD_CHAT = [
    ("no body", None),
    ("max_tokens huge", {"max_tokens": 10**30}),
    ("max_completion_tokens string", {"max_completion_tokens": "8"}),
    ("max_tokens zero", {"max_tokens": 0}),
    ("temperature NaN", {"temperature": float("nan")}),
    ("temperature infinite", {"temperature": float("inf")}),
    ("top_p over 1", {"top_p": 1.5}),
    ("seed huge", {"seed": 2**40}),
    ("n 2", {"n": 2}),
    ("stream string", {"stream": "yes"}),
    ("stream_options list", {"stream_options": []}),
    ("messages a string", {"messages": "hi"}),
    ("messages empty", {"messages": []}),
    ("role unknown", {"messages": [{"role": "function", "content": "x"}]}),
    ("content number", {"messages": [{"role": "user", "content": 5}]}),
    (
        "part text number",
        {"messages": [{"role": "user", "content": [{"type": "text", "text": 1}]}]},
    ),
    ("audio part", {"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]}),
    (
        "image by https URL",
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": "https://e.x/a.png"}}],
                }
            ]
        },
    ),
    (
        "image on a model without a projector",
        {
            "messages": [
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": PNG_URL}}]}
            ]
        },
    ),
    ("tool without its call id", {"messages": [*HI, {"role": "tool", "content": "x"}]}),
    (
        "call arguments a number",
        {
            "messages": [
                *HI,
                {
                    "role": "assistant",
                    "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": 5}}],
                },
            ]
        },
    ),
    ("tools object", {"tools": {}}),
    ("function without a name", {"tools": [{"type": "function", "function": {}}]}),
    ("tool_choice unknown", {"tool_choice": "any"}),
    ("tool_choice required without tools", {"tool_choice": "required"}),
    (
        "tool_choice names no offered function",
        {
            "tools": [{"type": "function", "function": {"name": "f"}}],
            "tool_choice": {"type": "function", "function": {"name": "g"}},
        },
    ),
    ("stop numbers", {"stop": [1]}),
    ("response_format unknown", {"response_format": {"type": "yaml"}}),
    ("json_schema missing", {"response_format": {"type": "json_schema"}}),
    ("provider only numbers", {"provider": {"only": [1]}}),
    (
        "over the window",
        {"max_tokens": 10_000_000, "messages": [{"role": "user", "content": "hi " * 5000}]},
    ),
]


@pytest.mark.parametrize("fields", [c[1] for c in BAD_CHAT], ids=[c[0] for c in BAD_CHAT])
def test_bad_chat_completions_bodies_are_400_and_the_server_keeps_serving(
    http: httpx.Client, model: str, fields: dict[str, Any] | None
) -> None:
    if fields is None:
        raw = "not json"
    else:
        raw = json.dumps({"model": model, "messages": HI, **fields}, allow_nan=True)
    headers = {"content-type": "application/json"}
    r = http.post("/v1/chat/completions", content=raw, headers=headers)
    body = assert_error(r, 400, "/v1/chat/completions")
    assert body["error"]["type"] == "invalid_request_error"
    ok = http.post("/v1/chat/completions", json={"model": model, "messages": HI})
    assert ok.status_code == 200, ok.text
    assert ok.json()["choices"][0]["message"]["role"] == "assistant"


def test_a_wrong_method_on_chat_completions_is_404_in_openais_format(http: httpx.Client) -> None:
    body = assert_error(http.get("/v1/chat/completions"), 404, "/v1/chat/completions")
    assert body["error"]["message"] == "no route for GET /v1/chat/completions"


def test_chat_completions_unknown_model_is_404_naming_the_served(
    gpt: openai.OpenAI, model: str
) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        gpt.chat.completions.create(model="test", messages=HI)  # type: ignore[arg-type]
    assert info.value.code == "model_not_found" and info.value.param == "model"
    assert f"model not found: test (served here: {model}; `engy pull` adds more)" in str(info.value)


def test_chat_completions_is_counted_and_logged(
    http: httpx.Client, server: EngyServer, model: str
) -> None:
    assert http.post("/v1/chat/completions", json={"model": model, "messages": HI}).is_success
    text = http.get("/metrics").text
    assert 'engy_requests_total{endpoint="/v1/chat/completions",status="200"}' in text
    assert 'engy_requests_total{endpoint="/v1/chat/completions",status="400"}' in text
    # The same per-request line as the other endpoints (model, sequence, tokens).
    assert any("seq=" in line and "stop=length" in line for line in server.output().splitlines())


def test_responses_over_the_window_is_400_whatever_the_cap(http: httpx.Client, model: str) -> None:
    # The server caps output at 4 tokens; the ask itself is over the window.
    r = http.post(
        "/v1/responses", json={"model": model, "input": "hi", "max_output_tokens": 10_000_000}
    )
    body = assert_error(r, 400, "/v1/responses")
    assert body["error"]["code"] == "context_length_exceeded"
    ok = http.post("/v1/responses", json={"model": model, "input": "hi", "max_output_tokens": 64})
    assert ok.status_code == 200
    assert ok.json()["max_output_tokens"] == 4  # the effective limit, echoed


# ---- a forced call cut by the token limit is a call ---------------------------------------

TOOLS = [
    {
        "name": "read_file",
        "description": "Read a file.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
    {
        "name": "search",
        "description": "Search.",
        "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
    },
]


@pytest.mark.parametrize("max_tokens", [1, 2, 3])
@pytest.mark.parametrize("stream", [False, True])
def test_messages_forced_call_cut_early_is_a_tool_use(
    claude: anthropic.Anthropic, model: str, max_tokens: int, stream: bool
) -> None:
    kwargs: Any = {
        "model": model,
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": "Search for it."}],
        "tools": TOOLS,
        "tool_choice": {"type": "tool", "name": "search"},
    }
    if stream:
        with claude.messages.stream(**kwargs) as s:
            msg = s.get_final_message()
    else:
        msg = claude.messages.create(**kwargs)
    assert msg.stop_reason == "max_tokens"
    assert [b.type for b in msg.content] == ["tool_use"]  # no markup as text
    assert msg.content[0].name == "search"  # type: ignore[union-attr]
    assert isinstance(msg.content[0].input, dict)  # type: ignore[union-attr]


@pytest.mark.parametrize("max_output_tokens", [1, 3])
@pytest.mark.parametrize("stream", [False, True])
def test_responses_forced_call_cut_early_is_a_function_call(
    gpt: openai.OpenAI, model: str, max_output_tokens: int, stream: bool
) -> None:
    kwargs: Any = {
        "model": model,
        "input": "Read it.",
        "tools": [
            {"type": "function", "name": t["name"], "parameters": t["input_schema"]} for t in TOOLS
        ],
        "tool_choice": "required",
        "max_output_tokens": max_output_tokens,
    }
    if stream:
        with gpt.responses.stream(**kwargs) as s:
            r = s.get_final_response()
    else:
        r = gpt.responses.create(**kwargs)
    assert r.status == "incomplete"
    assert [item.type for item in r.output] == ["function_call"]
    assert isinstance(json.loads(r.output[0].arguments), dict)  # type: ignore[union-attr]


CUT_MARKUP = [
    ("hermes", "<t", "read_file"),
    ("hermes", '<tool_call>\n{"name": "sea', "search"),
    ("qwen3-coder", "<function=sea", "search"),
    ("glm-4.6", "<tool_call>sea", "search"),
    ("hermes", "", "read_file"),
]


@pytest.mark.parametrize(("family", "output", "name"), CUT_MARKUP)
def test_forced_call_parser_makes_a_call_of_cut_markup(family: str, output: str, name: str) -> None:
    tools = ["read_file", "search"]
    ids = iter(["call_0", "call_1"])
    inner = make_parser(family, tools=tools, thinking=False, new_id=lambda: next(ids))
    parser = ForcedCallParser(inner, tools, lambda: next(ids))
    events = parser.feed(output) + parser.finish()
    assert not any(isinstance(e, TextDelta) for e in events)
    starts = [e for e in events if isinstance(e, ToolCallStart)]
    ends = [e for e in events if isinstance(e, ToolCallEnd)]
    assert [s.name for s in starts] == [name]
    assert len(ends) == 1 and isinstance(json.loads(ends[0].arguments), dict)


def test_forced_call_parser_passes_a_whole_call_through() -> None:
    tools = ["read_file"]
    inner = make_parser("hermes", tools=tools, thinking=False, new_id=lambda: "call_0")
    parser = ForcedCallParser(inner, tools, lambda: "call_x")
    out = '<tool_call>\n{"name": "read_file", "arguments": {"path": "/a"}}\n</tool_call>'
    events = parser.feed(out) + parser.finish()
    assert [e for e in events if isinstance(e, ToolCallEnd)] == [ToolCallEnd(0, '{"path": "/a"}')]
