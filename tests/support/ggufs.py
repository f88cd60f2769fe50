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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from support.paths import FIXTURES, need_fixtures

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


def tokenizer_kv(vocab_file: Path) -> dict[str, tuple[Any, Any, Any]]:
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
    colours: bool = False,
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
    colours: the model sees images through build_tiny_projector's projector:
      with a red image anywhere in the context it answers " red" and ends its
      turn, with a blue one " blue" (see COLOUR_* below); text alone is
      unaffected.
    """
    import gguf

    vfile = vocab_path(vocab)
    kv = tokenizer_kv(vfile)
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

    # Room for default + one direction per answer token + bias (+ the colour
    # dims); head_dim stays even.
    extra = len(COLOUR_DIMS) if colours else 0
    n_embd = max(N_EMBD_MIN, math.ceil((len(chain) + 2 + extra) / 32) * 32)
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

    attn_v = np.zeros((n_embd, n_embd), dtype=np.float32)
    attn_output = np.zeros((n_embd, n_embd), dtype=np.float32)
    if colours:
        words = {name: tokenize(vfile, word) for name, word in COLOUR_WORDS.items()}
        _see_colours(words, embd, output, attn_v, attn_output, end_id, scale)

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
    for name in ("attn_q", "attn_k"):
        w.add_tensor(f"blk.0.{name}.weight", zeros((n_embd, n_embd), dtype=f16))
    w.add_tensor("blk.0.attn_v.weight", attn_v.astype(f16))
    w.add_tensor("blk.0.attn_output.weight", attn_output.astype(f16))
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


# ---- seeing colours ----------------------------------------------------------
#
# With zero queries and keys every position attends to all before it alike,
# so attention hands each token the mean of the values in its context. The
# colour model's values carry two directions no text token has, red and blue,
# which only the projector writes (build_tiny_projector); the output layer
# turns red into a strong vote for " red", blue for " blue", and those two
# tokens have a "stop" direction that votes for the end of the turn. So the
# model answers a red image with " red" and stops, whatever else the prompt
# says, as long as the image is a fair share of the context (tens of tokens
# in a prompt of a few hundred).

# Offsets from the end of the embedding (the bias direction is n_embd - 1).
COLOUR_DIMS = {"red": 2, "blue": 3, "stop": 4}
COLOUR_WORDS = {"red": " red", "blue": " blue"}
ATTN_GAIN = 10.0
COLOUR_LOGIT = 100.0
STOP_LOGIT = 5000.0


def colour_dim(n_embd: int, name: str) -> int:
    return n_embd - COLOUR_DIMS[name]


def _see_colours(
    words: dict[str, list[int]],
    embd: np.ndarray,
    output: np.ndarray,
    attn_v: np.ndarray,
    attn_output: np.ndarray,
    end_id: int,
    scale: float,
) -> None:
    n_embd = embd.shape[1]
    stop = colour_dim(n_embd, "stop")
    for name, ids in words.items():
        dim = colour_dim(n_embd, name)
        if len(ids) != 1:
            raise ValueError(f"{COLOUR_WORDS[name]!r} is not a single token of this vocab")
        (tid,) = ids
        attn_v[dim, dim] = 1.0  # numpy (out, in): the value copies the colour
        attn_output[dim, dim] = ATTN_GAIN
        output[tid, dim] = COLOUR_LOGIT / scale
        embd[tid, stop] = 1.0
    output[end_id, stop] = STOP_LOGIT / scale


def cached_build(cache_dir: Path, build: Callable[..., Path], name: str, **kwargs: Any) -> Path:
    """`build(out, **kwargs)`, reusing a file named `name` (formatted with
    the arguments) and a hash of the inputs.

    The hash covers the arguments, the builder's module and the fixture files it
    reads (a `vocab`, a `template`), so editing any of them rebuilds. A temp file
    + os.replace means a half-written file (crash, parallel workers) is never
    picked up.
    """
    params = inspect.signature(build).bind(Path(), **kwargs)
    params.apply_defaults()
    args = {k: v for k, v in params.arguments.items() if k != "out"}
    h = hashlib.sha256(repr(sorted(args.items())).encode())
    h.update(Path(inspect.getfile(build)).read_bytes())
    if "vocab" in args or args.get("template") is not None:
        need_fixtures()  # a skip that says where they were looked for
    if "vocab" in args:
        h.update(vocab_path(args["vocab"]).read_bytes())
    if args.get("template") is not None:
        h.update((TEMPLATE_DIR / args["template"]).read_bytes())
    cache_dir.mkdir(parents=True, exist_ok=True)
    path = cache_dir / f"{name.format(**args)}-{h.hexdigest()[:16]}.gguf"
    if path.exists():
        return path
    fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix=".tmp-", suffix=".gguf")
    os.close(fd)
    try:
        build(Path(tmp), **kwargs)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def tiny_gguf_cached(cache_dir: Path, **kwargs: Any) -> Path:
    """build_tiny_gguf, reusing a file named by a hash of the inputs (cached_build)."""
    if kwargs.get("split_max_tensors"):
        raise ValueError("tiny_gguf_cached makes single files; call build_tiny_gguf to split")
    return cached_build(cache_dir, build_tiny_gguf, "tiny-{vocab}", **kwargs)


# ---- a tiny vision projector ------------------------------------------------
#
# llama.cpp's "mlp" (LLaVA) projector: a patch embedding (a conv with stride
# patch_size), a position embedding, vision blocks (with block_count = 1 the
# LLaVA graph runs none of them: it stops before the last) and a two-layer MLP
# mm.0 -> GELU -> mm.2 into the text model's embedding width.
#
# The weights read the colour of each patch: the vision embedding holds the
# patch's mean red and mean blue (pixels normalized to -1..1), and the MLP
# maps every patch onto the embedding of an ordinary token (default + bias
# directions), plus the red direction of a `colours=True` text model for a
# red patch, its blue direction for a blue one. That model then answers
# " red" or " blue" (see _see_colours): a test can tell that the image
# reached the model, and which one it was.

PROJ_N_EMBD = 4  # vision width: red, blue, two unused
PROJ_N_FF = 8
PROJ_GAIN = 10.0  # GELU(10) ~ 10 and GELU(-10) ~ 0: a clean switch


def build_tiny_projector(
    out: Path, *, n_embd_text: int = N_EMBD_MIN, image_size: int = 32, patch_size: int = 8
) -> Path:
    """Write a tiny mmproj GGUF for a text model from build_tiny_gguf with
    `n_embd_text` wide embeddings (built with colours=True to see them). An
    image becomes (image_size / patch_size)**2 tokens."""
    import gguf

    if image_size % patch_size:
        raise ValueError("image_size must be a multiple of patch_size")
    n_v, n_ff, bias_dim = PROJ_N_EMBD, PROJ_N_FF, n_embd_text - 1
    n_patches = (image_size // patch_size) ** 2

    w = gguf.GGUFWriter(out, "clip")
    w.add_name("engy-tiny-projector")
    w.add_string("clip.projector_type", "mlp")
    w.add_bool("clip.has_vision_encoder", True)
    w.add_bool("clip.use_gelu", True)
    w.add_uint32("clip.vision.image_size", image_size)
    w.add_uint32("clip.vision.patch_size", patch_size)
    w.add_uint32("clip.vision.embedding_length", n_v)
    w.add_uint32("clip.vision.feed_forward_length", n_ff)
    w.add_uint32("clip.vision.block_count", 1)
    w.add_uint32("clip.vision.projection_dim", n_embd_text)
    w.add_uint32("clip.vision.attention.head_count", 1)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
    w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)

    f32, f16 = np.float32, np.float16
    # Conv kernel [n_v, 3, p, p] (numpy order): channel means of the patch.
    patch = np.zeros((n_v, 3, patch_size, patch_size), dtype=f32)
    patch[0, 0] = 1.0 / patch_size**2  # red
    patch[1, 2] = 1.0 / patch_size**2  # blue
    w.add_tensor("v.patch_embd.weight", patch.astype(f16))
    w.add_tensor("v.position_embd.weight", np.zeros((n_patches, n_v), dtype=f32))
    # The one vision block: loaded (llama.cpp requires it), never run.
    for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
        w.add_tensor(f"v.blk.0.{name}.weight", np.zeros((n_v, n_v), dtype=f32))
        w.add_tensor(f"v.blk.0.{name}.bias", np.zeros(n_v, dtype=f32))
    for name in ("ln1", "ln2"):
        w.add_tensor(f"v.blk.0.{name}.weight", np.ones(n_v, dtype=f32))
        w.add_tensor(f"v.blk.0.{name}.bias", np.zeros(n_v, dtype=f32))
    w.add_tensor("v.blk.0.ffn_up.weight", np.zeros((n_ff, n_v), dtype=f32))
    w.add_tensor("v.blk.0.ffn_up.bias", np.zeros(n_ff, dtype=f32))
    w.add_tensor("v.blk.0.ffn_down.weight", np.zeros((n_v, n_ff), dtype=f32))
    w.add_tensor("v.blk.0.ffn_down.bias", np.zeros(n_v, dtype=f32))

    mm0 = np.zeros((n_ff, n_v), dtype=f32)
    mm0[0, 0] = mm0[1, 1] = PROJ_GAIN  # hidden 0: red, hidden 1: blue
    w.add_tensor("mm.0.weight", mm0)
    w.add_tensor("mm.0.bias", np.zeros(n_ff, dtype=f32))
    # Output = default + bias directions (an ordinary token), plus the red
    # or the blue direction.
    mm2 = np.zeros((n_embd_text, n_ff), dtype=f32)
    for hidden, name in ((0, "red"), (1, "blue")):
        mm2[colour_dim(n_embd_text, name), hidden] = 1.0 / PROJ_GAIN
    b2 = np.zeros(n_embd_text, dtype=f32)
    b2[0] = b2[bias_dim] = 1.0
    w.add_tensor("mm.2.weight", mm2)
    w.add_tensor("mm.2.bias", b2)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def tiny_projector_cached(cache_dir: Path, **kwargs: Any) -> Path:
    """build_tiny_projector, reusing a file named by a hash of its inputs."""
    return cached_build(cache_dir, build_tiny_projector, "mmproj-tiny", **kwargs)


# ---- two turns: a tool call, then an answer after its result ---------------------

# Logit that sends the first answer token to the second turn's chain once the
# marker is in the context; far over CHAIN_LOGIT, and cancelled (SUPPRESS) in
# every chain state so that only the first token of the answer is moved.
TURN2_LOGIT = 200.0
SUPPRESS = -300.0
# Attention score of the marker token for every query (softmax weight ~1
# against tens of thousands of others at score 0).
MARKER_SCORE = 40.0
ROPE_BASE = 1e12  # the last rotary pair barely turns over any real window


def build_two_turn_gguf(
    out: Path,
    *,
    vocab: str = "llama-bpe",
    template: str = "meta-llama-Llama-3.1-8B-Instruct.jinja",
    first: str,
    then: str,
    marker: str,
    context_length: int = 32768,
    end_token: str | None = None,
) -> Path:
    """A tiny GGUF that says `first` (say, a tool call) on a fresh
    conversation and `then` once `marker` (one token) is anywhere in the
    prompt: the marker is a token of `first`, so it is in the context from
    the moment the client sends the call back with its result.

    As in build_tiny_gguf the next token is a table lookup on the current
    one, so neither text may repeat a token, and the two share none. One
    attention head tells the turns apart: its query is the same for every
    token, its key is non-zero only for the marker, so it attends to the
    marker wherever it is (the key and query sit in the slowest rotary pair,
    with a huge rope base, so position does not matter) and copies a "second
    turn" direction into the residual. That direction moves the choice of
    the first answer token from `first`'s chain to `then`'s; within the
    chains it is cancelled.
    """
    import gguf

    vfile = vocab_path(vocab)
    kv = tokenizer_kv(vfile)
    tokens: list[bytes] = kv["tokenizer.ggml.tokens"][0]
    n_vocab = len(tokens)
    template_text = (TEMPLATE_DIR / template).read_text()
    end_id = _resolve_end_token(kv, tokens, template_text, end_token)
    # A first text that repeats tokens (a patch: "***", "\\n") is spelled
    # with other pieces where the tokenizer's split repeats one.
    chain_a = tokenize(vfile, first)
    if len(set(chain_a)) != len(chain_a):
        chain_a = unique_tokenization(vocab, first)
    chain_b = tokenize(vfile, then)
    marker_ids = tokenize(vfile, marker)
    if len(marker_ids) != 1 or marker_ids[0] not in chain_a:
        raise ValueError(f"marker {marker!r} must be one token of `first`")
    both = chain_a + chain_b
    if len(set(both)) != len(both) or end_id in both:
        raise ValueError("first and then must not repeat a token, share one or hold the end")
    m_id = marker_ids[0]

    n_embd = max(N_EMBD_MIN, math.ceil((len(both) + 4) / 32) * 32)
    head_dim = n_embd // N_HEAD
    a_dims = list(range(1, 1 + len(chain_a)))
    b_dims = list(range(1 + len(chain_a), 1 + len(both)))
    turn2_dim, marker_dim, bias_dim = n_embd - 3, n_embd - 2, n_embd - 1

    embd = np.zeros((n_vocab, n_embd), dtype=np.float32)
    embd[:, 0] = 1.0
    for dims, chain in ((a_dims, chain_a), (b_dims, chain_b)):
        for d, t in zip(dims, chain, strict=True):
            embd[t, 0] = 0.0
            embd[t, d] = 1.0
    embd[m_id, marker_dim] = 1.0  # a chain token with a key of its own
    embd[:, bias_dim] = 1.0

    # The attention input is rms_norm(embedding): two ones -> sqrt(n/2) each,
    # the marker's three ones -> sqrt(n/3).
    two, three = math.sqrt(n_embd / 2), math.sqrt(n_embd / 3)
    wq = np.zeros((n_embd, n_embd), dtype=np.float32)
    wk = np.zeros((n_embd, n_embd), dtype=np.float32)
    wv = np.zeros((n_embd, n_embd), dtype=np.float32)
    wo = np.zeros((n_embd, n_embd), dtype=np.float32)
    qk = head_dim - 2  # head 0's slowest rotary pair
    q = 4.0
    wq[qk, bias_dim] = q / two
    wk[qk, marker_dim] = MARKER_SCORE * math.sqrt(head_dim) / q / three
    wv[0, marker_dim] = 1.0 / three  # head 0 carries 1.0 ...
    wo[turn2_dim, 0] = 1.0  # ... into the second-turn direction

    output = np.zeros((n_vocab, n_embd), dtype=np.float32)
    prefs = np.zeros(n_vocab, dtype=np.float32)
    types = kv.get("tokenizer.ggml.token_type", (None,))[0]
    if types is not None:
        lengths = np.array([min(len(t), LENGTH_CAP) for t in tokens], dtype=np.float32)
        prefs += LENGTH_BONUS * lengths * (np.asarray(types) == 1)
    prefs[end_id] = END_PREFERENCE
    for text, logit in PREFERENCES.items():
        tid = _single_token(tokens, text)
        if tid is not None:
            prefs[tid] = logit
    output[:, bias_dim] = prefs / two
    for dims, chain in ((a_dims, chain_a), (b_dims, chain_b)):
        for src, dst in zip(dims, [*chain[1:], end_id], strict=True):
            output[dst, src] = CHAIN_LOGIT / two
    output[chain_a[0], 0] = CHAIN_LOGIT / two
    output[chain_b[0], turn2_dim] = TURN2_LOGIT / two
    output[chain_b[0], a_dims + b_dims] = SUPPRESS / two

    w = gguf.GGUFWriter(out, "llama")
    w.add_name(f"engy-two-turn-{vocab}")
    w.add_context_length(context_length)
    w.add_embedding_length(n_embd)
    w.add_block_count(1)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(ROPE_BASE)
    w.add_vocab_size(n_vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    for key, (value, vtype, sub) in kv.items():
        if key != "tokenizer.chat_template":
            w.add_key_value(key, value, vtype, sub)
    w.add_chat_template(template_text)
    if "tokenizer.ggml.eot_token_id" not in kv:
        w.add_eot_token_id(end_id)

    f16 = np.float16
    w.add_tensor("token_embd.weight", embd.astype(f16))
    w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    w.add_tensor("output.weight", output.astype(f16))
    w.add_tensor("blk.0.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
    for name, weight in (("attn_q", wq), ("attn_k", wk), ("attn_v", wv), ("attn_output", wo)):
        w.add_tensor(f"blk.0.{name}.weight", weight.astype(f16))
    w.add_tensor("blk.0.ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
    w.add_tensor("blk.0.ffn_gate.weight", np.zeros((N_FF, n_embd), dtype=f16))
    w.add_tensor("blk.0.ffn_up.weight", np.zeros((N_FF, n_embd), dtype=f16))
    w.add_tensor("blk.0.ffn_down.weight", np.zeros((n_embd, N_FF), dtype=f16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def _byte_level_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet (llama-bpe, qwen2): vocab character -> byte."""
    visible = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars, extra = {b: chr(b) for b in visible}, 0
    for b in range(256):
        if b not in chars:
            chars[b], extra = chr(256 + extra), extra + 1
    return {c: b for b, c in chars.items()}


