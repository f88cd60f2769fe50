"""protocols/sessions.py: who sent a request, which session it belongs to,
and where one turn's prompt stops repeating the previous one. Tables of
headers and bodies in, names out; the recorded Claude Code and Codex first
turns from shared/fixtures."""

from __future__ import annotations

import json
from typing import Any

import pytest
from support.paths import need_fixtures

from engy_local.chat import ChatRequest, Message, Text, ToolSpec
from engy_local.protocols.sessions import (
    Provenance,
    client_name,
    diverged,
    first_turn,
    opening,
    prompt_parts,
    provenance,
    side_kind,
    title_text,
)


def recorded(name: str) -> tuple[dict[str, str], dict[str, Any]]:
    raw = json.loads((need_fixtures() / "requests" / name).read_text())
    return {k.lower(): v for k, v in raw["headers"]}, raw["body"]


@pytest.mark.parametrize(
    ("headers", "name"),
    [
        ({"user-agent": "claude-cli/2.1.332 (external, sdk-cli)"}, "Claude Code 2.1.332"),
        ({"user-agent": "codex_exec/0.171.0 (Debian 12.0.0; x86_64) xterm"}, "Codex 0.171.0"),
        ({"user-agent": "codex_cli_rs/0.170.0 (Mac OS 15)"}, "Codex 0.170.0"),
        ({"originator": "codex_exec"}, "Codex"),
        ({"user-agent": "Anthropic/Python 0.40.0"}, "Anthropic SDK (Python 0.40.0)"),
        ({"user-agent": "OpenAI/Python 1.60.0"}, "OpenAI SDK (Python 1.60.0)"),
        ({"user-agent": "python-httpx/0.28.1"}, "httpx"),
        ({"user-agent": "curl/8.5.0"}, "curl"),
        ({"x-engy-client": "page", "user-agent": "Mozilla/5.0"}, "engy page"),
        ({}, "unknown"),
    ],
)
def test_client_name(headers: dict[str, str], name: str) -> None:
    assert client_name(headers) == name


def test_claude_code_names_its_session_in_metadata() -> None:
    headers, body = recorded("claude-code-2.1.332-first-turn.json")
    assert provenance("anthropic", headers, body) == Provenance(
        "Claude Code 2.1.332", "d346981d-9db4-4d3d-8a26-134f6bfb6d44", "metadata.user_id"
    )


@pytest.mark.parametrize(
    ("body", "headers", "session", "source"),
    [
        # Older Claude Code: user_<hash>_account_<uuid>_session_<uuid>
        (
            {"metadata": {"user_id": "user_ab12_account__session_0a1b2c3d-4e5f-6789"}},
            {},
            "0a1b2c3d-4e5f-6789",
            "metadata.user_id",
        ),
        ({}, {"x-claude-code-session-id": "s-1"}, "s-1", "x-claude-code-session-id"),
        ({"metadata": {"user_id": '{"device_id":"x"}'}}, {}, "", ""),
        ({"metadata": "not an object"}, {}, "", ""),
        ("not a body", {}, "", ""),
    ],
)
def test_anthropic_sessions(body: Any, headers: dict[str, str], session: str, source: str) -> None:
    who = provenance("anthropic", headers, body)
    assert (who.session, who.source) == (session, source)


def test_codex_names_its_session_and_thread() -> None:
    headers, body = recorded("codex-0.171.0-first-turn.json")
    who = provenance("openai", headers, body)
    thread = "01a2262f-b255-72a2-b465-aed8aa1f9619"
    assert who == Provenance("Codex 0.171.0", thread, "prompt_cache_key", thread, "turn")


def test_an_sdk_request_names_no_session() -> None:
    who = provenance("openai", {"user-agent": "OpenAI/Python 1.60.0"}, {"input": "hi"})
    assert who == Provenance("OpenAI SDK (Python 1.60.0)")


def claude(system: list[str], messages: list[Any], tools: int = 2) -> dict[str, Any]:
    return {
        "system": [
            {"type": "text", "text": t, "cache_control": {"type": "ephemeral"}} for t in system
        ],
        "tools": [{"name": f"t{i}", "input_schema": {"type": "object"}} for i in range(tools)],
        "messages": messages,
    }


U1 = {"role": "user", "content": [{"type": "text", "text": "hi"}]}
A1 = {"role": "assistant", "content": [{"type": "text", "text": "hello"}]}
U2 = {
    "role": "user",
    "content": [{"type": "text", "text": "more", "cache_control": {"type": "ephemeral"}}],
}
BILLING = "x-anthropic-billing-header: cc_version=2.1.332.0b8;"


