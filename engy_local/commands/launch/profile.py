"""Which tool profile `engy launch` gives the client: `--tools auto|lean|full`.

lean  the tools a small local model uses well and a short first prompt
      (Claude Code: Bash alone, no slash commands or memory;
      Codex: its command tool and apply_patch, its instructions' sections
      on the work only, no skills list, multi-agent, goals, image
      generation, web search or, without vision, view_image)
full  the client's own defaults

`auto` gives Codex its full set on a model under CODEX_LEAN_FROM
parameters: on Qwen2.5-Coder-0.5B the lean set had the model fill every
optional field of exec_command and the call was refused, or run its
answer to the token limit, where the full set ran the command. On
Qwen2.5-Coder-1.5B lean did as well as full (1 of 8 task-runs against 0
of 8) and reached its first token about 6x sooner (docs/benchmarks.md), so
from there Codex gets what Claude Code gets.

`auto` gives Cline its full set: its defaults are short (5.4k tokens, 25
tools), and on Qwen2.5-Coder-1.5B under lean the model wrote Cline's old
XML tool format as text in 3 greedy tries of 3, where under full it made
the file with its editor tool (docs/benchmarks.md). `auto` gives Qwen Code
its full set where the window is QWEN_FULL_WINDOW tokens or more (its own
first prompt is 16k tokens): on Qwen2.5-Coder-1.5B under lean the model
answered with reminders of its own and no call (0 of 5 tries), under its
own tools it made the file with write_file (1 of 2). For the other clients `auto`
picks lean for a model under LEAN_PARAMETERS parameters (or, when
the parameter count is unknown, weights under LEAN_WEIGHT_BYTES), or served
with a window under LEAN_WINDOW tokens, and full otherwise. Measured on
Qwen2.5-Coder (docs/benchmarks.md): the clients' full first prompts are
10-12k tokens, a third of a 32k window and minutes of prompt processing
on a CPU before the first token, and a 0.5B-1.5B model picks among
twelve tools badly. The family does not enter the rule: no family was
measured to do better with the full set at a small size.

Pure: what it decides from is passed in, so the rule is a table test.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ToolsChoice = Literal["auto", "lean", "full"]
ProfileName = Literal["lean", "full"]
TOOLS_CHOICES: tuple[ToolsChoice, ...] = ("auto", "lean", "full")

LEAN_PARAMETERS = 14_000_000_000
# 14B parameters at about 4.5 bits each (Q4_K_M): the weights' size when
# the parameter count cannot be read.
LEAN_WEIGHT_BYTES = 8 << 30
LEAN_WINDOW = 65_536
# Codex on a smaller model keeps its defaults (see above).
CODEX_LEAN_FROM = 1_000_000_000
# Clients whose own tools did better than lean on a small model (see above).
FULL_ON_AUTO = ("cline",)
QWEN_FULL_WINDOW = 32_768


@dataclass(frozen=True)
class Profile:
    name: ProfileName
    why: str  # "auto: 494M parameters, under 14B"
    other: str  # how to get the other profile

    @property
    def lean(self) -> bool:
        return self.name == "lean"


def _count(n: int) -> str:
    """494_032_768 -> 494M, 7_615_616_512 -> 7.6B."""
    if n >= 1_000_000_000:
        return f"{n / 1e9:.1f}B".replace(".0B", "B")
    return f"{max(1, round(n / 1e6))}M"


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB"


def _other(name: ProfileName) -> str:
    flip: ProfileName = "full" if name == "lean" else "lean"
    return f"--tools {flip} for the {'client defaults' if flip == 'full' else 'short tool set'}"


def choose(
    choice: ToolsChoice,
    window: int,
    parameters: int | None = None,
    weight_bytes: int | None = None,
    client: str = "claude",
) -> Profile:
    """The profile for `client` on a model served with `window` tokens, of
    `parameters` parameters (None: unknown) or `weight_bytes` of weights
    (None: unknown)."""
    if choice != "auto":
        return Profile(choice, f"--tools {choice}", _other(choice))
    if client in FULL_ON_AUTO:
        why = "auto: Cline did its task on a small model with its own tools, not on lean"
        return Profile("full", why, _other("full"))
    if client == "qwen" and window >= QWEN_FULL_WINDOW:
        why = (
            f"auto: Qwen Code did its task on a small model with its own tools, not on lean "
            f"(a {window}-token window holds their 16k-token prompt)"
        )
        return Profile("full", why, _other("full"))
    if client == "codex" and parameters and parameters < CODEX_LEAN_FROM:
        why = (
            f"auto: Codex on {_count(parameters)} parameters, under {_count(CODEX_LEAN_FROM)}, "
            "did its task on its defaults, not on lean"
        )
        return Profile("full", why, _other("full"))
    small: str | None = None
    if parameters:  # known: it decides, the file's bytes do not
        if parameters < LEAN_PARAMETERS:
            small = f"{_count(parameters)} parameters, under {_count(LEAN_PARAMETERS)}"
    elif weight_bytes and weight_bytes < LEAN_WEIGHT_BYTES:
        small = f"{_gib(weight_bytes)} of weights, under {_gib(LEAN_WEIGHT_BYTES)}"
    if small is not None:
        return Profile("lean", f"auto: {small}", _other("lean"))
    if window < LEAN_WINDOW:
        why = f"auto: a {window}-token window, under {LEAN_WINDOW}"
        return Profile("lean", why, _other("lean"))
    size = (
        f"{_count(parameters)} parameters"
        if parameters
        else f"{_gib(weight_bytes)} of weights"
        if weight_bytes
        else "size unknown"
    )
    why = f"auto: {size} and a {window}-token window"
    return Profile("full", why, _other("full"))
