"""Tiny GGUFs for tests with seeded random weights, run by the real
llama.cpp: hybrids (recurrent layers beside attention) and a mixture of
experts.

Three architectures, their tensors named and shaped as llama.cpp loads them:
- "qwen35" (Qwen3.5): Gated DeltaNet layers, every fourth layer full
  attention with a gated query;
- "lfm2" (LFM2): short convolutions, attention where a layer has KV heads;
- "qwen3moe" (Qwen3 MoE): attention in every layer, its feed-forward a
  router over N_EXPERT experts of which two run per token.

The weights are random, so every answer depends on the whole prompt
through the recurrent state: a cache that restores the wrong state (or
none) changes the greedy answer. The output layer writes only the tokens
of a small lexicon (words and digits of the tests' prompts), its logits
spread wide enough that argmax does not turn on rounding (batch shapes
change the sums' order): answers are text such as "keep 7.3:\nnote 41",
running to max_tokens, whose pairs of tokens the prompt holds too, so
the drafter of speculative decoding finds something to propose.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from support.ggufs import TEMPLATE_DIR, cached_build, tokenize, tokenizer_kv, vocab_path

HEAD_DIM = 32
OUTPUT_SPREAD = 8.0  # the logits' standard deviation
ARCHS = ("qwen35", "lfm2", "qwen3moe")
N_EXPERT, N_EXPERT_USED = 4, 2
LEXICON = "note 0123456789: keep.\n"


def build_hybrid_gguf(
    out: Path,
    *,
    arch: str = "qwen35",
    vocab: str = "qwen35",
    template: str | None = "Qwen-Qwen3-0.6B.jinja",
    context_length: int = 32768,
    seed: int = 0,
    lexicon: str = LEXICON,
    n_embd: int = 64,
    n_layer: int = 4,
    half: bool = False,
) -> Path:
    """Write a tiny `arch` GGUF to `out` and return `out`. vocab: the
    fixture ggml-vocab-X.gguf whose tokenizer.* keys are copied; template:
    a chat template fixture stored as tokenizer.chat_template; lexicon:
    the text whose tokens are all the model writes; n_embd, n_layer: its
    size (bench/hybrid.py takes a larger one than the tests, whose
    weights it stores in half precision with `half`)."""
    import gguf

    if arch not in ARCHS:
        raise ValueError(f"arch must be one of {ARCHS}, not {arch!r}")
    kv = tokenizer_kv(vocab_path(vocab))
    tokens = kv["tokenizer.ggml.tokens"][0]
    types = np.asarray(kv["tokenizer.ggml.token_type"][0])
    rng = np.random.default_rng(seed)

    def dense(rows: int, cols: int, gain: float = 1.0) -> np.ndarray:
        """A `cols` -> `rows` projection (numpy's shape is llama.cpp's reversed)."""
        weights = (rng.standard_normal((rows, cols)) * gain / np.sqrt(cols)).astype(np.float32)
        return weights.astype(np.float16) if half and min(rows, cols) > 16 else weights

    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    w = gguf.GGUFWriter(out, arch)
    w.add_name(f"engy-tiny-{arch}")
    w.add_context_length(context_length)
    shape = Shape(n_embd, 2 * n_embd, n_layer)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(shape.n_ff)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(len(tokens))
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    for key, (value, vtype, sub) in kv.items():
        if key != "tokenizer.chat_template":
            w.add_key_value(key, value, vtype, sub)
    if template is not None:
        w.add_chat_template((TEMPLATE_DIR / template).read_text())

    embd = rng.standard_normal((len(tokens), n_embd)).astype(np.float32)
    words = sorted(set(tokenize(vocab_path(vocab), lexicon)) & set(np.flatnonzero(types == 1)))
    output = np.zeros((len(tokens), n_embd), dtype=np.float32)
    # Every other token scores 0; the best of the lexicon's is well above.
    output[words] = dense(len(words), n_embd, OUTPUT_SPREAD)
    w.add_tensor("token_embd.weight", embd.astype(np.float16))
    w.add_tensor("output.weight", output.astype(np.float16))

    if arch == "qwen35":
        _qwen35(w, shape, rng, dense, ones)
    elif arch == "lfm2":
        _lfm2(w, shape, dense, ones)
    else:
        _qwen3moe(w, shape, dense, ones)
    for i in range(n_layer if arch != "qwen3moe" else 0):
        w.add_tensor(f"blk.{i}.ffn_gate.weight", dense(shape.n_ff, n_embd))
        w.add_tensor(f"blk.{i}.ffn_up.weight", dense(shape.n_ff, n_embd))
        w.add_tensor(f"blk.{i}.ffn_down.weight", dense(n_embd, shape.n_ff))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


@dataclass(frozen=True)
class Shape:
    n_embd: int
    n_ff: int
    n_layer: int


def _qwen35(w: Any, shape: Shape, rng: np.random.Generator, dense: Any, ones: Any) -> None:
    """Gated DeltaNet layers, gated attention in every fourth (3, 7, ...)."""
    n_head, n_head_kv = 2, 1
    d_state, n_group, n_v_heads, d_conv = 16, 2, 4, 4
    key_dim, value_dim = d_state * n_group, d_state * n_v_heads
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_rope_dimension_sections([6, 5, 5, 0])
    w.add_full_attention_interval(4)
    w.add_ssm_conv_kernel(d_conv)
    w.add_ssm_inner_size(value_dim)
    w.add_ssm_state_size(d_state)
    w.add_ssm_time_step_rank(n_v_heads)
    w.add_ssm_group_count(n_group)
    w.add_tensor("output_norm.weight", ones(shape.n_embd))
    for i in range(shape.n_layer):
        b = f"blk.{i}"
        w.add_tensor(f"{b}.attn_norm.weight", ones(shape.n_embd))
        w.add_tensor(f"{b}.post_attention_norm.weight", ones(shape.n_embd))
        if (i + 1) % 4 == 0:
            w.add_tensor(f"{b}.attn_q.weight", dense(HEAD_DIM * n_head * 2, shape.n_embd))
            w.add_tensor(f"{b}.attn_k.weight", dense(HEAD_DIM * n_head_kv, shape.n_embd))
            w.add_tensor(f"{b}.attn_v.weight", dense(HEAD_DIM * n_head_kv, shape.n_embd))
            w.add_tensor(f"{b}.attn_output.weight", dense(shape.n_embd, HEAD_DIM * n_head))
            w.add_tensor(f"{b}.attn_q_norm.weight", ones(HEAD_DIM))
            w.add_tensor(f"{b}.attn_k_norm.weight", ones(HEAD_DIM))
            continue
        conv_dim = key_dim * 2 + value_dim
        w.add_tensor(f"{b}.attn_qkv.weight", dense(conv_dim, shape.n_embd))
        w.add_tensor(f"{b}.attn_gate.weight", dense(value_dim, shape.n_embd))
        w.add_tensor(f"{b}.ssm_conv1d.weight", dense(conv_dim, d_conv))
        w.add_tensor(f"{b}.ssm_dt.bias", rng.uniform(-1, 1, n_v_heads).astype(np.float32))
        # A = -exp(A_log): a decay, so the state forgets slowly but surely
        w.add_tensor(f"{b}.ssm_a", -rng.uniform(0.5, 2.0, n_v_heads).astype(np.float32))
        w.add_tensor(f"{b}.ssm_beta.weight", dense(n_v_heads, shape.n_embd))
        w.add_tensor(f"{b}.ssm_alpha.weight", dense(n_v_heads, shape.n_embd))
        w.add_tensor(f"{b}.ssm_norm.weight", ones(d_state))
        w.add_tensor(f"{b}.ssm_out.weight", dense(shape.n_embd, value_dim))


def _lfm2(w: Any, shape: Shape, dense: Any, ones: Any) -> None:
    """Short convolutions, attention in every third layer from 2 (2, 5, ...)."""
    n_head, n_head_kv, l_cache = 2, 1, 3
    attention = [n_head_kv if i % 3 == 2 else 0 for i in range(shape.n_layer)]
    w.add_head_count(n_head)
    w.add_head_count_kv(attention)
    w.add_shortconv_l_cache(l_cache)
    w.add_tensor("token_embd_norm.weight", ones(shape.n_embd))
    for i, kv_heads in enumerate(attention):
        b = f"blk.{i}"
        w.add_tensor(f"{b}.attn_norm.weight", ones(shape.n_embd))
        w.add_tensor(f"{b}.ffn_norm.weight", ones(shape.n_embd))
        if kv_heads:
            w.add_tensor(f"{b}.attn_q.weight", dense(shape.n_embd, shape.n_embd))
            w.add_tensor(f"{b}.attn_k.weight", dense(HEAD_DIM * kv_heads, shape.n_embd))
            w.add_tensor(f"{b}.attn_v.weight", dense(HEAD_DIM * kv_heads, shape.n_embd))
            w.add_tensor(f"{b}.attn_output.weight", dense(shape.n_embd, shape.n_embd))
            w.add_tensor(f"{b}.attn_q_norm.weight", ones(HEAD_DIM))
            w.add_tensor(f"{b}.attn_k_norm.weight", ones(HEAD_DIM))
        else:
            w.add_tensor(f"{b}.shortconv.conv.weight", dense(shape.n_embd, l_cache))
            w.add_tensor(f"{b}.shortconv.in_proj.weight", dense(3 * shape.n_embd, shape.n_embd))
            w.add_tensor(f"{b}.shortconv.out_proj.weight", dense(shape.n_embd, shape.n_embd))


def _qwen3moe(w: Any, shape: Shape, dense: Any, ones: Any) -> None:
    """Attention with normed q and k, then N_EXPERT experts behind a router."""
    n_head, n_head_kv = 2, 1
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_expert_count(N_EXPERT)
    w.add_expert_used_count(N_EXPERT_USED)
    w.add_expert_feed_forward_length(shape.n_ff)
    w.add_tensor("output_norm.weight", ones(shape.n_embd))

    def experts(rows: int, cols: int) -> np.ndarray:
        return np.stack([dense(rows, cols) for _ in range(N_EXPERT)])

    for i in range(shape.n_layer):
        b = f"blk.{i}"
        w.add_tensor(f"{b}.attn_norm.weight", ones(shape.n_embd))
        w.add_tensor(f"{b}.attn_q.weight", dense(HEAD_DIM * n_head, shape.n_embd))
        w.add_tensor(f"{b}.attn_k.weight", dense(HEAD_DIM * n_head_kv, shape.n_embd))
        w.add_tensor(f"{b}.attn_v.weight", dense(HEAD_DIM * n_head_kv, shape.n_embd))
        w.add_tensor(f"{b}.attn_output.weight", dense(shape.n_embd, HEAD_DIM * n_head))
        w.add_tensor(f"{b}.attn_q_norm.weight", ones(HEAD_DIM))
        w.add_tensor(f"{b}.attn_k_norm.weight", ones(HEAD_DIM))
        w.add_tensor(f"{b}.ffn_norm.weight", ones(shape.n_embd))
        w.add_tensor(f"{b}.ffn_gate_inp.weight", dense(N_EXPERT, shape.n_embd))
        w.add_tensor(f"{b}.ffn_gate_exps.weight", experts(shape.n_ff, shape.n_embd))
        w.add_tensor(f"{b}.ffn_up_exps.weight", experts(shape.n_ff, shape.n_embd))
        w.add_tensor(f"{b}.ffn_down_exps.weight", experts(shape.n_embd, shape.n_ff))


def hybrid_gguf_cached(cache_dir: Path, **kwargs: Any) -> Path:
    """build_hybrid_gguf, reusing a file named by a hash of its inputs
    (ggufs.cached_build)."""
    return cached_build(cache_dir, build_hybrid_gguf, "hybrid-{arch}", **kwargs)
