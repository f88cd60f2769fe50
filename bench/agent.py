"""Coding agents finishing small coding tasks on a real model, through
`engy launch` and through the same clients pointed at llama-server (which
serves /v1/messages, /v1/responses and /v1/chat/completions itself) on the
same GGUF: Claude Code and Codex, and every client `engy launch` configures
(opencode, kilo, qwen, cline, continue, aider, mini-swe-agent).

    LLAMA_SERVER=$(bench/build_llama_server.sh) .venv/bin/python bench/agent.py \\
        --model ~/.cache/engy/real-models/qwen2.5-coder-1.5b-instruct.gguf

Each task is judged by the files it leaves, never by the model's words:

    command  run a given shell command that writes a file (one tool round trip)
    create   write a file with given content
    copy     read a value from one file into another
    fix      fix a one-line bug so that a script prints what it should
    patch    (Codex) add a file through its apply_patch tool
    steps    several steps: run a failing test, read it and the code, fix
             the code, run the test again (done: the test passes and is
             unchanged)

Per server the clients run one after another (--tries of each task), each
run a new session in the same project directory (Claude Code puts that
path in its system prompt, so sessions share their prefix as a user's
would); then engy is stopped and started again and one more session runs,
to see its first turn come from the disk cache. A recording proxy sits
between client and server (bench/agentproxy.py), so both servers are timed
the same way.

Through engy each client runs under `engy launch --tools PROFILE` for each
of --profiles (auto, lean, full: what launch gives the client, see
engy_local/commands/launch/profile.py; for Aider lean is its `whole` edit
format and full `diff`); no client flags of the bench's own choose tools.
For llama-server the clients get their defaults: the server, model and
window settings `engy launch` gives them (the same environment for Claude
Code, the same `-c` settings for Codex, the config launch writes for the
others, as its full profile writes it, Aider left to pick its own edit
format) and nothing of a profile, no model catalog (a llama-server user's
config has none, so Codex edits files through its shell there).

The clients come from where the tests install them (tests/support/clients.py
for Claude Code and Codex, tests/commands/test_launch_agents.py for the
others): run those tests once first.

Prints per client and server: tasks done, requests and turns, wall time,
first-turn and later-turn time to first token, the share of later turns'
prompt tokens read from cache, the second session's and the restarted
server's first turn read from cache, malformed calls (the client said the
call could not run as written), calls that reached the client as text, and
API errors. Not a test and not run in CI.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
from agentproxy import CALL_AS_TEXT, Exchange, Proxy

from bench import Server, engy, free_port, start_engy, start_llama

REPO = Path(__file__).resolve().parents[1]
NPM_BIN = REPO / ".engy-test" / "npm" / "node_modules" / ".bin"  # tests/support/clients.py
# tests/commands/test_launch_agents.py
AGENTS_BIN = REPO / ".engy-test" / "npm-agents" / "node_modules" / ".bin"
AGENTS_PY_BIN = REPO / ".engy-test" / "agents-venv" / "bin"
BINS = (NPM_BIN, AGENTS_BIN, AGENTS_PY_BIN)
PROFILES = ("auto", "lean", "full")
CLIENTS = ("claude", "codex", "opencode", "kilo", "qwen", "cline", "continue", "aider",
           "mini-swe-agent")  # fmt: skip


# ---- tasks ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Task:
    name: str
    ask: str
    files: dict[str, str]
    done: Callable[[Path], bool]
    clients: tuple[str, ...] = CLIENTS


def _reads(path: Path, want: str) -> bool:
    try:
        return path.read_text().strip() == want
    except OSError:
        return False


def _prints(script: Path, want: str) -> bool:
    try:
        r = subprocess.run(
            [sys.executable, script.name],
            cwd=script.parent,
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0 and r.stdout.strip() == want


PRICES = """\
def total(prices, discount):
    \"\"\"The sum of prices, less discount percent.\"\"\"
    subtotal = sum(prices)
    return subtotal - subtotal * discount / 10
"""
TEST_PRICES = """\
from prices import total

