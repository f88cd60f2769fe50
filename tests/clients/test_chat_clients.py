"""Tools that speak Chat Completions, run for real against `engy serve`:
opencode 1.18.33 and Continue's CLI (`cn`) 1.5.47 from the npm registry,
configured as docs/clients.md says (an OpenAI-compatible provider whose base URL
is engy's /v1 and whose model is the served id).

Each runs on a two-turn model (support.ggufs.build_two_turn_gguf): on a
fresh conversation it calls the tool's shell with `echo Zebra > proof.txt`,
once the result is back it answers AFTER. A client that leaves proof.txt
and prints AFTER has read a streamed tool call, run it and sent the result
back through /v1/chat/completions.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.clients import ChatClients, base_env, diagnose, model_id, run_client
from support.paths import CACHE, need_fixtures
from support.server import EngyServer

COMMAND = "echo Zebra > proof.txt"
AFTER = "All done, the command ran"


def two_turn(call: str) -> Path:
    need_fixtures()
    from support.ggufs import two_turn_gguf_cached

    return two_turn_gguf_cached(CACHE / "ggufs", first=call, then=AFTER, marker="ebra")


@pytest.fixture(scope="module")
def opencode_server() -> Iterator[EngyServer]:
    # opencode's shell tool is `bash`, with a required description.
    model = two_turn(
        '{"name": "bash","parameters":{"description": "Write it","command":"' + COMMAND + '"}}'
    )
    server = EngyServer(str(model))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def continue_server() -> Iterator[EngyServer]:
    server = EngyServer(
        str(two_turn('{"name": "Bash","parameters":{"command":"' + COMMAND + '"}}'))
    )
    yield server
    server.stop()


def served(server: EngyServer, stem: str) -> None:
    """The server's log says a tool call was answered, and the answer after it."""
    log = server.output()
    assert f"{stem}.gguf" in log and "stop=tool_call" in log, log[-4000:]


def test_opencode_runs_bash_and_answers(
    chat_clients: ChatClients, opencode_server: EngyServer, tmp_path: Path
) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    model = model_id(opencode_server)
    config = {
        "$schema": "https://opencode.ai/config.json",
        "provider": {
            "engy": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "engy",
                "options": {"baseURL": opencode_server.url + "/v1"},
                "models": {model: {"name": model}},
            }
        },
        "model": f"engy/{model}",
        "permission": {"bash": "allow", "edit": "allow"},
    }
    (work / "opencode.json").write_text(json.dumps(config))
    run = run_client([chat_clients.opencode, "run", "Make proof.txt"], base_env(home), work)
    why = diagnose("opencode run 'Make proof.txt'", run, opencode_server)
    assert run.returncode == 0, why
    assert (work / "proof.txt").read_text() == "Zebra\n", why
    assert AFTER in run.stdout, why
    served(opencode_server, model)


def test_continue_cli_runs_bash_and_answers(
    chat_clients: ChatClients, continue_server: EngyServer, tmp_path: Path
) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    model = model_id(continue_server)
    config = tmp_path / "config.yaml"
    config.write_text(
        "name: engy\nversion: 0.0.1\nschema: v1\nmodels:\n"
        f"  - name: engy\n    provider: openai\n    model: {model}\n"
        f"    apiBase: {continue_server.url}/v1\n    apiKey: local\n"
        "    roles: [chat, edit, apply]\n    capabilities: [tool_use]\n"
    )
    cmd: list[str | Path] = [chat_clients.cn, "--config", config, "-p", "Make proof.txt", "--auto"]
    run = run_client(cmd, base_env(home), work)
    why = diagnose("cn -p 'Make proof.txt' --auto", run, continue_server)
    assert run.returncode == 0, why
    assert (work / "proof.txt").read_text() == "Zebra\n", why
    assert AFTER in run.stdout, why
    served(continue_server, model)
