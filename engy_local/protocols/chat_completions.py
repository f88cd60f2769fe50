"""POST /v1/chat/completions: OpenAI Chat Completions, as pure translation
between its JSON and the neutral types of `engy_local.chat`.

    parsed = parse_request(body, images=limits)        # InvalidRequest names the field
    body = render_completion(parsed, answer, completion_id=..., created=...)
    stream = CompletionStream(parsed, completion_id=..., created=...)
    status, body, headers = error_body(err)

`chat_completions_request` reads requests, `chat_completions_render` writes
completions and errors, `chat_completions_stream` is the streaming state
machine.
"""

from __future__ import annotations

from .chat_completions_render import error_body, error_json, render_completion
from .chat_completions_request import CompletionsRequest, parse_request
from .chat_completions_stream import CompletionStream

__all__ = [
    "CompletionStream",
    "CompletionsRequest",
    "error_body",
    "error_json",
    "parse_request",
    "render_completion",
]
