"""The command line's options, each declared once: typed aliases the commands
share (`engy serve`, `chat`, `doctor`, `launch`, `ps`), the panels `engy
serve --help` groups them into, and the one way a command reports an error.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, NoReturn, Optional

import typer
from rich.console import Console

from ..errors import EngyError

DEFAULT_PORT = 8642
DEFAULT_URL = f"http://127.0.0.1:{DEFAULT_PORT}"

# `engy serve --help` panels.
MODEL = "Model"
MEMORY = "Memory: KV cache and experts"
NETWORK = "Network and security"
SESSIONS = "Sessions and cache"
UPSTREAM = "Upstream engines"
VISION = "Vision"
RPC = "RPC workers"

console = Console(stderr=True)


def fail(exc: Exception) -> NoReturn:
    """An error as one line on stderr, then exit 1."""
    console.print(f"[red]error:[/red] {exc}", soft_wrap=True, highlight=False)
    raise typer.Exit(1) from None


@contextmanager
def one_line_errors() -> Iterator[None]:
    """Any EngyError in the block is one line and exit 1, not a traceback."""
    try:
        yield
    except EngyError as exc:
        fail(exc)


def gpu_layers(value: str) -> int | None:
    """--gpu-layers: 'auto' (None), -1 (all) or a number of layers."""
    if value == "auto":
        return None
    try:
        n = int(value)
    except ValueError:
        raise typer.BadParameter("expected 'auto' or a number of layers") from None
    if n < -1:
        raise typer.BadParameter("expected 'auto', -1 (all) or a number >= 0")
    return n


def ctx_window(value: str) -> tuple[int | None, bool]:
    """--ctx-size of serve and launch: (cap, auto); cap None is the model's own."""
    if value == "auto":
        return None, True
    try:
        n = int(value)
    except ValueError:
        raise typer.BadParameter("expected 'auto' or a number of tokens") from None
    if n < 0:
        raise typer.BadParameter("expected 'auto', 0 (the model's own) or a number of tokens")
    return n or None, False


# typer needs Optional on Python 3.10.
# ruff: noqa: UP045

ModelArg = Annotated[
    Optional[str],
    typer.Argument(
        help="A GGUF path, an installed model's id or alias, or a catalog id "
        "(default: the catalog's)"
    ),
]
CtxSize = Annotated[
    int,
    typer.Option(
        "--ctx-size", help="Cap on the context window (0: the model's own)", rich_help_panel=MODEL
    ),
]
CtxWindow = Annotated[
    str,
    typer.Option(
        "--ctx-size",
        help="The context window: N tokens (0: the model's own), or 'auto': the largest "
        "the memory budget holds with the cache types and --parallel",
        rich_help_panel=MODEL,
    ),
]
GpuLayers = Annotated[
    str,
    typer.Option(
        "--gpu-layers",
        help="'auto' (all when the build can offload) or N",
        rich_help_panel=MODEL,
    ),
]
Temp = Annotated[
    Optional[float],
    typer.Option(
        "--temp",
        help="Temperature for requests that set none (Claude Code and Codex send none; "
        "default 0.8)",
        rich_help_panel=MODEL,
        min=0,
        max=2,
    ),
]
Threads = Annotated[
    int, typer.Option("--threads", help="CPU threads (0: all cores)", rich_help_panel=MODEL)
]
Mmproj = Annotated[
    Optional[Path],
    typer.Option("--mmproj", help="Vision projector GGUF for MODEL", rich_help_panel=VISION),
]
ModelsDir = Annotated[
    Optional[list[Path]],
    typer.Option(
        "--models-dir",
        help="A folder of GGUFs to list and serve in place (repeat for several; also "
        "$ENGY_MODELS_DIRS, separated by ':')",
        rich_help_panel=MODEL,
    ),
]
Rpc = Annotated[
    Optional[list[str]],
    typer.Option(
        "--rpc",
        help="llama.cpp RPC workers (ggml-rpc-server) to load the model onto: HOST:PORT,...",
        rich_help_panel=RPC,
    ),
]
# The key a server requires (serve), and the one a client sends (the rest).
ServerKey = Annotated[
    Optional[str],
    typer.Option(
        "--api-key",
        envvar="ENGY_API_KEY",
        help="Require this key from clients",
        rich_help_panel=NETWORK,
    ),
]
ClientKey = Annotated[
    Optional[str],
    typer.Option("--api-key", envvar="ENGY_API_KEY", help="The server's key, if it has one"),
]
Url = Annotated[str, typer.Option("--url", help="The engy server")]
Host = Annotated[str, typer.Option("--host", help="Address to bind", rich_help_panel=NETWORK)]
Port = Annotated[int, typer.Option("--port", help="Port to listen on", rich_help_panel=NETWORK)]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON")]
Verbose = Annotated[
    bool,
    typer.Option("--verbose", "-v", help="Show llama.cpp's own log lines as models load"),
]
