"""Neutral answers and errors -> OpenAI Chat Completions JSON.

Shared by the non-streaming body (`render_completion`) and the stream state
machine (`chat_completions_stream`). Pure: ids and timestamps are passed in.
"""

from __future__ import annotations

from typing import Any

from ..chat import Answer, StopReason, Usage
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
from .chat_completions_request import CompletionsRequest

# A stop sequence ends the answer as the model's own end does.
_FINISH_REASONS: dict[StopReason, str] = {
    "end": "stop",
    "stop": "stop",
    "length": "length",
    "tool_call": "tool_calls",
}


def finish_reason(reason: StopReason) -> str:
    return _FINISH_REASONS[reason]


def render_usage(usage: Usage) -> dict[str, Any]:
    """`prompt_tokens` counts every prompt token, the cached ones too."""
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.prompt_tokens + usage.output_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }


def tool_call_json(index: int | None, call_id: str, name: str, arguments: str) -> dict[str, Any]:
    """A call in `message.tool_calls` (no index) or a stream's first delta of one."""
    call: dict[str, Any] = {} if index is None else {"index": index}
    call |= {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    return call


def envelope(
    parsed: CompletionsRequest, completion_id: str, created: int, kind: str
) -> dict[str, Any]:
    """The fields every completion and chunk carry."""
    return {
        "id": completion_id,
        "object": kind,
        "created": created,
        "model": parsed.model or parsed.chat.model,
        "system_fingerprint": None,
    }


def render_completion(
    parsed: CompletionsRequest, answer: Answer, *, completion_id: str, created: int
) -> dict[str, Any]:
    """The non-streaming body. `content` is null when the answer is calls and
    its text only whitespace (what a model often writes before a call), as
    the stream leaves that text out; `reasoning_content` is there when the
    model thought."""
    text = answer.text if answer.text.strip() or not answer.calls else None
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
    if answer.thinking:
        message["reasoning_content"] = answer.thinking
    if answer.calls:
        message["tool_calls"] = [
            tool_call_json(None, c.id, c.name, c.arguments or "{}") for c in answer.calls
        ]
    choice = {
        "index": 0,
        "message": message,
        "logprobs": None,
        "finish_reason": finish_reason(answer.stop_reason),
    }
    body = envelope(parsed, completion_id, created, "chat.completion")
    return {**body, "choices": [choice], "usage": render_usage(answer.usage)}


# ---- errors ---------------------------------------------------------------------

# class -> (status, type, code); the most specific class wins.
_ERRORS: dict[type[EngyError], tuple[int, str, str | None]] = {
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


def _lookup(err: EngyError) -> tuple[int, str, str | None]:
    for cls in type(err).__mro__:
        if cls in _ERRORS:
            return _ERRORS[cls]
    return _ERRORS[EngyError]


def _param(err: EngyError) -> str | None:
    if isinstance(err, PromptTooLong):
        return err.param or "messages"
    if isinstance(err, InvalidRequest):
        return err.param
    if isinstance(err, ModelNotFound):
        return "model"
    return None


def error_json(err: EngyError) -> dict[str, Any]:
    """`{"error": {...}}`: the body of an HTTP error, and the chunk that ends
    a stream that failed after it began."""
    _, kind, code = _lookup(err)
    return {"error": {"message": err.message, "type": kind, "param": _param(err), "code": code}}


def error_body(err: EngyError) -> tuple[int, dict[str, Any], dict[str, str]]:
    """(HTTP status, body, extra headers) for an error before streaming."""
    headers = {"retry-after": str(err.retry_after)} if isinstance(err, Busy) else {}
    return _lookup(err)[0], error_json(err), headers
