"""What a request's model is shown of its tools under the x-engy-hide
header (server/hiding.py): a table over the neutral request. The server
tests in test_tools_tiny.py send the header through the real APIs."""

from __future__ import annotations

from typing import Any

import pytest

from engy_local.chat import ChatRequest, Message, Text, ToolChoice, ToolSpec
from engy_local.errors import InvalidRequest
from engy_local.server.hiding import hide

EXEC = ToolSpec(
    "exec_command",
    "Runs a command.",
    {
        "type": "object",
        "properties": {"cmd": {"type": "string"}, "workdir": {"type": "string"}, "tty": {}},
        "required": ["cmd"],
        "additionalProperties": False,
    },
)
STDIN = ToolSpec("write_stdin", "Writes to a session.", {"type": "object", "properties": {}})
PATCH = ToolSpec("apply_patch", "Edits files.", {"type": "string"})  # no properties at all


def request(*tools: ToolSpec, choice: ToolChoice | None = None) -> ChatRequest:
    return ChatRequest(
        "m",
        (Message("user", (Text("hi"),)),),
        tools=tools,
        tool_choice=choice or ToolChoice(),
    )


def shown(chat: ChatRequest) -> dict[str, list[str]]:
    """Each tool shown, with the parameters it is shown."""
    return {t.name: sorted(t.parameters.get("properties", {})) for t in chat.tools}


ALL = {"exec_command": ["cmd", "tty", "workdir"], "write_stdin": [], "apply_patch": []}


@pytest.mark.parametrize(
    ("header", "choice", "want"),
    [
        # No header, or an empty one: the request as sent.
        (None, None, ALL),
        ("", None, ALL),
        (" , ", None, ALL),
        # A tool, and optional parameters of another.
        ("write_stdin", None, {**ALL, "write_stdin": None}),
        (
            "write_stdin, exec_command.tty, exec_command.workdir",
            None,
            {"exec_command": ["cmd"], "apply_patch": []},
        ),
        # A required parameter is always shown: the call would be refused.
        ("exec_command.cmd", None, ALL),
        # Names this request does not have are passed over (one header
        # serves a whole session).
        ("view_image, exec_command.nothing, apply_patch.x", None, ALL),
        # A tool the request forces is shown; its optional parameters may not be.
        (
            "exec_command, exec_command.tty",
            ToolChoice("tool", "exec_command"),
            {**ALL, "exec_command": ["cmd", "workdir"]},
        ),
        # Forcing "some tool" forces none by name: hidden ones stay hidden.
        ("write_stdin", ToolChoice("any"), {**ALL, "write_stdin": None}),
    ],
)
def test_what_the_model_is_shown(header: str | None, choice: ToolChoice | None, want: Any) -> None:
    chat = request(EXEC, STDIN, PATCH, choice=choice)
    got = hide(chat, header)
    assert shown(got) == {k: v for k, v in want.items() if v is not None}
    if shown(got) == shown(chat):
        assert got is chat  # nothing copied when nothing is hidden
    assert got.messages == chat.messages and got.tool_choice == chat.tool_choice
    # The rest of a schema is kept as sent (required, additionalProperties).
    for tool in got.tools:
        original = next(t for t in chat.tools if t.name == tool.name)
        rest = {k: v for k, v in tool.parameters.items() if k != "properties"}
        assert rest == {k: v for k, v in original.parameters.items() if k != "properties"}


@pytest.mark.parametrize("header", ["a b", "exec_command.tty.x", ".tty", "write_stdin;tty", "é"])
def test_a_malformed_entry_is_refused_by_name(header: str) -> None:
    with pytest.raises(InvalidRequest, match="x-engy-hide") as caught:
        hide(request(EXEC, STDIN), header)
    assert caught.value.param == "x-engy-hide"


def test_a_request_without_tools_is_as_sent_and_a_malformed_header_still_refused() -> None:
    chat = request()
    assert hide(chat, "write_stdin") is chat
    with pytest.raises(InvalidRequest, match="x-engy-hide"):
        hide(chat, "write stdin")
