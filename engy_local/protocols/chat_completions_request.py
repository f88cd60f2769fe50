"""OpenAI Chat Completions request JSON -> `CompletionsRequest` (a
`ChatRequest` plus how the answer is sent).

Pure translation, no I/O. Every top-level field of the contract is read here
or ignored on purpose (see `_IGNORED`); unknown fields anywhere are tolerated.

Messages. `system` and `developer` are system text where they stand;
`user` content is text and `image_url` parts (base64 data URLs only);
`assistant` turns replay their `reasoning_content` (as llama-server and vLLM
name it), text and `tool_calls`; consecutive `tool` messages are one tool
turn, each result named by the call it answers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from ..chat import (
    ChatRequest,
    Message,
    Part,
    Sampling,
    Text,
    Thinking,
    ToolCall,
    ToolChoice,
    ToolResult,
    ToolSpec,
)
from ..errors import InvalidRequest
from . import fields as f
from .formats import chat_format
from .images import ImageLimits, check_count, parse_data_url

# Accepted and without effect: penalties and logit_bias (the sampler chain is
# temperature, top-k, top-p, min-p), logprobs (none are returned), the hosted
# API's bookkeeping (user, metadata, store, service_tier, prompt_cache_key,
# safety_identifier), outputs nothing here makes (modalities, audio,
# prediction, web_search_options, verbosity), and the legacy `functions` /
# `function_call` (clients send `tools` now).
_IGNORED = (
    "frequency_penalty",
    "presence_penalty",
    "logit_bias",
    "logprobs",
    "top_logprobs",
    "user",
    "metadata",
    "store",
    "service_tier",
    "prompt_cache_key",
    "safety_identifier",
    "modalities",
    "audio",
    "prediction",
    "web_search_options",
    "verbosity",
    "functions",
    "function_call",
)

# Seeds reach llama.cpp as a uint32; -1 (llama-server's "random") is 2^32-1,
# which is llama.cpp's own LLAMA_DEFAULT_SEED, a random seed.
_SEED_MASK = 0xFFFFFFFF


@dataclass(frozen=True)
class CompletionsRequest:
    chat: ChatRequest
    stream: bool
    include_usage: bool = False  # stream_options.include_usage: a last chunk with usage
    model: str = ""  # as sent, echoed in every answer


def parse_request(body: Any, *, images: ImageLimits | None = None) -> CompletionsRequest:
    """Translate a /v1/chat/completions body; raises `InvalidRequest` naming
    the field (`RequestTooLarge` for images over `images`' limits)."""
    limits = images or ImageLimits()
    d = f.obj(body, "body")
    model = f.string(d, "model", "model")
    n = f.integer(d, "n", "n", 1, minimum=1)
    if n != 1:
        raise InvalidRequest(f"n: only one choice is generated here (n must be 1), got {n}", "n")
    stream = f.boolean(d, "stream", "stream", False)
    options = _object(d, "stream_options", "stream_options")
    include_usage = f.boolean(options, "include_usage", "stream_options.include_usage", False)

    messages = _messages(f.array(d, "messages", "messages"), limits)
    if not any(m.role != "system" for m in messages):
        raise InvalidRequest("messages: no message to answer", param="messages")
    check_count(messages, limits)

    tools = _tools(f.array(d, "tools", "tools", []))
    parallel = f.boolean(d, "parallel_tool_calls", "parallel_tool_calls", True)
    # max_tokens is the older name; max_completion_tokens wins when both come.
    asked = f.integer(d, "max_completion_tokens", "max_completion_tokens", None, minimum=1)
    if asked is None:
        asked = f.integer(d, "max_tokens", "max_tokens", None, minimum=1)
    seed = f.integer(d, "seed", "seed", None, minimum=-(2**31))
    sampling = Sampling(
        max_tokens=asked,
        temperature=f.number(d, "temperature", "temperature", None, 0.0, 2.0),
        top_p=f.number(d, "top_p", "top_p", None, 0.0, 1.0),
        top_k=f.integer(d, "top_k", "top_k", None, minimum=0),  # llama-server, vLLM
        stop=_stop(d.get("stop")),
        seed=None if seed is None else seed & _SEED_MASK,
    )
    chat = ChatRequest(
        model=model,
        messages=tuple(messages),
        tools=tools,
        tool_choice=_tool_choice(d.get("tool_choice"), tools, parallel),
        sampling=sampling,
        thinking=_thinking(d),
        # As llama-server and vLLM do: max_tokens is lowered to what fits.
        overflow="shrink",
        provider=f.provider(d.get("provider")),
        json_output=chat_format(d.get("response_format")),
    )
    return CompletionsRequest(chat, stream, include_usage, model)


# ---- messages -------------------------------------------------------------------

_SYSTEM_ROLES = ("system", "developer")


def _messages(raw: list[Any], limits: ImageLimits) -> list[Message]:
    out: list[Message] = []
    names: dict[str, str] = {}  # call id -> tool name, for the results
    for i, value in enumerate(raw):
        path = f"messages[{i}]"
        m = f.obj(value, path)
        role = f.string(m, "role", f"{path}.role")
        content = m.get("content")
        if role in _SYSTEM_ROLES:
            text = _text(content, f"{path}.content")
            if text:
                out.append(Message("system", (Text(text),)))
        elif role == "user":
            parts = _user_parts(f.required(m, "content", f"{path}.content"), path, limits)
            if parts:
                out.append(Message("user", parts))
        elif role == "assistant":
            parts = _assistant_parts(m, path, names)
            if parts:
                out.append(Message("assistant", parts))
        elif role == "tool":
            call_id = f.string(m, "tool_call_id", f"{path}.tool_call_id")
            result = ToolResult(call_id, _text(content, f"{path}.content"), name=names.get(call_id))
            if out and out[-1].role == "tool":
                out[-1] = Message("tool", (*out[-1].parts, result))
            else:
                out.append(Message("tool", (result,)))
        else:
            raise InvalidRequest(
                f"{path}.role: expected system, developer, user, assistant or tool, got {role!r}",
                f"{path}.role",
            )
    return out


def _text(content: Any, path: str) -> str:
    """Content that can only be text: a string, or text parts (joined)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise f.fail(path, "a string or an array of text parts", content)
    texts = []
    for j, raw in enumerate(content):
        part = f.obj(raw, f"{path}[{j}]")
        kind = f.string(part, "type", f"{path}[{j}].type")
        if kind == "text":
            texts.append(f.string(part, "text", f"{path}[{j}].text"))
        elif kind != "refusal":  # an assistant's refusal says nothing to replay
            raise InvalidRequest(f"{path}[{j}].type: expected text, got {kind!r}", f"{path}[{j}]")
    return "".join(texts)


def _user_parts(content: Any, path: str, limits: ImageLimits) -> tuple[Part, ...]:
    where = f"{path}.content"
    if isinstance(content, str):
        return (Text(content),) if content else ()
    if not isinstance(content, list):
        raise f.fail(where, "a string or an array of content parts", content)
    parts: list[Part] = []
    for j, raw in enumerate(content):
        here = f"{where}[{j}]"
        part = f.obj(raw, here)
        kind = f.string(part, "type", f"{here}.type")
        if kind == "text":
            text = f.string(part, "text", f"{here}.text")
            if text:
                parts.append(Text(text))
        elif kind == "image_url":
            image = part.get("image_url")
            # Some clients send the URL itself rather than {"url": ...}.
            url = image if isinstance(image, str) else None
            if url is None:
                url = f.string(f.obj(image, f"{here}.image_url"), "url", f"{here}.image_url.url")
            parts.append(parse_data_url(url, here, f"{here}.image_url.url", limits))
        else:  # input_audio, file: nothing here can read them
            raise InvalidRequest(
                f"{here}.type: {kind!r} parts are not supported (text and image_url are)",
                f"{here}.type",
            )
    return tuple(parts)


def _assistant_parts(m: dict[str, Any], path: str, names: dict[str, str]) -> tuple[Part, ...]:
    """Reasoning, text, then calls: the order a template renders them in."""
    parts: list[Part] = []
    reasoning = f.string(m, "reasoning_content", f"{path}.reasoning_content", "")
    if reasoning:
        parts.append(Thinking(reasoning))
    text = _text(m.get("content"), f"{path}.content")
    if text:
        parts.append(Text(text))
    for j, raw in enumerate(f.array(m, "tool_calls", f"{path}.tool_calls", [])):
        here = f"{path}.tool_calls[{j}]"
        call = f.obj(raw, here)
        fn = f.obj(f.required(call, "function", f"{here}.function"), f"{here}.function")
        call_id = f.string(call, "id", f"{here}.id")
        name = f.string(fn, "name", f"{here}.function.name")
        names[call_id] = name
        parts.append(ToolCall(call_id, name, _arguments(fn.get("arguments"), here)))
    return tuple(parts)


def _arguments(value: Any, path: str) -> str:
    """A replayed call's arguments: JSON text kept byte for byte (the cached
    prompt depends on it); an object some clients send instead is written out."""
    if value is None or value == "":
        return "{}"
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False)
    raise f.fail(f"{path}.function.arguments", "a string", value)


# ---- tools ----------------------------------------------------------------------


def _tools(raw: list[Any]) -> tuple[ToolSpec, ...]:
    """The function tools. Other types (`custom`) are not offered: nothing
    here answers them. A second tool under a name already taken is dropped."""
    specs: dict[str, ToolSpec] = {}
    for i, value in enumerate(raw):
        path = f"tools[{i}]"
        tool = f.obj(value, path)
        if f.string(tool, "type", f"{path}.type", "function") != "function":
            continue
        fn = f.obj(f.required(tool, "function", f"{path}.function"), f"{path}.function")
        name = f.string(fn, "name", f"{path}.function.name")
        schema = fn.get("parameters")
        parameters = f.obj(schema, f"{path}.function.parameters") if schema is not None else None
        # strict: calls follow the schema whenever a grammar is in force;
        # under it, a schema the grammar cannot hold whole is refused.
        specs.setdefault(
            name,
            ToolSpec(
                name,
                f.string(fn, "description", f"{path}.function.description", ""),
                parameters or {"type": "object", "properties": {}},
                strict=bool(f.boolean(fn, "strict", f"{path}.function.strict", None)),
            ),
        )
    return tuple(specs.values())


Mode = Literal["auto", "any", "tool", "none"]
_MODES: dict[str, Mode] = {"auto": "auto", "none": "none", "required": "any"}


def _tool_choice(raw: Any, tools: tuple[ToolSpec, ...], parallel: bool) -> ToolChoice:
    mode: Mode = "auto"
    name: str | None = None
    if isinstance(raw, str):
        if raw not in _MODES:
            raise InvalidRequest(
                f"tool_choice: expected auto, none or required, got {raw!r}", "tool_choice"
            )
        mode = _MODES[raw]
    elif isinstance(raw, dict):
        kind = f.string(raw, "type", "tool_choice.type")
        if kind == "function":
            fn = f.obj(f.required(raw, "function", "tool_choice.function"), "tool_choice.function")
            name = f.string(fn, "name", "tool_choice.function.name")
            if not any(t.name == name for t in tools):
                raise InvalidRequest(
                    f"tool_choice.function.name: no function named {name!r} is offered",
                    "tool_choice.function.name",
                )
            mode = "tool"
        elif kind == "allowed_tools":
            # The subset is not enforced: every tool stays offered.
            allowed = _object(raw, "allowed_tools", "tool_choice.allowed_tools")
            chosen = f.string(allowed, "mode", "tool_choice.allowed_tools.mode", "auto")
            if chosen not in ("auto", "required"):
                raise InvalidRequest(
                    f"tool_choice.allowed_tools.mode: expected auto or required, got {chosen!r}",
                    "tool_choice.allowed_tools.mode",
                )
            mode = _MODES[chosen]
        else:
            raise InvalidRequest(
                f"tool_choice.type: expected function or allowed_tools, got {kind!r}",
                "tool_choice.type",
            )
    elif raw is not None:
        raise f.fail("tool_choice", "a string or an object", raw)
    if mode in ("any", "tool") and not tools:
        raise InvalidRequest("tool_choice: requires a tool but none is offered", "tool_choice")
    return ToolChoice(mode, name, parallel)


# ---- the rest -------------------------------------------------------------------


def _object(d: dict[str, Any], key: str, path: str) -> dict[str, Any]:
    """An optional object field; missing or null reads as {}."""
    value = d.get(key)
    return {} if value is None else f.obj(value, path)


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,) if value else ()
    if not isinstance(value, list):
        raise f.fail("stop", "a string or an array of strings", value)
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise f.fail(f"stop[{i}]", "a string", item)
    return tuple(s for s in value if s)


def _thinking(d: dict[str, Any]) -> bool | None:
    """`chat_template_kwargs.enable_thinking` (llama-server, vLLM) switches
    thinking; `reasoning_effort: none` turns it off; any other effort leaves
    the model's default."""
    kwargs = _object(d, "chat_template_kwargs", "chat_template_kwargs")
    enabled = f.boolean(kwargs, "enable_thinking", "chat_template_kwargs.enable_thinking", None)
    if enabled is not None:
        return bool(enabled)
    effort = f.string(d, "reasoning_effort", "reasoning_effort", None)
    return False if effort == "none" else None
