"""Tools and parameters a request's model is not shown, as a launcher asks.

A client such as Codex offers tools it has no setting to take away
(`write_stdin` always comes with `exec_command`), and a small model
misuses them. `engy launch` names what to leave out in a header the
client sends with every request (Codex: its provider's `http_headers`):

    x-engy-hide: write_stdin, exec_command.justification

An entry is a tool's name, or a tool's name and one of its optional
parameters. The model is not shown them, so it cannot call them; the
client's request is otherwise answered as sent. A tool the request forces
(tool_choice) and a required parameter stay shown, and names the request
does not have are passed over: one header serves every request of a
session, whatever tools each carries.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from ..chat import ChatRequest, ToolSpec
from ..errors import InvalidRequest

HEADER = "x-engy-hide"
# A tool name as the APIs allow it (letters, digits, _ and -), then
# optionally `.` and a parameter name.
_ENTRY = re.compile(r"([A-Za-z0-9_-]+)(?:\.([A-Za-z0-9_$-]+))?")


def parse_hidden(value: str) -> tuple[frozenset[str], dict[str, frozenset[str]]]:
    """The header's value -> (tools hidden, {tool: parameters hidden})."""
    tools: set[str] = set()
    parameters: dict[str, set[str]] = {}
    for raw in value.split(","):
        entry = raw.strip()
        if not entry:
            continue
        m = _ENTRY.fullmatch(entry)
        if m is None:
            raise InvalidRequest(
                f"header {HEADER}: {entry!r} is not a tool name or tool.parameter", param=HEADER
            )
        if m[2] is None:
            tools.add(m[1])
        else:
            parameters.setdefault(m[1], set()).add(m[2])
    return frozenset(tools), {k: frozenset(v) for k, v in parameters.items()}


def hide(chat: ChatRequest, value: str | None) -> ChatRequest:
    """`chat` with the tools and optional parameters `value` names left out
    of what the model is shown (`value` None or empty: `chat` itself)."""
    if not value:
        return chat
    tools, parameters = parse_hidden(value)  # a malformed header is refused, tools or not
    if not chat.tools:
        return chat
    forced = chat.tool_choice.name if chat.tool_choice.mode == "tool" else None
    shown: list[ToolSpec] = []
    for tool in chat.tools:
        if tool.name in tools and tool.name != forced:
            continue
        hidden = parameters.get(tool.name)
        shown.append(_without(tool, hidden) if hidden else tool)
    if len(shown) == len(chat.tools) and all(
        a is b for a, b in zip(shown, chat.tools, strict=True)
    ):
        return chat
    return replace(chat, tools=tuple(shown))


def _without(tool: ToolSpec, hidden: frozenset[str]) -> ToolSpec:
    schema = tool.parameters
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return tool
    required = schema.get("required")
    kept = set(required) if isinstance(required, list) else set()
    gone = {name for name in hidden if name in properties and name not in kept}
    if not gone:
        return tool
    left: dict[str, Any] = {k: v for k, v in properties.items() if k not in gone}
    return replace(tool, parameters={**schema, "properties": left})
