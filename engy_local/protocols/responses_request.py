"""OpenAI Responses request JSON -> `ResponsesRequest` (a `ChatRequest` plus
what the answer must echo and how tool names map back).

Pure translation, no I/O. Every top-level field of the contract is read here
or ignored on purpose (see `_IGNORED`); unknown fields anywhere are tolerated.

Tool names. The model sees one flat list of tools taking a JSON object:
- `function` tools keep their name;
- `custom` (freeform) tools keep their name and take one string, `input`;
- the functions (and custom tools) inside a `namespace` tool are offered as
  `<namespace>__<name>`.
`ResponsesRequest.origins` maps each model-visible name back to the client's
(kind, name, namespace), so answers come back as the items the client offered.
Input items that replay earlier calls are mapped the other way.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..chat import (
    STRING_GRAMMAR,
    ChatRequest,
    Message,
    Part,
    Sampling,
    Text,
    ToolCall,
    ToolChoice,
    ToolResult,
)
from ..chat import ToolSpec as Spec
from ..errors import InvalidRequest
from . import fields
from .formats import responses_format

# Accepted and without effect: the endpoint is stateless (store,
# previous_response_id, include, conversation), reasoning is the model's own,
# text.verbosity (text.format is read, see formats.py), and the rest is bookkeeping the
# hosted API keeps (prompt_cache_key, client_metadata, user, service_tier, ...).
_IGNORED = (
    "store",
    "previous_response_id",
    "reasoning",
    "prompt_cache_key",
    "include",
    "client_metadata",
    "metadata",
    "user",
    "safety_identifier",
    "service_tier",
    "truncation",
    "background",
    "conversation",
    "max_tool_calls",
    "top_logprobs",
    "stream_options",
)

NAMESPACE_SEPARATOR = "__"


@dataclass(frozen=True)
class ToolOrigin:
    """What a model-visible tool name stands for in the client's request."""

    kind: Literal["function", "custom"]
    name: str
    namespace: str | None = None


@dataclass(frozen=True)
class ResponsesRequest:
    chat: ChatRequest
    stream: bool
    # model-visible tool name -> the tool the client offered
    origins: Mapping[str, ToolOrigin] = field(default_factory=dict)
    # Request fields the Response object echoes: model (as sent),
    # instructions, max_output_tokens (effective), temperature, top_p, tools
    # (those offered to the model, as sent), tool_choice (as sent),
    # parallel_tool_calls, text (its format), metadata.
    echo: Mapping[str, Any] = field(default_factory=dict)


def parse_request(body: Any, max_output_cap: int | None = None) -> ResponsesRequest:
    """Translate a /v1/responses body; raises `InvalidRequest` naming the field.

    `max_output_cap` (engy serve --max-output-tokens) caps the output of a
    request that sets no `max_output_tokens`, or a larger one.
    """
    d = fields.obj(body, "body")
    model = fields.string(d, "model", "model")
    stream = fields.boolean(d, "stream", "stream", False)
    instructions = fields.string(d, "instructions", "instructions", None)

    asked = fields.integer(d, "max_output_tokens", "max_output_tokens", None, minimum=1)
    limits = [n for n in (asked, max_output_cap) if n is not None]
    sampling = Sampling(
        # What the client asked for, uncapped: the window check of the
        # contract is on it (the engine applies the cap after the check).
        max_tokens=asked if asked is not None else max_output_cap,
        temperature=fields.number(d, "temperature", "temperature", None, low=0, high=2),
        top_p=fields.number(d, "top_p", "top_p", None, low=0, high=1),
    )

    raw_tools = fields.array(d, "tools", "tools", [])
    specs, origins, offered = _tools(raw_tools)
    parallel = fields.boolean(d, "parallel_tool_calls", "parallel_tool_calls", True)
    choice = _tool_choice(d.get("tool_choice"), origins, parallel)

    messages: list[Message] = []
    if instructions:
        messages.append(Message("system", (Text(instructions),)))
    messages += _input(fields.required(d, "input", "input"))
    if not any(m.role != "system" for m in messages):
        raise InvalidRequest("input: no message to answer", param="input")

    json_output, text_format = responses_format(d)
    chat = ChatRequest(
        model=model,
        messages=tuple(messages),
        tools=specs,
        tool_choice=choice,
        sampling=sampling,
        # The contract: prompt + max_output_tokens over the window is a 400;
        # without max_output_tokens generation may use the rest of the window.
        overflow="reject" if asked is not None else "shrink",
        provider=fields.provider(d.get("provider")),
        json_output=json_output,
    )
    metadata = d.get("metadata")
    echo = {
        "model": model,
        "instructions": instructions,
        "max_output_tokens": min(limits) if limits else None,  # effective
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "tools": offered,
        "tool_choice": d.get("tool_choice") or "auto",
        "parallel_tool_calls": parallel,
        "text": {"format": text_format},
        "metadata": (
            metadata
            if isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())
            else {}
        ),
    }
    return ResponsesRequest(chat=chat, stream=stream, origins=origins, echo=echo)


