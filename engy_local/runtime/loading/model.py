"""Loading a GGUF with llama.cpp and the few model facts the rest needs.

The weights are loaded through llama.cpp's own API, not `llama_cpp.Llama`:
the context (several sequences, flash attention, a unified KV cache) is
built by the scheduler in context.py, which `Llama` would not let us do.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from pathlib import Path

import llama_cpp

from ...errors import ModelLoadError, NotGGUF
from ...models.ggufmeta import read_metadata, trained_context
from ...prompt.families import detect, get
from ...prompt.render.template import ChatTemplate
from . import llamalog
from .cpu import use_repacking
from .devices import cpu_buffer_type, offload_devices
from .memory import GPU_MARGIN, auto_offload, check_flash, kv_type
from .tokenizing import PrefixTokenizer
from .vision import Projector

# llama.cpp logs every load at length: into engy's log (llamalog), shown
# only with --verbose.
llamalog.install()
llama_cpp.llama_backend_init()


@dataclass(frozen=True)
class LoadOptions:
    path: Path
    ctx_size: int | None = None  # cap on the model's trained context
    gpu_layers: int | None = None  # None: all when the build offloads, else 0
    threads: int | None = None
    chat_template: str | None = None  # overrides tokenizer.chat_template
    family: str | None = None  # overrides the tool-call family detection
    mmproj: Path | None = None  # vision projector
    parallel: int = 4  # KV sequences: conversations served at once
    cache_ram: int = 2 << 30  # bytes of saved sequence states kept in RAM
    repack: bool | None = None  # CPU weight repacking; None: decide (cpu.py)
    flash_attn: str = "auto"  # "auto" (where the backend has it), "on" or "off"
    tensor_split: tuple[float, ...] = ()  # weights of the offload devices, in order
    digest: str | None = None  # sha256 of the weights where the store knows it
    speculative: str = "auto"  # drafts from the conversation where they pay; "off"
    draft_max: int = 16  # the longest draft
    cache_type_k: str = "f16"  # the KV cache's types (memory.KV_TYPES)
    cache_type_v: str = "f16"
    cpu_moe: int = 0  # MoE layers whose experts stay in CPU memory: the first N; -1: all
    ctx_auto: bool = False  # the window that fits the memory budget (the pool sets ctx_size)
    # What to say when there is no chat template (None: name the file)
    no_template: str | None = None


def backend_label(gpu_layers: int | None) -> str:
    """Where a model's layers run: "CPU", "CUDA", "RPC", "CUDA + RPC"."""
    if gpu_layers == 0:
        return "CPU"
    found = offload_devices()
    names = [d.backend or "GPU" for d in found if not d.remote]
    names += ["RPC"] if any(d.remote for d in found) else []
    return " + ".join(dict.fromkeys(names)) or "CPU"


def label_gpu(label: str) -> bool | None:
    """Whether a model of that backend label runs on a GPU: a local one
    says yes, the CPU no; RPC workers alone do not say (None)."""
    parts = set(label.split(" + "))
    if parts == {"CPU"}:
        return False
    return True if parts - {"CPU", "RPC"} else None


# Tokens llama.cpp cuts a text at before tokenizing the pieces, and the
# attributes that let one take the spaces beside it.
_SPECIAL = (
    llama_cpp.LLAMA_TOKEN_ATTR_CONTROL
    | llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED
    | llama_cpp.LLAMA_TOKEN_ATTR_UNKNOWN
)
_STRIPS = llama_cpp.LLAMA_TOKEN_ATTR_LSTRIP | llama_cpp.LLAMA_TOKEN_ATTR_RSTRIP


class Tokens:
    """Tokenizing and detokenizing through a loaded vocabulary (`_vocab`),
    for the model and for a vocabulary loaded alone (vocab.py)."""

    _vocab: llama_cpp.llama_vocab_p
    add_bos: bool
    bos_text: str
    _prefixes: PrefixTokenizer | None = None

    @property
    def bos(self) -> int:
        return int(llama_cpp.llama_vocab_bos(self._vocab)) if self.add_bos else -1

    def _token_text(self, token: int) -> str:
        return self.piece(token).decode("utf-8", "replace") if token >= 0 else ""

    def tokenize(self, text: str) -> list[int]:
        if self._prefixes is None:  # set up on first use, by whichever thread
            self._prefixes = PrefixTokenizer(
                self._tokenize_whole, self._cut_after, self.bos, self.bos_text
            )
        return self._prefixes.tokenize(text)

    def _tokenize_whole(self, text: str, first: bool) -> list[int]:
        if first:
            return tokenize_text(self._vocab, text, self.add_bos, self.bos_text)
        return tokenize_text(self._vocab, text, False, "")

    def _cut_after(self, token: int) -> str | None:
        """A special token's text, where llama.cpp cuts a text after it
        without taking the spaces beside it (tokenizing.py)."""
        attr = int(llama_cpp.llama_vocab_get_attr(self._vocab, token))
        if not attr & _SPECIAL or attr & _STRIPS:
            return None
        return self.piece(token).decode("utf-8", "replace")

    def piece(self, token: int) -> bytes:
        return token_piece(self._vocab, token)

    def marker_tokens(self, text: str) -> list[int]:
        """The tokens of a marker text, special tokens read as such, no BOS."""
        return tokenize_text(self._vocab, text, False, "")

    def is_end(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(self._vocab, token))


