"""`engy doctor [MODEL]`: a live self-test of what a coding agent needs from
a model here, each check with its result, the figure behind it and a fix.

It runs the model the way `engy serve` does (the same `ModelPool`, the same
requests an agent makes: tools, a forced call, a second turn) and never
through anything the server would not use. A check that cannot run because
an earlier one failed is skipped, not passed.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from rich.console import Console
from rich.table import Table

from ..backend import ModelStatus
from ..chat import (
    ChatRequest,
    Event,
    Finished,
    Message,
    Sampling,
    Text,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolCallEnd,
    ToolCallStart,
    ToolChoice,
    ToolResult,
    ToolSpec,
    Usage,
)
from ..errors import CatalogError, EngyError, LaunchError, NotGGUF
from ..models.ggufmeta import read_metadata
from ..runtime.pool import ModelPool
from .launch.claude import compaction_warning
from .launch.clients import CLIENTS, ClientName, find_client

Status = Literal["pass", "fail", "warn", "skip"]

# Claude Code's first turn is about 12k tokens, Codex's about 10k: a window
# under this cannot hold one turn and its answer.
MIN_WINDOW = 16384

WEATHER = ToolSpec(
    "get_weather",
    "Get the current weather for a city.",
    {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "The city"}},
        "required": ["city"],
    },
)
SHELL = ToolSpec(
    "run_shell",
    "Run a shell command and return its output.",
    {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
)
SYSTEM = Message("system", (Text("You are a helpful assistant with tools."),))


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    figure: str
    fix: str = ""


@dataclass
class Report:
    model: str | None
    checks: list[Check] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(c.status != "fail" for c in self.checks)

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "passed": self.passed,
            "checks": [asdict(c) for c in self.checks],
        }


@dataclass(frozen=True)
class DoctorOptions:
    model: str | None = None
    ctx_size: int | None = 32768
    gpu_layers: int | None = None
    threads: int | None = None
    rpc: tuple[str, ...] = ()  # llama.cpp RPC workers to attach before loading


# ---- checks that need no model ------------------------------------------------


def check_backend() -> Check:
    from ..runtime.loading.devices import local_gpu
    from ..runtime.loading.rpc import build_has_rpc

    backend = local_gpu()
    rpc = "RPC workers (--rpc): " + ("built in" if build_has_rpc() else "not built in")
    if backend:
        return Check(
            "backend", "pass", f"{backend}: this llama.cpp build offloads to the GPU; {rpc}"
        )
    return Check(
        "backend",
        "pass",
        f"CPU only: this llama.cpp build has no local GPU; {rpc}",
        'for a GPU, rebuild llama-cpp-python with CMAKE_ARGS="-DGGML_CUDA=on" (Metal: default '
        "on Apple silicon)",
    )


def check_devices(rpc: tuple[str, ...]) -> Check:
    """The devices layers can go to; with --rpc, the workers attached first."""
    from ..runtime.loading.devices import all_devices
    from ..runtime.loading.rpc import attach, parse_endpoints

    try:
        if rpc:
            attach(parse_endpoints(rpc))
    except EngyError as exc:
        return Check(
            "devices",
            "fail",
            str(exc),
            "start the worker (ggml-rpc-server -H HOST -p PORT) from the same llama.cpp",
        )
    return Check("devices", "pass", "; ".join(d.line() for d in all_devices()) or "none")


def check_cpu() -> Check:
    """llama.cpp's AMX kernels crash quantized models (SIGILL in tilezero)
    on CPUs that report AMX; the engine's guard loads models without them
    there unless repacking is forced (--repack, ENGY_REPACK=1)."""
    from ..runtime.loading.cpu import ENV, build_has_amx, cpu_reports_amx, guard_line, use_repacking

    cores = os.cpu_count() or 0
    figure = f"{cores} cores; {guard_line()}"
    if build_has_amx() and cpu_reports_amx() and use_repacking():
        return Check("CPU guard", "fail", figure, f"unset {ENV} (or set it to 0)")
    return Check("CPU guard", "pass", figure)


def check_clients() -> list[Check]:
    out = []
    names: tuple[ClientName, ...] = ("claude", "codex")
    for name in names:
        spec = CLIENTS[name]
        try:
            client = find_client(name)
        except LaunchError:
            out.append(Check(spec.title, "warn", "not installed", spec.install))
            continue
        old = client.too_old()
        figure = f"{client.version_text} at {client.path}"
        out.append(
            Check(spec.title, "warn", figure, spec.install)
            if old
            else Check(spec.title, "pass", figure, f"engy launch {name}")
        )
    return out


# ---- checks on the loaded model ------------------------------------------------


async def _events(pool: ModelPool, request: ChatRequest) -> list[Event]:
    generation = await pool.submit(request)
    return [event async for event in generation]


def _ask(pool: ModelPool, request: ChatRequest) -> list[Event]:
    return asyncio.run(_events(pool, request))


def _usage(events: list[Event]) -> Usage:
    return next((e.usage for e in events if isinstance(e, Finished)), Usage())


def _text(events: list[Event]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def check_template(pool: ModelPool, model: str) -> Check:
    """A whole agent turn through the template: tools offered, a call, its
    result, the next question."""
    conversation = (
        SYSTEM,
        Message("user", (Text("What is the weather in Paris?"),)),
        Message("assistant", (ToolCall("call_1", "get_weather", '{"city": "Paris"}'),)),
        Message("tool", (ToolResult("call_1", "Sunny, 21 C", name="get_weather"),)),
        Message("user", (Text("And should I take a coat?"),)),
    )
    request = ChatRequest(model=model, messages=conversation, tools=(WEATHER, SHELL))
    try:
        n = pool.count_tokens(request)
    except EngyError as exc:
        return Check(
            "template renders tools",
            "fail",
            f"the chat template cannot render a conversation with tools: {exc}",
            "give a chat template that takes tools in models.toml (chat_template)",
        )
    return Check("template renders tools", "pass", f"2 tools, a call and its result: {n} tokens")


def check_family(status: ModelStatus) -> Check:
    name = status.family
    if name == "none":
        return Check(
            "tool-call family",
            "fail",
            "none: the template renders tools, in a syntax engy does not know",
            'name the family in models.toml (tool_format = "hermes", ...); see the README',
        )
    if name == "generic":
        return Check(
            "tool-call family",
            "pass",
            "generic: the template has no tools; they are described in the system prompt",
        )
    return Check("tool-call family", "pass", f"{name}, detected from the chat template")


def check_forced_call(pool: ModelPool, model: str) -> Check:
    request = ChatRequest(
        model=model,
        messages=(SYSTEM, Message("user", (Text("What is the weather in Paris?"),))),
        tools=(WEATHER, SHELL),
        tool_choice=ToolChoice("tool", WEATHER.name),
        sampling=Sampling(max_tokens=96, temperature=0.0),
    )
    name = "forced tool call"
    try:
        events = _ask(pool, request)
    except EngyError as exc:
        return Check(name, "fail", f"the request failed: {exc}", "see the tool-call family")
    starts = [e for e in events if isinstance(e, ToolCallStart)]
    ends = [e for e in events if isinstance(e, ToolCallEnd)]
    if not starts or not ends:
        said = _text(events)[:60]
        return Check(name, "fail", f"no call came back (text: {said!r})", "see the family")
    try:
        arguments = json.loads(ends[0].arguments)
    except ValueError:
        arguments = None
    if starts[0].name != WEATHER.name or not isinstance(arguments, dict):
        return Check(name, "fail", f"not a valid call: {starts[0].name}({ends[0].arguments})", "")
    if "city" not in arguments:
        return Check(name, "fail", f"the required argument is missing: {ends[0].arguments}")
    return Check(name, "pass", f"{starts[0].name}({json.dumps(arguments)[:60]})")


def _template_text(pool: ModelPool, model: str) -> str:
    served = pool.served[0]
    if served.options.chat_template:
        return served.options.chat_template
    try:
        value = read_metadata(served.options.path).get("tokenizer.chat_template")
    except (OSError, NotGGUF):
        return ""
    return value if isinstance(value, str) else ""


def check_thinking(pool: ModelPool, status: ModelStatus) -> Check:
    """Reasoning in the family's own markers comes out as thinking, the
    rest as text (run through the parser the server uses)."""
    from ..prompt.families import get

    family = get(status.family)
    template = _template_text(pool, status.id)
    if not status.thinking and family.reasoning_start not in template:
        return Check("thinking", "pass", f"n/a: {status.family} models here do not think")
    parser = family.parser(tools={}, thinking=False, new_id=lambda: "call_doctor")
    sample = f"{family.reasoning_start}Paris is in France.{family.reasoning_end}It is sunny."
    events = parser.feed(sample) + parser.finish()
    thought = "".join(e.text for e in events if isinstance(e, ThinkingDelta))
    said = _text(events)
    if "Paris is in France." in thought and "It is sunny." in said and "Paris" not in said:
        return Check(
            "thinking",
            "pass",
            f"{family.reasoning_start}...{family.reasoning_end} splits from the answer",
        )
    return Check(
        "thinking",
        "fail",
        f"reasoning did not split: thinking {thought!r}, text {said!r}",
        "name the family in models.toml (tool_format)",
    )


def check_cache(pool: ModelPool, model: str) -> Check:
    """Turn 2 of a conversation reads turn 1's prompt from the KV cache."""
    first = (SYSTEM, Message("user", (Text("Name a colour."),)))
    sampling = Sampling(max_tokens=8, temperature=0.0)
    name = "second turn from cache"
    try:
        turn1 = _ask(pool, ChatRequest(model=model, messages=first, sampling=sampling))
        answer = _text(turn1) or "Blue."
        second = (
            *first,
            Message("assistant", (Text(answer),)),
            Message("user", (Text("Name another."),)),
        )
        turn2 = _ask(pool, ChatRequest(model=model, messages=second, sampling=sampling))
    except EngyError as exc:
        return Check(name, "fail", f"the request failed: {exc}")
    usage = _usage(turn2)
    figure = f"{usage.cached_tokens} of {usage.prompt_tokens} prompt tokens read from the cache"
    if usage.cached_tokens <= 0:
        return Check(name, "fail", figure, "every turn would evaluate the whole prompt again")
    return Check(name, "pass", figure)


