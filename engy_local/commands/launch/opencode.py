"""opencode and Kilo (a fork of it, every variable `KILO_` for `OPENCODE_`)
on an engy model. The whole config goes in one environment variable, which
opencode merges over the user's own config file (read, never written: it
is passed as `OPENCODE_CONFIG`, since every XDG folder opencode writes,
config included, is the launch's temporary directory: sessions, logs,
caches and the plugin it installs with npm).

`opencode run MESSAGE` without `--title` sends the model one more request
for a session title; launch gives one."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .setup import CACHE_HEADERS, Context, Setup, given

# The tools lean turns off: what a small model picks wrongly among, and
# side requests (webfetch, a subagent's task).
LEAN_OFF = ("webfetch", "websearch", "task", "todowrite", "todoread", "codesearch", "skill")
# Kilo's own on top of opencode's.
KILO_LEAN_OFF = ("background_process", "board_post", "board_read", "cancel_wakeup",
                 "kilo_local_recall", "schedule_wakeup")  # fmt: skip
TITLE = "engy launch"
# opencode's config file names, in a config folder (and a project's root).
CONFIG_NAMES = ("opencode.json", "opencode.jsonc", "config.json")

# Lean's system prompt for opencode's build agent, in place of the one it
# sends a model it does not know (8.9k characters written for large ones),
# with the project's folder spelled out. On Qwen2.5-Coder-1.5B (2026-12-07):
# under opencode's own prompt, whose only mention of the folder is its env
# block's "Working directory", the model wrote the task's file to the
# folder's parent or to /tmp/opencode/ (0/5); under short prompts that
# pointed at that line or asked for relative paths it still used
# /tmp/opencode (0/4); under this one it made the file in the project 8/8
# (two tasks, four tries each), its first prompt 3.4k tokens against 5.1k.
# The user's own build prompt wins (own_build_prompt). Kilo keeps its own:
# there the model made the file.
LEAN_PROMPT = """You are opencode, a coding agent in the user's terminal. Do the user's \
task with your tools, one call at a time, then say in one short line what you did.

The user's project is the folder {folder}, and every file you read, write or edit \
is in it: a file named notes.md is {folder}/notes.md. Run bash without a workdir: \
its commands run in {folder}."""


def lean_off(prefix: str) -> tuple[str, ...]:
    return LEAN_OFF + (KILO_LEAN_OFF if prefix == "KILO" else ())


def user_config(home: Path, prefix: str) -> Path | None:
    """The user's own global config file, where there is one."""
    folder = home / ".config" / ("kilo" if prefix == "KILO" else "opencode")
    names: tuple[str, ...] = ("kilo.json", "kilo.jsonc") if prefix == "KILO" else ()
    for name in (*names, *CONFIG_NAMES):
        path: Path = folder / name
        if path.is_file():
            return path
    return None


def project_folder(args: Sequence[str], cwd: Path) -> Path:
    """The folder opencode works in: `run --dir DIR`, the TUI's project
    argument, else the one it starts in."""
    if args and args[0] == "run":
        for i, arg in enumerate(args):
            if arg == "--dir" and i + 1 < len(args):
                return (cwd / args[i + 1]).resolve()
            if arg.startswith("--dir="):
                return (cwd / arg.split("=", 1)[1]).resolve()
        return cwd
    if args and not args[0].startswith("-") and (cwd / args[0]).is_dir():
        return (cwd / args[0]).resolve()
    return cwd


# `"build": {... "prompt": ...}` in a JSON or JSONC config.
_BUILD_PROMPT = re.compile(r'"build"\s*:\s*\{[^{}]*"prompt"\s*:')