# ---- tools ------------------------------------------------------------------


def _visible(name: str, namespace: str | None) -> str:
    """The name the model sees for a client's tool."""
    return f"{namespace}{NAMESPACE_SEPARATOR}{name}" if namespace else name


def _custom_parameters(tool: dict[str, Any], path: str) -> dict[str, Any]:
    """A freeform tool as a JSON tool taking its whole input as one string."""
    fmt = fields.obj(tool.get("format") or {"type": "text"}, f"{path}.format")
    definition = fields.string(fmt, "definition", f"{path}.format.definition", "")
    described = "The tool's whole input, as plain text."
    value: dict[str, Any] = {"type": "string"}
    if fmt.get("type") == "grammar" and definition:
        syntax = fields.string(fmt, "syntax", f"{path}.format.syntax", "lark")
        described += f" It must match this {syntax} grammar:\n{definition}"
        value[STRING_GRAMMAR] = {"syntax": syntax, "definition": definition}
    return {
        "type": "object",
        "properties": {"input": {**value, "description": described}},
        "required": ["input"],
    }


def _tool(tool: dict[str, Any], path: str, namespace: str | None) -> tuple[Spec, ToolOrigin] | None:
    """One `function` or `custom` tool; None for a type nothing here runs."""
    kind = fields.string(tool, "type", f"{path}.type")
    if kind not in ("function", "custom"):
        return None
    name = fields.string(tool, "name", f"{path}.name")
    description = fields.string(tool, "description", f"{path}.description", "")
    if kind == "function":
        schema = tool.get("parameters")
        parameters = fields.obj(schema, f"{path}.parameters") if schema is not None else None
        # defer_loading and the like have no effect: every tool is offered up
        # front (tool_search, which would load deferred ones, is not offered).
        parameters = parameters or {"type": "object", "properties": {}}
        strict = bool(fields.boolean(tool, "strict", f"{path}.strict", None))
    else:
        parameters, strict = _custom_parameters(tool, path), False
    visible = _visible(name, namespace)
    return Spec(visible, description, parameters, strict), ToolOrigin(kind, name, namespace)


def _tools(
    raw: list[Any],
) -> tuple[tuple[Spec, ...], dict[str, ToolOrigin], list[dict[str, Any]]]:
    """(specs for the model, model name -> origin, the offered tools as sent).

    Tool types nothing here can run (web_search, tool_search, file_search,
    image_generation, local_shell, mcp, ...) are dropped silently. A second
    tool with a name already taken is dropped too.
    """
    specs: list[Spec] = []
    origins: dict[str, ToolOrigin] = {}
    offered: list[dict[str, Any]] = []

    def add(found: tuple[Spec, ToolOrigin] | None) -> bool:
        if found is None or found[0].name in origins:
            return False
        specs.append(found[0])
        origins[found[0].name] = found[1]
        return True

    for i, item in enumerate(raw):
        tool = fields.obj(item, f"tools[{i}]")
        if tool.get("type") == "namespace":
            ns = fields.string(tool, "name", f"tools[{i}].name")
            nested = fields.array(tool, "tools", f"tools[{i}].tools", [])
            kept = [
                add(_tool(fields.obj(t, f"tools[{i}].tools[{j}]"), f"tools[{i}].tools[{j}]", ns))
                for j, t in enumerate(nested)
            ]
            if any(kept):
                offered.append(tool)
        elif add(_tool(tool, f"tools[{i}]", None)):
            offered.append(tool)
    return tuple(specs), origins, offered


Mode = Literal["auto", "any", "tool", "none"]
_MODES: dict[str, Mode] = {"auto": "auto", "none": "none", "required": "any"}


def _tool_choice(raw: Any, origins: Mapping[str, ToolOrigin], parallel: bool) -> ToolChoice:
    mode: Mode
    name: str | None
    if raw is None:
        mode, name = "auto", None
    elif isinstance(raw, str):
        if raw not in _MODES:
            raise InvalidRequest(
                f"tool_choice: expected auto, none or required, got {raw!r}", param="tool_choice"
            )
        mode, name = _MODES[raw], None
    elif isinstance(raw, dict):
        mode, name = _named_choice(raw, origins)
    else:
        raise fields.fail("tool_choice", "a string or an object", raw)
    if mode in ("any", "tool") and not origins:
        raise InvalidRequest("tool_choice: requires a tool but none is offered", "tool_choice")
    return ToolChoice(mode, name, parallel)


