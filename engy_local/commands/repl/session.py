"""The chat loop: read a message, run a slash command or ask the model, show
the answer as it streams.

A question becomes the same neutral `ChatRequest` the HTTP server builds
(`Conversation.request`), goes to a `Backend` (in-process, or a server with
`--url`) and comes back as the same events. Errors are one line and the
session goes on; Ctrl-C stops an answer, Ctrl-D leaves.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.text import Text

from ...backend import ModelInfo
from ...chat import Answer, Image
from ...client import RemoteBackend
from ...errors import ConversationFileError, NotAnImage
from .attach import load_image, size_text, typed_path
from .backends import USER_ERRORS, ChatBackend, ChatOptions, open_backend, remote_model
from .conversation import Conversation
from .reader import LineReader
from .view import AnswerView, Tally, stats_line


def error_line(message: str) -> Text:
    """One line, whatever went wrong: the terminal wraps it, never rich."""
    return Text.assemble(("error: ", "bold red"), message)


Command = Callable[["Session", str], Awaitable[bool]]  # False: leave


class Session:
    def __init__(
        self,
        options: ChatOptions,
        console: Console,
        backend: ChatBackend,
        info: ModelInfo,
        reader: LineReader | None = None,
    ) -> None:
        self.options = options
        self.console = console
        self.backend = backend
        self.info = info
        self.reader = reader or LineReader(options.history)
        self.show_thinking = options.show_thinking
        self.conversation = Conversation(
            model=info.id,
            system=options.system,
            thinking=options.thinking,
            max_tokens=options.max_tokens,
            temperature=options.temperature,
        )
        self.context_used = 0  # as of the last answer
        self.images: list[Image] = []  # attached to the next message

    async def run(self) -> None:
        self.say(
            f"engy chat · {self.info.id} · {self._where()} · /help for commands, Ctrl-D to leave",
            "dim",
        )
        while True:
            try:
                line = await self.reader.read()
            except KeyboardInterrupt:
                continue  # Ctrl-C at the prompt clears the line
            except EOFError:
                return
            if not line.strip():
                continue
            if (path := typed_path(line)) is not None:
                # A path alone (a file dropped on the terminal): an image.
                if self._takes_images():
                    self._attach(path)
            elif line.startswith("/"):
                name, _, arg = line.strip().partition(" ")
                command = COMMANDS.get(name.lower())
                if command is None:
                    self.error(f"unknown command {name}: /help lists them")
                elif not await command[0](self, arg.strip()):
                    return
            else:
                await self.ask(line)

    # -- output ---------------------------------------------------------

    def say(self, message: str, style: str = "") -> None:
        self.console.print(Text(message, style=style), soft_wrap=True)

    def error(self, message: str) -> None:
        self.console.print(error_line(message), soft_wrap=True)

    def _where(self) -> str:
        size = self.info.context_length
        window = f"context {size:,}" if size else "context unknown"
        if self.options.url:
            return f"{self.options.url} ({self.options.api}) · {window}"
        return f"{self.info.backend} · {window}"

    # -- asking ---------------------------------------------------------

    async def ask(self, question: str) -> None:
        images, self.images = tuple(self.images), []
        request = self.conversation.request(question, images)
        answer = Answer()
        tally = Tally(time.monotonic())
        view = AnswerView(self.console, show_thinking=self.show_thinking, status="waiting")

        async def generate() -> None:
            generation = await self.backend.submit(request)
            try:
                async for event in generation:
                    tally.add(event, generation.prompt_tokens)
                    answer.add(event)
                    view.event(event)
            finally:
                generation.cancel()

        task = asyncio.create_task(generate())
        with _on_interrupt(task.cancel):
            while not task.done():
                await asyncio.wait({task}, timeout=0.1)
                view.tick()
        view.close()
        stats = tally.stats(time.monotonic(), self.info.context_length)
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            self.error(str(exc) if isinstance(exc, USER_ERRORS) else f"{type(exc).__name__}: {exc}")
            return  # the question is dropped: the conversation stays as it was
        if answer.text or answer.thinking or not task.cancelled():
            self.conversation.add(question, answer, images)
        self.context_used = stats.context_used
        self.say(stats_line(stats), "dim")

    # -- commands -------------------------------------------------------

    async def cmd_help(self, arg: str) -> bool:
        for name, (_, usage, text) in COMMANDS.items():
            line = Text(f"  {(name + ' ' + usage).strip():<34}", style="bold")
            line.append(text)
            self.console.print(line)
        self.say(
            '  Alt-Enter: new line · """ ... """: a multi-line message · '
            "Ctrl-C: stop the answer · Ctrl-D: leave",
            "dim",
        )
        return True

    async def cmd_system(self, arg: str) -> bool:
        self.conversation.system = arg or None
        self.say(f"system prompt set ({len(arg)} characters)" if arg else "system prompt removed")
        return True

    async def cmd_clear(self, arg: str) -> bool:
        self.conversation.clear()
        self.context_used = 0
        self.images.clear()
        self.say("conversation cleared")
        return True

    async def cmd_model(self, arg: str) -> bool:
        if not arg:
            self.say(f"model {self.info.id} · {self._where()}")
            return True
        loop = asyncio.get_running_loop()
        old = self.backend
        try:
            with self.console.status(f"loading {arg}..."), _on_interrupt(lambda: None):
                if self.options.url:
                    assert isinstance(old, RemoteBackend)
                    info = await loop.run_in_executor(None, remote_model, old, arg)
                    new: ChatBackend = old
                else:
                    new, info = await loop.run_in_executor(None, self._reload, arg)
        except USER_ERRORS as exc:
            self.error(str(exc))
            return True
        self.backend, self.info = new, info
        self.conversation.model = info.id
        self.say(f"model {info.id} · {self._where()}")
        return True

    def _reload(self, model: str) -> tuple[ChatBackend, ModelInfo]:
        """Check `model` exists, then free the old model before loading the
        new one (two may not fit); on failure load the old one again."""
        from ...server.backends import resolve_model
        from ...server.options import ServeOptions

        resolve_model(model, ServeOptions(ctx_size=self.options.ctx_size))
        self.backend.close()
        try:
            return open_backend(self.options, model)
        except BaseException:
            self.backend, self.info = open_backend(self.options, self.info.path)
            raise

    async def cmd_think(self, arg: str) -> bool:
        settings = {
            "on": ("thinking", True),
            "off": ("thinking", False),
            "default": ("thinking", None),
            "show": ("show", True),
            "hide": ("show", False),
        }
        if arg not in settings:
            self.error("usage: /think on|off|default|show|hide")
            return True
        what, value = settings[arg]
        if what == "show":
            self.show_thinking = bool(value)
            self.say(f"thinking is {'shown' if value else 'hidden'}")
        else:
            self.conversation.thinking = value
            self.say(f"thinking {arg}" + (" (the model's own setting)" if value is None else ""))
        return True

    async def cmd_save(self, arg: str) -> bool:
        if not arg:
            self.error("usage: /save FILE")
            return True
        try:
            self.conversation.save(Path(arg))
        except OSError as exc:
            self.error(f"cannot write {arg}: {exc.strerror}")
            return True
        self.say(f"saved {len(self.conversation.messages)} messages to {arg}")
        return True

    async def cmd_load(self, arg: str) -> bool:
        if not arg:
            self.error("usage: /load FILE")
            return True
        try:
            self.conversation.load(Path(arg))
        except ConversationFileError as exc:
            self.error(str(exc))
            return True
        self.context_used = 0
        self.say(f"loaded {len(self.conversation.messages)} messages from {arg}")
        return True

    async def cmd_tokens(self, arg: str) -> bool:
        used, exact = self.context_used, False
        conversation = self.conversation
        if conversation.messages or conversation.system:
            loop = asyncio.get_running_loop()
            try:
                request = conversation.request()
                used = await loop.run_in_executor(None, self.backend.count_tokens, request)
                exact = True
            except Exception:  # the server cannot count, or a template needs a question
                pass
        size = self.info.context_length
        about = "" if exact else "about "
        if size:
            self.say(f"context: {about}{used:,} tokens used, {size - used:,} left of {size:,}")
        else:
            self.say(f"context: {about}{used:,} tokens used (the window's size is unknown)")
        return True

    async def cmd_image(self, arg: str) -> bool:
        if not self._takes_images():
            pass
        elif not arg:
            self.error("/image needs a PATH")
        else:
            self._attach(Path(arg))
        return True

    def _takes_images(self) -> bool:
        if not self.info.supports_images:
            self.error(f"{self.info.id} takes no images (it has no vision projector)")
        return self.info.supports_images

    def _attach(self, path: Path) -> None:
        try:
            image = load_image(path)
        except NotAnImage as exc:
            self.error(str(exc))
            return
        self.images.append(image)
        count = f" ({len(self.images)} attached)" if len(self.images) > 1 else ""
        self.say(
            f"image {path.name}, {size_text(image)}: goes with your next message{count}", "dim"
        )

    async def cmd_exit(self, arg: str) -> bool:
        return False


# name -> (handler, arguments, what it does); /help lists them in this order.
COMMANDS: dict[str, tuple[Command, str, str]] = {
    "/help": (Session.cmd_help, "", "this list"),
    "/system": (Session.cmd_system, "[TEXT]", "set the system prompt (no TEXT: remove it)"),
    "/clear": (Session.cmd_clear, "", "forget the conversation (the system prompt stays)"),
    "/model": (Session.cmd_model, "[ID]", "switch to another model (no ID: show this one)"),
    "/think": (Session.cmd_think, "on|off|default|show|hide", "thinking: ask for it, or show it"),
    "/save": (Session.cmd_save, "FILE", "write the conversation as JSON"),
    "/load": (Session.cmd_load, "FILE", "read a conversation written by /save"),
    "/tokens": (Session.cmd_tokens, "", "context used and left"),
    "/image": (Session.cmd_image, "PATH", "attach an image to the next message"),
    "/exit": (Session.cmd_exit, "", "leave (or Ctrl-D)"),
}


class _on_interrupt:
    """Within the block, Ctrl-C calls `action` instead of raising
    KeyboardInterrupt (where the platform lets asyncio catch signals)."""

    def __init__(self, action: Callable[[], object]) -> None:
        self.action = action
        self.installed = False

    def __enter__(self) -> None:
        try:
            asyncio.get_running_loop().add_signal_handler(signal.SIGINT, self.action)
            self.installed = True
        except (NotImplementedError, RuntimeError):  # Windows: Ctrl-C raises
            pass

    def __exit__(self, *exc: object) -> None:
        if self.installed:
            asyncio.get_running_loop().remove_signal_handler(signal.SIGINT)


def run_chat(options: ChatOptions, console: Console) -> int:
    """`engy chat`: load or connect, then talk until Ctrl-D. The exit code."""
    where = options.url or options.model or "the default model"
    try:
        if not options.url:
            from ...models.embedded import ready

            ready(options.model, console)  # the default's first start: a bar while it is assembled
        with console.status(f"{'connecting to' if options.url else 'loading'} {where}..."):
            backend, info = open_backend(options, options.model)
    except USER_ERRORS as exc:
        console.print(error_line(str(exc)), soft_wrap=True)
        return 1
    except KeyboardInterrupt:
        return 130

    async def main(session: Session) -> None:
        try:
            await session.run()
        finally:
            if isinstance(session.backend, RemoteBackend):
                await session.backend.aclose()

    session = Session(replace(options, model=info.id), console, backend, info)
    try:
        asyncio.run(main(session))
    except KeyboardInterrupt:  # Ctrl-C outside an answer and the prompt
        return 130
    finally:
        session.backend.close()
    return 0
