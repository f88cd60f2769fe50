"""`engy launch --tools auto|lean|full`: the rule that picks a profile for a
model, and what each profile adds to Claude Code's arguments and
environment and to Codex's `-c` settings and catalog entry, with the
user's own arguments winning. Pure: no server, no client."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from engy_local.backend import ModelStatus
from engy_local.commands.launch.claude import LEAN_ENV, claude_args, claude_env
from engy_local.commands.launch.codex import catalog_entry, codex_overrides, lean_instructions
from engy_local.commands.launch.profile import choose

B = 1_000_000_000
GIB = 1 << 30


@pytest.mark.parametrize(
    ("choice", "window", "parameters", "weights", "want", "said"),
    [
        # Qwen2.5-Coder-0.5B and 1.5B, gemma-3-270m: small, lean.
        ("auto", 32768, 494_032_768, 397 << 20, "lean", "494M parameters, under 14B"),
        ("auto", 32768, 1_543_714_304, 1 * GIB, "lean", "1.5B parameters, under 14B"),
        ("auto", 131072, 7_615_616_512, 4 * GIB, "lean", "7.6B parameters"),
        # At 14B and above, with a long window: the client's defaults.
        ("auto", 65536, 14 * B, 9 * GIB, "full", "14B parameters and a 65536-token window"),
        ("auto", 131072, 32_763_876_352, 19 * GIB, "full", "32.8B parameters"),
        # A big model in a short window: lean, the window is why.
        ("auto", 32768, 32 * B, 19 * GIB, "lean", "32768-token window, under 65536"),
        ("auto", 65535, 70 * B, None, "lean", "65535-token window"),
        # A known count decides, however small the file (a 20B at 2 bits).
        ("auto", 131072, 20 * B, 5 * GIB, "full", "20B parameters"),
        # The parameter count unknown: the weights' bytes decide.
        ("auto", 131072, None, 4 * GIB, "lean", "4.0 GiB of weights, under 8.0 GiB"),
        ("auto", 131072, None, 20 * GIB, "full", "20.0 GiB of weights"),
        # Nothing known of the size (a server elsewhere): the window alone.
        ("auto", 131072, None, None, "full", "size unknown and a 131072-token window"),
        ("auto", 16384, None, None, "lean", "16384-token window"),
        # Asked for, whatever the model.
        ("lean", 262144, 70 * B, 40 * GIB, "lean", "--tools lean"),
        ("full", 4096, 135_000_000, 100 << 20, "full", "--tools full"),
    ],
)
def test_the_rule(
    choice: str, window: int, parameters: int | None, weights: int | None, want: str, said: str
) -> None:
    profile = choose(choice, window, parameters, weights)  # type: ignore[arg-type]
    assert profile.name == want
    assert said in profile.why
    # The banner says how to get the other one.
    other = "full" if want == "lean" else "lean"
    assert f"--tools {other}" in profile.other


@pytest.mark.parametrize(
    ("choice", "parameters", "want", "said"),
    [
        # Qwen2.5-Coder-0.5B: lean's call was refused where the defaults ran it.
        ("auto", 494_032_768, "full", "Codex on 494M parameters, under 1B"),
        # Qwen2.5-Coder-1.5B: lean did as well, its first token 6x sooner.
        ("auto", 1_543_714_304, "lean", "1.5B parameters, under 14B"),
        ("auto", 70 * B, "full", "70B parameters"),
        ("auto", None, "lean", "1.0 GiB of weights"),
        ("lean", 494_032_768, "lean", "--tools lean"),
    ],
)
def test_codex_on_auto(choice: str, parameters: int | None, want: str, said: str) -> None:
    """Codex keeps its defaults on a model under 1B parameters; from there
    auto is Claude Code's rule."""
    profile = choose(choice, 65536, parameters, GIB, "codex")  # type: ignore[arg-type]
    assert profile.name == want and said in profile.why


@pytest.mark.parametrize(
    ("client", "parameters", "want"),
    [
        # Qwen2.5-Coder-1.5B: under lean Cline's model wrote its old XML
        # format as text (3 of 3), under full it made the file.
        ("cline", 1_543_714_304, "full"),
        ("cline", 70 * B, "full"),
        ("opencode", 1_543_714_304, "lean"),
        # Qwen2.5-Coder-1.5B: under lean Qwen Code's model made up
        # reminders (0 of 5), under full it made the file (1 of 2).
        ("qwen", 1_543_714_304, "full"),
        ("continue", 494_032_768, "lean"),
    ],
)
def test_the_other_clients_on_auto(client: str, parameters: int, want: str) -> None:
    assert choose("auto", 32768, parameters, GIB, client).name == want
    assert choose("lean", 32768, parameters, GIB, client).name == "lean"


