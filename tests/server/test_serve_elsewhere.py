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


def ask_every_api(
    server: EngyServer, model: str, answer: str = ANSWER
) -> tuple[anthropic.types.Message, openai.types.chat.ChatCompletion]:
    """One request on each API, each answered `answer` by the model; the
    Messages and Chat Completions answers, for more checks."""
    with anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0) as client:
        r = client.messages.create(
            model=model, max_tokens=16, messages=[{"role": "user", "content": "hi"}]
        )
    assert "".join(b.text for b in r.content if b.type == "text") == answer
    with openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0) as gpt:
        response = gpt.responses.create(model=model, input="hi", max_output_tokens=16)
        assert response.output_text == answer
        chat = gpt.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=16
        )
    assert chat.choices[0].message.content == answer
    return r, chat


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


# Ollama's Go template for ChatML with Hermes calls, in the shape its
# library's Qwen2.5 models carry (the lines with the format's markers).
QWEN_GO_TEMPLATE = (
    "{{- if or .System .Tools }}<|im_start|>system\n{{ .System }}\n{{- if .Tools }}\n<tools>\n"
    "{{- range .Tools }}\n{{ .Function }}\n{{- end }}\n</tools>\n<tool_call>\n{{- end }}"
    "<|im_end|>\n{{ end }}{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}"
    "<|im_end|>\n{{ end }}<|im_start|>assistant\n"
)
# Alpaca's instruction format: one engy has no template for.
ALPACA_GO_TEMPLATE = "{{ .System }}\n\n### Instruction:\n{{ .Prompt }}\n\n### Response:\n"


@pytest.fixture(scope="module")
def template_less() -> Path:
    """The tiny answer model with no chat template in its GGUF, as Ollama's
    own conversions of library models are."""
    from support.ggufs import tiny_gguf_cached
    from support.paths import CACHE

    return tiny_gguf_cached(
        CACHE / "ggufs", vocab="qwen2", template=None, answer=ANSWER, end_token="<|im_end|>"
    )


def test_an_ollama_model_with_only_ollama_s_template_serves_with_its_family_s_and_stop_words(
    tmp_path: Path, template_less: Path
) -> None:
    """Ollama keeps the template of a model it converted only as a Go
    template layer: engy serves it with the family's chat template (ChatML
    with Hermes calls, from the template's markers) on every API, with the
    params layer's stop words ending its answers; a model whose Go template
    is in no known format is a clear error naming it and the way to give a
    template. Ollama's store is not touched."""
    store = tmp_path / "user" / ".ollama" / "models"
    params = '{"stop": ["<|im_start|>", "<|im_end|>", " engy"], "temperature": 0.6}'
    manifest = ollama_manifest(store, template_less, template=QWEN_GO_TEMPLATE, params=params)
    ollama_pull(store, "qwen-only-go", "latest", template_less, manifest=manifest)
    alpaca = ollama_manifest(store, template_less, template=ALPACA_GO_TEMPLATE)
    ollama_pull(store, "alpaca-style", "7b", template_less, manifest=alpaca)
    before = snapshot(store)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(tmp_path / "user"))
        mp.delenv("OLLAMA_MODELS", raising=False)
        server = EngyServer(
            "ollama:qwen-only-go", "--ctx-size", "2048", "--keep-alive", "0", home=tmp_path / "engy"
        )
    try:
        model = "ollama:qwen-only-go"
        # The stop word " engy" cuts ANSWER ("Hello from engy.") short.
        cut = ANSWER[: ANSWER.index(" engy")]
        r, chat = ask_every_api(server, model, cut)
        assert r.stop_reason == "end_turn"
        assert chat.choices[0].finish_reason == "stop"
        # The family's template renders tools, so it takes them.
        tools = [{"name": "get_weather", "input_schema": {"type": "object"}}]
        with anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0) as client:
            counted = client.messages.count_tokens(
                model=model, messages=[{"role": "user", "content": "hi"}], tools=tools
            ).input_tokens
            bare = client.messages.count_tokens(
                model=model, messages=[{"role": "user", "content": "hi"}]
            ).input_tokens
        assert counted > bare + 50
    finally:
        server.stop()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(tmp_path / "user"))
        mp.delenv("OLLAMA_MODELS", raising=False)
        with pytest.raises(RuntimeError) as refused:
            EngyServer("ollama:alpaca-style:7b", "--ctx-size", "2048", home=tmp_path / "engy")
    said = str(refused.value)
    assert "ollama:alpaca-style:7b has no chat template" in said and "chat_template" in said
    assert snapshot(store) == before
