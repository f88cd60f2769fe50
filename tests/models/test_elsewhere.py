"""Models other tools keep, served in place: Ollama's store, LM Studio's
folder, a folder of the user's. Each layout is built as its tool writes
it, from the tiny test GGUFs, in a HOME of the test's own; engy lists,
finds and shows them, `engy rm` refuses them, and nothing there changes."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.layouts import LIST, blob, ollama_manifest, ollama_pull, place, snapshot
from typer.testing import CliRunner

from engy_local.commands.cli import app
from engy_local.models import ollama
from engy_local.models.store import find, installed


@dataclass
class Layout:
    home: Path  # $HOME: ~/.ollama, ~/.lmstudio
    ollama: Path
    lmstudio: Path
    folder: Path
    gemma_blob: Path  # the model blob of ollama gemma3:270m
    vision_model: Path
    vision_projector: Path


@pytest.fixture
def layout(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    tiny_qwen3: Path,
    tiny_vision: tuple[Path, Path],
    tiny_answer: Path,
) -> Iterator[Layout]:
    home = tmp_path / "user"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("ENGY_HOME", str(tmp_path / "engy"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    for name in ("OLLAMA_MODELS", "ENGY_CATALOG"):
        monkeypatch.delenv(name, raising=False)
    # --models-dir adds to it in this process: set here, so the test restores it
    monkeypatch.setenv("ENGY_MODELS_DIRS", "")
    store = home / ".ollama" / "models"
    ollama_pull(store, "gemma3", "270m", tiny_qwen3)
    model, projector = tiny_vision
    ollama_pull(store, "tinyvision", "latest", model, projector, v2=True)
    ollama_pull(store, "repo-gguf", "latest", tiny_answer, host="hf.co", namespace="owner")
    lms = home / ".lmstudio" / "models" / "lmstudio-community" / "Tiny-Vision-GGUF"
    place(lms, "tiny-vision-q8_0.gguf", model)
    place(lms, "mmproj-tiny-vision-f16.gguf", projector)
    folder = tmp_path / "mine"
    place(folder / "deep" / "er", "answer-Q4_K_M.gguf", tiny_answer)
    gemma = ollama.scan(store)[0]
    assert gemma.name == "gemma3:270m"
    yield Layout(home, store, lms, folder, gemma.path, model, projector)


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout + result.stderr


def listed(*args: str) -> dict[str, dict[str, object]]:
    code, out = run("list", "--json", *args)
    assert code == 0, out
    return {row["id"]: row for row in json.loads(out)}


def test_list_shows_each_tool_s_models_with_their_place_size_and_files(layout: Layout) -> None:
    rows = listed()
    gemma = rows["ollama:gemma3:270m"]
    assert gemma["source"] == "ollama" and gemma["owned"] is False
    assert gemma["path"] == str(layout.gemma_blob)
    assert gemma["size"] == layout.gemma_blob.stat().st_size
    assert gemma["context"] == 32768  # from the GGUF's header
    # The catalog knows gemma3:270m: the bare name stays the catalog's.
    assert "gemma3:270m" not in gemma["aliases"]

    vision = rows["ollama:tinyvision:latest"]  # from manifests-v2, a link to its blob
    assert {"ollama:tinyvision", "tinyvision:latest", "tinyvision"} <= set(vision["aliases"])
    assert vision["mmproj"] is not None and Path(str(vision["mmproj"])).name.startswith("sha256-")
    assert vision["size"] == layout.vision_model.stat().st_size + (
        layout.vision_projector.stat().st_size
    )
    assert "ollama:hf.co/owner/repo-gguf" in rows["ollama:hf.co/owner/repo-gguf:latest"]["aliases"]

    lms = rows["tiny-vision-q8_0"]
    assert lms["source"] == "lmstudio" and lms["quant"] == "Q8_0"
    assert lms["mmproj"] == str(layout.lmstudio / "mmproj-tiny-vision-f16.gguf")
    assert "lmstudio-community/Tiny-Vision-GGUF" in lms["aliases"]
    assert "mmproj-tiny-vision-f16" not in rows  # a projector is not a model

    assert "answer-Q4_K_M" not in rows  # a user's folder only when named
    rows = listed("--models-dir", str(layout.folder))
    assert rows["answer-Q4_K_M"]["source"] == "folder"
    assert rows["answer-Q4_K_M"]["quant"] == "Q4_K_M"

    code, out = run("list")
    assert code == 0
    header = next(line for line in out.splitlines() if line.strip())
    assert header.split() == ["ID", "SIZE", "QUANT", "CONTEXT", "MEMORY", "FIT", "FROM", "PATH"]
    assert "ollama:gemma3:270m" in out and "lm studio" in out


def test_find_takes_every_name_each_tool_s_model_goes_by(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    def found(ref: str) -> str | None:
        record = find(ref)
        return record.id if record else None

    assert found("ollama:gemma3:270m") == "ollama:gemma3:270m"
    assert found("gemma3:270m") is None  # the catalog's model, not pulled here
    assert found("tinyvision") == found("tinyvision:latest") == "ollama:tinyvision:latest"
    assert found("ollama:hf.co/owner/repo-gguf") == "ollama:hf.co/owner/repo-gguf:latest"
    for ref in (
        "tiny-vision-q8_0",
        "tiny-vision-q8_0.gguf",
        "lmstudio-community/Tiny-Vision-GGUF",
        "lmstudio:lmstudio-community/Tiny-Vision-GGUF",
        "lmstudio-community/Tiny-Vision-GGUF@Q8_0",
    ):
        assert found(ref) == "tiny-vision-q8_0", ref
    assert found("answer-Q4_K_M") is None
    monkeypatch.setenv("ENGY_MODELS_DIRS", os.pathsep.join(["/nowhere", str(layout.folder)]))
    assert found("answer-Q4_K_M") == "answer-Q4_K_M"
    assert found("folder:deep/er/answer-Q4_K_M.gguf") == "answer-Q4_K_M"


def test_show_and_rm_leave_every_file_as_it_was(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = snapshot(layout.home), snapshot(layout.folder)
    code, out = run("show", "ollama:gemma3:270m")
    assert code == 0, out
    assert "ollama:" in out and str(layout.gemma_blob) in out and "32,768" in out

    code, out = run("rm", "ollama:gemma3:270m")
    assert code == 1
    assert "belongs to Ollama" in out and "ollama rm gemma3:270m" in out
    code, out = run("rm", "lmstudio-community/Tiny-Vision-GGUF")
    assert code == 1 and "belongs to LM Studio" in out
    code, out = run("rm", "tinyvision")
    assert code == 1 and "ollama rm tinyvision:latest" in out
    monkeypatch.setenv("ENGY_MODELS_DIRS", str(layout.folder))
    code, out = run("rm", "answer-Q4_K_M")
    assert code == 1 and "your models folder" in out
    code, out = run("list", "--json")
    assert code == 0
    assert (snapshot(layout.home), snapshot(layout.folder)) == before


def test_a_model_installed_nowhere_stays_unknown_and_the_store_is_not_written(
    layout: Layout,
) -> None:
    assert find("no-such-model:7b") is None
    assert not (Path(os.environ["ENGY_HOME"]) / "models").exists()


# --- Ollama's formats, one at a time ---------------------------------------------


def test_a_manifest_list_serves_its_gguf_child(tmp_path: Path, tiny_qwen3: Path) -> None:
    """Newer Ollama writes a list of manifests, one per runner; the child a
    GGUF runner loads may be a blob of its own."""
    child = ollama_manifest(tmp_path, tiny_qwen3)
    digest = blob(tmp_path, json.dumps(child).encode())["digest"]
    mlx = {"mediaType": "application/vnd.docker.distribution.manifest.v2+json", "runner": "mlx"}
    listing = {
        "schemaVersion": 2,
        "mediaType": LIST,
        "manifests": [
            {**mlx, "format": "safetensors", "layers": [], "digest": "sha256:" + "0" * 64},
            {"mediaType": child["mediaType"], "digest": digest, "runner": "ollama"},
        ],
    }
    ollama_pull(tmp_path, "listed", "1b", tiny_qwen3, manifest=listing)
    (model,) = ollama.scan(tmp_path)
    assert model.name == "listed:1b" and model.path.read_bytes() == tiny_qwen3.read_bytes()


def test_manifests_engy_cannot_serve_are_left_out(tmp_path: Path, tiny_qwen3: Path) -> None:
    ollama_pull(tmp_path, "ok", "1", tiny_qwen3)
    ollama_pull(tmp_path, "lora", "1", tiny_qwen3, manifest=ollama_manifest(
        tmp_path, tiny_qwen3, adapter=tiny_qwen3
    ))  # fmt: skip
    bad = ollama_manifest(tmp_path, tiny_qwen3)
    bad["layers"][0]["digest"] = "sha256:../../../../etc/passwd"
    ollama_pull(tmp_path, "escape", "1", tiny_qwen3, manifest=bad)
    gone = ollama_manifest(tmp_path, tiny_qwen3)
    gone["layers"][0]["digest"] = "sha256:" + "a" * 64  # no such blob
    ollama_pull(tmp_path, "gone", "1", tiny_qwen3, manifest=gone)
    junk = tmp_path / "manifests" / "registry.ollama.ai" / "library" / "junk" / "1"
    junk.parent.mkdir(parents=True)
    junk.write_text("not json")
    assert [m.name for m in ollama.scan(tmp_path)] == ["ok:1"]


def test_ollama_models_honours_its_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tiny_qwen3: Path
) -> None:
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "elsewhere"))
    ollama_pull(tmp_path / "elsewhere", "qwen", "tiny", tiny_qwen3)
    assert ollama.models_root() == tmp_path / "elsewhere"
    assert any(r.id == "ollama:qwen:tiny" for r in installed())