def check_window(status: ModelStatus) -> Check:
    n = status.context_length
    if n < MIN_WINDOW:
        return Check(
            "context window",
            "fail",
            f"{n} tokens: Claude Code's first turn alone is about 12k",
            f"serve with --ctx-size {max(32768, MIN_WINDOW)} or a model with a longer window",
        )
    warning = compaction_warning(n)
    if warning:
        return Check("context window", "warn", f"{n} tokens as loaded", warning)
    return Check("context window", "pass", f"{n} tokens as loaded")


# ---- the whole run ---------------------------------------------------------------


def _model_checks(options: DoctorOptions, report: Report, say: Callable[[str], None]) -> None:
    from ..server.backends import resolve_model
    from ..server.options import ServeOptions

    serve = ServeOptions(
        model=options.model,
        ctx_size=options.ctx_size,
        gpu_layers=options.gpu_layers,
        threads=options.threads,
    )
    names = (
        "model loads",
        "template renders tools",
        "tool-call family",
        "forced tool call",
        "thinking",
        "second turn from cache",
        "context window",
    )

    def skip_rest(done: int) -> None:
        for name in names[done:]:
            report.checks.append(Check(name, "skip", "skipped: the model did not load"))

    if any(c.name == "devices" and c.status == "fail" for c in report.checks):
        report.checks.append(Check("model loads", "fail", "an RPC worker failed (see devices)"))
        return skip_rest(1)
    try:
        served = resolve_model(options.model, serve)
    except CatalogError as exc:
        report.checks.append(Check("model loads", "fail", str(exc), "engy list / engy models"))
        return skip_rest(1)
    report.model = served.id
    say(f"loading {served.id}...")
    started = time.monotonic()
    try:
        pool = ModelPool([served], primary=served.id, keep_alive=None)
    except EngyError as exc:
        report.checks.append(
            Check("model loads", "fail", str(exc), "check the file; a GGUF needs a chat template")
        )
        return skip_rest(1)
    try:
        status = next(s for s in pool.status() if s.id == served.id)
        took = time.monotonic() - started
        report.checks.append(
            Check(
                "model loads",
                "pass",
                f"{served.options.path.name}: {status.backend}, "
                f"{status.cost / (1 << 30):.2f} GiB estimated, {took:.1f} s"
                + (f"; {status.split}" if status.split else ""),
            )
        )
        template = check_template(pool, served.id)
        report.checks += [template, check_family(status)]
        if template.status == "fail":
            for name in names[3:6]:
                report.checks.append(Check(name, "skip", "skipped: the template cannot render"))
        else:
            say("generating...")
            report.checks += [
                check_forced_call(pool, served.id),
                check_thinking(pool, status),
                check_cache(pool, served.id),
            ]
        report.checks.append(check_window(status))
    finally:
        pool.close()


def run_doctor(options: DoctorOptions, console: Console) -> Report:
    report = Report(options.model)
    report.checks += [check_backend(), check_cpu(), check_devices(options.rpc)]
    with console.status("checking...") as progress:
        _model_checks(options, report, lambda line: progress.update(line))
    report.checks += check_clients()
    return report


_MARKS: dict[Status, str] = {
    "pass": "[green]pass[/green]",
    "fail": "[red]FAIL[/red]",
    "warn": "[yellow]warn[/yellow]",
    "skip": "[dim]skip[/dim]",
}


def print_report(report: Report, as_json: bool, out: Console) -> None:
    if as_json:
        out.print_json(json.dumps(report.to_json()))
        return
    table = Table(title=f"engy doctor: {report.model or 'no model'}", title_justify="left")
    for column in ("check", "result", "figure", "fix"):
        table.add_column(column, overflow="fold")
    for c in report.checks:
        table.add_row(c.name, _MARKS[c.status], c.figure, c.fix)
    out.print(table)
    failed = [c for c in report.checks if c.status == "fail"]
    for c in failed:
        out.print(f"[red]failed:[/red] {c.name}: {c.figure}", soft_wrap=True, highlight=False)
    if not failed:
        out.print("[green]all checks passed[/green]")