class Model(Tokens):
    """One loaded GGUF: weights, vocabulary, template and family. Decoding
    happens in a context the model's scheduler owns (context.py);
    tokenizing and rendering are safe from any thread."""

    def __init__(self, options: LoadOptions) -> None:
        path = options.path
        self.projector: Projector | None = None
        self.handle: llama_cpp.llama_model_p | None = None
        if not path.is_file():
            raise ModelLoadError(f"model file not found: {path}")
        self.threads = options.threads or max(1, (os.cpu_count() or 2))
        train_ctx = _trained_context(path)
        self.n_ctx = min(train_ctx, options.ctx_size) if options.ctx_size else train_ctx
        self.parallel = max(1, options.parallel)
        gpu_layers, cpu_moe = self._placement(options)
        self.backend = backend_label(gpu_layers)
        self.cache_ram = max(0, options.cache_ram)
        self.repack = use_repacking(options.repack)
        self.type_k = kv_type(options.cache_type_k, "--cache-type-k")
        self.type_v = kv_type(options.cache_type_v, "--cache-type-v")
        self.flash_attn = check_flash(self.type_v, options.flash_attn)
        params = llama_cpp.llama_model_default_params()
        params.n_gpu_layers = gpu_layers
        params.use_extra_bufts = self.repack
        # Kept as long as the model: llama.cpp holds on to the pointer.
        self._overrides = experts_on_cpu(cpu_moe)
        self.cpu_moe = cpu_moe
        if self._overrides is not None:
            params.tensor_buft_overrides = ctypes.cast(self._overrides, ctypes.c_void_p)
        if options.tensor_split:
            split = (ctypes.c_float * llama_cpp.llama_max_devices())(*options.tensor_split)
            params.tensor_split = split
        with llamalog.captured() as load:
            handle = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
        self.split = llamalog.parse_split(load.text)
        if not handle:
            # The first error says why; the function name before it does not.
            why = llamalog.strip_function(load.errors[0]) if load.errors else ""
            said = f" ({why})" if why else ""
            raise ModelLoadError(f"could not load {path}: llama.cpp refused the file{said}")
        self.handle = handle
        self.path = path
        self.gpu_layers = gpu_layers
        vocab = llama_cpp.llama_model_get_vocab(handle)
        self._vocab = vocab
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(vocab))
        self.options = options
        self.speculative = options.speculative
        self.draft_max = max(1, options.draft_max)
        self.n_swa = int(llama_cpp.llama_model_n_swa(handle))
        self.n_layer = int(llama_cpp.llama_model_n_layer(handle))
        self.n_embd = int(llama_cpp.llama_model_n_embd(handle))
        # Recurrent state (Mamba, RWKV; hybrids beside attention layers:
        # Qwen3.5, LFM2, Nemotron H) cannot be cut back to a prefix: it
        # resumes where it is, or where a checkpoint of it was kept.
        self.hybrid = bool(llama_cpp.llama_model_is_hybrid(handle))
        self.recurrent = self.hybrid or bool(llama_cpp.llama_model_is_recurrent(handle))
        self.add_bos = bool(llama_cpp.llama_vocab_get_add_bos(vocab))
        self.bos_text = self._token_text(llama_cpp.llama_vocab_bos(vocab))
        self.eos_text = self._token_text(llama_cpp.llama_vocab_eos(vocab))
        self.metadata: dict[str, str] = _metadata(handle)
        # M-RoPE (Qwen2-VL, Qwen3.5) and per-layer n-gram embeddings
        # (qwen4exp): each KV cell keeps more than its position, which a
        # saved state writes beside it (kvstate).
        rope = llama_cpp.llama_model_rope_type(handle)
        mrope = rope in (llama_cpp.LLAMA_ROPE_TYPE_MROPE, llama_cpp.LLAMA_ROPE_TYPE_IMROPE)
        self.cell_ext = mrope or self.metadata.get("general.architecture") == "qwen4exp"
        source = options.chat_template or self.metadata.get("tokenizer.chat_template")
        if not source:
            self.close()
            raise ModelLoadError(
                options.no_template
                or f"{path.name} has no chat template; give one in models.toml (chat_template)"
            )
        self.template = ChatTemplate(source, bos_token=self.bos_text, eos_token=self.eos_text)
        self.family = get(options.family) if options.family else detect(source)
        if options.mmproj is not None:
            self.projector = Projector(options.mmproj, handle, self.threads)

    def _placement(self, options: LoadOptions) -> tuple[int, int]:
        """(layers offloaded, MoE layers whose experts stay in CPU memory).
        --gpu-layers auto: all of them onto the GPUs and RPC workers there
        are; on local GPUs that cannot hold the whole model, experts go to
        CPU memory first, then layers (memory.plan_offload)."""
        if options.gpu_layers is not None:
            return options.gpu_layers, options.cpu_moe
        devices = offload_devices()
        if not devices:
            return 0, options.cpu_moe
        if options.cpu_moe or any(d.remote for d in devices):
            return -1, options.cpu_moe
        free = sum(max(0, d.free - GPU_MARGIN) for d in offload_devices(memory=True))
        plan = auto_offload(
            options.path, options.cache_type_k, options.cache_type_v,
            self.n_ctx, self.parallel, free,
        )  # fmt: skip
        return plan.gpu_layers, plan.cpu_moe

    @property
    def kv_types(self) -> str:
        """The KV cache's types as one says them: "q8_0", or "q8_0/f16" (K/V)."""
        return self.type_k if self.type_k == self.type_v else f"{self.type_k}/{self.type_v}"

    @property
    def vocab(self) -> llama_cpp.llama_vocab_p:
        vocab: llama_cpp.llama_vocab_p = self._vocab
        return vocab

    def close(self) -> None:
        if self.projector is not None:
            self.projector.close()
            self.projector = None
        if self.handle:
            llama_cpp.llama_model_free(self.handle)
            self.handle = None


