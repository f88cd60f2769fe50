"""mini-swe-agent on an engy model: one bash tool, each step one request
(not streamed), no context management of its own. Its model goes through
litellm as `openai/MODEL` with the server in model_kwargs; its global
config and last trajectory go to the launch's temporary directory."""

from __future__ import annotations

from .setup import Context, Setup, given

# Steps a run takes at most unless the user's config says otherwise (theirs
# comes after launch's, so it wins).
STEP_LIMIT = 50


def configure(ctx: Context) -> Setup:
    env = dict(ctx.base_env)
    env.update(
        MSWEA_GLOBAL_CONFIG_DIR=str(ctx.workdir / "mini-swe-agent"),
        MSWEA_CONFIGURED="true",  # no first-run setup questions
        MSWEA_SILENT_STARTUP="1",
        MSWEA_COST_TRACKING="ignore_errors",  # a local model has no price
        LITELLM_LOCAL_MODEL_COST_MAP="True",
    )
    args = [f"--model=openai/{ctx.model.id}"]
    if not given(ctx.user_args, "--output", "-o"):
        args.append(f"--output={ctx.workdir / 'last_mini_run.traj.json'}")
    configs = [] if given(ctx.user_args, "--config", "-c") else ["mini.yaml"]
    configs += [
        f"model.model_kwargs.api_base={ctx.v1}",
        f"model.model_kwargs.api_key={ctx.key}",
        f"model.model_kwargs.max_tokens={ctx.cap}",
        # Its protocol takes a bash call in every answer (an answer without
        # one is a format error it sends back): asked for, the server holds
        # each answer to a call. Qwen2.5-Coder-1.5B otherwise wrote the
        # call as text, as its instructions' examples show one.
        "model.model_kwargs.tool_choice=required",
        # Its own limit is none (0), and a local model costs nothing, so
        # its cost limit never comes: held to a call, the 1.5B wrote the
        # same one again step after step once the file was made.
        f"agent.step_limit={STEP_LIMIT}",
    ]
    for c in configs:
        args += ["--config", c]
    said = [
        f"mini-swe-agent: openai/{ctx.model.id} at {ctx.v1} through litellm, "
        f"{ctx.cap} output tokens a step, its bash tool called in every step, at most "
        f"{STEP_LIMIT} steps (agent.step_limit); trajectory and config in a temporary "
        "directory",
    ]
    return Setup([*args, *ctx.user_args], env, said)
