"""The `engy` command line: Typer wiring only. Each command calls a function
that tests can call directly."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
import typer.core
from rich.console import Console

from .errors import EngyError
from .models.catalog import CatalogError, load_catalog

app = typer.Typer(
    help="Local inference for agent tools: Anthropic Messages and OpenAI Responses on llama.cpp.",
    no_args_is_help=True,
    add_completion=False,
)
console = Console(stderr=True)

DEFAULT_PORT = 8642


def _gpu_layers(value: str) -> int | None:
    if value == "auto":
        return None
    try:
        n = int(value)
    except ValueError:
        raise typer.BadParameter("expected 'auto' or a number of layers") from None
    if n < -1:
        raise typer.BadParameter("expected 'auto', -1 (all) or a number >= 0")
    return n


@app.command()
def serve(
    model: Annotated[
        Optional[str],  # noqa: UP045 - typer needs Optional on 3.10
        typer.Argument(help="A GGUF path or a model id from models.toml (default: the catalog's)"),
    ] = None,
    host: Annotated[str, typer.Option(help="Address to bind")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on")] = DEFAULT_PORT,
    ctx_size: Annotated[
        int, typer.Option("--ctx-size", help="Cap on the context window (0: the model's own)")
    ] = 32768,
    gpu_layers: Annotated[
        str, typer.Option("--gpu-layers", help="'auto' (all when the build can offload) or N")
    ] = "auto",
    threads: Annotated[int, typer.Option(help="CPU threads (0: all cores)")] = 0,
    api_key: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option("--api-key", envvar="ENGY_API_KEY", help="Require this key from clients"),
    ] = None,
    no_api_key: Annotated[
        bool, typer.Option("--no-api-key", help="Allow serving off loopback without a key")
    ] = False,
    allow_host: Annotated[
        Optional[list[str]],  # noqa: UP045
        typer.Option(
            "--allow-host",
            envvar="ENGY_ALLOW_HOST",
            help="Also accept requests with this Host name (repeat, or comma-separated; '*': any)",
        ),
    ] = None,
    allow_origin: Annotated[
        Optional[list[str]],  # noqa: UP045
        typer.Option(
            "--allow-origin",
            envvar="ENGY_ALLOW_ORIGIN",
            help="Also accept requests from this browser Origin, e.g. https://app.example",
        ),
    ] = None,
    shutdown_grace: Annotated[
        float,
        typer.Option(
            "--shutdown-grace", help="Seconds streams may finish on Ctrl-C / SIGTERM", min=0
        ),
    ] = 5.0,
    timeout: Annotated[
        float, typer.Option(help="Seconds one generation may take (0: no limit)")
    ] = 600.0,
    max_output_tokens: Annotated[
        int,
        typer.Option(
            "--max-output-tokens", help="Cap on output tokens per request, on both endpoints"
        ),
    ] = 8192,
    queue_size: Annotated[
        int, typer.Option("--queue-size", help="Requests that may wait for the model")
    ] = 16,
    memory_budget: Annotated[
        float,
        typer.Option(
            "--memory-budget", help="GiB the loaded models may take (0: 80% of RAM)", min=0
        ),
    ] = 0,
    keep_alive: Annotated[
        float,
        typer.Option(
            "--keep-alive", help="Seconds an idle model stays loaded (0: until room is needed)"
        ),
    ] = 1800,
    upstream: Annotated[
        Optional[list[str]],  # noqa: UP045
        typer.Option(
            "--upstream",
            help="Run the tokens on this engine (llama-server, vLLM, SGLang): "
            "http://HOST:PORT[;kind=..;model=..;tokenizer=..;key=..;gpu=..;quantization=..] "
            "(repeat for several)",
        ),
    ] = None,
    upstream_kind: Annotated[
        str,
        typer.Option(
            "--upstream-kind", help="Its completions API: llamacpp (/completion) or openai"
        ),
    ] = "llamacpp",
    upstream_model: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option("--upstream-model", help="The model's name at the upstream (and here)"),
    ] = None,
    upstream_key: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option("--upstream-key", envvar="ENGY_UPSTREAM_KEY", help="The upstream's API key"),
    ] = None,
    tokenizer: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            "--tokenizer",
            help="The upstreams' vocabulary and template: a GGUF, a model id, or a Hugging "
            "Face tokenizer.json or snapshot directory (default: MODEL)",
        ),
    ] = None,
    parallel: Annotated[
        int,
        typer.Option(
            "--parallel", help="Conversations each model serves at once (KV sequences)", min=1
        ),
    ] = 4,
    cache_ram: Annotated[
        float,
        typer.Option(
            "--cache-ram", help="MiB of RAM for saved conversation states (0: none)", min=0
        ),
    ] = 2048,
    repack: Annotated[
        Optional[bool],  # noqa: UP045
        typer.Option(
            "--repack/--no-repack",
            envvar="ENGY_REPACK",
            help="CPU weight repacking (default: on, except where AMX would crash)",
        ),
    ] = None,
    mmproj: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option("--mmproj", help="Vision projector GGUF for MODEL (images on /v1/messages)"),
    ] = None,
    max_image_bytes: Annotated[
        int,
        typer.Option("--max-image-bytes", help="Largest image one request may send (413 over)"),
    ] = 5 * 1024 * 1024,
    max_images: Annotated[
        int, typer.Option("--max-images", help="Images one request may send (413 over)", min=0)
    ] = 100,
    rpc: Annotated[
        Optional[list[str]],  # noqa: UP045
        typer.Option(
            "--rpc",
            help="llama.cpp RPC workers (ggml-rpc-server) to load the model onto: HOST:PORT,...",
        ),
    ] = None,
    tensor_split: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            "--tensor-split",
            help="How much of the model each device takes, e.g. 3,1 (RPC workers, then GPUs)",
        ),
    ] = None,
) -> None:
    """Serve a model on POST /v1/messages (Anthropic) and /v1/responses (OpenAI)."""
    from .engine.rpc import parse_tensor_split
    from .serve import ServeOptions, run_server

    options = ServeOptions(
        model=model,
        host=host,
        port=port,
        ctx_size=ctx_size or None,
        gpu_layers=_gpu_layers(gpu_layers),
        threads=threads or None,
        api_key=api_key or None,
        no_api_key=no_api_key,
        allow_hosts=tuple(allow_host or ()),
        allow_origins=tuple(allow_origin or ()),
        shutdown_grace=shutdown_grace,
        timeout=timeout or None,
        max_output_tokens=max_output_tokens,
        queue_size=queue_size,
        memory_budget=int(memory_budget * (1 << 30)) or None,
        keep_alive=keep_alive or None,
        upstream=tuple(upstream or ()),
        upstream_kind=upstream_kind,
        upstream_model=upstream_model or None,
        upstream_key=upstream_key or None,
        tokenizer=tokenizer or None,
        parallel=parallel,
        cache_ram=int(cache_ram * (1 << 20)),
        repack=repack,
        mmproj=mmproj.expanduser() if mmproj else None,
        max_image_bytes=max_image_bytes,
        max_images=max_images,
        rpc=tuple(rpc or ()),
    )
    try:
        options = replace(options, tensor_split=parse_tensor_split(tensor_split))
        run_server(options, console)
    except (CatalogError, EngyError) as exc:
        console.print(f"[red]error:[/red] {exc}", soft_wrap=True, highlight=False)  # one line
        raise typer.Exit(1) from None


@app.command()
def chat(
    model: Annotated[
        Optional[str],  # noqa: UP045
        typer.Argument(help="A GGUF path or model id (with --url: the server's model id)"),
    ] = None,
    url: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(help="Talk to a running server (engy serve) instead of loading the model"),
    ] = None,
    api: Annotated[
        str, typer.Option(help="With --url: the API to speak, 'messages' or 'responses'")
    ] = "messages",
    api_key: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option("--api-key", envvar="ENGY_API_KEY", help="With --url: the server's key"),
    ] = None,
    system: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(help="System prompt"),
    ] = None,
    think: Annotated[
        Optional[bool],  # noqa: UP045
        typer.Option("--think/--no-think", help="Ask for thinking, or not (default: the model's)"),
    ] = None,
    hide_thinking: Annotated[
        bool, typer.Option("--hide-thinking", help="Do not show the model's thinking")
    ] = False,
    max_tokens: Annotated[
        int, typer.Option("--max-tokens", help="Cap on tokens per answer (0: what fits)")
    ] = 0,
    temperature: Annotated[
        Optional[float],  # noqa: UP045
        typer.Option(help="Sampling temperature (default: the engine's)"),
    ] = None,
    ctx_size: Annotated[
        int, typer.Option("--ctx-size", help="Cap on the context window (0: the model's own)")
    ] = 32768,
    gpu_layers: Annotated[
        str, typer.Option("--gpu-layers", help="'auto' (all when the build can offload) or N")
    ] = "auto",
    threads: Annotated[int, typer.Option(help="CPU threads (0: all cores)")] = 0,
    mmproj: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option("--mmproj", help="Vision projector GGUF for MODEL (for /image)"),
    ] = None,
) -> None:
    """Talk to a model in the terminal: in-process, or through a server with --url."""
    from .models.catalog import engy_home
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
        gpu_layers=_gpu_layers(gpu_layers),
        threads=threads or None,
        history=engy_home() / "chat_history",
        mmproj=mmproj.expanduser() if mmproj else None,
    )
    raise typer.Exit(run_chat(options, Console()))


@app.command(name="models")
def list_catalog() -> None:
    """List the models in the catalog."""
    catalog = load_catalog()
    for entry in catalog.entries.values():
        mark = " (default)" if entry.id == catalog.default else ""
        typer.echo(f"{entry.id}\t{entry.quant}\t{entry.name}{mark}")


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
    from .models.download import PullError
    from .models.inventory import human_size, pull_with_progress

    try:
        record = pull_with_progress(ref, console)
    except (PullError, CatalogError) as exc:
        console.print(f"[red]error:[/red] {exc}", soft_wrap=True, highlight=False)
        raise typer.Exit(1) from None
    what = f"{record.quant}, {human_size(record.size)}" if record.quant else human_size(record.size)
    console.print(f"{record.id} ({what}): {record.path}", soft_wrap=True, highlight=False)


@app.command(name="list")
def list_models() -> None:
    """List the installed models: pulled, imported, and found in the Hugging Face cache."""
    from .models.inventory import list_table
    from .models.store import installed

    Console().print(list_table(installed()))


@app.command()
def show(
    model: Annotated[str, typer.Argument(help="An installed model's id, alias or file")],
) -> None:
    """Show what an installed model is: architecture, size, context, template, licence."""
    from .models.inventory import describe

    try:
        rows = describe(model)
    except CatalogError as exc:
        console.print(f"[red]error:[/red] {exc}", soft_wrap=True, highlight=False)
        raise typer.Exit(1) from None
    out = Console()
    for key, value in rows:
        out.print(f"[bold]{key:<18}[/bold]{value}", soft_wrap=True, highlight=False)


@app.command(name="rm")
def remove(
    model: Annotated[str, typer.Argument(help="An installed model's id (id@quant: one)")],
) -> None:
    """Remove a model from the store (a file imported by path is forgotten, not deleted)."""
    from .models.inventory import human_size
    from .models.store import remove as remove_model

    try:
        gone = remove_model(model)
    except CatalogError as exc:
        console.print(f"[red]error:[/red] {exc}", soft_wrap=True, highlight=False)
        raise typer.Exit(1) from None
    for r in gone.models:
        done = f"removed ({human_size(r.size)})" if r.owned else f"forgot it; {r.path} is kept"
        name = f"{r.id}@{r.quant}" if r.quant else r.id
        console.print(f"{name}: {done}", soft_wrap=True, highlight=False)
    for directory in gone.unfinished:
        console.print(f"removed an unfinished download: {directory}", soft_wrap=True)


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
    client: Annotated[str, typer.Argument(help="claude (Claude Code) or codex (Codex)")],
    model: Annotated[
        Optional[str],  # noqa: UP045
        typer.Argument(help="A model the server serves, a GGUF path or a catalog id"),
    ] = None,
    host: Annotated[str, typer.Option(help="Where engy runs, or is started")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="engy's port")] = DEFAULT_PORT,
    api_key: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option("--api-key", envvar="ENGY_API_KEY", help="The server's key, if it has one"),
    ] = None,
    keep: Annotated[
        bool, typer.Option("--keep", help="Leave a server started here running")
    ] = False,
    small_model: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option("--small-model", help="Claude Code: the model for haiku and subagents"),
    ] = None,
    ctx_size: Annotated[
        int, typer.Option("--ctx-size", help="A server started here: cap on the window")
    ] = 32768,
) -> None:
    """Run Claude Code or Codex on a local model: `engy launch claude [MODEL] [-- ARGS]`."""
    from .launch import LaunchError, LaunchOptions
    from .launch import launch as run_launch

    if client not in ("claude", "codex"):
        raise typer.BadParameter("expected 'claude' or 'codex'", param_hint="CLIENT")
    options = LaunchOptions(
        client="claude" if client == "claude" else "codex",
        model=model,
        client_args=tuple(ctx.meta.get("client_args", ())),
        host=host,
        port=port,
        api_key=api_key or None,
        keep=keep,
        small_model=small_model,
        serve_args=["--ctx-size", str(ctx_size)],
    )
    try:
        code = run_launch(options, console)
    except (LaunchError, CatalogError, EngyError) as exc:
        console.print(f"[red]error:[/red] {exc}", soft_wrap=True, highlight=False)
        raise typer.Exit(1) from None
    raise typer.Exit(code)


@app.command()
def ps(
    url: Annotated[str, typer.Option(help="The engy server")] = f"http://127.0.0.1:{DEFAULT_PORT}",
    api_key: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option("--api-key", envvar="ENGY_API_KEY", help="The server's key, if it has one"),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON")] = False,
) -> None:
    """What a running engy holds: each loaded model, its window, memory, keep-alive."""
    from .ps import fetch_status, print_status

    try:
        models = fetch_status(url, api_key or None)
    except EngyError as exc:
        console.print(f"[red]error:[/red] {exc}", soft_wrap=True, highlight=False)
        raise typer.Exit(1) from None
    print_status(models, url, as_json, Console())


@app.command()
def doctor(
    model: Annotated[
        Optional[str],  # noqa: UP045
        typer.Argument(help="A GGUF path or model id (default: the catalog's)"),
    ] = None,
    ctx_size: Annotated[
        int, typer.Option("--ctx-size", help="Cap on the context window (0: the model's own)")
    ] = 32768,
    gpu_layers: Annotated[
        str, typer.Option("--gpu-layers", help="'auto' (all when the build can offload) or N")
    ] = "auto",
    rpc: Annotated[
        Optional[list[str]],  # noqa: UP045
        typer.Option("--rpc", help="llama.cpp RPC workers to load the model onto: HOST:PORT,..."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON")] = False,
) -> None:
    """Check that a model works for coding agents: load, template, tools, cache, clients."""
    from .doctor import DoctorOptions, print_report, run_doctor

    options = DoctorOptions(model, ctx_size or None, _gpu_layers(gpu_layers), rpc=tuple(rpc or ()))
    report = run_doctor(options, Console(stderr=True) if as_json else Console())
    print_report(report, as_json, Console())
    raise typer.Exit(0 if report.passed else 1)


def main() -> None:  # pragma: no cover
    logging.basicConfig(level=logging.WARNING)
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