def own_build_prompt(home: Path, folder: Path, env: Mapping[str, str]) -> bool:
    """Whether the user gives opencode's build agent a prompt of their own,
    in a config file or an agent file (which lean's would override)."""
    dirs = [home / ".config" / "opencode", folder / ".opencode"]
    if env.get("OPENCODE_CONFIG_DIR"):
        dirs.append(Path(env["OPENCODE_CONFIG_DIR"]))
    if any((d / sub / "build.md").is_file() for d in dirs for sub in ("agent", "agents")):
        return True
    configs = [d / name for d in [*dirs, folder] for name in CONFIG_NAMES]
    if env.get("OPENCODE_CONFIG"):  # launch passes the global one this way too
        configs.append(Path(env["OPENCODE_CONFIG"]))
    for path in dict.fromkeys(configs):
        try:
            text = path.read_text("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if _BUILD_PROMPT.search(text):
            return True
    return False


def config(ctx: Context, prefix: str = "OPENCODE", prompt: str | None = None) -> dict[str, Any]:
    m = ctx.model
    out: dict[str, Any] = {
        "$schema": "https://opencode.ai/config.json",
        "provider": {
            "engy": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "engy",
                "options": {
                    "baseURL": ctx.v1,
                    "apiKey": ctx.key,
                    # The folder is in the system prompt, before the tools:
                    # a session elsewhere reads what follows it from the
                    # cache at its new place (server/cachereuse.py).
                    "headers": CACHE_HEADERS,
                },
                "models": {
                    m.id: {
                        "name": m.id,
                        "tool_call": True,
                        "limit": {"context": m.context_length, "output": ctx.cap},
                    }
                },
            }
        },
        "model": f"engy/{m.id}",
        "small_model": f"engy/{m.id}",
        "autoupdate": False,
        "share": "disabled",
        # Run what the model asks without a prompt: engy launch's clients
        # act in the project, as Claude Code's and Codex's do under launch.
        # Outside the project it asks (a one-shot run refuses), its own
        # temporary folder included, which it would otherwise allow: the
        # 1.5B wrote the task's file to /tmp/opencode/ and was told it
        # had succeeded.
        "permission": {
            "edit": "allow",
            "bash": "allow",
            "webfetch": "deny",
            "external_directory": {"*": "ask"},
        },
    }
    if ctx.lean:
        out["tools"] = {tool: False for tool in lean_off(prefix)}
    if prompt is not None:
        out["agent"] = {"build": {"prompt": prompt}}
    return out


def configure(ctx: Context, prefix: str = "OPENCODE") -> Setup:
    """opencode (prefix OPENCODE) or Kilo (prefix KILO)."""
    env = dict(ctx.base_env)
    data = ctx.workdir / "xdg"
    user_home = Path(ctx.base_env.get("HOME", str(Path.home())))
    own = user_config(user_home, prefix)
    if own is not None and f"{prefix}_CONFIG" not in env:
        env[f"{prefix}_CONFIG"] = str(own)
    args = list(ctx.user_args)
    prompt = None
    if ctx.lean and prefix == "OPENCODE":
        folder = project_folder(args, ctx.cwd)
        if not own_build_prompt(user_home, folder, env):
            prompt = LEAN_PROMPT.format(folder=folder)
    env.update({
        f"{prefix}_CONFIG_CONTENT": json.dumps(config(ctx, prefix, prompt)),
        f"{prefix}_DISABLE_MODELS_FETCH": "1",
        f"{prefix}_DISABLE_AUTOUPDATE": "1",
        f"{prefix}_DISABLE_LSP_DOWNLOAD": "1",
        "XDG_DATA_HOME": str(data / "data"),
        "XDG_STATE_HOME": str(data / "state"),
        "XDG_CACHE_HOME": str(data / "cache"),
        "XDG_CONFIG_HOME": str(data / "config"),
        "npm_config_cache": str(data / "npm"),
    })  # fmt: skip
    if prefix == "KILO":
        env.update(KILO_NO_DAEMON="1", KILO_TELEMETRY_LEVEL="off")
    if args[:1] == ["run"] and not given(args, "--title"):
        args[1:1] = ["--title", TITLE]
    tools = "no " + ", ".join(lean_off(prefix)) if ctx.lean else "its default tools"
    name = "Kilo" if prefix == "KILO" else "opencode"
    said = [
        f"{name}: provider engy ({ctx.v1}), model engy/{ctx.model.id} with its "
        f"{ctx.model.context_length}-token window and {ctx.cap} output tokens, in "
        f"{prefix}_CONFIG_CONTENT" + (f" over yours ({own}, not changed)" if own else ""),
        f"{name}: {tools}; edits and commands allowed, no sharing, update checks or "
        "model list fetch; sessions in a temporary directory",
    ]
    if prompt is not None:
        said.append(
            f"{name}: a short system prompt naming the project folder (lean; "
            "your own agent.build.prompt wins)"
        )
    return Setup(args, env, said)
