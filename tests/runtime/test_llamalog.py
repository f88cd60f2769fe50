"""llama.cpp's log as engy's: lines at ggml's own levels in `engy.llama`,
pieces joined, nothing shown unless asked; a load's capture; and a model
llama.cpp refuses names the reason it logged."""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from engy_local.errors import ModelLoadError
from engy_local.runtime.loading import llamalog
from engy_local.runtime.loading.model import LoadOptions, Model

# ggml.h: NONE 0, DEBUG 1, INFO 2, WARN 3, ERROR 4, CONT 5
NONE, DEBUG, INFO, WARN, ERROR, CONT = range(6)


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append((record.levelname, record.getMessage()))


@pytest.fixture
def records() -> Iterator[Records]:
    handler = Records()
    llamalog.log.addHandler(handler)
    level = llamalog.log.level
    llamalog.log.setLevel(logging.DEBUG)
    yield handler
    llamalog.log.removeHandler(handler)
    llamalog.log.setLevel(level)


def say(level: int, text: str) -> None:
    llamalog.callback(level, text.encode(), ctypes.c_void_p(0))


def test_levels_are_ggmls_and_lines_are_joined(records: Records) -> None:
    say(WARN, "llama_context: n_ctx_seq (131072) > n_ctx_train (32768)\n")
    say(DEBUG, "layer 0: filtered\n")
    say(INFO, "loading")
    say(CONT, ".")
    say(CONT, ".\n")
    say(ERROR, "error loading model: bad\nsecond line\n")
    say(INFO, "no newline")
    say(NONE, "next\n")  # a new line ends the one before it
    assert records.seen == [
        ("WARNING", "llama_context: n_ctx_seq (131072) > n_ctx_train (32768)"),
        ("DEBUG", "layer 0: filtered"),
        ("INFO", "loading.."),
        ("ERROR", "error loading model: bad"),
        ("ERROR", "second line"),
        ("INFO", "no newline"),
        ("INFO", "next"),
    ]


def test_capture_keeps_lines_and_errors() -> None:
    with llamalog.captured() as load:
        say(INFO, "load_tensors: offloaded 3/7 layers to GPU\n")
        say(INFO, "load_tensors:        CPU model buffer size =    30.5 MiB\n")
        say(ERROR, "oops\n")
    say(ERROR, "after\n")
    assert load.errors == ["oops"]
    assert llamalog.parse_split(load.text) == llamalog.Split(3, 7, (("CPU", 30.5),))


def test_nothing_is_shown_unless_asked(capfd: pytest.CaptureFixture[str]) -> None:
    say(WARN, "control-looking token: 212 '</s>' was not control-type\n")
    say(ERROR, "an error, still only in the log\n")
    assert capfd.readouterr().err == ""


def test_a_refused_model_says_why(tmp_path: Path, tiny_qwen3: Path) -> None:
    whole = tiny_qwen3.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole[: len(whole) - 4096])  # the header whole, the weights not
    with pytest.raises(ModelLoadError) as info:
        Model(LoadOptions(cut))
    assert "llama.cpp refused the file (error loading model:" in info.value.message
    assert "corrupted or incomplete" in info.value.message
