"""Qwen Code on an engy model. Its home (`QWEN_HOME`: settings, chats,
usage records) is the launch's temporary directory: the settings there are
the user's ~/.qwen/settings.json (read, never written) with engy's model,
window, output cap and auth over it, and telemetry, usage statistics,
auto-memory and update checks off where the user set nothing.

Its tool flags take lists, which would swallow a prompt after them: they
go after the user's arguments (`engy launch qwen -- "task"`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .setup import CACHE_HEADERS, Context, Setup, given

# What lean keeps: its shell, reading and writing files. Not `edit`: asked
# to run a command, Qwen2.5-Coder-0.5B called edit on the file the command
# was to make, four times, then answered nothing; a small model writes a
# whole file as well as it edits one (Aider's `whole` against `diff`,
# docs/benchmarks.md).
LEAN_CORE = ("run_shell_command", "write_file", "read_file")
# Excluding its tool search would show its deferred tools instead: these go
# too; and the worktree, artifact, findings and messaging tools, which
# --core-tools leaves in (measured on Qwen2.5-Coder-1.5B: 3k of its 11.9k
# first-prompt tokens, and the model answered that the file was made
# without calling anything).
LEAN_EXCLUDE = ("agent", "skill", "tool_search", "tool_call", "get_goal", "update_goal",
                "list_agents", "enter_worktree", "exit_worktree", "record_artifact",
                "report_findings", "send_message", "task_stop")  # fmt: skip
QUIET: dict[str, dict[str, Any]] = {
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "general": {"enableAutoUpdate": False},
    "memory": {"enableManagedAutoMemory": False, "enableManagedAutoDream": False},
}
# Lean's quiet defaults besides: no bundled skills. Their list (1.4k
# tokens in a <system-reminder> before the task) is for the Skill tool,
# which lean excludes, and after it Qwen2.5-Coder-1.5B wrote reminders of
# its own ("the file has been created") instead of a call. The user's own
# skills stay.
QUIET_LEAN: dict[str, dict[str, Any]] = {"skills": {"disabledLevels": ["bundled"]}}


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def user_settings(home: Path) -> dict[str, Any]:
    path = home / ".qwen" / "settings.json"
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def settings(ctx: Context, theirs: dict[str, Any]) -> dict[str, Any]:
    """engy's model and auth over the user's settings, which win over
    engy's quiet defaults."""
    ours = {
        "model": {
            "name": ctx.model.id,
            "generationConfig": {
                "contextWindowSize": ctx.model.context_length,
                "samplingParams": {"max_tokens": ctx.cap},
                "customHeaders": CACHE_HEADERS,
            },
        },
        "security": {"auth": {"selectedType": "openai"}},
    }
    quiet = _merge(QUIET, QUIET_LEAN) if ctx.lean else QUIET
    return _merge(_merge(quiet, theirs), ours)


def configure(ctx: Context) -> Setup:
    home = ctx.workdir / "qwen"
    home.mkdir(parents=True, exist_ok=True)
    user_home = Path(ctx.base_env.get("HOME", str(Path.home())))
    (home / "settings.json").write_text(
        json.dumps(settings(ctx, user_settings(user_home)), indent=1), "utf-8"
    )
    env = dict(ctx.base_env)
    env.update(
        QWEN_HOME=str(home),
        OPENAI_BASE_URL=ctx.v1,
        OPENAI_API_KEY=ctx.key,
        OPENAI_MODEL=ctx.model.id,
        QWEN_CODE_SUPPRESS_YOLO_WARNING="1",
    )
    args = list(ctx.user_args)
    if not given(args, "--approval-mode", "--yolo", "-y"):
        args += ["--approval-mode", "yolo"]
    if ctx.lean and not given(args, "--core-tools", "--exclude-tools"):
        args += ["--core-tools", *LEAN_CORE, "--exclude-tools", *LEAN_EXCLUDE]
    tools = ", ".join(LEAN_CORE) if ctx.lean else "its default tools"
    said = [
        f"Qwen Code: {ctx.model.id} at {ctx.v1}, its {ctx.model.context_length}-token window "
        f"and {ctx.cap} output tokens; settings in a temporary QWEN_HOME (yours read, not "
        "changed)",
        f"Qwen Code: {tools}; approval mode yolo; no telemetry, usage statistics or auto-memory"
        + ("; no bundled skills" if ctx.lean else ""),
    ]
    return Setup(args, env, said)