@pytest.mark.parametrize(
    ("before", "after", "where"),
    [
        (claude(["a", "b"], [U1]), claude(["a", "b"], [U1, A1, U2]), ""),
        # Claude Code moves its cache breakpoints every turn: not a change.
        (
            claude(["a", "b"], [U2]),
            claude(["a", "b"], [{**U2, "content": [{"type": "text", "text": "more"}]}]),
            "",
        ),
        # The attribution line is dropped before the prompt: not a change either.
        (claude([BILLING + "1", "b"], [U1]), claude([BILLING + "2", "b"], [U1, A1, U2]), ""),
        (claude(["a", "b"], [U1]), claude(["a", "B"], [U1, A1, U2]), "system[1] changed"),
        (claude(["a", "b"], [U1]), claude(["a", "b"], [U1, A1, U2], tools=3), "tools[2] added"),
        (claude(["a", "b"], [U1], tools=3), claude(["a", "b"], [U1]), "tools[2] removed"),
        (
            claude(["a"], [U1, A1, U2]),
            claude(["a"], [U1, {**A1, "content": "hullo"}, U2]),
            "messages[1] changed",
        ),
        (claude(["a"], [U1, A1, U2]), claude(["a"], [U2]), "messages[0] changed"),
        (claude(["a"], [U1, A1, U2]), claude(["a"], [U1]), "messages[1] removed"),
    ],
)
def test_where_a_turn_stops_repeating_the_previous_one(
    before: dict[str, Any], after: dict[str, Any], where: str
) -> None:
    assert diverged(prompt_parts("anthropic", before), prompt_parts("anthropic", after)) == where


def test_responses_parts_are_named_as_on_the_wire() -> None:
    body = {
        "instructions": "be brief",
        "tools": [{"type": "function", "name": "f"}],
        "input": [{"role": "user", "content": "hi"}],
    }
    assert [name for name, _ in prompt_parts("openai", body)] == [
        "instructions",
        "tools[0]",
        "input[0]",
    ]
    changed = {
        **body,
        "instructions": "be long",
        "input": [*body["input"], {"role": "user", "content": "x"}],
    }
    assert (
        diverged(prompt_parts("openai", body), prompt_parts("openai", changed))
        == "instructions changed"
    )
    assert [name for name, _ in prompt_parts("openai", {"input": "hi"})] == ["input"]


def test_chat_completions_parts_name_the_system_prompt_by_its_message() -> None:
    body: dict[str, Any] = {
        "tools": [{"type": "function", "function": {"name": "f"}}],
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hi"},
        ],
    }
    parts = prompt_parts("chat", body)
    assert [name for name, _ in parts] == ["messages[0] (system)", "tools[0]", "messages[1]"]
    longer: dict[str, Any] = {
        **body,
        "messages": [*body["messages"], A1, {"role": "user", "content": "x"}],
    }
    assert diverged(parts, prompt_parts("chat", longer)) == ""
    # The system message is not the conversation's first turn: a new
    # conversation under the same system prompt is a new one.
    assert first_turn(parts) == first_turn(prompt_parts("chat", longer))
    other = {**body, "messages": [body["messages"][0], {"role": "user", "content": "bye"}]}
    assert opening(parts) != opening(prompt_parts("chat", other))
    briefer = {
        **longer,
        "messages": [{"role": "developer", "content": "be briefer"}, *longer["messages"][1:]],
    }
    assert diverged(prompt_parts("chat", longer), prompt_parts("chat", briefer)) == (
        "messages[0] (developer) added"
    )
    # OpenAI's prompt_cache_key names a session on this API too.
    who = provenance("chat", {"user-agent": "OpenAI/Python 1.60.0"}, {"prompt_cache_key": "k"})
    assert who == Provenance("OpenAI SDK (Python 1.60.0)", "k", "prompt_cache_key")


def test_a_conversation_keeps_its_first_turn_and_opening() -> None:
    one, two = claude(["a"], [U1]), claude(["a"], [U1, A1, U2])
    assert first_turn(prompt_parts("anthropic", one)) == first_turn(prompt_parts("anthropic", two))
    assert opening(prompt_parts("anthropic", one)) == opening(prompt_parts("anthropic", two))
    other = claude(["a"], [U2])
    assert opening(prompt_parts("anthropic", one)) != opening(prompt_parts("anthropic", other))
    changed = claude(["b"], [U1, A1, U2])
    assert first_turn(prompt_parts("anthropic", changed)) == first_turn(
        prompt_parts("anthropic", one)
    )


def chat(system: str, user: str, tools: bool = False) -> ChatRequest:
    messages = (Message("system", (Text(system),)), Message("user", (Text(user),)))
    spec = (ToolSpec("Bash", "", {"type": "object"}),) if tools else ()
    return ChatRequest("m", messages, tools=spec)


@pytest.mark.parametrize(
    ("request_", "kind"),
    [
        (
            chat("You are Claude Code. You are naming a coding session: write a title.", "..."),
            "title",
        ),
        (chat("You are Claude Code.", "Summarize the conversation so far."), "summary"),
        (chat("You are Claude Code.", "List the files.", tools=True), ""),
        (chat("You are Claude Code.", "Write a title.", tools=True), ""),
        (chat("You are a helpful assistant.", "hi"), ""),
    ],
)
def test_side_kind(request_: ChatRequest, kind: str) -> None:
    assert side_kind(request_) == kind


@pytest.mark.parametrize(
    ("answer", "title"),
    [
        ('{"title": "Fix the login bug"}', "Fix the login bug"),
        ("  Fix the login bug\nmore", "Fix the login bug"),
        ("", ""),
    ],
)
def test_title_text(answer: str, title: str) -> None:
    assert title_text(answer) == title
