"""What can go wrong between engy and its upstream, mapped in one place onto
engy's typed errors (and so onto each protocol's error body):

    the upstream answered 4xx        InvalidRequest  400  its message
    ... 429                          Busy            429
    ... 503                          UpstreamUnavailable  503
    ... any other 5xx                ServerError     500
    it cannot be reached             UpstreamUnavailable  503
    it did not answer in time        GenerationTimeout    504
    it went away mid-answer          UpstreamLost    500  (the stream's error event)
"""

from __future__ import annotations

from typing import Any

import httpx

from ..errors import (
    Busy,
    EngyError,
    GenerationTimeout,
    InvalidRequest,
    ServerError,
    UpstreamLost,
    UpstreamUnavailable,
)
from .wire import error_message


def from_status(url: str, status: int, body: Any) -> EngyError:
    message = f"upstream {url}: {error_message(body)}"
    if status == 429:
        return Busy(message, retry_after=2)
    if 400 <= status < 500:
        return InvalidRequest(message)
    if status == 503:
        return UpstreamUnavailable(message)
    return ServerError(f"{message} (HTTP {status})")


def from_transport(url: str, exc: httpx.HTTPError, streaming: bool) -> EngyError:
    """An httpx failure; `streaming`: the answer had begun."""
    if isinstance(exc, httpx.TimeoutException) and not isinstance(exc, httpx.ConnectTimeout):
        return GenerationTimeout(f"upstream {url} did not answer in time")
    if streaming:
        return UpstreamLost(f"upstream {url} went away mid-answer: {exc or type(exc).__name__}")
    return UpstreamUnavailable(f"upstream {url} is unreachable: {exc or type(exc).__name__}")
