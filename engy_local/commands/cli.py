"""The `engy` command line: Typer wiring only. Each command calls a function
that tests can call directly; options are declared once, in options.py."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
import typer.core
from rich.console import Console

from .options import (
    DEFAULT_PORT,
    DEFAULT_URL,
    AsJson,
    ClientKey,
    CtxSize,
    CtxWindow,
    GpuLayers,
    Mmproj,
    ModelArg,
    ModelsDir,
    Rpc,
    Temp,
    Threads,
    Url,
    console,
    ctx_window,
    gpu_layers,
    one_line_errors,
)
from .serve import serve

# typer needs Optional on Python 3.10.
# ruff: noqa: UP045

app = typer.Typer(
    help="Local inference for agent tools: Anthropic Messages, OpenAI Responses and Chat "
    "Completions on llama.cpp.",
    no_args_is_help=True,
    add_completion=False,
)
app.command()(serve)


@app.command()
def chat(
    model: ModelArg = None,
    url: Annotated[
        Optional[str],
        typer.Option(help="Talk to a running server (engy serve) instead of loading the model"),
    ] = None,
    api: Annotated[
        str, typer.Option(help="With --url: the API to speak, 'messages' or 'responses'")
    ] = "messages",
    api_key: ClientKey = None,
    system: Annotated[Optional[str], typer.Option(help="System prompt")] = None,
    think: Annotated[
        Optional[bool],
        typer.Option("--think/--no-think", help="Ask for thinking, or not (default: the model's)"),
    ] = None,
    hide_thinking: Annotated[
        bool, typer.Option("--hide-thinking", help="Do not show the model's thinking")
    ] = False,
    max_tokens: Annotated[
        int, typer.Option("--max-tokens", help="Cap on tokens per answer (0: what fits)")
    ] = 0,
    temperature: Annotated[
        Optional[float], typer.Option(help="Sampling temperature (default: the engine's)")
    ] = None,
    ctx_size: CtxSize = 32768,
    gpu_layers_: GpuLayers = "auto",
    threads: Threads = 0,
    mmproj: Mmproj = None,
) -> None:
    """Talk to a model in the terminal: in-process, or through a server with --url."""
    from ..models.catalog import engy_home
    from .repl import ChatOptions, run_chat

    if api not in ("messages", "responses"):
        raise typer.BadParameter("expected 'messages' or 'responses'", param_hint="--api")
    options = ChatOptions(
        model=model,
        url=url,
        api="messages" if api == "messages" else "responses",
        api_key=api_key or None,
        system=system,
        thinking=think,
        show_thinking=not hide_thinking,
        max_tokens=max_tokens or None,
        temperature=temperature,
        ctx_size=ctx_size or None,
        gpu_layers=gpu_layers(gpu_layers_),
        threads=threads or None,
        history=engy_home() / "chat_history",
        mmproj=mmproj.expanduser() if mmproj else None,
    )
    raise typer.Exit(run_chat(options, Console()))


cache_app = typer.Typer(
    help="The prompt cache on disk: list what it holds (the default), or clear it.",
    no_args_is_help=False,
)
app.add_typer(cache_app, name="cache")
CacheDir = Annotated[
    Optional[Path],
    typer.Option("--cache-disk", help="Its directory (default: $ENGY_HOME/kvcache)"),
]


@cache_app.callback(invoke_without_command=True)
def cache(ctx: typer.Context, cache_disk: CacheDir = None) -> None:
    """List the stored prompt states: model, tokens, size, last use, hits."""
    if ctx.invoked_subcommand is None:
        from .cache import list_cache

        list_cache(cache_disk, Console())


@cache_app.command(name="clear")
def cache_clear(
    model: Annotated[
        Optional[str], typer.Argument(help="Only this model's (a GGUF, an id, a file name)")
    ] = None,
    cache_disk: CacheDir = None,
) -> None:
    """Remove the stored prompt states: all, or one model's."""
    from .cache import clear_cache

    for line in clear_cache(cache_disk, model):
        console.print(line, soft_wrap=True, highlight=False)


def _wide() -> Console:
    """A table's console: the terminal's width, and wide enough that ids and
    paths are never cut where the output goes to a pipe or a file."""
    out = Console()
    return out if out.is_terminal else Console(width=max(out.width, 240))


@app.command(name="models")
def list_catalog(models_dir: ModelsDir = None, as_json: AsJson = False) -> None:
    """List the models in the catalog: size (here, or to download), memory at the
    default window, and whether it fits this machine."""
    import json

    from ..models.catalog import load_catalog
    from ..models.folders import add_user_roots
    from ..models.store import installed
    from ..runtime.loading.fit import machine
    from .inventory import catalog_json, catalog_table

    add_user_roots(list(models_dir or ()))
    with one_line_errors():
        rows = catalog_json(load_catalog(), installed(), machine())
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
    else:
        _wide().print(catalog_table(rows))


@app.command()
def pull(
    ref: Annotated[
        str,
        typer.Argument(
            help="A catalog id (id@quant), hf:owner/repo[:quant or file], a URL or a GGUF path"
        ),
    ],
) -> None:
    """Download a model into the store (a GGUF path is recorded, not copied)."""
    from .inventory import human_size, pull_with_progress

    with one_line_errors():
        record = pull_with_progress(ref, console)
    what = f"{record.quant}, {human_size(record.size)}" if record.quant else human_size(record.size)
    console.print(f"{record.id} ({what}): {record.path}", soft_wrap=True, highlight=False)