def _named_choice(
    raw: dict[str, Any], origins: Mapping[str, ToolOrigin]
) -> tuple[Mode, str | None]:
    kind = fields.string(raw, "type", "tool_choice.type")
    if kind == "allowed_tools":
        # The subset in `tools` is not enforced: every tool stays offered.
        mode = fields.string(raw, "mode", "tool_choice.mode", "auto")
        if mode not in ("auto", "required"):
            raise InvalidRequest(
                f"tool_choice.mode: expected auto or required, got {mode!r}", "tool_choice.mode"
            )
        return ("any" if mode == "required" else "auto"), None
    if kind not in ("function", "custom"):
        raise InvalidRequest(
            f"tool_choice.type: {kind!r} tools are not supported", param="tool_choice.type"
        )
    name = fields.string(raw, "name", "tool_choice.name")
    namespace = fields.string(raw, "namespace", "tool_choice.namespace", None)
    visible = _visible(name, namespace)
    origin = origins.get(visible)
    if origin is None or origin.kind != kind:
        raise InvalidRequest(
            f"tool_choice.name: no {kind} tool named {name!r} is offered", "tool_choice.name"
        )
    return "tool", visible


# ---- input items ------------------------------------------------------------


def _text_parts(content: Any, path: str) -> tuple[Part, ...]:
    """Message content: a string, or parts of which only text is kept."""
    if isinstance(content, str):
        return (Text(content),) if content else ()
    if not isinstance(content, list):
        raise fields.fail(path, "a string or an array", content)
    parts: list[Part] = []
    for j, raw in enumerate(content):
        part = fields.obj(raw, f"{path}[{j}]")
        # input_image, input_file, refusal and unknown parts are ignored.
        if part.get("type") in ("input_text", "output_text", "text"):
            text = fields.string(part, "text", f"{path}[{j}].text")
            if text:
                parts.append(Text(text))
    return tuple(parts)


def _output_text(item: dict[str, Any], path: str) -> str:
    """A tool output: a string or an array of parts (text kept, images dropped)."""
    output = item.get("output")
    if output is None or isinstance(output, str):
        return output or ""
    return "".join(p.text for p in _text_parts(output, path) if isinstance(p, Text))


_ROLES: dict[str, Literal["system", "user", "assistant"]] = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
}


class _Conversation:
    """Folds input items into messages: calls join the assistant turn before
    them, consecutive outputs make one tool turn."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.names: dict[str, str] = {}  # call_id -> model-visible name

    def _append(self, role: Literal["assistant", "tool"], part: Part) -> None:
        last = self.messages[-1] if self.messages else None
        joins = last is not None and last.role == role
        if joins and role == "assistant":
            # A call joins a text turn or other calls; text never follows a call.
            joins = isinstance(part, ToolCall)
        if last is not None and joins:
            self.messages[-1] = Message(role, (*last.parts, part))
        else:
            self.messages.append(Message(role, (part,)))

    def message(self, item: dict[str, Any], path: str) -> None:
        role_name = fields.string(item, "role", f"{path}.role")
        role = _ROLES.get(role_name)
        if role is None:
            raise InvalidRequest(
                f"{path}.role: expected user, assistant, system or developer, got {role_name!r}",
                param=f"{path}.role",
            )
        parts = _text_parts(fields.required(item, "content", f"{path}.content"), f"{path}.content")
        if parts:  # a message with nothing but images has nothing to say
            self.messages.append(Message(role, parts))

    def call(self, item: dict[str, Any], path: str, custom: bool) -> None:
        call_id = fields.string(item, "call_id", f"{path}.call_id")
        name = fields.string(item, "name", f"{path}.name")
        namespace = fields.string(item, "namespace", f"{path}.namespace", None)
        if custom:
            text = fields.string(item, "input", f"{path}.input", "")
            arguments = json.dumps({"input": text}, ensure_ascii=False)
        else:
            arguments = fields.string(item, "arguments", f"{path}.arguments", "") or "{}"
        visible = _visible(name, namespace)
        self.names[call_id] = visible
        self._append("assistant", ToolCall(call_id, visible, arguments))

    def output(self, item: dict[str, Any], path: str) -> None:
        call_id = fields.string(item, "call_id", f"{path}.call_id")
        text = _output_text(item, f"{path}.output")
        self._append("tool", ToolResult(call_id, text, name=self.names.get(call_id)))


def _input(raw: Any) -> list[Message]:
    if isinstance(raw, str):
        return [Message("user", (Text(raw),))]
    if not isinstance(raw, list):
        raise fields.fail("input", "a string or an array", raw)
    conv = _Conversation()
    for i, value in enumerate(raw):
        path = f"input[{i}]"
        item = fields.obj(value, path)
        # An item without a type but with a role is a message (EasyInputMessage).
        kind = fields.string(item, "type", f"{path}.type", "message" if "role" in item else "")
        if kind == "message":
            conv.message(item, path)
        elif kind in ("function_call", "custom_tool_call"):
            conv.call(item, path, custom=kind == "custom_tool_call")
        elif kind in ("function_call_output", "custom_tool_call_output"):
            conv.output(item, path)
        # reasoning, item_reference, web_search_call, local_shell_call,
        # tool_search_*, compaction and unknown items: ignored.
    return conv.messages
