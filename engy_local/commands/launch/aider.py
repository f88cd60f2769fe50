"""Aider on an engy model. Aider makes no tool calls: the model edits
through a text format, `whole` (each changed file written out again) or
`diff` (search/replace blocks). Small models keep to `whole`; `diff`
saves output tokens where a model can hold its format (the lean profile's
rule decides: lean gets `whole`).

Aider's own files under HOME (its analytics id, caches, input history)
go to the launch's temporary directory: HOME is that directory for it,
and a ~/.aider.conf.yml of the user's is passed with --config. Its files
in the project (.aider.chat.history.md, the tags cache) stay there, as
aider writes them. Outside a git repository `--no-git`: aider would
otherwise create one."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from .setup import Context, Setup, given

# Every flag engy passes goes before the user's: aider takes the last.
QUIET = ["--no-check-update", "--no-show-release-notes", "--no-analytics",
         "--no-show-model-warnings"]  # fmt: skip


def edit_format(lean: bool) -> str:
    return "whole" if lean else "diff"


def metadata(ctx: Context) -> dict[str, dict[str, object]]:
    """The window and costs of the model, as aider's --model-metadata-file
    (litellm's model entries) takes them."""
    return {
        f"openai/{ctx.model.id}": {
            "max_input_tokens": ctx.model.context_length,
            "max_output_tokens": ctx.cap,
            "max_tokens": ctx.cap,
            "input_cost_per_token": 0.0,
            "output_cost_per_token": 0.0,
            "litellm_provider": "openai",
            "mode": "chat",
        }
    }


def in_git(cwd: Path) -> bool:
    try:
        r = subprocess.run(
            ["git", "rev-parse", "--is-inside-work-tree"],
            cwd=cwd, capture_output=True, text=True, timeout=10,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0 and r.stdout.strip() == "true"


def configure(ctx: Context) -> Setup:
    home = ctx.workdir / "home"
    home.mkdir(parents=True, exist_ok=True)
    meta = ctx.workdir / "aider-models.json"
    meta.write_text(json.dumps(metadata(ctx), indent=1), "utf-8")
    env = dict(ctx.base_env)
    env.pop("OPENAI_API_KEY", None)
    env.update(
        OPENAI_API_BASE=ctx.v1,
        OPENAI_API_KEY=ctx.key,
        HOME=str(home),
        # litellm fetches its model price list at import without it.
        LITELLM_LOCAL_MODEL_COST_MAP="True",
    )
    fmt = edit_format(ctx.lean)
    args = [f"--model=openai/{ctx.model.id}", f"--model-metadata-file={meta}",
            f"--edit-format={fmt}", *QUIET]  # fmt: skip
    user_home = Path(ctx.base_env.get("HOME", str(Path.home())))
    own = user_home / ".aider.conf.yml"
    if own.is_file() and not given(ctx.user_args, "--config", "-c"):
        args.append(f"--config={own}")
    git = in_git(ctx.cwd)
    if not git and not given(ctx.user_args, "--git", "--no-git"):
        args.append("--no-git")
    said = [
        f"aider: openai/{ctx.model.id} at {ctx.v1}, its {ctx.model.context_length}-token "
        f"window and {ctx.cap} output tokens in {meta.name}",
        f"aider: edit format {fmt} ({'lean: whole files' if fmt == 'whole' else 'diff blocks'}; "
        "--edit-format to change it), no analytics or update checks"
        + ("" if git else ", --no-git (not in a git repository)"),
    ]
    return Setup([*args, *ctx.user_args], env, said)
