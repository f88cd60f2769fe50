"""`engy serve` on models other tools keep, in a HOME holding an Ollama
store and an LM Studio folder built as those tools write them: each API
answers, nothing there changes, the memory engy estimated is what llama.cpp
allocated, the page names the model before any request, and a blob Ollama
removed under the server is a clear error naming Ollama and the file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from support.browser import OpenPage, live
from support.layouts import ollama_manifest, ollama_pull, place, snapshot
from support.paths import ANSWER
from support.server import EngyServer

from engy_local.runtime.loading.fit import Machine, estimate

WINDOW = 4096
PARALLEL = 4
http = httpx.Client(timeout=120)


@pytest.fixture(scope="module")
def user_home(tmp_path_factory: pytest.TempPathFactory, tiny_answer: Path) -> Iterator[Path]:
    """A HOME with `ollama pull gemma3:270m` and an LM Studio download in it
    (the tiny answer model in both), and engy's servers started in it."""
    home = tmp_path_factory.mktemp("user")
    ollama_pull(home / ".ollama" / "models", "gemma3", "270m", tiny_answer)
    lms = home / ".lmstudio" / "models" / "lmstudio-community" / "Tiny-Answer-GGUF"
    place(lms, "tiny-answer-q8_0.gguf", tiny_answer)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(home))
        for name in ("OLLAMA_MODELS", "ENGY_MODELS_DIRS", "HF_HUB_CACHE", "HF_HOME"):
            mp.delenv(name, raising=False)
        mp.setenv("HF_HUB_CACHE", str(home / "no-hf-cache"))
        yield home


def ask_every_api(server: EngyServer, model: str) -> None:
    """One request on each API, each answered by the model."""
    with anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0) as client:
        r = client.messages.create(
            model=model, max_tokens=16, messages=[{"role": "user", "content": "hi"}]
        )
    assert "".join(b.text for b in r.content if b.type == "text") == ANSWER
    gpt = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0)
    response = gpt.responses.create(model=model, input="hi", max_output_tokens=16)
    assert response.output_text == ANSWER
    chat = gpt.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=16
    )
    assert chat.choices[0].message.content == ANSWER


def status(server: EngyServer) -> dict[str, Any]:
    data: dict[str, Any] = http.get(server.url + "/engy/status").json()
    return data


def test_ollama_model_by_name_answers_on_every_api_and_its_store_is_untouched(
    user_home: Path, request: pytest.FixtureRequest
) -> None:
    store = user_home / ".ollama" / "models"
    # (Chromium keeps its own files under HOME: the tools' folders are what count.)
    before = snapshot(user_home / ".ollama"), snapshot(user_home / ".lmstudio")
    server = EngyServer("ollama:gemma3:270m", "--ctx-size", str(WINDOW), "--keep-alive", "0")
    try:
        # The page's first screen, before any request: the model and its state.
        (served,) = status(server)["served"]
        assert served["id"] == "ollama:gemma3:270m"
        try:
            open_page: OpenPage = request.getfixturevalue("open_page")
        except pytest.skip.Exception:
            pass  # no Chromium here: the JSON the page reads is checked above
        else:
            page = open_page(server.url + "/")
            live(page)
            line = page.locator("#serving")
            line.get_by_text("ollama:gemma3:270m").wait_for(timeout=10000)
            assert "loaded" in line.inner_text()

        ask_every_api(server, "ollama:gemma3:270m")
        ask_every_api(server, "gemma3:270m")  # the name a client knows it by
        after = snapshot(user_home / ".ollama"), snapshot(user_home / ".lmstudio")
        assert after == before  # nothing written, linked or locked there

        # engy's estimate of the KV cache, against what llama.cpp allocated.
        (loaded,) = http.get(server.url + "/engy/ps").json()["models"]
        (blob,) = [p for p in (store / "blobs").iterdir() if p.stat().st_size > 1 << 20]
        fit = estimate((blob,), blob.stat().st_size, Machine((), (), 1 << 40), WINDOW, PARALLEL)
        assert fit.kv is not None and loaded["kv_bytes"] > 0
        assert abs(loaded["kv_bytes"] - fit.kv) <= fit.kv * 0.01, (loaded["kv_bytes"], fit.kv)

        # Ollama removes the blob (`ollama rm`, a prune) while engy runs.
        r = http.post(server.url + "/engy/models/unload", json={"model": "ollama:gemma3:270m"})
        assert r.status_code == 200, r.text
        blob.unlink()
        r = http.post(
            server.url + "/v1/messages",
            json={"model": "ollama:gemma3:270m", "max_tokens": 8, "messages": [
                {"role": "user", "content": "hi"}
            ]},
        )  # fmt: skip
        assert r.status_code >= 400
        message = r.json()["error"]["message"]
        assert "Ollama no longer has it" in message and str(blob) in message
    finally:
        server.stop()


def test_lm_studio_model_by_its_file_stem_answers_on_every_api(user_home: Path) -> None:
    before = snapshot(user_home / ".lmstudio")
    server = EngyServer("tiny-answer-q8_0", "--ctx-size", str(WINDOW))
    try:
        assert [m["id"] for m in status(server)["served"]] == ["tiny-answer-q8_0"]
        ask_every_api(server, "tiny-answer-q8_0")
        ask_every_api(server, "lmstudio-community/Tiny-Answer-GGUF")
    finally:
        server.stop()
    assert snapshot(user_home / ".lmstudio") == before


def test_an_ollama_gguf_without_a_template_takes_the_catalog_s_of_that_name(
    tmp_path: Path, gemma_path: Path
) -> None:
    """Ollama keeps a chat template in a Go template layer; a GGUF with none
    (the pretrained gemma-3-270m is one), pulled under a name the catalog
    knows (gemma3:270m-base), is served with the catalog's template."""
    store = tmp_path / "user" / ".ollama" / "models"
    manifest = ollama_manifest(store, gemma_path, link=True)
    ollama_pull(store, "gemma3", "270m-base", gemma_path, manifest=manifest)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(tmp_path / "user"))
        mp.delenv("OLLAMA_MODELS", raising=False)
        server = EngyServer("ollama:gemma3:270m-base", "--ctx-size", "2048", home=tmp_path / "engy")
    try:
        with anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0) as client:
            r = client.messages.create(
                model="ollama:gemma3:270m-base",
                max_tokens=8,
                messages=[{"role": "user", "content": "Say hi."}],
            )
        # (without a template the load would have failed: "... has no chat template")
        assert r.stop_reason in ("end_turn", "max_tokens") and r.content
    finally:
        server.stop()
