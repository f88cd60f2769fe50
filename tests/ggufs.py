"""Build tiny, real GGUF models for tests.

The models are "llama" architecture with one transformer block whose weights are all
zero and whose norms are ones. The residual stream is therefore just the embedding of
the current token, so the next-token logits are a fixed table lookup:
``logits = output @ rms_norm(token_embd[current])``. That lets a test script exactly
what the model says (``answer``) while still running llama.cpp for real.

Layout of the hidden state (n_embd dims):
  dim 0                   "default" direction, shared by every token not in the answer
  dims 1..len(answer)     one basis direction per answer token
  dim n_embd - 1          "bias" direction, present in every token's embedding, so that
                          the output column on it is a preference that applies always
"""

from __future__ import annotations

import hashlib
import inspect
import math
import os
import struct
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures"
VOCAB_DIR = FIXTURES / "vocab"
TEMPLATE_DIR = FIXTURES / "chat-templates"

# Logit given to the next token of the answer chain. Must beat the strongest
# preference below by a wide margin so that sampling at temperature 1.0 never strays.
CHAIN_LOGIT = 80.0
# Always-on preferences for when a grammar forbids the chain's token (forced tool calls
# run under a JSON grammar). Inside a free JSON string ~all 150k tokens are allowed at
# logit 0, and so are the other preferred tokens, so '"' needs a margin of ~14+ over all
# of them to close the string right away. Where a choice remains, close objects before
# arrays and before adding items ('}' > ']' > ',').
# Where the grammar forces a character, the single-char token must win over the many
# tokens that start with it and run on into a string (e.g. ':";\n'), hence ':' '{' '['.
# Gemma 4 writes strings between <|"|> tokens, and '"' may stand inside them: its close
# quote must beat '"' (in JSON it can never be chosen: it holds a '"').
PREFERENCES = {'"': 50, "}": 36, "]": 30, ",": 24, ":": 20, "0": 18, "{": 16, "[": 14}
PREFERENCES['<|"|>'] = 52
# Once a grammar is complete only end-of-generation tokens are allowed (or whitespace):
# make the end token win there too. Far below '"', so a plain model does not stop at once.
END_PREFERENCE = 10
# Where the grammar leaves a free choice among zero-preference tokens (key names, enum
# values), favour longer normal tokens a little, so greedy decoding does not spell
# "mode" one letter at a time. Capped well below every preference above.
LENGTH_BONUS, LENGTH_CAP = 0.125, 16
# End-of-turn markers of common chat templates, tried in order when no end_token is given.
END_TOKEN_CANDIDATES = ("<|im_end|>", "<|eot_id|>", "<turn|>", "<end_of_turn>", "<|end|>")

N_EMBD_MIN = 32
N_HEAD = 4
N_FF = 128


def vocab_path(vocab: str) -> Path:
    return VOCAB_DIR / f"ggml-vocab-{vocab}.gguf"


def fixtures_missing_reason(vocab: str = "qwen2", template: str | None = None) -> str | None:
    """A pytest skip reason when the shared fixtures are absent, else None."""
    if not vocab_path(vocab).is_file():
        return f"vocab fixture not found: {vocab_path(vocab)}"
    if template is not None and not (TEMPLATE_DIR / template).is_file():
        return f"chat template fixture not found: {TEMPLATE_DIR / template}"
    return None


# Scalar GGUF value types -> struct format (little-endian files).
_SCALAR_FMT = {
    0: "B",
    1: "b",
    2: "H",
    3: "h",
    4: "I",
    5: "i",
    6: "f",
    7: "?",
    10: "Q",
    11: "q",
    12: "d",
}