@app.command(name="list")
def list_models(models_dir: ModelsDir = None, as_json: AsJson = False) -> None:
    """List the installed models: pulled, imported, and found in the Hugging Face cache,
    Ollama, LM Studio and your folders; with memory needed and whether each fits."""
    import json

    from ..models.folders import add_user_roots
    from ..models.store import installed
    from ..runtime.loading.fit import machine
    from .inventory import list_json, list_table

    add_user_roots(list(models_dir or ()))
    with one_line_errors():
        records, here = installed(), machine()
    if as_json:
        typer.echo(json.dumps(list_json(records, here), indent=2))
    else:
        _wide().print(list_table(records, here))


@app.command()
def show(
    model: Annotated[str, typer.Argument(help="An installed model's id, alias or file")],
) -> None:
    """Show what an installed model is: architecture, size, context, template, licence."""
    from .inventory import describe

    with one_line_errors():
        rows = describe(model)
    out = Console()
    for key, value in rows:
        out.print(f"[bold]{key:<18}[/bold]{value}", soft_wrap=True, highlight=False)


@app.command(name="rm")
def remove(
    model: Annotated[str, typer.Argument(help="An installed model's id (id@quant: one)")],
) -> None:
    """Remove a model from the store (a file imported by path is forgotten, not deleted)."""
    from ..models.store import remove as remove_model
    from .inventory import removed_lines

    with one_line_errors():
        gone = remove_model(model)
    for line in removed_lines(gone):
        console.print(line, soft_wrap=True, highlight=False)


class _ClientArgsCommand(typer.core.TyperCommand):
    """Everything after `--` is the client's, kept apart before parsing (so
    that `engy launch claude -- -p hi` does not read `-p` as MODEL)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:  # a click Context
        if "--" in args:
            cut = args.index("--")
            args, ctx.meta["client_args"] = args[:cut], args[cut + 1 :]
        return super().parse_args(ctx, args)


@app.command(cls=_ClientArgsCommand)
def launch(
    ctx: typer.Context,
    client: Annotated[
        Optional[str],
        typer.Argument(
            help="claude, codex, opencode, kilo, qwen, cline, continue, aider or "
            "mini-swe-agent (none: list them and which are installed)"
        ),
    ] = None,
    model: Annotated[
        Optional[str],
        typer.Argument(help="A model the server serves, a GGUF path or a catalog id"),
    ] = None,
    host: Annotated[str, typer.Option(help="Where engy runs, or is started")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="engy's port")] = DEFAULT_PORT,
    api_key: ClientKey = None,
    keep: Annotated[
        bool, typer.Option("--keep", help="Leave a server started here running")
    ] = False,
    small_model: Annotated[
        Optional[str],
        typer.Option("--small-model", help="Claude Code: the model for haiku and subagents"),
    ] = None,
    ctx_size: CtxWindow = "32768",
    temp: Temp = None,
    tools: Annotated[
        str,
        typer.Option(
            "--tools",
            help="The client's tool profile: lean (a short tool set and prompt, for small "
            "models), full (the client's defaults) or auto (Claude Code: lean under 14B "
            "parameters or a 64k window; Codex: its defaults)",
        ),
    ] = "auto",
) -> None:
    """Run a coding agent on a local model: `engy launch CLIENT [MODEL] [-- ARGS]`."""
    from .launch import LaunchOptions
    from .launch import launch as run_launch
    from .launch.clients import CLIENTS, known
    from .launch.profile import TOOLS_CHOICES

    if client is None:
        for spec, where in known():
            state = f"[green]{where}[/green]" if where else f"not installed: {spec.install}"
            console.print(
                f"  [bold]{spec.name:<15}[/bold] {spec.title:<15} {state}",
                soft_wrap=True,
                highlight=False,
            )
        return
    names = [name for name in CLIENTS if name == client]
    if not names:
        raise typer.BadParameter("expected one of " + ", ".join(CLIENTS), param_hint="CLIENT")
    if tools not in TOOLS_CHOICES:
        raise typer.BadParameter("expected auto, lean or full", param_hint="--tools")
    ctx_window(ctx_size)  # checked here; the server it starts reads it again
    options = LaunchOptions(
        client=names[0],
        model=model,
        client_args=tuple(ctx.meta.get("client_args", ())),
        host=host,
        port=port,
        api_key=api_key or None,
        keep=keep,
        small_model=small_model,
        tools="lean" if tools == "lean" else "full" if tools == "full" else "auto",
        serve_args=["--ctx-size", ctx_size, *(["--temp", str(temp)] if temp is not None else [])],
    )
    with one_line_errors():
        code = run_launch(options, console)
    raise typer.Exit(code)


@app.command()
def ps(url: Url = DEFAULT_URL, api_key: ClientKey = None, as_json: AsJson = False) -> None:
    """What a running engy holds: each loaded model, its window, memory, keep-alive."""
    from .ps import fetch_status, print_status

    with one_line_errors():
        models = fetch_status(url, api_key or None)
    print_status(models, url, as_json, Console())


@app.command()
def doctor(
    model: ModelArg = None,
    ctx_size: CtxSize = 32768,
    gpu_layers_: GpuLayers = "auto",
    rpc: Rpc = None,
    as_json: AsJson = False,
) -> None:
    """Check that a model works for coding agents: load, template, tools, cache, clients."""
    from .doctor import DoctorOptions, print_report, run_doctor

    options = DoctorOptions(model, ctx_size or None, gpu_layers(gpu_layers_), rpc=tuple(rpc or ()))
    report = run_doctor(options, Console(stderr=True) if as_json else Console())
    print_report(report, as_json, Console())
    raise typer.Exit(0 if report.passed else 1)


def main() -> None:  # pragma: no cover
    logging.basicConfig(level=logging.WARNING)
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
