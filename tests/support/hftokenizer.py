"""A Hugging Face model snapshot's tokenizer files made from a vocab GGUF in
../shared/fixtures/vocab, as an upstream serving safetensors would come
with: tokenizer.json (byte-level BPE with the vocabulary's merges and
pre-tokenizer regex), tokenizer_config.json (chat template, special tokens)
and config.json (the trained window)."""

from __future__ import annotations

import json
from pathlib import Path

from support.ggufs import TEMPLATE_DIR, tokenizer_kv, vocab_path

# The pre-tokenizer split of Qwen2's tokenizer.json (llama.cpp's "qwen2").
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_CONTROL, _USER_DEFINED = 3, 4  # llama.cpp token types


def build_hf_snapshot(out: Path, template: str, vocab: str = "qwen2") -> Path:
    """The snapshot directory (built once; the files are kept)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
    from tokenizers import pre_tokenizers as pre

    if (out / "tokenizer.json").is_file():
        return out
    assert vocab == "qwen2", "only Qwen2's pre-tokenizer is written out here"
    kv = tokenizer_kv(vocab_path(vocab))
    tokens = [t.decode("utf-8") for t in kv["tokenizer.ggml.tokens"][0]]
    types = kv["tokenizer.ggml.token_type"][0]
    merges = [tuple(m.decode("utf-8").split(" ", 1)) for m in kv["tokenizer.ggml.merges"][0]]
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre.Sequence(
        [
            pre.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
            pre.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    special = [i for i, t in enumerate(types) if t in (_CONTROL, _USER_DEFINED)]
    tok.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False) for i in special])
    out.mkdir(parents=True, exist_ok=True)
    config = {
        "chat_template": (TEMPLATE_DIR / template).read_text(),
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "add_bos_token": False,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config))
    model_config = {"max_position_embeddings": 40960, "torch_dtype": "bfloat16"}
    (out / "config.json").write_text(json.dumps(model_config))
    ends = [tokens.index(t) for t in ("<|im_end|>", "<|endoftext|>")]
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": ends}))
    tok.save(str(out / "tokenizer.json.part"))
    (out / "tokenizer.json.part").rename(out / "tokenizer.json")
    return out