def _tokenizer_kv(vocab_file: Path) -> dict[str, tuple[Any, Any, Any]]:
    """Every ``tokenizer.*`` key of a vocab GGUF as (value, type, sub_type).

    A minimal reader of the GGUF header: gguf.GGUFReader builds a numpy view per array
    element and takes ~20 s on the qwen2 vocab's 300k strings; this takes well under 1 s.
    Strings stay raw bytes; numeric arrays become lists of Python numbers, each with its
    original GGUF type so llama.cpp's type checks still pass.
    """
    import gguf

    buf = vocab_file.read_bytes()
    if buf[:4] != b"GGUF":
        raise ValueError(f"{vocab_file} is not a GGUF file")
    pos = 4

    def take(fmt: str) -> Any:
        nonlocal pos
        (v,) = struct.unpack_from("<" + fmt, buf, pos)
        pos += struct.calcsize(fmt)
        return v

    def take_str() -> bytes:
        nonlocal pos
        n = take("Q")
        pos += n
        return buf[pos - n : pos]

    def take_value(vtype: int) -> Any:
        if vtype == gguf.GGUFValueType.STRING:
            return take_str()
        return take(_SCALAR_FMT[vtype])

    version, _n_tensors, n_kv = take("I"), take("Q"), take("Q")
    if version < 2:
        raise ValueError(f"{vocab_file}: GGUF version {version} is too old")
    out = {}
    for _ in range(n_kv):
        key = take_str().decode()
        vtype = gguf.GGUFValueType(take("I"))
        sub = None
        if vtype == gguf.GGUFValueType.ARRAY:
            sub = gguf.GGUFValueType(take("I"))
            n = take("Q")
            if sub == gguf.GGUFValueType.STRING:
                value: Any = [take_str() for _ in range(n)]
            else:
                dt = np.dtype("<" + _SCALAR_FMT[sub])
                value = np.frombuffer(buf, dtype=dt, count=n, offset=pos).tolist()
                pos += n * dt.itemsize
        else:
            value = take_value(vtype)
        if key.startswith("tokenizer."):
            out[key] = (value, vtype, sub)
    return out


def _single_token(tokens: list[bytes], text: str) -> int | None:
    """Id of the token whose text is exactly ``text``, if any."""
    try:
        return tokens.index(text.encode())
    except ValueError:
        return None


def _resolve_end_token(
    kv: dict[str, tuple[Any, Any, Any]],
    tokens: list[bytes],
    template_text: str | None,
    end_token: str | None,
) -> int:
    if end_token is not None:
        tid = _single_token(tokens, end_token)
        if tid is None:
            raise ValueError(f"end_token {end_token!r} is not a single token of this vocab")
        return tid
    # The template's own end-of-turn marker, when it has one the vocab knows.
    for cand in END_TOKEN_CANDIDATES:
        if template_text is not None and cand in template_text:
            tid = _single_token(tokens, cand)
            if tid is not None:
                return tid
    for key in ("tokenizer.ggml.eot_token_id", "tokenizer.ggml.eos_token_id"):
        if key in kv:
            return int(kv[key][0])
    raise ValueError("cannot tell the end-of-turn token; pass end_token=")


def tokenize(vocab_file: Path, text: str) -> list[int]:
    """Tokenize with llama.cpp itself, the way the server will see the text."""
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(vocab_file), vocab_only=True, verbose=False)
    try:
        return list(llm.tokenize(text.encode(), add_bos=False, special=True))
    finally:
        llm.close()


