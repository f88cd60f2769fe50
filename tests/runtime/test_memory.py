"""What a model takes in memory, before llama.cpp loads it (runtime/memory.py):
the KV cache by type, the window --ctx-size auto picks, the error for one
that cannot fit, and where --gpu-layers auto puts a model a GPU cannot hold
whole. Table tests on made-up shapes, and the header reading on a real file."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.paths import CACHE

from engy_local.errors import DoesNotFit, KVTypeError
from engy_local.models.ggufmeta import tensor_sizes
from engy_local.runtime.loading import llamalog
from engy_local.runtime.loading.memory import (
    Footprint,
    Layers,
    Offload,
    Shape,
    check_fits,
    check_flash,
    fit_window,
    kv_bytes,
    kv_shape,
    kv_type,
    layers_of,
    plan_offload,
)

MiB, GiB = 1 << 20, 1 << 30


@pytest.mark.parametrize(
    ("name", "values", "expected"),
    [
        ("f16", 64, 128),
        ("f32", 64, 256),
        ("bf16", 64, 128),
        ("q8_0", 64, 68),  # 34 bytes per 32 values: a little over half of f16
        ("q4_0", 64, 36),
        ("q4_1", 64, 40),
        ("q5_0", 64, 44),
        ("q5_1", 64, 48),
        ("iq4_nl", 64, 36),
    ],
)
def test_kv_bytes_by_type(name: str, values: int, expected: int) -> None:
    assert kv_bytes(name, values) == expected


def test_a_type_llama_cpp_does_not_take_names_the_ones_it_does() -> None:
    assert kv_type("Q8_0") == "q8_0"
    with pytest.raises(KVTypeError, match=r"--cache-type-v: 'q3_k' .*q8_0, q5_1"):
        kv_type("q3_k", "--cache-type-v")


@pytest.mark.parametrize(
    ("type_v", "flash", "expected"),
    [
        ("f16", "auto", "auto"),
        ("f16", "off", "off"),
        ("q8_0", "auto", "on"),  # a quantized V is read by flash attention only
        ("q4_0", "on", "on"),
        ("bf16", "off", "off"),
    ],
)
def test_a_quantized_v_turns_flash_attention_on(type_v: str, flash: str, expected: str) -> None:
    assert check_flash(type_v, flash) == expected


def test_a_quantized_v_without_flash_attention_is_refused() -> None:
    with pytest.raises(KVTypeError, match="needs flash attention"):
        check_flash("q8_0", "off")


@pytest.mark.parametrize(
    ("meta", "expected"),
    [
        # Qwen2.5-0.5B: 24 layers, 2 KV heads of 64
        ({"block_count": 24, "attention.head_count": 14, "attention.head_count_kv": 2,
          "embedding_length": 896}, Shape(24 * 2 * 64, 24 * 2 * 64)),
        # explicit key and value widths (gemma 3)
        ({"block_count": 18, "attention.head_count": 4, "attention.head_count_kv": 1,
          "embedding_length": 640, "attention.key_length": 256,
          "attention.value_length": 256}, Shape(18 * 256, 18 * 256)),
        # attention in every fourth layer only (Qwen3.5)
        ({"block_count": 8, "attention.head_count": 2, "attention.head_count_kv": 1,
          "embedding_length": 64, "attention.key_length": 32, "full_attention_interval": 4},
         Shape(2 * 32, 2 * 32)),
        # MLA: a latent and the rope part per layer, no V
        ({"block_count": 2, "attention.head_count": 16, "embedding_length": 2048,
          "attention.kv_lora_rank": 512, "rope.dimension_count": 64}, Shape(2 * 576, 0)),
    ],
)  # fmt: skip
def test_kv_shape_from_the_header(meta: dict[str, int], expected: Shape) -> None:
    full = {"general.architecture": "arch", **{f"arch.{k}": v for k, v in meta.items()}}
    assert kv_shape(full) == expected


QWEN = Footprint(weights=400 * MiB, per_token=12 * 1024, trained=32768)


@pytest.mark.parametrize(
    ("fp", "parallel", "budget", "expected"),
    [
        (QWEN, 1, 8 * GiB, 32768),  # the model's own window fits: no more
        (QWEN, 4, 1 * GiB, 13312),  # (1 GiB - 400 MiB) / (4 x 12 KiB), in steps of 256
        (QWEN, 1, 1 * GiB, 32768),
        (Footprint(400 * MiB, 24 * 1024, 32768), 4, 1 * GiB, 6656),  # f16 vs the q8_0 above
        (Footprint(100, 0, 4096), 4, 1 * GiB, 4096),  # no KV in the header: the model's own
    ],
)
def test_auto_window_is_the_largest_that_fits(
    fp: Footprint, parallel: int, budget: int, expected: int
) -> None:
    window = fit_window(fp, parallel, budget)
    assert window == expected
    assert fp.total(window, parallel) <= budget or window == fp.trained


def test_no_room_for_a_useful_window_says_what_to_change() -> None:
    with pytest.raises(DoesNotFit, match="--memory-budget"):
        fit_window(QWEN, 4, 420 * MiB)


def test_an_explicit_window_that_cannot_fit_is_refused_with_what_would() -> None:
    check_fits(QWEN, 32768, 1, 1 * GiB, "K f16, V f16")  # fits: nothing said
    with pytest.raises(DoesNotFit) as err:
        check_fits(QWEN, 32768, 4, 1 * GiB, "K f16, V f16")
    said = str(err.value)
    assert "--ctx-size 32768 x 4 conversations needs 1.50 GiB of KV cache" in said
    assert "--ctx-size auto would give 13312" in said and "--cache-type-k q8_0" in said


def _layers(n: int, dense: int, experts: int, output: int = 0) -> Layers:
    return Layers((dense,) * n, (experts,) * n, output)


@pytest.mark.parametrize(
    ("layers", "kv", "free", "expected"),
    [
        (_layers(4, 100, 900, 50), 10, 5000, Offload(-1, 0)),  # all fits
        (_layers(4, 100, 900, 50), 10, 4000, Offload(-1, 1)),  # one layer's experts out
        (_layers(4, 100, 900, 50), 10, 2000, Offload(-1, 3)),
        (_layers(4, 100, 900, 50), 10, 490, Offload(-1, 4)),  # every expert on the CPU
        (_layers(4, 100, 900, 50), 10, 300, Offload(2, -1)),  # then layers from the end
        (_layers(4, 100, 900, 50), 10, 450, Offload(3, -1)),  # all 4 but not the output
        (_layers(4, 100, 0, 50), 10, 300, Offload(2, 0)),  # a dense model: layers only
        (_layers(4, 100, 0, 50), 10, 0, Offload(0, 0)),
    ],
)
def test_gpu_layers_auto_moves_experts_before_layers(
    layers: Layers, kv: int, free: int, expected: Offload
) -> None:
    assert plan_offload(layers, kv, free) == expected


def test_tensor_sizes_and_layers_read_from_a_real_moe_gguf() -> None:
    from support.ggufs import fixtures_missing_reason
    from support.hybrid import N_EXPERT, hybrid_gguf_cached

    if reason := fixtures_missing_reason("qwen35"):
        pytest.skip(reason)
    path = hybrid_gguf_cached(CACHE / "ggufs", arch="qwen3moe", n_layer=2)
    sizes = tensor_sizes(path)
    # f32 experts: N_EXPERT x n_ff (128) x n_embd (64) x 4 bytes, padded to 32
    assert sizes["blk.1.ffn_up_exps.weight"] == N_EXPERT * 128 * 64 * 4
    assert sum(sizes.values()) <= path.stat().st_size
    layers = layers_of(sizes, 2)
    assert layers.experts == (3 * N_EXPERT * 128 * 64 * 4,) * 2
    assert layers.dense[0] > 0 and layers.output > 0


def test_the_load_log_says_which_layers_kept_their_experts_on_the_cpu() -> None:
    text = (
        "tensor blk.0.ffn_up_exps.weight (0 MiB f16) buffer type overridden to CPU\n"
        "tensor blk.0.ffn_down_exps.weight (0 MiB f16) buffer type overridden to CPU\n"
        "tensor blk.1.ffn_gate_exps.weight (0 MiB f16) buffer type overridden to CPU_REPACK\n"
        "load_tensors: offloaded 3/3 layers to GPU\n"
        "load_tensors:        CUDA0 model buffer size =    10.50 MiB\n"
    )
    split = llamalog.parse_split(text)
    assert split.overridden == 2
    assert split.line() == (
        "3/3 layers offloaded, CUDA0 10.5 MiB, experts of 2 layers in CPU memory"
    )
    kv = "llama_kv_cache: size =   48.00 MiB (  4096 cells,  24 layers,  4/4 seqs), K (q8_0)"
    assert llamalog.parse_kv_size(kv + "\nllama_kv_cache: size =    2.00 MiB") == 50 * MiB


def test_tensor_sizes_of_a_missing_file_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        tensor_sizes(tmp_path / "nope.gguf")
