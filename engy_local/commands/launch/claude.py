"""Claude Code on an engy model: everything is environment variables (see
shared/reference/clients.md), so nothing of the user's is written."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ...backend import ModelStatus
from ...server.cachereuse import HEADER as REUSE_HEADER

# Sent when the server has no --api-key: Claude Code wants some key.
PLACEHOLDER_KEY = "engy-local"
# Claude Code asks for 32000 output tokens; a local window needs room left
# for the prompt, so the cap is a quarter of it, at most this.
MAX_OUTPUT_CAP = 8192


# A new session in another folder leaves the last one's prompt at the
# folder's path in its environment section; the ~200 tokens after it are
# read from the cache at their new place in runs of at least this many
# (server/cachereuse.py). Moving a run costs a pass over the whole KV cache
# (about 1.9 s on Qwen2.5-Coder-1.5B with 4 x 32k cells, 2 cores): below
# ~170 tokens reading them again was as quick, so shorter runs (a tool
# call the template renders otherwise than the model wrote it) are read.
REUSE_RUN = 160


# Claude Code 2.1.332 reads an auto-compact window under 100k tokens as 100k
# (it says so at start-up), and compacts when 33k are left of it.
CLAUDE_MIN_WINDOW = 100_000
CLAUDE_COMPACT_BUFFER = 33_000


def compaction_warning(context_length: int) -> str | None:
    """What to tell the user when Claude Code cannot compact in time."""
    if context_length >= CLAUDE_MIN_WINDOW:
        return None
    at = CLAUDE_MIN_WINDOW - CLAUDE_COMPACT_BUFFER
    return (
        f"Claude Code takes a window under {CLAUDE_MIN_WINDOW // 1000}k tokens as "
        f"{CLAUDE_MIN_WINDOW // 1000}k and compacts at about {at // 1000}k, past this "
        f"{context_length}-token one: a longer session ends in 'prompt is too long' unless "
        f"you /compact, or serve a window of {CLAUDE_MIN_WINDOW // 1000}k or more (--ctx-size)"
    )


def output_cap(context_length: int) -> int:
    return max(256, min(MAX_OUTPUT_CAP, context_length // 4))


# The lean profile (profile.py): the tools a small model uses well. Tried on
# Qwen2.5-Coder-0.5B at temperature 0 (docs/benchmarks.md): offered Edit,
# it "edited" the file it was asked to create (old and new text the same)
# and never made it; with Bash, Read and Write it once ran the command in
# two turns and once wrote an 8192-token answer after it; with Bash alone
# it ran the command each time. The first prompt is 18% of the default
# twelve tools'. Read and Write are a `--tools` away.
LEAN_TOOLS = ("Bash",)
# Lean also drops auto-memory (its instructions, with this project's memory
# path, open the first user message) and the git commit and PR guidance
# in Bash's description. Set by the user, their value stands.
LEAN_ENV = {
    "CLAUDE_CODE_DISABLE_AUTO_MEMORY": "1",
    "CLAUDE_CODE_DISABLE_GIT_INSTRUCTIONS": "1",
}
# Moves the per-machine sections (cwd, environment, memory path, git status)
# from the system prompt into the first user message, so that sessions in
# other folders share the system prompt and the tools in the cache.
CACHE_FRIENDLY = "--exclude-dynamic-system-prompt-sections"


def given(args: Sequence[str], *flags: str) -> bool:
    """Whether the user's arguments (before a bare `--`) set any of `flags`,
    as `--flag`, `--flag value` or `--flag=value`."""
    for arg in args:
        if arg == "--":
            return False
        if any(arg == f or arg.startswith(f + "=") for f in flags):
            return True
    return False


def claude_args(lean: bool, user_args: Sequence[str]) -> list[str]:
    """What engy adds before the user's arguments; an option the user
    gives is left to them. `--tools=` (one value) and not `--tools X`:
    that option takes several values and would swallow a prompt after it."""
    out: list[str] = []
    if lean and not given(user_args, "--tools"):
        out.append("--tools=" + ",".join(LEAN_TOOLS))
    if lean and not given(user_args, "--disable-slash-commands"):
        out.append("--disable-slash-commands")
    # It does nothing with a system prompt of the user's own.
    if not given(user_args, CACHE_FRIENDLY, "--system-prompt", "--system-prompt-file"):
        out.append(CACHE_FRIENDLY)
    return out


def claude_env(
    base: Mapping[str, str],
    url: str,
    api_key: str | None,
    model: ModelStatus,
    small_model: str | None = None,
    lean: bool = False,
) -> dict[str, str]:
    """The environment Claude Code runs with: `base` (the user's) with the
    server, the key, every model tier, the real window and side traffic off
    (and, lean, memory and git guidance off unless the user set them)."""
    env = dict(base)
    # A real Anthropic key must not go to the local server, and with both
    # set Claude Code asks which to use.
    env.pop("ANTHROPIC_API_KEY", None)
    small = small_model or model.id
    env.update(
        ANTHROPIC_BASE_URL=url,
        ANTHROPIC_AUTH_TOKEN=api_key or PLACEHOLDER_KEY,
        ANTHROPIC_MODEL=model.id,
        ANTHROPIC_DEFAULT_OPUS_MODEL=model.id,
        ANTHROPIC_DEFAULT_SONNET_MODEL=model.id,
        ANTHROPIC_DEFAULT_HAIKU_MODEL=small,
        ANTHROPIC_SMALL_FAST_MODEL=small,  # the haiku tier's older name
        CLAUDE_CODE_SUBAGENT_MODEL=small,
        # The per-request attribution block changes the system prompt's
        # start every turn, which would defeat the KV cache.
        CLAUDE_CODE_ATTRIBUTION_HEADER="0",
        # Without it Claude Code assumes 1M tokens and never compacts.
        CLAUDE_CODE_AUTO_COMPACT_WINDOW=str(model.context_length),
        CLAUDE_CODE_MAX_OUTPUT_TOKENS=str(output_cap(model.context_length)),
        # Title requests, telemetry and update checks: none.
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
    )
    if lean:
        for key, value in LEAN_ENV.items():
            env.setdefault(key, value)
    env["ANTHROPIC_CUSTOM_HEADERS"] = with_header(
        base.get("ANTHROPIC_CUSTOM_HEADERS", ""), REUSE_HEADER, str(REUSE_RUN)
    )
    return env


def with_header(headers: str, name: str, value: str) -> str:
    """ANTHROPIC_CUSTOM_HEADERS ("Name: value" lines) with `name` added,
    unless the user's already set it."""
    lines = [line for line in headers.splitlines() if line.strip()]
    if any(line.split(":", 1)[0].strip().lower() == name for line in lines):
        return headers
    return "\n".join([*lines, f"{name}: {value}"])