def build_tiny_gguf(
    out: Path,
    *,
    vocab: str = "qwen2",
    template: str | None = "Qwen-Qwen3-0.6B.jinja",
    answer: str | None = None,
    context_length: int = 32768,
    end_token: str | None = None,
    split_max_tensors: int = 0,
) -> Path:
    """Write a tiny llama-architecture GGUF to ``out`` and return ``out``.

    vocab: name X of shared/fixtures/vocab/ggml-vocab-X.gguf; all its tokenizer.* keys
      are copied.
    template: file name in shared/fixtures/chat-templates/ stored as
      tokenizer.chat_template; None stores no template at all (not even the vocab's).
    answer: when given, the model replies exactly this text then the end-of-turn token,
      whatever the prompt. Caveat: the first answer token is predicted from the last
      prompt token, so the answer must not contain the token that ends the rendered
      prompt (e.g. "\\n" after ChatML's "assistant\\n").
    end_token: the end-of-turn token's text; by default the template's marker
      (<|im_end|>, <|eot_id|>, <turn|>, ...) or else the vocab's eot/eos id.
    split_max_tensors: when set, write a split GGUF with at most this many tensors per
      part, as `<out stem>-00001-of-0000N.gguf` ... next to `out` (gguf-split's names);
      returns the first part.
    """
    import gguf

    vfile = vocab_path(vocab)
    kv = _tokenizer_kv(vfile)
    tokens: list[bytes] = kv["tokenizer.ggml.tokens"][0]
    n_vocab = len(tokens)
    template_text = (TEMPLATE_DIR / template).read_text() if template is not None else None
    end_id = _resolve_end_token(kv, tokens, template_text, end_token)

    chain = tokenize(vfile, answer) if answer is not None else []
    if answer is not None:
        if not chain:
            raise ValueError("answer tokenizes to no tokens")
        dup = sorted({t for t in chain if chain.count(t) > 1})
        if dup:
            pieces = [tokens[t].decode(errors="replace") for t in dup]
            raise ValueError(
                f"answer {answer!r} repeats tokens {dup} {pieces}: the next token depends "
                "only on the current one, so every answer token must be unique"
            )
        if end_id in chain:
            raise ValueError(f"answer {answer!r} contains the end-of-turn token {end_id}")

    # Room for default + one direction per answer token + bias; head_dim stays even.
    n_embd = max(N_EMBD_MIN, math.ceil((len(chain) + 2) / 32) * 32)
    bias_dim = n_embd - 1

    embd = np.zeros((n_vocab, n_embd), dtype=np.float32)
    embd[:, 0] = 1.0  # default direction
    for i, t in enumerate(chain):
        embd[t, 0] = 0.0
        embd[t, 1 + i] = 1.0
    embd[:, bias_dim] = 1.0

    # rms_norm of a row with two ones scales it to sqrt(n_embd / 2) each, so divide the
    # output weights by that to get the logits we want.
    scale = math.sqrt(n_embd / 2)
    output = np.zeros((n_vocab, n_embd), dtype=np.float32)
    prefs = np.zeros(n_vocab, dtype=np.float32)
    types = kv.get("tokenizer.ggml.token_type", (None,))[0]
    if types is not None:
        lengths = np.array([min(len(t), LENGTH_CAP) for t in tokens], dtype=np.float32)
        prefs += LENGTH_BONUS * lengths * (np.asarray(types) == 1)  # 1: normal token
    prefs[end_id] = END_PREFERENCE
    for text, logit in PREFERENCES.items():
        tid = _single_token(tokens, text)
        if tid is not None:
            prefs[tid] = logit
    output[:, bias_dim] = prefs / scale
    if chain:
        nexts = [*chain, end_id]  # default -> a0, a_i -> a_i+1, a_last -> end
        for src, dst in enumerate(nexts):
            output[dst, src] = CHAIN_LOGIT / scale

    w = gguf.GGUFWriter(out, "llama", split_max_tensors=split_max_tensors)
    w.add_name(f"engy-tiny-{vocab}")
    w.add_context_length(context_length)
    w.add_embedding_length(n_embd)
    w.add_block_count(1)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(n_vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    for key, (value, vtype, sub) in kv.items():
        if key != "tokenizer.chat_template":
            w.add_key_value(key, value, vtype, sub)
    if template_text is not None:
        w.add_chat_template(template_text)
    if "tokenizer.ggml.eot_token_id" not in kv:
        # Make sure llama.cpp stops on the end token even if it would not detect it.
        w.add_eot_token_id(end_id)

    f16 = np.float16
    zeros = np.zeros
    w.add_tensor("token_embd.weight", embd.astype(f16))
    w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    w.add_tensor("output.weight", output.astype(f16))
    w.add_tensor("blk.0.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
    for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
        w.add_tensor(f"blk.0.{name}.weight", zeros((n_embd, n_embd), dtype=f16))
    w.add_tensor("blk.0.ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
    w.add_tensor("blk.0.ffn_gate.weight", zeros((N_FF, n_embd), dtype=f16))
    w.add_tensor("blk.0.ffn_up.weight", zeros((N_FF, n_embd), dtype=f16))
    w.add_tensor("blk.0.ffn_down.weight", zeros((n_embd, N_FF), dtype=f16))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if split_max_tensors:
        return sorted(out.parent.glob(f"{out.stem}-00001-of-*.gguf"))[0]
    return out


def tiny_gguf_cached(cache_dir: Path, **kwargs: Any) -> Path:
    """build_tiny_gguf, reusing a file named by a hash of the inputs.

    The hash covers the arguments, this module's source and the fixture files used, so
    editing any of them rebuilds. A temp file + os.replace means a half-written file
    (crash, parallel workers) is never picked up.
    """
    params = inspect.signature(build_tiny_gguf).bind(Path(), **kwargs)
    params.apply_defaults()
    args = {k: v for k, v in params.arguments.items() if k != "out"}
    if args["split_max_tensors"]:
        raise ValueError("tiny_gguf_cached makes single files; call build_tiny_gguf to split")
    h = hashlib.sha256(repr(sorted(args.items())).encode())
    h.update(Path(__file__).read_bytes())
    h.update(vocab_path(args["vocab"]).read_bytes())
    if args["template"] is not None:
        h.update((TEMPLATE_DIR / args["template"]).read_bytes())
    cache_dir.mkdir(parents=True, exist_ok=True)
    path = cache_dir / f"tiny-{args['vocab']}-{h.hexdigest()[:16]}.gguf"
    if path.exists():
        return path
    fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix=".tmp-", suffix=".gguf")
    os.close(fd)
    try:
        build_tiny_gguf(Path(tmp), **kwargs)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path
