"""`engy launch`: find the client, find or start the server, configure the
client for the model as loaded, run it, and stop what was started."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from ...errors import LaunchError
from ...models.catalog import engy_home
from . import aider, cline, continuecli, miniswe, opencode, qwen
from .claude import LEAN_TOOLS, claude_args, claude_env, compaction_warning, output_cap
from .clients import Client, ClientName, find_client
from .codex import bundled_catalog, catalog_entry, codex_env, codex_overrides, write_catalog
from .profile import Profile, ToolsChoice, choose
from .server import Server, connect, model_size
from .setup import Context, Setup

# The clients configured through a temporary directory of their own (the
# rest: Claude Code and Codex, below).
CONFIGURE: dict[str, Callable[[Context], Setup]] = {
    "opencode": opencode.configure,
    "kilo": lambda ctx: opencode.configure(ctx, "KILO"),
    "qwen": qwen.configure,
    "cline": cline.configure,
    "continue": continuecli.configure,
    "aider": aider.configure,
    "mini-swe-agent": miniswe.configure,
}
# How long a client has to exit after SIGTERM before it is killed (Cline
# ignores SIGTERM).
STOP_GRACE = 5.0


@dataclass(frozen=True)
class LaunchOptions:
    client: ClientName
    model: str | None = None
    client_args: tuple[str, ...] = ()
    host: str = "127.0.0.1"
    port: int = 8642
    api_key: str | None = None
    keep: bool = False  # leave a server started here running
    small_model: str | None = None  # Claude Code's haiku tier and subagents
    serve_args: list[str] = field(default_factory=list)  # for a server started here
    home: Path | None = None  # engy's own files (default: ENGY_HOME)
    tools: ToolsChoice = "auto"  # the tool profile (profile.py)


def launch(options: LaunchOptions, console: Console) -> int:
    """Run the client on an engy model; its exit code. Raises LaunchError."""
    client = find_client(options.client)
    warning = client.too_old()
    if warning:
        console.print(f"[yellow]warning:[/yellow] {warning}", soft_wrap=True, highlight=False)
    home = options.home or engy_home()
    with console.status("starting engy..."):
        server = connect(
            options.model,
            options.host,
            options.port,
            options.api_key,
            options.serve_args,
            home / "logs",
            lambda line: console.print(line, soft_wrap=True, highlight=False),
        )
    try:
        m = server.model
        where = (
            f"engy started here (pid {server.process.pid}), stopped when {options.client} exits"
            if server.process is not None and not options.keep
            else "engy started here, left running"
            if server.process is not None
            else "engy already running"
        )
        if server.process is None and "--temp" in options.serve_args:
            console.print(
                "[yellow]warning:[/yellow] --temp is for a server launch starts; the running "
                "one keeps its own (engy serve --temp)",
                soft_wrap=True,
                highlight=False,
            )
        console.print(
            f"[bold]engy launch[/bold] {client.spec.title} {client.version_text} on "
            f"[cyan]{m.id}[/cyan] ({m.context_length} tokens, {m.backend}) at {server.url}: "
            f"{where}",
            soft_wrap=True,
            highlight=False,
        )
        profile = _profile(server, options, client.spec.name)
        console.print(
            f"  tools: [bold]{profile.name}[/bold] ({profile.why}); {profile.other}",
            soft_wrap=True,
            highlight=False,
        )
        if client.spec.name in CONFIGURE:
            return _run_configured(client, server, options, console, profile)
        argv, env = _configure(client, server, options, home, console, profile)
        return run_client(argv, env)
    finally:
        if server.process is not None:
            if options.keep:
                console.print(
                    f"engy left running at {server.url} (pid {server.process.pid}, "
                    f"log {server.log})",
                    soft_wrap=True,
                    highlight=False,
                )
            else:
                server.stop()


def _profile(server: Server, options: LaunchOptions, client: str) -> Profile:
    m = server.model
    if options.tools != "auto":
        return choose(options.tools, m.context_length)
    parameters, size = model_size(server.url, options.api_key, m.id)
    return choose("auto", m.context_length, parameters, size, client)


def _run_configured(
    client: Client, server: Server, options: LaunchOptions, console: Console, profile: Profile
) -> int:
    """A client whose config engy writes into a temporary directory,
    removed when the client exits."""
    workdir = Path(tempfile.mkdtemp(prefix="engy-launch-"))
    try:
        ctx = Context(
            url=server.url,
            api_key=options.api_key,
            model=server.model,
            lean=profile.lean,
            workdir=workdir,
            user_args=options.client_args,
            base_env=os.environ,
            binary=client.path,
            cwd=Path.cwd(),
        )
        setup = CONFIGURE[client.spec.name](ctx)
        for line in setup.said:
            console.print(f"  {line}", soft_wrap=True, highlight=False)
        return run_client([str(client.path), *setup.args], setup.env)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _configure(
    client: Client,
    server: Server,
    options: LaunchOptions,
    home: Path,
    console: Console,
    profile: Profile,
) -> tuple[list[str], dict[str, str]]:
    m = server.model
    lean = profile.lean
    user = options.client_args
    if client.spec.name == "claude":
        env = claude_env(os.environ, server.url, options.api_key, m, options.small_model, lean)
        added = claude_args(lean, user)
        ours = any(a.startswith("--tools=") for a in added)
        tools = ", ".join(LEAN_TOOLS) if ours else "the tools your --tools names"
        said = f"{tools}, no slash commands or auto-memory" if lean else "its default tools"
        console.print(
            f"  Claude Code: {said}; " + " ".join(added),
            soft_wrap=True,
            highlight=False,
        )
        console.print(
            f"  Claude Code: every model tier {m.id}"
            + (f" (haiku and subagents {options.small_model})" if options.small_model else "")
            + f", auto-compact at the {m.context_length}-token window, "
            f"{output_cap(m.context_length)} output tokens at most",
            soft_wrap=True,
            highlight=False,
        )
        warning = compaction_warning(m.context_length)
        if warning:
            console.print(f"[yellow]warning:[/yellow] {warning}", soft_wrap=True, highlight=False)
        return [str(client.path), *added, *user], env
    env = codex_env(os.environ, options.api_key)
    entry = catalog_entry(m, bundled_catalog(client.path, env), lean)
    catalog = write_catalog(home / "codex", entry) if entry is not None else None
    if catalog is None:
        console.print(
            "[yellow]warning:[/yellow] this Codex ships no model catalog to start from; "
            "apply_patch comes as a function tool",
            highlight=False,
        )
    console.print(
        f"  Codex: provider {server.url}/v1 and model {m.id} as -c overrides "
        f"(config.toml is not changed)" + (f", model catalog {catalog}" if catalog else ""),
        soft_wrap=True,
        highlight=False,
    )
    if lean:
        off = ["skills list", "multi-agent", "goals", "image generation", "web search"]
        off += [] if m.images else ["view_image"]
        console.print(
            f"  Codex: exec_command and apply_patch; no {', '.join(off[:-1])} or {off[-1]} "
            "(your -c settings win)",
            soft_wrap=True,
            highlight=False,
        )
    overrides = codex_overrides(server.url, m, catalog, lean)
    return [str(client.path), *overrides, *user], env


def run_client(argv: Sequence[str], env: dict[str, str]) -> int:
    """Run the client in this terminal. Ctrl-C is the client's to handle
    (it stops a turn); engy waits for it to exit. A Python handler, unlike
    SIG_IGN, is not inherited: the client gets the default disposition."""

    def wait_for_client(signum: int, frame: object) -> None:
        pass

    previous = signal.signal(signal.SIGINT, wait_for_client)
    try:
        proc = subprocess.Popen(list(argv), env=env)
    except OSError as exc:
        signal.signal(signal.SIGINT, previous)
        raise LaunchError(f"cannot run {argv[0]}: {exc}") from None
    try:
        return proc.wait()
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=STOP_GRACE)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        signal.signal(signal.SIGINT, previous)


__all__ = ["LaunchError", "LaunchOptions", "launch"]