@pytest.mark.parametrize(("window", "want"), [(16384, "lean"), (32768, "full"), (131072, "full")])
def test_qwen_code_gets_its_own_tools_where_the_window_holds_them(window: int, want: str) -> None:
    """Its own first prompt is 16k tokens: in a 16k window lean's 7k."""
    assert choose("auto", window, 1_543_714_304, GIB, "qwen").name == want


# ---- Claude Code ------------------------------------------------------------------

CACHE = "--exclude-dynamic-system-prompt-sections"
LEAN4 = "--tools=Bash"


@pytest.mark.parametrize(
    ("lean", "user", "want"),
    [
        (True, ["-p", "hi"], [LEAN4, "--disable-slash-commands", CACHE]),
        (False, ["-p", "hi"], [CACHE]),
        (True, [], [LEAN4, "--disable-slash-commands", CACHE]),
        # The user's --tools, in either spelling, wins: none of ours.
        (True, ["--tools", "Bash", "-p", "hi"], ["--disable-slash-commands", CACHE]),
        (True, ["--tools=Read"], ["--disable-slash-commands", CACHE]),
        (True, ["--disable-slash-commands"], [LEAN4, CACHE]),
        (False, [CACHE], []),
        # With a system prompt of their own the flag does nothing: not added.
        (False, ["--system-prompt", "Be brief"], []),
        (True, ["--system-prompt-file=p.txt"], [LEAN4, "--disable-slash-commands"]),
        # After the user's own `--` everything is the prompt's, not an option.
        (True, ["--", "--tools"], [LEAN4, "--disable-slash-commands", CACHE]),
        # Not a prefix match: --toolsy is no --tools.
        (True, ["--toolsy"], [LEAN4, "--disable-slash-commands", CACHE]),
    ],
)
def test_claude_args(lean: bool, user: list[str], want: list[str]) -> None:
    assert claude_args(lean, user) == want


MODEL = ModelStatus("qwen2.5-coder-0.5b", 32768, "CPU", 0, None, family="hermes")


def test_claude_env_lean_turns_memory_and_git_guidance_off_unless_the_user_set_them() -> None:
    url = "http://127.0.0.1:8642"
    full = claude_env({"HOME": "/h"}, url, None, MODEL, lean=False)
    assert not set(LEAN_ENV) & set(full)
    lean = claude_env({"HOME": "/h"}, url, None, MODEL, lean=True)
    assert {k: lean[k] for k in LEAN_ENV} == LEAN_ENV
    # Everything else is the same in both.
    assert {k: v for k, v in lean.items() if k not in LEAN_ENV} == full
    mine = claude_env({"CLAUDE_CODE_DISABLE_AUTO_MEMORY": "0"}, url, None, MODEL, lean=True)
    assert mine["CLAUDE_CODE_DISABLE_AUTO_MEMORY"] == "0"
    assert mine["CLAUDE_CODE_DISABLE_GIT_INSTRUCTIONS"] == "1"


@pytest.mark.parametrize(
    ("mine", "want"),
    [
        (None, "x-engy-cache-reuse: 160"),
        ("X-Team: a", "X-Team: a\nx-engy-cache-reuse: 160"),
        ("X-Team: a\nX-Engy-Cache-Reuse: 0", "X-Team: a\nX-Engy-Cache-Reuse: 0"),
    ],
)
def test_claude_env_asks_for_shifted_reuse_unless_the_user_set_it(
    mine: str | None, want: str
) -> None:
    """Every profile: a new session in another folder reads the environment
    section after the path from the cache (server/cachereuse.py); a user's
    own headers stay, and their own setting of it wins."""
    base = {"ANTHROPIC_CUSTOM_HEADERS": mine} if mine is not None else {}
    for lean in (True, False):
        env = claude_env(base, "http://127.0.0.1:8642", None, MODEL, lean=lean)
        assert env["ANTHROPIC_CUSTOM_HEADERS"] == want


