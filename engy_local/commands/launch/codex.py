"""Codex on an engy model, without touching the user's config.toml: the
provider, the model and its window go in as `-c` overrides, and the model's
catalog entry (what tells Codex to send `apply_patch` as the freeform tool
engy returns as `custom_tool_call`) is a JSON file of engy's own.

The catalog entry starts from one of the catalog Codex ships in its binary
(`codex debug models --bundled`), so its instructions are the ones this
Codex version is built with; engy only states what the local model is.

The lean profile (profile.py) keeps what a small model uses well: Codex
0.171.0's catalog offers one kind of command tool (`shell_type` takes
`default`, `local` and `shell_command` as names of `unified_exec`:
`exec_command`, which runs one command and returns its output, with
`write_stdin` beside it) and one form of apply_patch (`freeform`, which
engy turns into `custom_tool_call`). Lean keeps the shipped instructions'
sections on doing the work (engineering judgment, editing, persistence)
and drops those on tone, design and how to report (lean_instructions), and
turns off the skills list, multi-agent, goals, image generation and web
search (and view_image, for a model without vision)."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...backend import ModelStatus
from ...server.hiding import HEADER as HIDE_HEADER
from .claude import PLACEHOLDER_KEY, output_cap

PROVIDER = "engy"
KEY_VARIABLE = "ENGY_API_KEY"
# Families that write one call per message (harmony): no parallel calls.
SINGLE_CALL_FAMILIES = frozenset({"gpt-oss"})
# Fields of a shipped entry that describe OpenAI's service, not a model
# served locally; they are reset.
_LOCAL: dict[str, Any] = {
    "upgrade": None,
    "availability_nux": None,
    "visibility": "list",
    "supported_in_api": True,
    "priority": 0,
    "additional_speed_tiers": [],
    "service_tiers": [],
    "supports_search_tool": False,
    "include_plugin_usage_instructions": False,
    "include_apps_usage_instructions": False,
    "experimental_supported_tools": [],
    "input_modalities": ["text"],
    "use_responses_lite": False,
}


# Codex features a lean profile turns off with -c (the user's own -c, after
# engy's, wins), and the config that turns off the rest.
LEAN_FEATURES_OFF = ("multi_agent", "goals", "image_generation")
LEAN_SETTINGS: dict[str, str | int | bool] = {
    "web_search": "disabled",
    "skills.bundled.enabled": False,
}
# What a lean profile's model is not shown (server/hiding.py, through the
# header Codex sends with each request): write_stdin, which no Codex setting
# takes from beside exec_command and which small models call on sessions
# that never existed, and exec_command's optional fields but its folder
# (they filled `justification` and `sandbox_permissions`, and Codex refused
# the call). One call runs one command. And request_user_input, which Codex
# refuses outside Plan mode ("unavailable in Default mode") and which the
# 1.5B called to ask which file held the bug it had been named.
LEAN_HIDDEN = (
    "write_stdin",
    "request_user_input",
    *(
        f"exec_command.{name}"
        for name in (
            "justification",
            "prefix_rule",
            "sandbox_permissions",
            "login",
            "shell",
            "tty",
            "yield_time_ms",
            "max_output_tokens",
        )
    ),
)


# Sections of the shipped instructions a lean profile leaves out, by heading
# (with the sections under them): tone, front-end design, and the channels
# and formatting of progress updates and final answers, which a local model
# writes in plain text anyway. About three quarters of the text; what is
# left says how to work: judgment, editing, git, persistence.
LEAN_DROPPED_SECTIONS = frozenset({"personality", "frontend guidance", "working with the user"})
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*$")


def lean_instructions(text: str) -> str:
    """`text` (Markdown) without the LEAN_DROPPED_SECTIONS: a dropped
    heading's section runs to the next heading of its level or above.
    A version whose headings differ keeps whatever is not named."""
    out: list[str] = []
    dropping: int | None = None  # the level of the heading being dropped
    for line in text.splitlines(keepends=True):
        m = _HEADING.match(line)
        if m:
            level = len(m[1])
            if dropping is not None and level <= dropping:
                dropping = None
            if dropping is None and m[2].lower() in LEAN_DROPPED_SECTIONS:
                dropping = level
        if dropping is None:
            out.append(line)
    return re.sub(r"\n{3,}", "\n\n", "".join(out))


def auto_compact_limit(context_length: int) -> int:
    """Compact while the window still has room for an answer."""
    return context_length - output_cap(context_length)


def bundled_catalog(codex: Path, env: Mapping[str, str]) -> list[dict[str, Any]]:
    """The model entries this Codex binary ships with ([] if it cannot say)."""
    try:
        r = subprocess.run(
            [str(codex), "debug", "models", "--bundled"],
            capture_output=True,
            text=True,
            timeout=60,
            env=dict(env),
            stdin=subprocess.DEVNULL,
        )
        models = json.loads(r.stdout).get("models") if r.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError, AttributeError):
        return []
    return [m for m in models if isinstance(m, dict)] if isinstance(models, list) else []


def _template(shipped: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The shipped entry closest to a plain tool-calling model: direct tool
    calls (no code-only tool mode, no multi-agent v2) and freeform apply_patch."""

    def plain(m: dict[str, Any]) -> bool:
        return "tool_mode" not in m and "multi_agent_version" not in m

    ranked = sorted(
        shipped,
        key=lambda m: (not plain(m), m.get("apply_patch_tool_type") != "freeform"),
    )
    return dict(ranked[0]) if ranked and "base_instructions" in ranked[0] else None


