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


def lean_off(prefix: str) -> tuple[str, ...]:
    return LEAN_OFF + (KILO_LEAN_OFF if prefix == "KILO" else ())


def user_config(home: Path, prefix: str) -> Path | None:
    """The user's own global config file, where there is one."""
    folder = home / ".config" / ("kilo" if prefix == "KILO" else "opencode")
    names: tuple[str, ...] = ("kilo.json", "kilo.jsonc") if prefix == "KILO" else ()
    for name in (*names, "opencode.json", "opencode.jsonc", "config.json"):
        path: Path = folder / name
        if path.is_file():
            return path
    return None


def config(ctx: Context, prefix: str = "OPENCODE") -> dict[str, Any]:
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
    return out


def configure(ctx: Context, prefix: str = "OPENCODE") -> Setup:
    """opencode (prefix OPENCODE) or Kilo (prefix KILO)."""
    env = dict(ctx.base_env)
    data = ctx.workdir / "xdg"
    user_home = Path(ctx.base_env.get("HOME", str(Path.home())))
    own = user_config(user_home, prefix)
    if own is not None and f"{prefix}_CONFIG" not in env:
        env[f"{prefix}_CONFIG"] = str(own)
    env.update({
        f"{prefix}_CONFIG_CONTENT": json.dumps(config(ctx, prefix)),
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
    args = list(ctx.user_args)
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
    return Setup(args, env, said)
