"""Whether a model fits this machine (`engy list`, `engy models`, the
warning `engy pull` gives): the memory at serve's defaults, weighed against
a machine's GPUs and RAM. The machines are made up; the models are the tiny
test GGUFs, read as memory.py reads them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.ggufs import fixtures_missing_reason
from support.paths import CACHE
from typer.testing import CliRunner

from engy_local.commands.cli import app
from engy_local.commands.inventory import fit_warning
from engy_local.models.ggufmeta import read_metadata, tensor_sizes
from engy_local.runtime.loading.fit import Machine, estimate
from engy_local.runtime.loading.memory import GPU_MARGIN, footprint, layers_of

GiB = 1 << 30
BIG = 1 << 40


def test_each_verdict_from_the_memory_it_needs(tiny_qwen3: Path) -> None:
    size = tiny_qwen3.stat().st_size
    fp = footprint(tiny_qwen3)
    on_gpu = estimate((tiny_qwen3,), size, Machine((BIG,), ("CUDA0",), BIG))
    assert on_gpu.verdict == "gpu" and on_gpu.label == "fits on the GPU"
    # serve's defaults: the model's window up to 32768, 4 sequences, f16
    assert on_gpu.window == min(fp.trained, 32768)
    assert on_gpu.kv == fp.per_token * on_gpu.window * 4
    assert on_gpu.need == size + on_gpu.kv
    # The GPU keeps a margin free for llama.cpp's buffers.
    tight = Machine((GPU_MARGIN + on_gpu.need - 1,), ("CUDA0",), BIG)
    assert estimate((tiny_qwen3,), size, tight).verdict == "ram"
    assert estimate((tiny_qwen3,), size, Machine((), (), BIG)).label == "fits in RAM only"
    small = Machine((), (), on_gpu.need - 1)
    assert estimate((tiny_qwen3,), size, small).label == "too large"
    q8 = estimate((tiny_qwen3,), size, Machine((), (), BIG), type_k="q8_0", type_v="q8_0")
    assert q8.kv is not None and q8.kv < on_gpu.kv


def test_a_mixture_of_experts_fits_with_experts_in_cpu_memory() -> None:
    if reason := fixtures_missing_reason("qwen35", "Qwen-Qwen3-0.6B.jinja"):
        pytest.skip(reason)
    from support.hybrid import hybrid_gguf_cached

    moe = hybrid_gguf_cached(CACHE / "ggufs", arch="qwen3moe")
    meta = read_metadata(moe)
    layers = layers_of(tensor_sizes(moe), meta["qwen3moe.block_count"])
    size = moe.stat().st_size
    whole = estimate((moe,), size, Machine((BIG,), ("CUDA0",), BIG))
    assert whole.verdict == "gpu" and whole.kv
    # Room for all but half the experts: some stay in CPU memory.
    everything = sum(layers.dense) + sum(layers.experts) + layers.output + whole.kv
    room = GPU_MARGIN + everything - sum(layers.experts) // 2
    fit = estimate((moe,), size, Machine((room,), ("CUDA0",), BIG))
    assert fit.label == "fits with experts in CPU memory"
    # Not even the layers without their experts: it runs from RAM.
    assert estimate((moe,), size, Machine((GPU_MARGIN + 1,), ("CUDA0",), BIG)).verdict == "ram"


def test_a_model_not_downloaded_is_judged_by_its_size() -> None:
    fit = estimate(None, 20 * GiB, Machine((24 * GiB,), ("Metal",), 64 * GiB))
    assert fit.verdict == "gpu" and fit.kv is None and fit.need == 20 * GiB
    assert estimate(None, 20 * GiB, Machine((), (), 16 * GiB)).verdict == "large"


def test_models_lists_a_size_and_a_verdict_for_every_catalog_model(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ENGY_HOME", str(tmp_path / "engy"))
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("ENGY_MODELS_DIRS", "")
    monkeypatch.delenv("OLLAMA_MODELS", raising=False)
    result = CliRunner().invoke(app, ["models", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert len(rows) > 20
    for row in rows:
        assert row["size"] > 0 and row["fit"] in ("gpu", "experts", "ram", "large"), row
        assert row["memory"] >= row["size"]
    assert sum(row["default"] for row in rows) == 1
    kimi = next(row for row in rows if row["id"].startswith("kimi"))
    assert kimi["fit"] == "large"  # hundreds of GB: no machine running these tests holds it

    result = CliRunner().invoke(app, ["models"])
    assert result.exit_code == 0
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert lines[0].split() == ["ID", "QUANT", "SIZE", "MEMORY", "FIT", "NAME"]
    assert len(lines) == len(rows) + 1
    assert all(any(v in line for v in ("fits", "too large")) for line in lines[1:])


def test_pull_warns_before_downloading_what_will_not_fit() -> None:
    laptop = Machine((), (), 8 * GiB)
    warning = fit_warning("kimi-k2.6", laptop)
    assert "more than this machine's memory holds" in warning
    assert fit_warning("gemma-3-270m", laptop) == ""
    gpu = Machine((4 * GiB,), ("CUDA0",), 64 * GiB)
    assert "will not fit the GPU" in fit_warning("qwen3-coder:30b", gpu)
    assert fit_warning("hf:someone/repo", laptop) == ""  # size unknown before it is asked