# ---- Codex ------------------------------------------------------------------------

INSTRUCTIONS = (
    "You are Codex.\n\n# Personality\nWarm.\n\n# General\nRead first.\n"
    "## Frontend guidance\nBold.\n### Design instructions\nFonts.\n"
    "## Editing constraints\nUse apply_patch.\n\n# Working with the user\nChannels.\n"
    "## Final answer instructions\nShort.\n"
)
LEAN_INSTRUCTIONS = (
    "You are Codex.\n\n# General\nRead first.\n## Editing constraints\nUse apply_patch.\n\n"
)
SHIPPED = [
    {
        "slug": "gpt-x",
        "base_instructions": INSTRUCTIONS,
        "model_messages": {"instructions_template": INSTRUCTIONS, "approvals": None},
        "shell_type": "unified_exec",
        "apply_patch_tool_type": "freeform",
        "include_skills_usage_instructions": True,
        "context_window": 272000,
    }
]


def overrides(argv: list[str]) -> dict[str, str]:
    return dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "-c")


LEAN_C = {
    "features.multi_agent": "false",
    "features.goals": "false",
    "features.image_generation": "false",
    "web_search": '"disabled"',
    "skills.bundled.enabled": "false",
    "features.view_image": "false",  # MODEL has no vision projector
}


@pytest.mark.parametrize("lean", [True, False])
def test_codex_overrides(lean: bool) -> None:
    c = overrides(codex_overrides("http://127.0.0.1:8642", MODEL, Path("/c.json"), lean))
    # What both profiles share: the provider, the model, its window.
    assert c["model_provider"] == '"engy"' and c["model"] == json.dumps(MODEL.id)
    assert c["model_catalog_json"] == '"/c.json"'
    hide = "model_providers.engy.http_headers.x-engy-hide"
    if lean:
        assert {k: c[k] for k in LEAN_C} == LEAN_C
        # Sent with each request: the model is not shown write_stdin nor
        # exec_command's fields but its command and folder.
        hidden = json.loads(c[hide]).split(",")
        assert {"write_stdin", "request_user_input", "exec_command.justification"} <= set(hidden)
        assert not {"exec_command", "exec_command.cmd", "exec_command.workdir"} & set(hidden)
    else:
        assert not set(LEAN_C) & set(c) and hide not in c


def test_codex_lean_keeps_view_image_for_a_model_with_vision() -> None:
    c = overrides(codex_overrides("http://x", replace(MODEL, images=True), None, lean=True))
    assert "features.view_image" not in c and c["features.goals"] == "false"


def test_codex_catalog_entry_lean_and_full() -> None:
    full = catalog_entry(MODEL, SHIPPED, lean=False)
    lean = catalog_entry(MODEL, SHIPPED, lean=True)
    assert full is not None and lean is not None
    # Full keeps the instructions this Codex ships; lean their sections on
    # the work, and no skills list.
    assert full["base_instructions"] == INSTRUCTIONS
    assert full["model_messages"]["instructions_template"] == INSTRUCTIONS
    assert lean["base_instructions"] == LEAN_INSTRUCTIONS
    assert lean["model_messages"] == {"instructions_template": LEAN_INSTRUCTIONS, "approvals": None}
    for entry in (full, lean):
        assert entry["slug"] == MODEL.id and entry["context_window"] == 32768
        assert entry["apply_patch_tool_type"] == "freeform"
        assert entry["shell_type"] == "unified_exec"
    assert full["include_skills_usage_instructions"] is True
    assert lean["include_skills_usage_instructions"] is False


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (INSTRUCTIONS, LEAN_INSTRUCTIONS),
        # A heading named alike at another level is dropped with its children.
        ("## Personality\nx\n### Tone\ny\n## Tools\nz\n", "## Tools\nz\n"),
        # Headings this version does not have: all kept, word for word.
        (
            "# How you work\nPlan.\n## Tools\nUse them.\n",
            "# How you work\nPlan.\n## Tools\nUse them.\n",
        ),
        # A `#` inside a line is no heading; blank runs left by a cut are one blank line.
        ("a # b\n\n# Personality\nx\n\n\n# End\n", "a # b\n\n# End\n"),
        ("", ""),
    ],
)
def test_lean_instructions(text: str, want: str) -> None:
    assert lean_instructions(text) == want
