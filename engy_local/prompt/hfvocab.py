"""A Hugging Face tokenizer (`tokenizer.json` and the files beside it) as a
vocabulary, for an upstream that serves safetensors: the same role as
vocab.py's GGUF vocabulary, through the `tokenizers` library (the Rust
tokenizer vLLM and SGLang run, so the ids are the ones they would make).

Read from the directory of a model snapshot (or a tokenizer.json in one):

    tokenizer.json          the tokenizer
    tokenizer_config.json   chat_template, bos_token, eos_token, add_bos_token
    chat_template.jinja     the template, where newer snapshots keep it
    generation_config.json  eos_token_id: the ids that end a turn
    config.json             max_position_embeddings: the trained window;
                            quantization_config / torch_dtype: the weights'
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ..errors import TokenizerError
from .families import Family, detect, get
from .render.template import ChatTemplate

# Turn-ending tokens llama.cpp also treats as end of generation, where the
# configs name only the document's end.
_END_TEXTS = (
    "<|im_end|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|return|>",
)
_BYTE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def is_hf_tokenizer(path: Path) -> bool:
    """A tokenizer.json, or a directory holding one."""
    return (path.is_file() and path.suffix == ".json") or (path / "tokenizer.json").is_file()


def _gpt2_chars() -> dict[str, int]:
    """Byte-level BPE's printable stand-in for each byte, reversed."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    chars, n = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + n)] = b
            n += 1
    return chars


_GPT2 = _gpt2_chars()


def _json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TokenizerError(f"cannot read {path}: {exc}") from None
    return data if isinstance(data, dict) else {}


def _token_text(value: Any) -> str:
    """tokenizer_config's tokens are strings or AddedToken objects."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else ""


def _decoders(spec: Any) -> set[str]:
    if not isinstance(spec, dict):
        return set()
    found = {str(spec.get("type"))}
    for inner in spec.get("decoders") or ():
        found |= _decoders(inner)
    return found


class HFVocabulary:
    """Satisfies `prepare.PromptModel` and what upstream/text.py needs."""

    projector = None

    def __init__(
        self,
        path: Path,
        *,
        n_ctx: int | None = None,
        chat_template: str | None = None,
        family: str | None = None,
    ) -> None:
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise TokenizerError(
                "a Hugging Face tokenizer needs the tokenizers package: "
                "pip install 'engy-local[upstream]'"
            ) from None

        file = path / "tokenizer.json" if path.is_dir() else path
        folder = file.parent
        if not file.is_file():
            raise TokenizerError(f"tokenizer file not found: {file}")
        try:
            self._tok = Tokenizer.from_file(str(file))
        except Exception as exc:  # the Rust side raises plain Exceptions
            raise TokenizerError(f"cannot load {file}: {exc}") from None
        spec = _json(file)
        config = _json(folder / "tokenizer_config.json")
        model_config = _json(folder / "config.json")
        self.path = path
        self._decoder = _decoders(spec.get("decoder"))
        self._added = {int(t["id"]): str(t["content"]) for t in spec.get("added_tokens") or ()}
        self.bos_text = _token_text(config.get("bos_token"))
        self.eos_text = _token_text(config.get("eos_token"))
        bos_id = self._tok.token_to_id(self.bos_text) if self.bos_text else None
        self._bos = bos_id
        self.add_bos = (
            bool(config.get("add_bos_token", _post_adds_bos(spec))) and bos_id is not None
        )
        self._ends = self._end_ids(folder, config, model_config)
        self.quantization = _quantization(model_config)
        trained = model_config.get("max_position_embeddings")
        self.trained_context = trained if isinstance(trained, int) and trained > 0 else 4096
        self.n_ctx = n_ctx or self.trained_context
        source = chat_template or _template(folder, config)
        if not source:
            raise TokenizerError(
                f"{folder} has no chat template (tokenizer_config.json chat_template, "
                "or chat_template.jinja)"
            )
        self.template = ChatTemplate(source, bos_token=self.bos_text, eos_token=self.eos_text)
        self.family: Family = get(family) if family else detect(source)

    def _end_ids(
        self, folder: Path, config: dict[str, Any], model_config: dict[str, Any]
    ) -> set[int]:
        ends: set[int] = set()
        for source in (_json(folder / "generation_config.json"), model_config):
            value = source.get("eos_token_id")
            ends |= (
                {value}
                if isinstance(value, int)
                else {v for v in value or () if isinstance(v, int)}
            )
        for text in (self.eos_text, *_END_TEXTS):
            tid = self._tok.token_to_id(text) if text else None
            if tid is not None and tid in self._added:
                ends.add(tid)
        return ends

    def tokenize(self, text: str) -> list[int]:
        """As the local engine does: special tokens in the text are parsed,
        and exactly one BOS leads when the model wants one."""
        ids: list[int] = self._tok.encode(text, add_special_tokens=False).ids
        if self.add_bos and self._bos is not None and (not ids or ids[0] != self._bos):
            ids.insert(0, self._bos)
        return ids

    def piece(self, token: int) -> bytes:
        """The bytes of one token (special tokens as their text)."""
        if token in self._added:
            return self._added[token].encode()
        text = self._tok.id_to_token(token)
        if text is None:
            return b""
        if "ByteLevel" in self._decoder:
            return bytes(_GPT2.get(c, 0x3F) for c in text)
        if "ByteFallback" in self._decoder and (match := _BYTE.fullmatch(text)):
            return bytes([int(match[1], 16)])
        return text.replace("\u2581", " ").encode()

    def is_end(self, token: int) -> bool:
        return token in self._ends

    def close(self) -> None:
        pass


_DTYPES = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}


def _quantization(model_config: dict[str, Any]) -> str:
    """What the snapshot's weights are: its quantization method (FP8, AWQ,
    GPTQ ...), else their dtype (BF16 ...); "" when it does not say."""
    method = (model_config.get("quantization_config") or {}).get("quant_method")
    if isinstance(method, str) and method:
        return method.upper()
    dtype = model_config.get("torch_dtype") or model_config.get("dtype")
    return _DTYPES.get(dtype, "") if isinstance(dtype, str) else ""


def _post_adds_bos(spec: dict[str, Any]) -> bool:
    """Whether the tokenizer's post-processor puts a special token first."""
    post = spec.get("post_processor")
    if not isinstance(post, dict):
        return False
    steps = post.get("processors") if post.get("type") == "Sequence" else [post]
    for step in steps or ():
        if isinstance(step, dict) and step.get("type") == "TemplateProcessing":
            single = step.get("single") or []
            return bool(single) and "SpecialToken" in single[0]
    return False


def _template(folder: Path, config: dict[str, Any]) -> str | None:
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    value = config.get("chat_template")
    if isinstance(value, list):  # [{"name": "default", "template": ...}, ...]
        named = {v.get("name"): v.get("template") for v in value if isinstance(v, dict)}
        value = named.get("default") or next(iter(named.values()), None)
    return value if isinstance(value, str) else None
