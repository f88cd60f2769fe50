"""Several models in one server, and the provider object: a real `engy
serve` with no MODEL argument serves the default model and every pulled one,
picked by the request's `model`."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
from support.paths import ANSWER
from support.server import EngyServer

http = httpx.Client(timeout=120)
HI = [{"role": "user", "content": "Hi"}]
DEFAULT = "qwen2.5-coder:0.5b"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory, default_path: Path) -> Path:
    """A store holding the default model and two tiny models imported by
    reference with `engy pull PATH`."""
    return tmp_path_factory.mktemp("engy-home")


def _pull(home: Path, path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "engy_local", "pull", str(path)],
        env={**os.environ, "ENGY_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.fixture(scope="module")
def server(home: Path, tiny_answer: Path, tiny_qwen3: Path) -> Iterator[EngyServer]:
    _pull(home, tiny_answer)
    _pull(home, tiny_qwen3)
    # A budget that holds one model at a time (with its RAM cache): serving
    # another unloads the idle one first. Each one's weights and KV cache
    # fit it alone, or the server would refuse to start.
    s = EngyServer(None, "--ctx-size", "2048", "--memory-budget", "0.6", home=home)
    yield s
    s.stop()


def _ids(server: EngyServer) -> list[str]:
    return [m["id"] for m in http.get(server.url + "/v1/models").json()["data"]]


def test_serves_the_default_and_every_pulled_model(
    server: EngyServer, tiny_answer: Path, tiny_qwen3: Path
) -> None:
    ids = _ids(server)
    assert ids[0] == "qwen2.5-coder:0.5b"
    assert tiny_answer.stem in ids and tiny_qwen3.stem in ids


def test_two_models_answer_by_model_in_consecutive_requests(
    server: EngyServer, tiny_answer: Path, tiny_qwen3: Path
) -> None:
    client = anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0, timeout=300)
    with client:
        _consecutive(client, tiny_answer, tiny_qwen3)


def _consecutive(client: anthropic.Anthropic, tiny_answer: Path, tiny_qwen3: Path) -> None:
    for _ in range(2):
        a = client.messages.create(model=tiny_answer.stem, max_tokens=20, messages=HI)
        assert a.model == tiny_answer.stem
        assert a.content[0].text == ANSWER  # type: ignore[union-attr]
        b = client.messages.create(model=tiny_qwen3.stem, max_tokens=5, messages=HI)
        assert b.model == tiny_qwen3.stem
        assert b.content[0].text != ANSWER  # type: ignore[union-attr]
    g = client.messages.create(model=DEFAULT, max_tokens=3, messages=HI)
    assert g.usage.output_tokens > 0
    # The file name serves too.
    r = client.messages.create(model=tiny_answer.name, max_tokens=20, messages=HI)
    assert r.content[0].text == ANSWER  # type: ignore[union-attr]


def test_unknown_model_is_404_in_both_formats(server: EngyServer) -> None:
    r = http.post(
        server.url + "/v1/messages", json={"model": "nope", "max_tokens": 5, "messages": HI}
    )
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
    r = http.post(server.url + "/v1/responses", json={"model": "nope", "input": "Hi"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"


@pytest.mark.parametrize(
    ("provider", "failed"),
    [
        ({"quantizations": ["q8_0"]}, "provider.quantizations"),
        ({"min_context": 10_000_000}, "provider.min_context"),
        ({"gpu": True}, "provider.gpu"),
        ({"only": ["some-other-model"]}, "provider.only"),
        ({"ignore": [DEFAULT]}, "provider.ignore"),
    ],
)
def test_unmet_provider_requirements_are_503_in_both_formats(
    server: EngyServer, provider: dict[str, object], failed: str
) -> None:
    with (
        anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0) as client,
        pytest.raises(anthropic.APIStatusError) as err,
    ):
        client.messages.create(
            model=DEFAULT, max_tokens=3, messages=HI, extra_body={"provider": provider}
        )
    assert err.value.status_code == 503
    body = err.value.body
    assert body["error"]["type"] == "overloaded_error"  # type: ignore[index]
    assert failed in body["error"]["message"]  # type: ignore[index]

    with (
        openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0) as oai,
        pytest.raises(openai.InternalServerError) as oerr,
    ):
        oai.responses.create(model=DEFAULT, input="Hi", extra_body={"provider": provider})
    assert oerr.value.status_code == 503
    assert failed in oerr.value.message


def test_met_provider_requirements_serve(server: EngyServer) -> None:
    provider = {
        "only": [DEFAULT],
        "quantizations": ["Q4_K_M"],
        "min_context": 1024,
        "gpu": False,
        "future_key": {"ignored": True},
    }
    body = {"model": DEFAULT, "max_tokens": 3, "messages": HI, "provider": provider}
    assert http.post(server.url + "/v1/messages", json=body).status_code == 200
    body = {"model": DEFAULT, "max_output_tokens": 16, "input": "Hi", "provider": provider}
    assert http.post(server.url + "/v1/responses", json=body).status_code == 200


@pytest.mark.parametrize(
    "provider",
    [{"min_context": "big"}, {"gpu": "yes"}, {"only": "gemma"}, {"quantizations": [4]}, "fast"],
)
def test_provider_with_wrong_types_is_400(server: EngyServer, provider: object) -> None:
    body = {"model": DEFAULT, "max_tokens": 3, "messages": HI, "provider": provider}
    r = http.post(server.url + "/v1/messages", json=body)
    assert r.status_code == 400 and "provider" in r.json()["error"]["message"]
    body = {"model": DEFAULT, "input": "Hi", "provider": provider}
    r = http.post(server.url + "/v1/responses", json=body)
    assert r.status_code == 400 and r.json()["error"]["param"].startswith("provider")


def test_responses_input_tokens_counts_exactly(server: EngyServer) -> None:
    with openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0) as oai:
        kwargs = {"model": DEFAULT, "instructions": "Be brief.", "input": "Count me."}
        counted = oai.responses.input_tokens.count(**kwargs)  # type: ignore[arg-type]
        r = oai.responses.create(max_output_tokens=16, **kwargs)  # type: ignore[arg-type]
    assert r.usage is not None
    assert counted.input_tokens == r.usage.input_tokens > 5
