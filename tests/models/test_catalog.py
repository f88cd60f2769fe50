"""The catalog: the shipped models.toml is complete and covers every tool-call
family; a bad entry says what is wrong; $ENGY_CATALOG adds models."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.paths import REPO

from engy_local.errors import CatalogError
from engy_local.models.catalog import (
    CAPABILITIES,
    load_catalog,
    parse_catalog,
    quant_of,
    split_parts,
)

REPO_ROOT = REPO


def test_the_shipped_catalog_parses_and_every_entry_is_complete() -> None:
    catalog = parse_catalog((REPO_ROOT / "models.toml").read_text())
    assert catalog.default == "qwen2.5-coder:0.5b"
    assert len(catalog.entries) >= 30
    for entry in catalog.entries.values():
        where = entry.id
        assert entry.name and entry.license, where
        assert entry.family and entry.context and entry.context >= 2048, where
        assert set(entry.capabilities) <= set(CAPABILITIES), where
        assert ("vision" in entry.capabilities) == (entry.mmproj is not None), where
        assert bool(entry.pypi) != bool(entry.hf), f"{where}: one source, pypi or hf"
        assert entry.quant in entry.quants, where
        for quant in entry.quants.values():
            assert quant.size and quant.size > 100_000_000, f"{where} {quant.name}"
            first = quant.files[0].path
            assert first.endswith(".gguf"), f"{where} {quant.name}"
            assert [f.path for f in quant.files] == split_parts(first), where
            if entry.hf:  # the quant is what the file name says
                assert quant_of(first) == quant.name.upper(), f"{where} {first}"
        for other in catalog.entries.values():
            if other is not entry:
                assert not {entry.id, *entry.aliases} & {other.id, *other.aliases}, where


def test_the_catalog_covers_every_tool_call_family_at_two_sizes() -> None:
    catalog = load_catalog()
    families = {e.family for e in catalog.entries.values()}
    for family in (
        "qwen3", "qwen3-coder", "hermes", "llama3", "mistral", "devstral", "ministral",
        "deepseek-r1", "deepseek-v3.1", "deepseek-v3.2", "deepseek-v4", "glm-4.6", "kimi-k2",
        "kimi-k3", "gpt-oss", "minimax-m2", "gemma4", "granite4",
    ):  # fmt: skip
        assert family in families, family
    for model_id in ("qwen3-coder:30b", "gpt-oss:20b", "gpt-oss:120b", "kimi-k3", "glm-5.2"):
        assert catalog.find(model_id) is not None, model_id
    laptop = [e for e in catalog.entries.values() if e.size and e.size < 20e9]
    workstation = [e for e in catalog.entries.values() if e.size and e.size >= 20e9]
    assert len(laptop) >= 15 and len(workstation) >= 10


def test_a_catalog_with_a_bad_entry_says_what_is_wrong() -> None:
    bad = '[models."x"]\nhf = "a/b"\nquant = "Q4_K_M"\n[models."x".files]\nQ4_K_M = {size = 1}\n'
    with pytest.raises(CatalogError, match="x Q4_K_M"):
        parse_catalog(bad)
    split = (
        '[models."x"]\nhf = "a/b"\nquant = "Q4_K_M"\n[models."x".files]\n'
        'Q4_K_M = { file = "X-Q4_K_M-00001-of-00002.gguf", sha256 = ["' + "0" * 64 + '"] }\n'
    )
    with pytest.raises(CatalogError, match="1 sha256 for 2 parts"):
        parse_catalog(split)


def test_engy_catalog_adds_models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    extra = tmp_path / "mine.toml"
    extra.write_text(
        '[models."mine:1b"]\nhf = "me/Mine-GGUF"\nquant = "Q8_0"\nfamily = "qwen3"\n'
        '[models."mine:1b".files]\nQ8_0 = { file = "Mine-Q8_0.gguf", size = 1000 }\n'
    )
    monkeypatch.setenv("ENGY_CATALOG", str(extra))
    catalog = load_catalog()
    assert catalog.find("mine:1b") is not None and catalog.find("qwen3-coder:30b") is not None
    assert catalog.default == "qwen2.5-coder:0.5b"


def test_split_parts_and_quant_names() -> None:
    assert split_parts("Q4/X-Q4_K_M-00001-of-00003.gguf") == [
        "Q4/X-Q4_K_M-00001-of-00003.gguf",
        "Q4/X-Q4_K_M-00002-of-00003.gguf",
        "Q4/X-Q4_K_M-00003-of-00003.gguf",
    ]
    assert split_parts("X-Q4_K_M.gguf") == ["X-Q4_K_M.gguf"]
    for name, quant in (
        ("Qwen3-8B.Q4_K_M.gguf", "Q4_K_M"),
        ("gpt-oss-20b-mxfp4.gguf", "MXFP4"),
        ("UD-Q4_K_M/GLM-5.2-UD-Q4_K_M-00001-of-00011.gguf", "UD-Q4_K_M"),
        ("llama-3.2-1b-instruct-q4_k_m.gguf", "Q4_K_M"),
        ("x-IQ2_XXS.gguf", "IQ2_XXS"),
        ("model-bf16.gguf", "BF16"),
        ("tiny-qwen2-0123abcd.gguf", ""),
    ):
        assert quant_of(name) == quant, name
