"""Continue's CLI (`cn`) on an engy model: a config YAML in the launch's
temporary directory (an OpenAI provider at engy, the real window and an
output cap, tool use on), its global folder (sessions, logs, permissions)
there too, and its telemetry off. A `--config` of the user's is theirs.

In `-p` (headless) runs the tools that ask first (Write, Edit, MultiEdit)
are dropped unless allowed, and `--auto` would also ignore `--exclude`:
launch allows them by name."""

from __future__ import annotations

import json

from .setup import CACHE_HEADERS, Context, Setup, given

ALLOW = ("Write", "Edit", "MultiEdit", "Bash")
# Lean drops what a small model does not need.
LEAN_EXCLUDE = ("Fetch", "Subagent", "Skills", "AskQuestion", "Checklist", "UploadArtifact")


def config_yaml(ctx: Context) -> str:
    """The config; each value is JSON, which YAML reads as it is."""
    m = ctx.model
    return (
        "name: engy\nversion: 1.0.0\nschema: v1\nmodels:\n"
        f"  - name: {json.dumps(m.id)}\n    provider: openai\n    model: {json.dumps(m.id)}\n"
        f"    apiBase: {json.dumps(ctx.v1)}\n    apiKey: {json.dumps(ctx.key)}\n"
        "    roles: [chat, edit, apply]\n    capabilities: [tool_use]\n"
        "    defaultCompletionOptions:\n"
        f"      contextLength: {m.context_length}\n      maxTokens: {ctx.cap}\n"
        "    requestOptions:\n      headers:\n"
        + "".join(f"        {k}: {json.dumps(v)}\n" for k, v in CACHE_HEADERS.items())
    )


def configure(ctx: Context) -> Setup:
    env = dict(ctx.base_env)
    env.update(
        CONTINUE_GLOBAL_DIR=str(ctx.workdir / "continue"),
        CONTINUE_CLI_ENABLE_TELEMETRY="0",
        CONTINUE_METRICS_ENABLED="0",
    )
    args: list[str] = []
    if not given(ctx.user_args, "--config"):
        config = ctx.workdir / "continue-config.yaml"
        config.write_text(config_yaml(ctx), "utf-8")
        args += ["--config", str(config)]
    if not given(ctx.user_args, "--auto", "--allow"):
        for tool in ALLOW:
            args += ["--allow", tool]
    if ctx.lean and not given(ctx.user_args, "--exclude"):
        for tool in LEAN_EXCLUDE:
            args += ["--exclude", tool]
    said = [
        f"Continue: {ctx.model.id} at {ctx.v1}, its {ctx.model.context_length}-token window "
        f"and {ctx.cap} output tokens in a temporary config",
        "Continue: "
        + ", ".join(ALLOW)
        + " allowed"
        + (f"; no {', '.join(LEAN_EXCLUDE)}" if ctx.lean else "")
        + "; no telemetry",
    ]
    return Setup([*args, *ctx.user_args], env, said)