assert total([10, 20, 30], 0) == 60
assert total([10, 20, 30], 50) == 30, total([10, 20, 30], 50)
print("ok")
"""


def _passes(work: Path, test: str, want: str) -> bool:
    """The test runs clean and is still the one the task gave."""
    return _reads(work / test, want.strip()) and _prints(work / test, "ok")


TASKS = (
    Task(
        "command",
        "Run this shell command: echo Hello from engy > greeting.txt",
        {},
        lambda d: _reads(d / "greeting.txt", "Hello from engy"),
    ),
    Task(
        "create",
        "Create a file named greeting.txt containing exactly this line: Hello from engy",
        {},
        lambda d: _reads(d / "greeting.txt", "Hello from engy"),
    ),
    Task(
        "copy",
        "config.json holds a port number. Write that number, and nothing else, "
        "into a new file named port.txt.",
        {"config.json": '{\n  "name": "demo",\n  "port": 8123\n}\n'},
        lambda d: _reads(d / "port.txt", "8123"),
    ),
    Task(
        "fix",
        "calc.py should print 5 but it prints -1. Fix the bug in calc.py.",
        {"calc.py": "def add(a, b):\n    return a - b\n\n\nprint(add(2, 3))\n"},
        lambda d: _prints(d / "calc.py", "5"),
    ),
    Task(
        "patch",
        "Use the apply_patch tool to add a file named notes.txt with the single line: done",
        {},
        lambda d: _reads(d / "notes.txt", "done"),
        clients=("codex",),
    ),
    Task(
        "steps",
        "The test in test_prices.py fails. Run it with: python3 test_prices.py "
        "Then fix the bug in prices.py (not the test) and run the test again to "
        "check that it passes.",
        {"prices.py": PRICES, "test_prices.py": TEST_PRICES},
        lambda d: _passes(d, "test_prices.py", TEST_PRICES),
    ),
)


# ---- clients -------------------------------------------------------------------------


@dataclass
class Target:
    """A server behind the proxy, and how a client is pointed at it."""

    name: str  # engy / llama-server
    proxy: Proxy
    model: str
    window: int
    home: Path  # the bench's ENGY_HOME (engy launch's catalog, logs, disk cache)
    max_turns: str  # Claude Code's --max-turns
    timeout: int  # seconds one client run may take


def base_env(home: Path, engy_home: Path) -> dict[str, str]:
    keep = ("PATH", "LANG", "LC_ALL", "TZ", "TMPDIR", "PYTHONPATH")  # this tree's engy_local
    env = {k: v for k, v in os.environ.items() if k in keep}
    env["PATH"] = os.pathsep.join([*map(str, BINS), env.get("PATH", "")])
    env.update(HOME=str(home), ENGY_HOME=str(engy_home), NO_PROXY="127.0.0.1,localhost")
    python3 = shutil.which("python3")
    has_python = shutil.which("python", path=env["PATH"]) and _login_shell_has_python(env)
    if python3 and not has_python:
        # Models run `python x.py` as on most machines; a VM with only
        # python3 would fail the fix and steps tasks for want of the name.
        # Codex runs commands in a login shell, which sets PATH anew from
        # /etc/profile and then reads this home's .profile.
        shim = home / "bin"
        shim.mkdir(exist_ok=True)
        if not (shim / "python").exists():
            (shim / "python").symlink_to(python3)
        env["PATH"] = f"{shim}{os.pathsep}{env['PATH']}"
        (home / ".profile").write_text(f'PATH="{shim}:$PATH"\n')
    return env


def _login_shell_has_python(env: dict[str, str]) -> bool:
    try:
        r = subprocess.run(
            ["bash", "-lc", "command -v python"], env=env, capture_output=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return True  # no bash to ask: leave PATH as it is
    return r.returncode == 0


def client_args(client: str, ask: str, max_turns: str, files: tuple[str, ...] = ()) -> list[str]:
    """Each client's one-shot form, running what the model asks unasked
    (there is no one to ask); it does not change which tools are offered,
    the profile does."""
    if client == "claude":
        allowed = ["--allowedTools", "Bash,Read,Edit,Write"]
        return ["-p", ask, *allowed, "--max-turns", max_turns]
    if client == "codex":
        bypass = "--dangerously-bypass-approvals-and-sandbox"  # no sandbox to build here
        return ["exec", "--skip-git-repo-check", bypass, ask]
    if client in ("opencode", "kilo"):  # permissions: launch allows edits and bash
        return ["run", *(["--auto"] if client == "kilo" else []), ask]
    if client == "continue":
        return ["-p", ask]
    if client == "aider":  # it sees the files it is given (as a user names them)
        return [*files, "--message", ask, "--yes-always"]
    if client == "mini-swe-agent":
        steps = f"agent.step_limit={max_turns}"
        return ["--task", ask, "--yolo", "--exit-immediately", "--config", "mini.yaml",
                "--config", steps]  # fmt: skip
    return [ask]  # qwen, cline: launch gives their run-everything flags


def command(
    client: str, target: Target, task: Task, env: dict[str, str], profile: str, scratch: Path
) -> list[str]:
    """`engy launch --tools PROFILE` for engy; for llama-server, the client
    with launch's server settings and its own defaults (config files in
    `scratch`)."""
    port = target.proxy.url.rsplit(":", 1)[1]
    args = client_args(client, task.ask, target.max_turns, tuple(task.files))
    if target.name == "engy":
        return [*engy(), "launch", client, "--port", port, "--tools", profile, "--", *args]
    from engy_local.backend import ModelStatus
    from engy_local.commands.launch.claude import claude_env
    from engy_local.commands.launch.codex import codex_env, codex_overrides
    from engy_local.commands.launch.run import CONFIGURE
    from engy_local.commands.launch.setup import Context

    status = ModelStatus(target.model, target.window, "CPU", 0, None, family="hermes")
    if client == "claude":
        env.update(claude_env(env, target.proxy.url, None, status))
        return [str(NPM_BIN / "claude"), *args]
    if client == "codex":
        env.update(codex_env(env, None))
        overrides = codex_overrides(target.proxy.url, status, None)
        return [str(NPM_BIN / "codex"), *overrides, *args]
    binary = _binary(client)
    ctx = Context(target.proxy.url, None, status, False, scratch, tuple(args), env, binary)
    setup = CONFIGURE[client](ctx)
    env.clear()
    env.update(setup.env)
    # Aider picks its own edit format for a model it does not know.
    argv = [a for a in setup.args if not a.startswith("--edit-format=")]
    return [str(binary), *argv]


def _binary(client: str) -> Path:
    from engy_local.commands.launch.clients import CLIENTS as SPECS

    name = next(spec.command for key, spec in SPECS.items() if key == client)
    for folder in BINS:
        if (folder / name).exists():
            return folder / name
    sys.exit(f"{name} is not in {', '.join(map(str, BINS))}: run the launch tests once")


@dataclass
class Result:
    client: str
    server: str
    task: str
    done: bool
    wall: float
    exchanges: list[Exchange]
    session: str  # "first", "later", "restarted"
    exit: int = 0
    profile: str = "-"  # engy launch --tools; "-" for llama-server


def run_task(
    task: Task, client: str, target: Target, root: Path, session: str, profile: str
) -> Result:
    work = root / f"project-{client}"  # the same path every run: a shared prefix
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    for name, text in task.files.items():
        (work / name).write_text(text)
    home = root / f"home-{client}"
    home.mkdir(exist_ok=True)
    env = base_env(home, target.home)
    if client == "codex":
        env["CODEX_HOME"] = str(home / ".codex")
        (home / ".codex").mkdir(exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="engy-bench-config-"))  # llama-server's configs
    argv = command(client, target, task, env, profile, scratch)
    seen = len(target.proxy.exchanges)
    started = time.monotonic()
    try:
        r = subprocess.run(
            argv,
            cwd=work,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=target.timeout,
        )
        code, out = r.returncode, r.stdout + r.stderr
    except subprocess.TimeoutExpired:
        code, out = -1, "timed out"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    wall = time.monotonic() - started
    done = task.done(work)
    (root / "logs").mkdir(exist_ok=True)
    name = f"{target.name}-{profile}-{client}-{task.name}-{session}-{int(started)}.txt"
    log = root / "logs" / name
    log.write_text(f"$ {' '.join(argv)}\nexit {code}\n{out}")
    exchanges = target.proxy.exchanges[seen:]
    mark = "done" if done else "NOT done"
    print(
        f"  {target.name:12} {profile:5} {client:6} {task.name:7} {session:9} {mark:8} "
        f"{wall:6.0f} s {len(exchanges)} requests, exit {code}",
        flush=True,
    )
    return Result(client, target.name, task.name, done, wall, exchanges, session, code, profile)


# ---- servers -------------------------------------------------------------------------


def engy_target(args: argparse.Namespace, logs: Path, home: Path) -> tuple[Server, Target]:
    os.environ["ENGY_HOME"] = str(home)  # the disk tier lives there; launch finds it too
    temp = ["--temp", str(args.temp)] if args.temp is not None else []
    server = start_engy(
        args.model, args.threads, logs, "--ctx-size", str(args.ctx_size), *temp, *args.engy
    )
    model = httpx.get(server.url + "/v1/models").json()["data"][0]["id"]
    proxy = Proxy(server.url, free_port(), logs / "exchanges-engy" if args.save else None)
    return server, Target("engy", proxy, model, args.ctx_size, home, args.max_turns, args.timeout)


def llama_target(args: argparse.Namespace, logs: Path, home: Path) -> tuple[Server, Target]:
    binary = os.environ["LLAMA_SERVER"]
    temp = ["--temp", str(args.temp)] if args.temp is not None else []
    server = start_llama(binary, args.model, args.threads, args.ctx_size, logs, *temp)
    proxy = Proxy(server.url, free_port(), logs / "exchanges-llama-server" if args.save else None)
    return server, Target(
        "llama-server", proxy, args.model.stem, args.ctx_size, home, args.max_turns, args.timeout
    )


# ---- report --------------------------------------------------------------------------


def _median(values: list[float], digits: int = 1) -> str:
    return f"{statistics.median(values):.{digits}f}" if values else "-"


def _share(pairs: list[tuple[int | None, int | None]]) -> str:
    known = [(p, c) for p, c in pairs if p and c is not None]
    if not known:
        return "n/a"
    return f"{100 * sum(c for _, c in known) / sum(p for p, _ in known):.0f}%"


def _turns(result: Result) -> list[Exchange]:
    """The session's own turns: requests that offer tools (a title or
    summary on the side offers none); for Aider, which offers none, all."""
    if result.client == "aider":
        return list(result.exchanges)
    return [e for e in result.exchanges if e.tools]


def _first_turn(result: Result) -> Exchange | None:
    turns = _turns(result)
    return turns[0] if turns else None


def report(results: list[Result]) -> None:
    rows = []
    keys = sorted({(r.client, r.server, r.profile) for r in results})
    for client, server, profile in keys:
        mine = [r for r in results if (r.client, r.server, r.profile) == (client, server, profile)]
        timed = [r for r in mine if r.session != "restarted"]
        turns = [e for r in timed for e in _turns(r)]
        firsts = [_first_turn(r) for r in timed]
        later = [e for r in timed for e in _turns(r)[1:]]
        second = [_first_turn(r) for r in timed[1:]]
        restarted = [_first_turn(r) for r in mine if r.session == "restarted"]
        errors = [e.error for r in mine for e in r.exchanges if e.error]
        rows.append(
            {
                "client": client,
                "server": server,
                "tools": profile,
                "done": f"{sum(r.done for r in timed)}/{len(timed)}",
                "requests": str(sum(len(r.exchanges) for r in timed)),
                "turns": str(len(turns)),
                "wall s": f"{sum(r.wall for r in timed):.0f}",
                "1st prompt": _median([float(e.prompt) for e in firsts if e and e.prompt], 0),
                "ttft 1st": _median([e.first for e in firsts if e and e.first is not None]),
                "ttft later": _median([e.first for e in later if e.first is not None]),
                "later cached": _share([(e.prompt, e.cached) for e in later]),
                "2nd session 1st": _share([(e.prompt, e.cached) for e in second if e]),
                "restart 1st": _share([(e.prompt, e.cached) for e in restarted if e]),
                "malformed": str(sum(e.malformed for r in mine for e in r.exchanges)),
                "as text": str(
                    sum(bool(CALL_AS_TEXT.search(e.text)) for r in mine for e in r.exchanges)
                ),
                "API errors": str(len(errors)),
            }
        )
        for error in errors[:3]:
            print(f"  {client} on {server}: {error}")
    cols = list(rows[0]) if rows else []
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for row in rows:
        print("| " + " | ".join(row[c] for c in cols) + " |")
    print("\nper task (done/runs):")
    for client, server, profile in keys:
        per = {
            t.name: [
                r.done
                for r in results
                if (r.client, r.server, r.profile, r.task) == (client, server, profile, t.name)
                and r.session != "restarted"
            ]
            for t in TASKS
        }
        print(
            f"  {client:6} {server:12} {profile:5} "
            + "  ".join(f"{name} {sum(d)}/{len(d)}" for name, d in per.items() if d)
        )


# ---- main ----------------------------------------------------------------------------


def run_server(name: str, args: argparse.Namespace, root: Path, results: list[Result]) -> None:
    logs = root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    home = root / f"engy-home-{name}"
    start = engy_target if name == "engy" else llama_target
    server, target = start(args, logs, home)
    print(f"{name} at {server.url} (log {server.log}), proxy {target.proxy.url}", flush=True)
    tasks = [t for t in TASKS if t.name in args.tasks]
    profiles = args.profiles if name == "engy" else ["-"]
    try:
        for client in args.clients:
            for profile in profiles:
                runs = 0
                for _ in range(args.tries):
                    for task in tasks:
                        if client in task.clients:
                            session = "first" if runs == 0 else "later"
                            results.append(
                                run_task(task, client, target, root / name, session, profile)
                            )
                            runs += 1
    finally:
        target.proxy.stop()
        server.stop()
    if not args.restart or name != "engy":
        return
    # The same sessions' first turn after a restart: engy's disk tier. llama-server
    # keeps nothing across a restart (unless told to save slots by hand): not run.
    server, target = start(args, logs, home)
    try:
        for client in args.clients:
            task = next(t for t in tasks if client in t.clients)
            profile = args.profiles[0]
            results.append(run_task(task, client, target, root / name, "restarted", profile))
    finally:
        target.proxy.stop()
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=False)
    parser.add_argument("--clients", nargs="+", default=["claude", "codex"], choices=CLIENTS)
    parser.add_argument(
        "--servers", nargs="+", default=["engy", "llama-server"], choices=["engy", "llama-server"]
    )
    parser.add_argument(
        "--tasks", nargs="+", default=[t.name for t in TASKS], choices=[t.name for t in TASKS]
    )
    parser.add_argument(
        "--profiles",
        nargs="+",
        default=list(PROFILES),
        choices=PROFILES,
        help="engy launch --tools profiles to run through engy",
    )
    parser.add_argument("--tries", type=int, default=2)
    parser.add_argument("--ctx-size", type=int, default=32768)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument(
        "--no-restart",
        dest="restart",
        action="store_false",
        help="skip the restarted server's session",
    )
    parser.add_argument(
        "--engy", nargs=argparse.REMAINDER, default=[], help="more `engy serve` arguments (last)"
    )
    parser.add_argument("--keep", type=Path, help="keep the projects and logs here")
    parser.add_argument(
        "--temp", type=float, help="both servers' temperature for requests that set none"
    )
    parser.add_argument("--timeout", type=int, default=1800, help="seconds a client run may take")
    parser.add_argument("--save", action="store_true", help="save each request and answer")
    parser.add_argument(
        "--max-turns", default="8", help="Claude Code's --max-turns, mini-swe-agent's step limit"
    )
    parser.add_argument("--report", type=Path, help="print the table of a run's results.json")
    args = parser.parse_args()
    if args.report:
        report(load_results(args.report))
        return
    if "llama-server" in args.servers and not os.environ.get("LLAMA_SERVER"):
        sys.exit("LLAMA_SERVER is not set: LLAMA_SERVER=$(bench/build_llama_server.sh)")
    for client in args.clients:
        _binary(client)  # exits saying where it was looked for
    if args.model is None:
        sys.exit("--model is required")
    root = args.keep or Path(tempfile.mkdtemp(prefix="engy-agent-"))
    print(
        f"model {args.model.name}, window {args.ctx_size}, {args.threads} threads, "
        f"{args.tries} tries, projects and logs in {root}",
        flush=True,
    )
    results: list[Result] = []
    try:
        for name in args.servers:
            run_server(name, args, root, results)
    finally:
        report(results)
        (root / "results.json").write_text(
            json.dumps(
                [{**r.__dict__, "exchanges": [e.__dict__ for e in r.exchanges]} for r in results],
                indent=1,
                default=str,
            )
        )


def load_results(path: Path) -> list[Result]:
    out = []
    for raw in json.loads(path.read_text()):
        exchanges = [Exchange(**e) for e in raw.pop("exchanges")]
        out.append(Result(**raw, exchanges=exchanges))
    return out


if __name__ == "__main__":
    main()