def unique_tokenization(vocab: str, text: str) -> list[int]:
    """Normal tokens of a byte-level vocab whose pieces spell `text`, no id
    twice (not the tokenizer's split: the model may write any tokens it
    likes, and the text is what the parser reads). The tokenizer's split is
    kept where it repeats nothing; a repeated token is spelled again, with
    its neighbours when it must be, from pieces no other part uses."""
    vfile = vocab_path(vocab)
    kv = tokenizer_kv(vfile)
    tokens: list[bytes] = kv["tokenizer.ggml.tokens"][0]
    types = kv["tokenizer.ggml.token_type"][0]
    decode = _byte_level_decoder()
    pieces: dict[int, bytes] = {}
    by_first: dict[int, list[tuple[bytes, int]]] = {}
    for tid, (tok, kind) in enumerate(zip(tokens, types, strict=True)):
        try:
            piece = bytes(decode[c] for c in tok.decode())
        except (KeyError, UnicodeDecodeError):
            continue
        pieces[tid] = piece
        if kind == 1 and piece:
            by_first.setdefault(piece[0], []).append((piece, tid))
    for candidates in by_first.values():
        candidates.sort(key=lambda pt: -len(pt[0]))
    canonical = tokenize(vfile, text)
    reserved: set[int] = set()  # tokens the split still needs further on

    def spell(target: bytes, used: set[int], budget: list[int]) -> list[int] | None:
        """Pieces for `target` none of which is in `used` (bounded search)."""
        if not target:
            return []
        for piece, tid in by_first.get(target[0], ()):
            if tid in used or tid in reserved or not target.startswith(piece):
                continue
            budget[0] -= 1
            if budget[0] < 0:
                return None
            rest = spell(target[len(piece) :], used | {tid}, budget)
            if rest is not None:
                return [tid, *rest]
        return None

    out: list[int] = []
    spans: list[int] = []  # how many canonical tokens each piece of out stands for
    i = 0
    while i < len(canonical):
        tid = canonical[i]
        if tid not in out:
            out.append(tid)
            spans.append(1)
            i += 1
            continue
        # Spell this token again, with the next ones and then the ones
        # before it too (taken back out of `out`) when it must be.
        done = False
        for back in range(3):
            if back > len(out):
                break
            for width in range(1, 4):
                lo = i - sum(spans[len(spans) - back :]) if back else i
                span = b"".join(pieces[t] for t in canonical[lo : i + width])
                kept = out[: len(out) - back] if back else out
                reserved = set(canonical[i + width :]) - set(kept)
                found = spell(span, set(kept), [20000])
                if found is not None:
                    del out[len(kept) :], spans[len(kept) :]
                    out += found
                    spans += [0] * (len(found) - 1) + [i + width - lo]
                    i += width
                    done = True
                    break
            if done:
                break
        if not done:
            at = b"".join(pieces[t] for t in canonical[:i]).decode(errors="replace")
            raise ValueError(f"{text!r} cannot be spelled without repeating a token after {at!r}")
    if b"".join(pieces[t] for t in out) != text.encode():
        raise ValueError(f"unique_tokenization spelled {text!r} wrong")
    return out


def two_turn_gguf_cached(cache_dir: Path, **kwargs: Any) -> Path:
    """build_two_turn_gguf, reused by a hash of its inputs (cached_build)."""
    return cached_build(cache_dir, build_two_turn_gguf, "two-turn-{vocab}", **kwargs)
