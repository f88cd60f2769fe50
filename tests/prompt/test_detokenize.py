"""Token ids to text: where an answer ends."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
from support.paths import FIXTURES

from engy_local.prompt.families import detect
from engy_local.prompt.families.base import Family
from engy_local.prompt.parsing.detokenize import TokenText
from engy_local.prompt.prepare import turn_ends
from engy_local.prompt.render.template import ChatTemplate

PIECES = {1: b"Hi", 2: b" there", 3: b"<|im_start|>", 4: b"user", 5: b"<|start|>", 9: b"<|im_end|>"}


@dataclass
class Vocab:
    """A vocabulary of whole special tokens and plain words."""

    template: ChatTemplate | None = None
    family: Family | None = None
    path: Path = Path("m.gguf")
    n_ctx: int = 4096
    projector: None = None
    by_text: dict[bytes, int] = field(default_factory=lambda: {v: k for k, v in PIECES.items()})

    def piece(self, token: int) -> bytes:
        return PIECES[token]

    def is_end(self, token: int) -> bool:
        return token == 9

    def tokenize(self, text: str) -> list[int]:
        return [self.by_text.get(text.encode(), 4)]


def run(text: TokenText, tokens: list[int]) -> tuple[str, str | None]:
    out = ""
    for t in tokens:
        piece, end = text.push_token(t)
        out += piece
        if end:
            return out, end
    return out, None


@pytest.mark.parametrize(
    ("ends", "tokens", "expected"),
    [
        ((), [1, 2, 9, 1], ("Hi there", "end")),
        ((3,), [1, 2, 3, 4], ("Hi there", "end")),  # the turn marker ends it, unshown
        ((), [1, 3, 4], ("Hi<|im_start|>user", None)),
    ],
)
def test_end_tokens(
    ends: tuple[int, ...], tokens: list[int], expected: tuple[str, str | None]
) -> None:
    assert run(TokenText(Vocab(), (), None, ends), tokens) == expected


def template(name: str) -> str:
    path = FIXTURES / "chat-templates" / f"{name}.jinja"
    if not path.is_file():
        pytest.skip(f"chat template fixture {path} is absent")
    return path.read_text()


@pytest.mark.parametrize(
    ("name", "ends"),
    [
        ("Qwen-Qwen2.5-7B-Instruct", (3,)),
        ("openai-gpt-oss-120b", ()),  # Harmony answers open several messages
        ("mistralai-Mistral-Nemo-Instruct-2407", ()),
    ],
)
def test_turn_ends(name: str, ends: tuple[int, ...]) -> None:
    source = template(name)
    model = Vocab(template=ChatTemplate(source), family=detect(source))
    assert turn_ends(model) == ends  # type: ignore[arg-type]
