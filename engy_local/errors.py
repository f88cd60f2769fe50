"""Typed errors, raised where they happen and mapped to each protocol's error
body in one place (`protocols.anthropic.error_body`, `protocols.responses.error_body`).

    EngyError                 status  meaning
    ├── InvalidRequest          400   bad JSON, a wrong type, a missing field
    │   └── PromptTooLong       400   the prompt does not fit the context window
    ├── Unauthorized            401   missing or wrong API key
    ├── Forbidden               403   a Host or Origin this server does not accept
    ├── ModelNotFound           404   no such model
    ├── NotFoundRoute           404   no such endpoint
    ├── RequestTooLarge         413   body over the size limit
    ├── Busy                    429   the request queue is full
    ├── NoWorker                503   no loaded model meets the provider requirements
    ├── GenerationTimeout       504   a generation ran past --timeout
    ├── ServerError             500   anything else that went wrong inside
    └── RemoteError             any   what a server answered to `engy chat --url`
"""

from __future__ import annotations


class EngyError(Exception):
    status = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidRequest(EngyError):
    status = 400

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class PromptTooLong(InvalidRequest):
    def __init__(self, tokens: int, maximum: int, message: str | None = None) -> None:
        super().__init__(message or f"prompt is too long: {tokens} tokens > {maximum} maximum")
        self.tokens = tokens
        self.maximum = maximum


class Unauthorized(EngyError):
    status = 401


class Forbidden(EngyError):
    status = 403


class ModelNotFound(EngyError):
    status = 404

    def __init__(self, model: str) -> None:
        super().__init__(f"model not found: {model}")
        self.model = model


class NotFoundRoute(EngyError):
    status = 404


class RequestTooLarge(EngyError):
    status = 413


class Busy(EngyError):
    status = 429

    def __init__(self, message: str, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class NoWorker(EngyError):
    status = 503


class GenerationTimeout(EngyError):
    status = 504


class ServerError(EngyError):
    status = 500


class RemoteError(EngyError):
    """An error a server answered `engy chat --url` with: the HTTP status
    (500 for one inside a stream), the error's type or code, its message."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
