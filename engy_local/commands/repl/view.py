"""How an answer appears in the terminal, as its events arrive.

The answer is cut into blocks (markdown paragraphs, lists, fenced code) as it
streams. A finished block is printed once, rendered, and stays in the
scrollback; the block still growing is drawn live below it (its tail, if it
is taller than the screen), over a status line: a spinner with what is
happening (loading, the prompt's progress, hidden thinking). Thinking is
dim, tool calls get a line each. After the answer comes one dim line of
numbers (`stats_line`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.live import Live
from rich.markdown import Markdown
from rich.segment import Segment
from rich.spinner import Spinner
from rich.text import Text

from ...chat import (
    Event,
    Finished,
    PromptProgress,
    Started,
    StopReason,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)

Kind = Literal["text", "thinking", "call"]
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


class BlockSplitter:
    """Cuts streamed markdown into blocks that render the same alone as in
    the whole: a block ends at a blank line outside a code fence, once the
    next line starts unindented (an indented one may continue a list item)."""

    def __init__(self) -> None:
        self._lines: list[str] = []  # complete lines of the open block
        self._partial = ""  # the line being written
        self._fence: str | None = None  # the open fence's marker
        self._blank = False  # the last complete line was blank

    def feed(self, text: str) -> list[str]:
        """Add text; return the blocks it completed."""
        done: list[str] = []
        self._partial += text
        while "\n" in self._partial:
            line, self._partial = self._partial.split("\n", 1)
            block = self._line(line)
            if block:
                done.append(block)
        return done

    @property
    def pending(self) -> str:
        return "\n".join([*self._lines, self._partial]).strip("\n")

    def finish(self) -> str:
        """The rest, as a last block ("" when there is none)."""
        rest = self.pending
        self._lines, self._partial, self._fence, self._blank = [], "", None, False
        return rest

    def _line(self, line: str) -> str:
        block = ""
        starts = line.strip() and not line[0].isspace()
        if self._fence is None and self._blank and starts and self._lines:
            block = "\n".join(self._lines).strip("\n")
            self._lines = []
        self._lines.append(line)
        marker = _FENCE.match(line)
        if marker and self._fence is None:
            self._fence = marker.group(1)
        elif marker and self._fence is not None:
            closing = marker.group(1)
            same = closing[0] == self._fence[0] and len(closing) >= len(self._fence)
            if same and not line.strip()[len(closing) :].strip():
                self._fence = None
        self._blank = not line.strip()
        return block


@dataclass(frozen=True)
class Stats:
    output_tokens: int
    first_token: float | None  # seconds from asking to the first token
    generating: float  # seconds from the first token to the end
    context_used: int
    context_size: int
    stop: StopReason | Literal["stopped"]


@dataclass
class Tally:
    """What the stats line needs, counted as the events arrive."""

    asked: float  # time.monotonic() when the question went out
    first: float | None = None  # ... and when the first token came
    pieces: int = 0  # text, thinking and call pieces: tokens, near enough
    prompt_tokens: int = 0
    finished: Finished | None = None

    def add(self, event: Event, prompt_tokens: int) -> None:
        self.prompt_tokens = prompt_tokens
        if self.first is None and isinstance(event, (TextDelta, ThinkingDelta, ToolCallStart)):
            self.first = time.monotonic()
        if isinstance(event, (TextDelta, ThinkingDelta, ToolCallDelta)):
            self.pieces += 1
        if isinstance(event, Finished):
            self.finished = event

    def stats(self, ended: float, context_size: int) -> Stats:
        """Exact when the answer finished; counted pieces when it was stopped."""
        done = self.finished
        if done is not None:
            tokens = done.usage.output_tokens
            used = done.usage.prompt_tokens + tokens
        else:
            tokens, used = self.pieces, self.prompt_tokens + self.pieces
        return Stats(
            output_tokens=tokens,
            first_token=None if self.first is None else self.first - self.asked,
            generating=0.0 if self.first is None else ended - self.first,
            context_used=used,
            context_size=context_size,
            stop="stopped" if done is None else done.stop_reason,
        )


def stats_line(s: Stats) -> str:
    """One line: tokens, tokens per second, time to first token, context."""
    parts = []
    if s.stop == "stopped":
        parts.append("stopped")
    elif s.stop == "length":
        parts.append("cut at the token limit")
    parts.append(f"{s.output_tokens} tokens")
    if s.output_tokens > 1 and s.generating > 0:
        parts.append(f"{(s.output_tokens - 1) / s.generating:.1f} tok/s")
    if s.first_token is not None:
        parts.append(f"first token {s.first_token:.2f} s")
    if s.context_size:
        share = 100 * s.context_used / s.context_size
        parts.append(f"context {s.context_used:,}/{s.context_size:,} ({share:.0f}%)")
    else:
        parts.append(f"context {s.context_used:,}")
    return " · ".join(parts)


class AnswerView:
    """Draws one answer. Call `event` for each event, `tick` now and then
    (it redraws the live part at most ~12 times a second), `close` at the
    end. Everything runs on the caller's thread."""

    def __init__(self, console: Console, *, show_thinking: bool, status: str) -> None:
        # configuration
        self.console = console
        self.show_thinking = show_thinking
        # state
        self._status = status
        self._kind: Kind | None = None
        self._blocks = BlockSplitter()
        self._call: tuple[str, str] | None = None  # the call being written: name, arguments
        self._hidden = 0  # thinking pieces not shown
        self._spinner = Spinner("dots")
        self._drawn = 0.0
        self._interval = 0.08
        self._live = Live(
            _Renderable(self),
            console=console,
            transient=True,
            auto_refresh=False,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._live.start()

    def event(self, event: Event) -> None:
        if isinstance(event, TextDelta):
            self._switch("text")
            self._commit(self._blocks.feed(event.text))
            self._status = ""
        elif isinstance(event, ThinkingDelta):
            if self.show_thinking:
                self._switch("thinking")
                self._commit(self._blocks.feed(event.text))
                self._status = ""
            else:
                self._hidden += 1
                self._status = f"thinking ({self._hidden} tokens)"
        elif isinstance(event, ToolCallStart):
            self._switch("call")
            self._call = (event.name, "")
        elif isinstance(event, ToolCallDelta) and self._call is not None:
            self._call = (self._call[0], self._call[1] + event.arguments)
        elif isinstance(event, ToolCallEnd) and self._call is not None:
            self._print(_call_line(self._call[0], event.arguments))
            self._call, self._kind = None, None
        elif isinstance(event, Started):
            self._status = "processing the prompt"
        elif isinstance(event, PromptProgress) and event.total:
            self._status = f"processing the prompt {event.done:,}/{event.total:,} tokens"
        elif isinstance(event, Finished):
            self._status = ""
        self.tick()

    def tick(self, force: bool = False) -> None:
        """Redraw, at most ~12 times a second, and less when drawing is slow
        (a long block): drawing must not steal the model's time."""
        now = time.monotonic()
        if force or now - self._drawn >= self._interval:
            self._live.refresh()
            self._drawn = time.monotonic()
            self._interval = max(0.08, 4 * (self._drawn - now))

    def close(self) -> None:
        """Print what is still open and take the live part away."""
        self._switch(None)
        self._status = ""
        self._live.stop()

    # -- helpers --------------------------------------------------------

    def _switch(self, kind: Kind | None) -> None:
        if kind == self._kind:
            return
        if self._kind in ("text", "thinking"):
            self._commit([self._blocks.finish()])
        elif self._kind == "call" and self._call is not None:
            self._print(_call_line(*self._call))  # cut short
            self._call = None
        self._kind = kind

    def _commit(self, blocks: list[str]) -> None:
        for block in blocks:
            if block.strip():
                self._print(self._render(block, self._kind))

    def _print(self, renderable: RenderableType) -> None:
        self._live.console.print(renderable)

    def _render(self, text: str, kind: Kind | None) -> RenderableType:
        if kind == "thinking":
            return Text(text, style="dim italic")
        return Markdown(text)

    def live_part(self) -> Iterator[RenderableType]:
        if self._call is not None:
            yield _call_line(*self._call)
        elif self._blocks.pending.strip():
            yield self._render(self._blocks.pending, self._kind)
        if self._status:
            self._spinner.text = Text(self._status, style="dim")
            yield self._spinner


def _call_line(name: str, arguments: str) -> Text:
    shown = arguments if len(arguments) <= 400 else arguments[:400] + " …"
    line = Text("⚙ ", style="cyan")
    line.append(name, style="bold cyan")
    line.append(f" {shown}", style="dim")
    return line


class _Renderable:
    """The live part: the tail of what does not fit the screen."""

    def __init__(self, view: AnswerView) -> None:
        self.view = view

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        lines: list[list[Segment]] = []
        for item in self.view.live_part():
            lines += console.render_lines(item, options.update(height=None), pad=False)
        room = max(3, console.size.height - 2)
        for line in lines[-room:]:
            yield from line
            yield Segment.line()
