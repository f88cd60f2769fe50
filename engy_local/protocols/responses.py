"""POST /v1/responses: the OpenAI Responses API (stateless), as pure
translation between its JSON and the neutral types of `engy_local.chat`.

    parsed = parse_request(body, max_output_cap=N)     # InvalidRequest names the field
    body = render_response(parsed, answer, response_id=..., created_at=...)
    stream = ResponseStream(parsed, response_id=..., created_at=...)
    status, body, headers = error_body(err)

`responses_request` reads requests, `responses_render` writes Response
objects and errors, `responses_stream` is the streaming state machine.
"""

from __future__ import annotations

from .responses_render import error_body, render_response
from .responses_request import ResponsesRequest, ToolOrigin, parse_request
from .responses_stream import InputDecoder, ResponseStream

__all__ = [
    "InputDecoder",
    "ResponseStream",
    "ResponsesRequest",
    "ToolOrigin",
    "error_body",
    "parse_request",
    "render_response",
]