def catalog_entry(
    model: ModelStatus, shipped: list[dict[str, Any]], lean: bool = False
) -> dict[str, Any] | None:
    """Codex's model metadata for `model` as loaded, or None when this
    Codex ships no catalog to start from."""
    entry = _template(shipped)
    if entry is None:
        return None
    for key in ("tool_mode", "multi_agent_version", "multi_agent_reasoning_effort"):
        entry.pop(key, None)
    entry.update(_LOCAL)
    window = model.context_length
    entry.update(
        slug=model.id,
        display_name=model.id,
        description=f"{model.id} on engy ({model.backend}, {window}-token window)",
        context_window=window,
        max_context_window=window,
        auto_compact_token_limit=auto_compact_limit(window),
        apply_patch_tool_type="freeform",
        supports_parallel_tool_calls=model.family not in SINGLE_CALL_FAMILIES,
        supports_reasoning_summaries=model.thinking,
    )
    if model.thinking:
        # engy turns thinking on or off; it has no effort levels to pick.
        entry["supported_reasoning_levels"] = [
            {"effort": "medium", "description": "The model thinks before it answers"}
        ]
        entry["default_reasoning_level"] = "medium"
    else:
        entry["supported_reasoning_levels"] = []
        entry.pop("default_reasoning_level", None)
    if lean:
        # The shipped wording stays, shortened: tried on Qwen2.5-Coder-0.5B,
        # a short set of engy's own (four wordings, 1.9k-token first
        # prompts) had it fill exec_command's optional `justification` with
        # its description, which Codex refuses, then call write_stdin on a
        # session that never existed; with the shipped ones it ran the command.
        entry.update(include_skills_usage_instructions=False, shell_type="unified_exec")
        entry["base_instructions"] = lean_instructions(str(entry["base_instructions"]))
        messages = entry.get("model_messages")
        if isinstance(messages, dict) and isinstance(messages.get("instructions_template"), str):
            # Codex builds its instructions from this template when it has one.
            template = lean_instructions(messages["instructions_template"])
            entry["model_messages"] = {**messages, "instructions_template": template}
    return entry


def write_catalog(directory: Path, entry: dict[str, Any]) -> Path:
    """engy's own catalog file for one model, beside nothing of the user's."""
    directory.mkdir(parents=True, exist_ok=True)
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", str(entry["slug"]))
    path = directory / f"codex-model-{safe}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"models": [entry]}, indent=2, ensure_ascii=False))
    tmp.replace(path)
    return path


def _toml(value: str | int | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return json.dumps(value)  # a TOML basic string


def codex_overrides(
    url: str, model: ModelStatus, catalog: Path | None, lean: bool = False
) -> list[str]:
    """`-c key=value` arguments: they take precedence over config.toml and
    change nothing on disk; the user's own, after them, take precedence
    over them."""
    window = model.context_length
    settings: dict[str, str | int | bool] = {
        "model_provider": PROVIDER,
        f"model_providers.{PROVIDER}.name": PROVIDER,
        f"model_providers.{PROVIDER}.base_url": url + "/v1",
        f"model_providers.{PROVIDER}.wire_api": "responses",
        f"model_providers.{PROVIDER}.env_key": KEY_VARIABLE,
        "model": model.id,
        "model_context_window": window,
        "model_auto_compact_token_limit": auto_compact_limit(window),
        # Usage reports and ChatGPT-only features would go to OpenAI.
        "analytics.enabled": False,
        "features.plugins": False,
        "features.apps": False,
    }
    if catalog is not None:
        settings["model_catalog_json"] = str(catalog)
    if lean:
        settings.update({f"features.{f}": False for f in LEAN_FEATURES_OFF})
        settings.update(LEAN_SETTINGS)
        settings[f"model_providers.{PROVIDER}.http_headers.{HIDE_HEADER}"] = ",".join(LEAN_HIDDEN)
        if not model.images:  # view_image is of no use to a model without vision
            settings["features.view_image"] = False
    out: list[str] = []
    for key, value in settings.items():
        out += ["-c", f"{key}={_toml(value)}"]
    return out


def codex_env(base: Mapping[str, str], api_key: str | None) -> dict[str, str]:
    env = dict(base)
    env[KEY_VARIABLE] = api_key or PLACEHOLDER_KEY
    return env
