"""Shared fixtures: the real models the tests run, real `engy serve`
processes to talk to, the real clients and terminals (support/)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.paths import ANSWER, CACHE, need_fixtures
from support.server import EngyServer

# Fixtures defined beside the helpers they use.
pytest_plugins = ["support.browser", "support.clients", "support.terminal"]


@pytest.fixture(scope="session")
def engy_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store of our own, so tests never touch the user's."""
    home = CACHE / "home"
    home.mkdir(parents=True, exist_ok=True)
    return home


GEMMA = "gemma-3-270m-base"


def _embedded(engy_home: Path, model_id: str) -> Path:
    os.environ["ENGY_HOME"] = str(engy_home)
    from engy_local.models.catalog import load_catalog
    from engy_local.models.embedded import locate

    return locate(load_catalog().entries[model_id])


@pytest.fixture(scope="session")
def gemma_path(engy_home: Path) -> Path:
    """The real pretrained gemma-3-270m GGUF (a base model with a sliding
    window) from its wheels on the package index, as `engy serve GEMMA`
    finds it."""
    return _embedded(engy_home, GEMMA)


@pytest.fixture(scope="session")
def default_path(engy_home: Path) -> Path:
    """The default model (Qwen2.5-Coder-0.5B-Instruct) from its wheels, as
    `engy serve` with no MODEL finds it."""
    from engy_local.models.catalog import load_catalog

    return _embedded(engy_home, load_catalog().default)


@pytest.fixture(scope="session")
def tiny_qwen3() -> Path:
    """A tiny GGUF with the qwen2 vocabulary and the real Qwen3 template."""
    need_fixtures()
    from support.ggufs import tiny_gguf_cached

    return tiny_gguf_cached(CACHE / "ggufs", vocab="qwen2", template="Qwen-Qwen3-0.6B.jinja")


@pytest.fixture(scope="session")
def tiny_answer() -> Path:
    """A tiny Qwen3-template GGUF that answers ANSWER and ends its turn,
    whatever the prompt (for the real Claude Code and Codex)."""
    need_fixtures()
    from support.ggufs import tiny_gguf_cached

    return tiny_gguf_cached(
        CACHE / "ggufs", vocab="qwen2", template="Qwen-Qwen3-0.6B.jinja", answer=ANSWER
    )


@pytest.fixture(scope="session")
def gemma_server(gemma_path: Path, engy_home: Path) -> Iterator[EngyServer]:
    """`engy serve gemma-3-270m-base`: the sliding-window model."""
    server = EngyServer(GEMMA, home=engy_home)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def default_server(default_path: Path, engy_home: Path) -> Iterator[EngyServer]:
    """`engy serve` with no MODEL argument, exactly as a user runs it: the
    catalog's default model (and what else the store holds)."""
    server = EngyServer(None, home=engy_home)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def tiny_server(tiny_qwen3: Path) -> Iterator[EngyServer]:
    server = EngyServer(str(tiny_qwen3), "--ctx-size", "8192")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def answer_server(tiny_answer: Path) -> Iterator[EngyServer]:
    server = EngyServer(str(tiny_answer))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def tiny_vision() -> tuple[Path, Path]:
    """(model, projector): the tiny answer model that also sees colours,
    and the tiny mlp projector made for it (see ggufs.build_tiny_projector).
    It answers ANSWER to text, " red" to a red image, " blue" to a blue one."""
    need_fixtures()
    from support.ggufs import tiny_gguf_cached, tiny_projector_cached

    model = tiny_gguf_cached(
        CACHE / "ggufs",
        vocab="qwen2",
        template="Qwen-Qwen3-0.6B.jinja",
        answer=ANSWER,
        colours=True,
    )
    return model, tiny_projector_cached(CACHE / "ggufs")
