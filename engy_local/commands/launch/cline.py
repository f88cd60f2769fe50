"""Cline's CLI on an engy model. Everything it keeps (provider settings,
sessions, its database, logs) goes in `--data-dir`, the launch's temporary
directory: engy runs `cline auth` there for an OpenAI-compatible provider,
then gives the provider its real window and turns telemetry and update
checks off (and, lean, the tools a small model does not need).

Cline ignores SIGTERM: run.py kills it after a grace period."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from ...errors import LaunchError
from .setup import CACHE_HEADERS, Context, Setup, given

# Lean: its file, edit and command tools stay; the web, questions, agents
# and the team tools go.
LEAN_OFF = (
    "fetch_web_content", "ask_question", "spawn_agent",
    "team_spawn_teammate", "team_send_message", "team_broadcast", "team_read_mailbox",
    "team_run_task", "team_await_run", "team_await_runs", "team_await_all_runs",
    "team_cancel_run", "team_list_runs", "team_status", "team_task", "team_cleanup",
    "team_shutdown_teammate", "team_create_outcome", "team_attach_outcome_fragment",
    "team_review_outcome_fragment", "team_finalize_outcome", "team_list_outcomes",
    "team_mission_log",
)  # fmt: skip
PROVIDER = "openai-compatible"


def global_settings(lean: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"telemetryOptOut": True, "autoUpdateEnabled": False}
    if lean:
        out["disabledTools"] = list(LEAN_OFF)
        out["tools"] = {"web_search": {"enabled": False}}
    return out


def configure(ctx: Context) -> Setup:
    data = ctx.workdir / "cline"
    env = dict(ctx.base_env)
    env["CLINE_NO_AUTO_UPDATE"] = "1"
    if given(ctx.user_args, "--data-dir"):
        return Setup(list(ctx.user_args), env, ["Cline: your --data-dir, as it is"])
    if ctx.binary is None:
        raise LaunchError("cline: no binary to configure")
    auth = [str(ctx.binary), "auth", "-p", PROVIDER, "-k", ctx.key, "-m", ctx.model.id,
            "-b", ctx.v1, "--data-dir", str(data)]  # fmt: skip
    try:
        r = subprocess.run(
            auth, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LaunchError(f"cline auth did not finish: {exc}") from None
    providers_path = data / "settings" / "providers.json"
    if r.returncode != 0 or not providers_path.is_file():
        raise LaunchError(f"cline auth failed ({r.returncode}): {(r.stderr or r.stdout)[-500:]}")
    providers = json.loads(providers_path.read_text("utf-8"))
    ours = providers["providers"][PROVIDER]["settings"]
    ours["contextWindow"] = ctx.model.context_length
    ours["headers"] = CACHE_HEADERS
    providers_path.write_text(json.dumps(providers, indent=1), "utf-8")
    (data / "settings" / "global-settings.json").write_text(
        json.dumps(global_settings(ctx.lean), indent=1), "utf-8"
    )
    tools = "no web, questions, subagents or team tools" if ctx.lean else "its default tools"
    said = [
        f"Cline: provider {PROVIDER} at {ctx.v1}, model {ctx.model.id} with its "
        f"{ctx.model.context_length}-token window, in a temporary --data-dir",
        f"Cline: {tools}; no telemetry or update checks",
    ]
    return Setup(["--data-dir", str(data), *ctx.user_args], env, said)