class _Override(ctypes.Structure):
    """llama_model_tensor_buft_override: tensors whose name matches
    `pattern` (a regex, searched) go to buffer type `buft`."""

    _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]


# An MoE layer's expert tensors: gate, up, down, a fused gate_up, and the
# "chexps" some architectures name theirs.
_EXPERTS = r"ffn_(up|down|gate|gate_up)_(ch|)exps"


def experts_on_cpu(layers: int) -> ctypes.Array[_Override] | None:
    """The overrides that keep the experts of the first `layers` MoE layers
    (-1: of all) in CPU memory, ended by an empty entry; None for 0. Only
    the experts stay: attention and the shared weights go where the layer
    goes, so a GPU runs what every token needs and the CPU the experts the
    router picks."""
    if layers == 0:
        return None
    if layers < 0:
        patterns = [rf"\.{_EXPERTS}"]
    else:
        patterns = [rf"^blk\.{i}\.{_EXPERTS}" for i in range(layers)]
    cpu = cpu_buffer_type()
    table = (_Override * (len(patterns) + 1))()
    for entry, pattern in zip(table, patterns, strict=False):
        entry.pattern, entry.buft = pattern.encode(), cpu
    return table


def tokenize_text(
    vocab: llama_cpp.llama_vocab_p, text: str, add_bos: bool, bos_text: str
) -> list[int]:
    """Tokens of a rendered prompt. Templates usually write the BOS text
    themselves; it is dropped here and added as the real token instead, so
    there is exactly one."""
    if add_bos and bos_text and text.startswith(bos_text):
        text = text[len(bos_text) :]
    data = text.encode("utf-8")
    size = len(data) + 2
    while True:
        buf = (llama_cpp.llama_token * size)()
        n = llama_cpp.llama_tokenize(vocab, data, len(data), buf, size, add_bos, True)
        if n >= 0:
            return list(buf[:n])
        size = -n


def token_piece(vocab: llama_cpp.llama_vocab_p, token: int) -> bytes:
    """The bytes of one token, special tokens rendered as their text."""
    size = 64
    while True:
        buf = ctypes.create_string_buffer(size)
        n = llama_cpp.llama_token_to_piece(vocab, token, buf, size, 0, True)
        if n >= 0:
            return buf.raw[:n]
        size = -n


def _metadata(handle: llama_cpp.llama_model_p) -> dict[str, str]:
    out: dict[str, str] = {}
    buf_size = 1 << 16
    for i in range(llama_cpp.llama_model_meta_count(handle)):
        key = ctypes.create_string_buffer(1024)
        if llama_cpp.llama_model_meta_key_by_index(handle, i, key, 1024) < 0:
            continue
        size = buf_size
        while True:
            value = ctypes.create_string_buffer(size)
            n = llama_cpp.llama_model_meta_val_str_by_index(handle, i, value, size)
            if n < size:
                break
            size = n + 1
        if n >= 0:
            out[key.value.decode("utf-8", "replace")] = value.value.decode("utf-8", "replace")
    return out


def _trained_context(path: Path) -> int:
    try:
        meta = read_metadata(path)
    except (OSError, NotGGUF) as exc:
        raise ModelLoadError(f"cannot read {path}: {exc}") from None
    return trained_context(meta) or 4096
