"""What `engy launch` hands each client beside Claude Code and Codex, from
the model as loaded: the real window and an output cap that fits it, the
cache-reuse header, the lean tool set, the user's own flags and settings
winning, and every file written inside the launch's own directory. (Each
real client runs in test_launch_agents.py; Cline's setup runs its binary
and is checked there.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engy_local.backend import ModelStatus
from engy_local.commands.launch import aider, continuecli, miniswe, opencode, qwen
from engy_local.commands.launch.setup import Context, output_cap
from engy_local.server.cachereuse import HEADER

MODEL = ModelStatus(id="qwen2.5-coder:1.5b", context_length=32768, backend="CPU", cost=0,
                    keep_alive_left=None)  # fmt: skip


def context(
    tmp_path: Path, *user: str, lean: bool = True, home: Path | None = None, cwd: Path | None = None
) -> Context:
    work = tmp_path / "launch"
    work.mkdir(exist_ok=True)
    env = {"HOME": str(home or tmp_path / "home"), "PATH": "/usr/bin", "OPENAI_API_KEY": "sk-real"}
    return Context("http://127.0.0.1:8642", None, MODEL, lean, work, user, env,
                   cwd=cwd or tmp_path)  # fmt: skip


def written(tmp_path: Path) -> list[Path]:
    return [p for p in tmp_path.rglob("*") if p.is_file()]


@pytest.mark.parametrize(("window", "cap"), [(32768, 8192), (8192, 2048), (2048, 512), (512, 256)])
def test_the_output_cap_is_a_quarter_of_the_window_within_bounds(window: int, cap: int) -> None:
    assert output_cap(window) == cap


@pytest.mark.parametrize("prefix", ["OPENCODE", "KILO"])
def test_opencode_and_kilo_get_the_window_the_header_and_a_title(
    tmp_path: Path, prefix: str
) -> None:
    setup = opencode.configure(context(tmp_path, "run", "Make it"), prefix)
    config = json.loads(setup.env[f"{prefix}_CONFIG_CONTENT"])
    engy = config["provider"]["engy"]
    assert engy["models"][MODEL.id]["limit"] == {"context": 32768, "output": 8192}
    assert engy["options"]["headers"][HEADER]
    assert config["model"] == config["small_model"] == f"engy/{MODEL.id}"
    assert config["tools"]["webfetch"] is False and ("board_post" in config["tools"]) == (
        prefix == "KILO"
    )
    assert setup.args == ["run", "--title", "engy launch", "Make it"]
    # Outside the project it asks, its own temporary folder too (which it
    # allows by default).
    assert config["permission"]["external_directory"] == {"*": "ask"}
    assert all(setup.env[f"XDG_{d}_HOME"].startswith(str(tmp_path / "launch"))
               for d in ("DATA", "STATE", "CACHE", "CONFIG"))  # fmt: skip
    # The user's own title stands; full keeps the client's tools.
    own = opencode.configure(context(tmp_path, "run", "--title=x", "Go", lean=False), prefix)
    assert own.args == ["run", "--title=x", "Go"]
    assert "tools" not in json.loads(own.env[f"{prefix}_CONFIG_CONTENT"])


def test_opencode_reads_the_user_s_config_file_in_place(tmp_path: Path) -> None:
    home = tmp_path / "home"
    theirs = home / ".config" / "opencode" / "opencode.json"
    theirs.parent.mkdir(parents=True)
    theirs.write_text('{"theme": "mine"}')
    setup = opencode.configure(context(tmp_path, home=home))
    assert setup.env["OPENCODE_CONFIG"] == str(theirs)
    assert theirs.read_text() == '{"theme": "mine"}'


def build_prompt(setup_env: dict[str, str], prefix: str = "OPENCODE") -> str | None:
    config = json.loads(setup_env[f"{prefix}_CONFIG_CONTENT"])
    prompt = config.get("agent", {}).get("build", {}).get("prompt")
    return str(prompt) if prompt is not None else None


def test_lean_opencode_is_told_the_project_folder_in_a_short_prompt(tmp_path: Path) -> None:
    project = tmp_path / "my project"
    (project / "sub").mkdir(parents=True)
    setup = opencode.configure(context(tmp_path, "run", "Make it", cwd=project))
    prompt = build_prompt(setup.env)
    assert prompt is not None and f"{project}/notes.md" in prompt and len(prompt) < 1000
    assert any("short system prompt" in line for line in setup.said)
    # Where opencode is told to work elsewhere, that folder is named.
    moved = opencode.configure(context(tmp_path, "run", "--dir", "sub", "Go", cwd=project))
    assert f"{project / 'sub'}/notes.md" in (build_prompt(moved.env) or "")
    # Kilo and the full profile keep the client's own prompt.
    kilo = opencode.configure(context(tmp_path, "run", "x"), "KILO")
    assert build_prompt(kilo.env, "KILO") is None
    assert build_prompt(opencode.configure(context(tmp_path, "x", lean=False)).env) is None


@pytest.mark.parametrize(
    ("args", "folder"),
    [
        ((), "."),
        (("run", "Make it"), "."),
        (("run", "--dir", "sub", "Make it"), "sub"),
        (("run", "--dir=sub", "Make it"), "sub"),
        (("sub",), "sub"),  # the TUI's project argument
        (("missing",), "."),  # not a folder: a subcommand or a message
        (("--model", "x"), "."),
    ],
)
def test_opencode_s_project_folder(tmp_path: Path, args: tuple[str, ...], folder: str) -> None:
    (tmp_path / "sub").mkdir()
    assert opencode.project_folder(args, tmp_path) == (tmp_path / folder).resolve()


@pytest.mark.parametrize(
    ("where", "text"),
    [
        ("home/.config/opencode/opencode.jsonc",
         '// mine\n{"agent": {"build": {"model": "x", "prompt": "{file:./p.md}"}}}'),
        ("project/opencode.json", '{"agent": {"build": {"prompt": "Be brief"}}}'),
        ("project/.opencode/agent/build.md", "---\ndescription: mine\n---\nBe brief"),
        ("home/.config/opencode/agents/build.md", "Be brief"),
    ],
)  # fmt: skip
def test_the_user_s_own_build_prompt_wins_over_lean_s(
    tmp_path: Path, where: str, text: str
) -> None:
    path = tmp_path / where
    path.parent.mkdir(parents=True)
    path.write_text(text)
    ctx = context(tmp_path, "run", "Go", home=tmp_path / "home", cwd=tmp_path / "project")
    setup = opencode.configure(ctx)
    assert build_prompt(setup.env) is None
    assert not any("short system prompt" in line for line in setup.said)
    assert path.read_text() == text


def test_qwen_settings_are_the_user_s_with_engy_s_model_over_them(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".qwen").mkdir(parents=True)
    mine = {"telemetry": {"enabled": True}, "ui": {"theme": "dark"}, "model": {"name": "other"}}
    (home / ".qwen" / "settings.json").write_text(json.dumps(mine))
    setup = qwen.configure(context(tmp_path, "Make it", home=home))
    settings = json.loads((Path(setup.env["QWEN_HOME"]) / "settings.json").read_text())
    assert settings["model"]["name"] == MODEL.id
    generation = settings["model"]["generationConfig"]
    assert generation["contextWindowSize"] == 32768
    assert generation["samplingParams"]["max_tokens"] == 8192
    assert generation["customHeaders"][HEADER]
    assert settings["telemetry"]["enabled"] is True  # theirs wins over engy's quiet default
    assert (
        settings["ui"] == {"theme": "dark"}
        and settings["privacy"]["usageStatisticsEnabled"] is False
    )
    # The prompt stays first; engy's list-taking flags come after it.
    assert setup.args[0] == "Make it" and "--core-tools" in setup.args
    assert json.loads((home / ".qwen" / "settings.json").read_text()) == mine
    # Lean cuts the bundled skills' list (its Skill tool is cut too).
    assert settings["skills"]["disabledLevels"] == ["bundled"]
    yolo = qwen.configure(context(tmp_path, "Go", "--approval-mode", "plan", lean=False))
    assert yolo.args == ["Go", "--approval-mode", "plan"]
    full = json.loads((Path(yolo.env["QWEN_HOME"]) / "settings.json").read_text())
    assert "skills" not in full


def test_continue_s_config_has_the_window_the_cap_and_the_header(tmp_path: Path) -> None:
    setup = continuecli.configure(context(tmp_path, "-p", "Make it"))
    config = Path(setup.args[setup.args.index("--config") + 1]).read_text()
    assert "contextLength: 32768" in config and "maxTokens: 8192" in config
    assert f"{HEADER}:" in config and "capabilities: [tool_use]" in config
    assert setup.args[-2:] == ["-p", "Make it"] and "--exclude" in setup.args
    theirs = continuecli.configure(context(tmp_path, "--config", "mine.yaml", "--auto", lean=False))
    assert theirs.args == ["--config", "mine.yaml", "--auto"]


def test_aider_gets_the_window_an_edit_format_and_a_home_of_its_own(tmp_path: Path) -> None:
    ctx = context(tmp_path, "--message", "Make it")
    setup = aider.configure(ctx)
    meta_file = next(
        a.split("=", 1)[1] for a in setup.args if a.startswith("--model-metadata-file")
    )
    meta = json.loads(Path(meta_file).read_text())[f"openai/{MODEL.id}"]
    assert meta["max_input_tokens"] == 32768 and meta["max_output_tokens"] == 8192
    assert "--edit-format=whole" in setup.args and "--no-git" in setup.args
    assert setup.env["OPENAI_API_KEY"] != "sk-real"  # a real key does not go to engy
    assert setup.env["HOME"].startswith(str(tmp_path / "launch"))
    assert setup.args[-2:] == ["--message", "Make it"]  # aider takes the last: the user's win
    full = aider.configure(context(tmp_path, lean=False))
    assert "--edit-format=diff" in full.args


def test_mini_swe_agent_gets_the_server_and_a_cap_through_litellm(tmp_path: Path) -> None:
    setup = miniswe.configure(context(tmp_path, "--task", "Make it"))
    configs = [setup.args[i + 1] for i, a in enumerate(setup.args) if a == "--config"]
    assert configs[0] == "mini.yaml"
    assert "model.model_kwargs.api_base=http://127.0.0.1:8642/v1" in configs
    assert "model.model_kwargs.max_tokens=8192" in configs
    # Each of its steps must be a bash call: the server is asked to hold it to one.
    assert "model.model_kwargs.tool_choice=required" in configs
    # Its own limit is none and a local model costs nothing: launch's limit.
    assert "agent.step_limit=50" in configs
    # The user's own config comes after launch's, so it wins.
    mine = miniswe.configure(context(tmp_path, "--config", "my.yaml"))
    assert mine.args[-2:] == ["--config", "my.yaml"]
    assert "mini.yaml" not in mine.args
    assert setup.env["MSWEA_GLOBAL_CONFIG_DIR"].startswith(str(tmp_path / "launch"))


def test_nothing_is_written_outside_the_launch_directory(tmp_path: Path) -> None:
    for configure in (opencode.configure, qwen.configure, continuecli.configure,
                      miniswe.configure):  # fmt: skip
        configure(context(tmp_path, "x"))
    aider.configure(context(tmp_path, "x"))
    outside = [p for p in written(tmp_path) if not p.is_relative_to(tmp_path / "launch")]
    assert outside == []
