"""Reading what the user types: prompt_toolkit on a terminal (history kept
across runs, editing, multi-line entry), plain lines from a pipe.

Multi-line entry: Alt-Enter (or Esc then Enter) starts a new line; a message
that starts with three double quotes goes on over Enter until they close;
pasted text keeps its newlines.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path

from prompt_toolkit import PromptSession
from prompt_toolkit.history import FileHistory, History, InMemoryHistory
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent

PROMPT = "› "  # noqa: RUF001 - a prompt mark, meant as it is
CONTINUATION = "  "  # wrapped and further lines line up under the text
QUOTES = '"""'


def open_block(text: str) -> bool:
    """Whether `text` opened a triple-quoted block that is not closed yet."""
    return text.lstrip().startswith(QUOTES) and text.count(QUOTES) % 2 == 1


def unquote(text: str) -> str:
    """A triple-quoted message without its quotes."""
    stripped = text.strip()
    if stripped.startswith(QUOTES) and stripped.endswith(QUOTES) and len(stripped) >= 6:
        return stripped[3:-3].strip("\n")
    return text


def _bindings() -> KeyBindings:
    keys = KeyBindings()

    @keys.add("enter")
    def _enter(event: KeyPressEvent) -> None:
        buffer = event.current_buffer
        if open_block(buffer.text):
            buffer.insert_text("\n")
        else:
            buffer.validate_and_handle()

    @keys.add("escape", "enter")
    def _newline(event: KeyPressEvent) -> None:
        event.current_buffer.insert_text("\n")

    return keys


class LineReader:
    """`await read()` gives the next message; raises EOFError on Ctrl-D (or
    the pipe's end) and KeyboardInterrupt on Ctrl-C at the prompt."""

    def __init__(self, history: Path | None) -> None:
        self._session: PromptSession[str] | None = None
        self._lines: asyncio.Queue[str] | None = None
        if sys.stdin.isatty() and sys.stdout.isatty():
            self._session = PromptSession(
                history=_history(history),
                multiline=True,
                key_bindings=_bindings(),
                prompt_continuation=CONTINUATION,
                enable_history_search=False,
            )

    async def read(self) -> str:
        if self._session is not None:
            return unquote(await self._session.prompt_async(PROMPT))
        if self._lines is None:
            self._lines = asyncio.Queue()
            _start_pipe_reader(self._lines)
        line = await self._lines.get()
        if not line:
            raise EOFError
        return line.rstrip("\n")


def _start_pipe_reader(lines: asyncio.Queue[str]) -> None:
    """Read stdin on a daemon thread: a blocked read must not keep the
    process alive after Ctrl-C, as an executor's thread would."""
    loop = asyncio.get_running_loop()

    def read() -> None:
        while True:
            line = sys.stdin.readline()
            try:
                loop.call_soon_threadsafe(lines.put_nowait, line)
            except RuntimeError:  # the loop is closed: the session is over
                return
            if not line:
                return

    threading.Thread(target=read, name="engy-stdin", daemon=True).start()


def _history(path: Path | None) -> History:
    if path is None:
        return InMemoryHistory()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(exist_ok=True)
    except OSError:
        return InMemoryHistory()  # a read-only home: history for this run only
    return FileHistory(str(path))
