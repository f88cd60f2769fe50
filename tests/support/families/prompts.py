"""Prompts made with the real chat templates, the way the engine makes them
(`prepared`) or straight through the template (`rendered`), and the check
of a `Rendered` row."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from engy_local.chat import ChatRequest, Message, ToolSpec
from engy_local.prompt.families import Family, get
from engy_local.prompt.prepare import render
from engy_local.prompt.render.messages import to_template_messages, to_template_tools
from engy_local.prompt.render.template import ChatTemplate
from support.families.spec import Rendered
from support.paths import FIXTURES

TEMPLATES = FIXTURES / "chat-templates"


def source(name: str) -> str:
    """A template fixture's text (the test skips when it is absent)."""
    path = TEMPLATES / name
    if not path.is_file():
        pytest.skip(f"chat template fixture not found: {path}")
    return path.read_text(encoding="utf-8")


def template(name: str, **kwargs: Any) -> ChatTemplate:
    return ChatTemplate(source(name), **kwargs)


def prepared(
    chat: ChatTemplate,
    family: str | Family,
    messages: Sequence[Message],
    tools: Sequence[ToolSpec],
    **request: Any,
) -> str:
    """The prompt `prepare.render` makes for a text-only model with this
    template and family."""
    model = SimpleNamespace(
        path=Path("tiny.gguf"),
        template=chat,
        family=get(family) if isinstance(family, str) else family,
        projector=None,
    )
    chat_request = ChatRequest(model="m", messages=tuple(messages), tools=tuple(tools), **request)
    placed, _ = render(model, chat_request)  # type: ignore[arg-type]
    return placed.text


def rendered(
    chat: ChatTemplate, messages: Sequence[Message], tools: Sequence[ToolSpec], **kwargs: Any
) -> str:
    """The template itself on the engine's messages and tools."""
    return chat.render(
        to_template_messages(list(messages), quirks=chat.quirks),
        tools=to_template_tools(list(tools)),
        **kwargs,
    )


def shown(present: bool, *pieces: str) -> dict[str, tuple[str, ...]]:
    """`Rendered` arguments: the pieces are in the prompt, or none is."""
    return {"contains": pieces} if present else {"absent": pieces}


def assert_in_order(text: str, pieces: Sequence[str]) -> None:
    at = 0
    for piece in pieces:
        found = text.find(piece, at)
        assert found >= 0, f"{piece!r} not after {text[:at][-300:]!r}"
        at = found + len(piece)


def check_rendered(row: Rendered) -> None:
    text = row.text()
    if row.equals is not None:
        assert text == row.equals
    if row.same_as is not None:
        assert text == row.same_as()
    if row.starts is not None:
        assert text.startswith(row.starts), text[:300]
    if row.ends is not None:
        assert text.endswith(row.ends), text[-300:]
    for piece in row.contains:
        assert piece in text, piece
    for piece in row.absent:
        assert piece not in text, piece
    assert_in_order(text, row.in_order)
    for order in row.orders:
        at = [text.index(piece) for piece in order]
        assert all(a < b for a, b in pairwise(at)), (order, at)
    for piece, count in row.counts:
        assert text.count(piece) == count, piece
