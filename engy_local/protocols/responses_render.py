"""Neutral answers and errors -> OpenAI Responses JSON.

Shared by the non-streaming body (`render_response`) and the stream state
machine (`responses_stream`). Pure: ids and timestamps are passed in.

Item ids derive from the response id: `resp_X` gives `msg_X_<n>`,
`fc_X_<n>` and `ctc_X_<n>`, n being the item's output_index.
"""

from __future__ import annotations

import json
from typing import Any

from ..chat import Answer, ToolCall, Usage
from ..errors import (
    Busy,
    EngyError,
    Forbidden,
    GenerationTimeout,
    InvalidRequest,
    ModelNotFound,
    NotFoundRoute,
    NoWorker,
    PromptTooLong,
    RequestTooLarge,
    Unauthorized,
)
from .responses_request import ResponsesRequest, ToolOrigin


def item_id(response_id: str, prefix: str, output_index: int) -> str:
    suffix = response_id.removeprefix("resp_")
    return f"{prefix}_{suffix}_{output_index}"


def envelope(
    parsed: ResponsesRequest,
    response_id: str,
    created_at: int,
    status: str,
    output: list[dict[str, Any]],
    usage: Usage | None = None,
    error: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The Response object (B6 field set; what openai-python requires)."""
    echo = parsed.echo
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "background": False,
        "error": error,
        "incomplete_details": ({"reason": "max_output_tokens"} if status == "incomplete" else None),
        "instructions": echo.get("instructions"),
        "max_output_tokens": echo.get("max_output_tokens"),
        "model": echo.get("model", parsed.chat.model),
        "output": output,
        "parallel_tool_calls": echo.get("parallel_tool_calls", True),
        "previous_response_id": None,  # stateless: never stored, never read
        "reasoning": {"effort": None, "summary": None},  # the request's had no effect
        "store": False,
        "temperature": echo.get("temperature"),
        "text": dict(echo.get("text", {"format": {"type": "text"}})),
        "tool_choice": echo.get("tool_choice", "auto"),
        "tools": list(echo.get("tools", [])),
        "top_p": echo.get("top_p"),
        "truncation": "disabled",
        "usage": render_usage(usage) if usage is not None else None,
        "user": None,
        "metadata": dict(echo.get("metadata", {})),
    }


def render_usage(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {
            "cached_tokens": usage.cached_tokens,
            # processed now and left in the KV cache for the next request
            "cache_write_tokens": max(usage.prompt_tokens - usage.cached_tokens, 0),
        },
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.prompt_tokens + usage.output_tokens,
    }


# ---- output items -------------------------------------------------------------


def text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def message_item(item_id: str, status: str, text: str | None) -> dict[str, Any]:
    """A message item; `text` None gives the empty content of `output_item.added`."""
    return {
        "id": item_id,
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": [] if text is None else [text_part(text)],
    }


def origin_of(parsed: ResponsesRequest, name: str) -> ToolOrigin:
    """The client's tool behind a model-visible name; an unknown name (the
    model made it up) comes back as a function call under that name."""
    return parsed.origins.get(name) or ToolOrigin("function", name)


def custom_input(arguments: str) -> str:
    """A custom tool's input from the JSON arguments the model wrote:
    `input`, else the one string value there is, else the text as it came."""
    try:
        value = json.loads(arguments, strict=False)  # raw newlines in strings are common
    except ValueError:
        return arguments
    if isinstance(value, dict):
        if isinstance(value.get("input"), str):
            return str(value["input"])
        strings = [v for v in value.values() if isinstance(v, str)]
        if len(value) == 1 and strings:
            return strings[0]
    return arguments


def call_item(
    origin: ToolOrigin, item_id: str, call_id: str, status: str, payload: str
) -> dict[str, Any]:
    """A function_call (payload: arguments) or custom_tool_call (payload: input)."""
    custom = origin.kind == "custom"
    item: dict[str, Any] = {
        "id": item_id,
        "type": "custom_tool_call" if custom else "function_call",
        "status": status,
        "call_id": call_id,
        "name": origin.name,
        "input" if custom else "arguments": payload,
    }
    if origin.namespace is not None:
        item["namespace"] = origin.namespace
    return item


def call_prefix(origin: ToolOrigin) -> str:
    return "ctc" if origin.kind == "custom" else "fc"


def _call(parsed: ResponsesRequest, response_id: str, index: int, call: ToolCall) -> dict[str, Any]:
    origin = origin_of(parsed, call.name)
    payload = custom_input(call.arguments) if origin.kind == "custom" else call.arguments
    return call_item(
        origin, item_id(response_id, call_prefix(origin), index), call.id, "completed", payload
    )


def render_response(
    parsed: ResponsesRequest, answer: Answer, *, response_id: str, created_at: int
) -> dict[str, Any]:
    """The non-streaming body. The message item comes first; it is left out
    when the answer has calls and its text is only whitespace (what a model
    often writes before a call), as the stream does."""
    output: list[dict[str, Any]] = []
    if answer.text.strip() or not answer.calls:
        output.append(message_item(item_id(response_id, "msg", 0), "completed", answer.text))
    for call in answer.calls:
        output.append(_call(parsed, response_id, len(output), call))
    status = "incomplete" if answer.stop_reason == "length" else "completed"
    if status == "incomplete":
        output[-1]["status"] = "incomplete"  # the item the cap cut short
    return envelope(parsed, response_id, created_at, status, output, answer.usage)


# ---- errors -----------------------------------------------------------------

# class -> (status, type, code); the most specific class wins.
_HTTP_ERRORS: dict[type[EngyError], tuple[int, str, str | None]] = {
    PromptTooLong: (400, "invalid_request_error", "context_length_exceeded"),
    InvalidRequest: (400, "invalid_request_error", None),
    Unauthorized: (401, "authentication_error", "invalid_api_key"),
    Forbidden: (403, "permission_error", "forbidden"),
    ModelNotFound: (404, "invalid_request_error", "model_not_found"),
    NotFoundRoute: (404, "invalid_request_error", None),
    RequestTooLarge: (413, "invalid_request_error", "request_too_large"),
    Busy: (429, "rate_limit_error", "rate_limit_exceeded"),
    NoWorker: (503, "server_error", "server_is_overloaded"),
    GenerationTimeout: (504, "server_error", "timeout"),
    EngyError: (500, "server_error", "server_error"),
}

# class -> response.error.code of `response.failed`, as Codex reads it:
# context_length_exceeded, invalid_prompt and server_is_overloaded are fatal,
# anything else is retried.
_STREAM_ERRORS: dict[type[EngyError], str] = {
    PromptTooLong: "context_length_exceeded",
    InvalidRequest: "invalid_prompt",
    Busy: "rate_limit_exceeded",
    NoWorker: "server_is_overloaded",
    EngyError: "server_error",
}


def _lookup(table: dict[type[EngyError], Any], err: EngyError) -> Any:
    for cls in type(err).__mro__:
        if cls in table:
            return table[cls]
    return table[EngyError]


def _param(err: EngyError) -> str | None:
    if isinstance(err, PromptTooLong):
        return err.param or "input"
    if isinstance(err, InvalidRequest):
        return err.param
    if isinstance(err, ModelNotFound):
        return "model"
    return None


def error_body(err: EngyError) -> tuple[int, dict[str, Any], dict[str, str]]:
    """(HTTP status, body, extra headers) for an error before streaming."""
    status, kind, code = _lookup(_HTTP_ERRORS, err)
    body = {"error": {"message": err.message, "type": kind, "param": _param(err), "code": code}}
    headers = {"retry-after": str(err.retry_after)} if isinstance(err, Busy) else {}
    return status, body, headers


def stream_error(err: EngyError) -> dict[str, Any]:
    """`response.error` of a `response.failed` event."""
    return {"code": _lookup(_STREAM_ERRORS, err), "message": err.message, "param": _param(err)}
