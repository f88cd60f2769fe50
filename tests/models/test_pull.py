"""`engy pull` against a real HTTP server on 127.0.0.1 that serves files the way
the Hugging Face hub does (tests/hubserver.py), with HF_ENDPOINT pointed at it.
Nothing here reaches beyond 127.0.0.1."""

from __future__ import annotations

import hashlib
import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.hubserver import Hub, running_hub
from support.paths import ANSWER
from support.server import EngyServer
from typer.testing import CliRunner

from engy_local.commands.cli import app
from engy_local.models.pull import pull
from engy_local.models.store import MANIFEST, installed, pulled

REPO = "engy-test/Tiny-GGUF"


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Hub]:
    """The fake hub, and a store and Hugging Face cache of this test's own."""
    with running_hub() as h:
        monkeypatch.setenv("HF_ENDPOINT", h.url)
        monkeypatch.setenv("ENGY_HOME", str(tmp_path / "home"))
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
        monkeypatch.delenv("HF_TOKEN", raising=False)
        monkeypatch.delenv("ENGY_CATALOG", raising=False)
        yield h


@pytest.fixture(scope="session")
def tiny_bytes(tiny_qwen3: Path) -> bytes:
    return tiny_qwen3.read_bytes()


@pytest.fixture(scope="session")
def tiny_split(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """A tiny GGUF split in three parts, as gguf-split names them."""
    from support.ggufs import build_tiny_gguf
    from support.paths import need_fixtures

    need_fixtures()
    out = tmp_path_factory.mktemp("split") / "Tiny-Split-F16.gguf"
    first = build_tiny_gguf(out, split_max_tensors=4)
    return sorted(first.parent.glob("Tiny-Split-F16-*-of-00003.gguf"))


@pytest.fixture(scope="session")
def tiny_projector(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A small, valid GGUF standing in for a vision projector."""
    import gguf

    out = tmp_path_factory.mktemp("mmproj") / "mmproj.gguf"
    w = gguf.GGUFWriter(out, "clip")
    w.add_name("engy-test projector")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out.read_bytes()


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout + result.stderr


def one_line(text: str) -> str:
    """The error, which must be one line (besides the progress bar, if any)."""
    assert "Traceback" not in text, text
    lines = [line for line in text.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, text
    return lines[0]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_an_interrupted_pull_resumes_and_transfers_only_the_rest(
    hub: Hub, tiny_bytes: bytes
) -> None:
    key = f"{REPO}/Tiny-Q4_K_M.gguf"
    hub.add(key, tiny_bytes)
    half = len(tiny_bytes) // 2
    hub.drop_after[key] = half

    code, out = run("pull", f"hf:{REPO}")
    assert code == 1
    assert "connection lost" in one_line(out) and "resume" in out
    (part,) = (Path(os.environ["ENGY_HOME"]) / "models").glob("*/*.part")
    assert part.stat().st_size == half
    assert pulled() == [] and installed() == []  # half a file is never listed
    assert "Tiny" not in run("list")[1]

    sent_before = hub.sent[key]
    code, out = run("pull", f"hf:{REPO}")
    assert code == 0, out
    assert hub.sent[key] - sent_before == len(tiny_bytes) - half  # only the rest
    resumed = [h for p, h in hub.requests if p == f"/cdn/{key}"][-1]
    assert resumed["range"] == f"bytes={half}-"
    (record,) = pulled()
    assert record.id == f"hf:{REPO}" and record.quant == "Q4_K_M"
    assert record.path.read_bytes() == tiny_bytes and not part.exists()
    manifest = json.loads((record.path.parent / MANIFEST).read_text())
    assert manifest["files"] == [
        {"path": "Tiny-Q4_K_M.gguf", "size": len(tiny_bytes), "sha256": sha256(tiny_bytes)}
    ]
    assert manifest["source"] == "hf" and manifest["architecture"] == "llama"


def test_a_corrupted_file_fails_verification_and_is_not_installed(
    hub: Hub, tiny_bytes: bytes
) -> None:
    key = f"{REPO}/Tiny-Q4_K_M.gguf"
    hub.add(key, tiny_bytes)
    broken = bytearray(tiny_bytes)
    broken[len(broken) // 2] ^= 0xFF
    hub.serve_instead[key] = bytes(broken)

    code, out = run("pull", f"hf:{REPO}")
    assert code == 1
    line = one_line(out)
    assert "sha256" in line and sha256(tiny_bytes) in line and "discarded" in line
    assert installed() == []
    # The rule: a complete file that fails verification is deleted, .part and all,
    # because resuming cannot repair it; the next pull fetches it anew.
    models = Path(os.environ["ENGY_HOME"]) / "models"
    assert [p for p in models.rglob("*") if p.suffix in (".gguf", ".part")] == []

    del hub.serve_instead[key]
    sent_before = hub.sent[key]
    code, out = run("pull", f"hf:{REPO}")
    assert code == 0, out
    assert hub.sent[key] - sent_before == len(tiny_bytes)
    assert pulled()[0].path.read_bytes() == tiny_bytes


def test_a_file_that_is_not_a_gguf_is_not_installed(hub: Hub) -> None:
    hub.add("files/page.gguf", b"<html>Sign in to continue</html>\n")
    code, out = run("pull", f"{hub.url}/files/page.gguf")
    assert code == 1
    assert "not a valid GGUF file" in one_line(out)
    assert installed() == []


def test_a_split_gguf_installs_as_one_model_and_loads_in_llama_cpp(
    hub: Hub, tiny_split: list[Path], tiny_projector: bytes
) -> None:
    repo = "engy-test/Split-GGUF"
    for part in tiny_split:
        hub.add(f"{repo}/F16/{part.name}", part.read_bytes())
    hub.add(f"{repo}/mmproj-F16.gguf", tiny_projector)

    code, out = run("pull", f"hf:{repo}")
    assert code == 0, out
    (record,) = pulled()
    assert [f.name for f in record.files] == [p.name for p in tiny_split]
    assert record.quant == "F16" and record.mmproj is not None
    assert record.mmproj.read_bytes() == tiny_projector  # the projector came with it
    assert record.size == sum(p.stat().st_size for p in tiny_split) + len(tiny_projector)
    listing = run("list")[1]
    assert listing.count(f"hf:{repo}") == 1
    shown = run("show", record.id)[1]
    assert "images" in shown and "yes, through the projector" in shown

    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(record.path), n_ctx=128, verbose=False)
    try:
        assert llm.n_vocab() > 100_000
        llm.create_completion("Hi", max_tokens=2)
    finally:
        llm.close()


def test_hf_references_resolve_through_hf_endpoint(
    hub: Hub, tiny_bytes: bytes, tiny_projector: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    for quant in ("Q4_K_M", "Q8_0"):
        hub.add(f"{REPO}/Tiny-{quant}.gguf", tiny_bytes)
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")

    assert pull(f"hf:{REPO}").quant == "Q4_K_M"  # the default quant
    assert pull(f"hf:{REPO}:q8_0").quant == "Q8_0"
    by_file = pull(f"hf:{REPO}:Tiny-Q8_0.gguf")
    assert by_file.quant == "Q8_0" and by_file.path.name == "Tiny-Q8_0.gguf"
    assert sorted((r.id, r.quant) for r in pulled()) == [
        (f"hf:{REPO}", "Q4_K_M"),
        (f"hf:{REPO}", "Q8_0"),
    ]
    paths = [p for p, _ in hub.requests]
    assert f"/api/models/{REPO}" in paths
    assert f"/{REPO}/resolve/main/Tiny-Q4_K_M.gguf" in paths
    for path, headers in hub.requests:
        if path.startswith(("/api/", f"/{REPO}/resolve/")):
            assert headers["authorization"] == "Bearer hf_test_token"

    code, out = run("pull", f"hf:{REPO}:IQ2_XXS")
    assert code == 1
    assert "has no IQ2_XXS GGUF (it has: Q4_K_M, Q8_0)" in one_line(out)


def test_a_404_is_one_clear_line(hub: Hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, out = run("pull", "hf:engy-test/No-Such-GGUF")
    assert code == 1
    assert "no such repository" in one_line(out) and "404" in out

    catalog = tmp_path / "extra.toml"
    catalog.write_text(
        '[models."gone:1b"]\nhf = "engy-test/Gone-GGUF"\nquant = "Q4_K_M"\n'
        '[models."gone:1b".files]\nQ4_K_M = { file = "Gone-Q4_K_M.gguf", size = 1 }\n'
    )
    monkeypatch.setenv("ENGY_CATALOG", str(catalog))
    code, out = run("pull", "gone:1b")
    assert code == 1
    assert "not found (HTTP 404)" in one_line(out) and "Gone-Q4_K_M.gguf" in out

    code, out = run("pull", f"{hub.url}/files/missing.gguf")
    assert code == 1 and "404" in one_line(out)


def test_a_full_disk_keeps_the_partial_file_for_resume(hub: Hub, tiny_bytes: bytes) -> None:
    """A real write failure: the pull runs with a file-size limit (RLIMIT_FSIZE),
    so the kernel refuses writes past it, as it does when the disk is full."""
    key = f"{REPO}/Tiny-Q4_K_M.gguf"
    hub.add(key, tiny_bytes)
    limit = 8 << 20

    def limited() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    command = [sys.executable, "-m", "engy_local", "pull", f"hf:{REPO}"]
    done = subprocess.run(command, capture_output=True, text=True, preexec_fn=limited)
    assert done.returncode == 1
    assert "no space left" in one_line(done.stderr) and "resume" in done.stderr
    (part,) = (Path(os.environ["ENGY_HOME"]) / "models").glob("*/*.part")
    assert 0 < part.stat().st_size <= limit
    assert installed() == []

    kept = part.stat().st_size
    sent_before = hub.sent[key]
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert hub.sent[key] - sent_before == len(tiny_bytes) - kept
    assert pulled()[0].path.read_bytes() == tiny_bytes


def test_two_pulls_of_one_model_at_once_do_not_corrupt_each_other(
    hub: Hub, tiny_bytes: bytes
) -> None:
    key = f"{REPO}/Tiny-Q4_K_M.gguf"
    hub.add(key, tiny_bytes)
    hub.delay = 0.002  # ~0.7 s for the whole file: the second starts while the first runs
    command = [sys.executable, "-m", "engy_local", "pull", f"hf:{REPO}"]
    first = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    while not hub.sent[key]:
        time.sleep(0.01)
    second = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    outs = [p.communicate(timeout=120)[1] for p in (first, second)]
    assert [first.returncode, second.returncode] == [0, 0], outs
    assert "waiting for another engy pull" in outs[1]
    assert hub.sent[key] == len(tiny_bytes)  # fetched once
    (record,) = pulled()
    assert record.path.read_bytes() == tiny_bytes


def test_a_url_pull_and_a_path_import(hub: Hub, tiny_bytes: bytes, tiny_qwen3: Path) -> None:
    hub.add("files/Tiny-Url-Q8_0.gguf", tiny_bytes)
    code, out = run("pull", f"{hub.url}/files/Tiny-Url-Q8_0.gguf")
    assert code == 0, out
    code, out = run("pull", str(tiny_qwen3))
    assert code == 0, out
    by_id = {r.id: r for r in pulled()}
    url, imported = by_id["Tiny-Url-Q8_0"], by_id[tiny_qwen3.stem]
    assert url.source == "url" and url.quant == "Q8_0" and url.owned
    assert imported.source == "file" and not imported.owned
    assert imported.path == tiny_qwen3.resolve()  # recorded where it is, not copied
    assert imported.manifest is not None
    assert not list(imported.manifest.parent.glob("*.gguf"))


def test_a_pulled_catalog_id_and_a_path_both_serve(
    hub: Hub, tiny_answer: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tiny_answer.read_bytes()
    hub.add("engy-test/Answer-GGUF/Answer-F16.gguf", data)
    catalog = tmp_path / "extra.toml"
    catalog.write_text(
        f"""
[models."answer:tiny"]
name = "engy test model"
hf = "engy-test/Answer-GGUF"
quant = "F16"
context = 32768
family = "qwen3"
capabilities = ["tools", "thinking"]
license = "Apache-2.0"

[models."answer:tiny".files]
F16 = {{ file = "Answer-F16.gguf", size = {len(data)}, sha256 = "{sha256(data)}" }}
"""
    )
    monkeypatch.setenv("ENGY_CATALOG", str(catalog))
    code, out = run("pull", "answer:tiny")
    assert code == 0, out
    assert pulled()[0].source == "catalog"

    home = Path(os.environ["ENGY_HOME"])
    for model, name in (("answer:tiny", "answer:tiny"), (str(tiny_answer), tiny_answer.stem)):
        server = EngyServer(model, "--ctx-size", "2048", home=home)
        try:
            reply = httpx.post(
                f"{server.url}/v1/messages",
                json={
                    "model": name,
                    "max_tokens": 16,
                    "messages": [{"role": "user", "content": "Hi"}],
                },
                timeout=60,
            )
        finally:
            server.stop()
        assert reply.status_code == 200, reply.text
        text = "".join(b.get("text", "") for b in reply.json()["content"])
        assert ANSWER in text


def test_rm_discards_an_unfinished_pull(hub: Hub, tiny_bytes: bytes) -> None:
    key = f"{REPO}/Tiny-Q4_K_M.gguf"
    hub.add(key, tiny_bytes)
    hub.drop_after[key] = 1 << 20
    assert run("pull", f"hf:{REPO}")[0] == 1
    models = Path(os.environ["ENGY_HOME"]) / "models"
    assert list(models.glob("*/*.part"))

    code, out = run("rm", f"hf:{REPO}")
    assert code == 0 and "unfinished download" in out
    assert not list(models.glob("*/*.part")) and not list(models.iterdir())
    assert run("rm", f"hf:{REPO}")[0] == 1  # nothing left
