"""`GET /metrics`: counters kept by the server, in the Prometheus text format.

    engy_requests_total{endpoint,status}     requests answered, by route and HTTP status
    engy_prompt_tokens_total                 prompt tokens of finished generations
    engy_cached_tokens_total                 of those, read from the KV cache
    engy_generated_tokens_total              output tokens
    engy_requests_waiting                    generations queued for a model (queue depth)
    engy_requests_generating                 generations that own a model
    engy_time_to_first_token_seconds         histogram: submit to first output
    engy_decode_tokens_per_second            histogram: output tokens / time after the first
    engy_model_loaded{model}                 1 for each loaded model
    engy_cache_entries{model,tier}           saved prompt states (tier: ram, disk)
    engy_cache_bytes{model,tier}             bytes they take
    engy_cache_hits_total{model,tier}        prompts restored from the tier
    engy_cache_restored_tokens_total{...}    prompt tokens those restores spared
    engy_drafted_tokens_total                tokens speculative decoding drafted
    engy_accepted_tokens_total               of those, the ones the model agreed with

`Tracked` wraps each generation to feed them, and ends it with an error when
the server's shutdown grace period is over (see `shutdown.Drain`).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..backend import CacheStatus, Generation
from ..chat import Event, Finished, Started, TextDelta, ThinkingDelta, ToolCallStart
from ..errors import NoWorker
from .activity import Entry
from .shutdown import Drain

TTFT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
SPEED_BUCKETS = (1.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0)


@dataclass
class Histogram:
    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    n: int = 0

    def observe(self, value: float) -> None:
        if not self.counts:
            self.counts = [0] * len(self.buckets)
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1
        self.total += value
        self.n += 1

    def lines(self, name: str) -> list[str]:
        counts = self.counts or [0] * len(self.buckets)
        out = [
            f'{name}_bucket{{le="{b:g}"}} {c}' for b, c in zip(self.buckets, counts, strict=True)
        ]
        out += [f'{name}_bucket{{le="+Inf"}} {self.n}', f"{name}_sum {self.total:g}"]
        return [*out, f"{name}_count {self.n}"]


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@dataclass
class Metrics:
    requests: Counter[tuple[str, int]] = field(default_factory=Counter)
    prompt_tokens: int = 0
    cached_tokens: int = 0
    generated_tokens: int = 0
    drafted: int = 0
    accepted: int = 0
    waiting: int = 0
    generating: int = 0
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    speed: Histogram = field(default_factory=lambda: Histogram(SPEED_BUCKETS))

    def request(self, endpoint: str, status: int) -> None:
        self.requests[(endpoint, status)] += 1

    def render(
        self, loaded: Iterable[str] = (), caches: Iterable[tuple[str, CacheStatus]] = ()
    ) -> str:
        lines: list[str] = []

        def metric(name: str, kind: str, text: str, values: Sequence[str]) -> None:
            lines.extend([f"# HELP {name} {text}", f"# TYPE {name} {kind}", *values])

        metric(
            "engy_requests_total",
            "counter",
            "Requests answered, by endpoint and HTTP status.",
            [
                f'engy_requests_total{{endpoint="{_label(e)}",status="{s}"}} {n}'
                for (e, s), n in sorted(self.requests.items())
            ],
        )
        for name, text, value in (
            ("engy_prompt_tokens_total", "Prompt tokens of finished requests.", self.prompt_tokens),
            ("engy_cached_tokens_total", "Prompt tokens read from the cache.", self.cached_tokens),
            ("engy_generated_tokens_total", "Output tokens generated.", self.generated_tokens),
        ):
            metric(name, "counter", text, [f"{name} {value}"])
        for name, text, value in (
            ("engy_requests_waiting", "Generations queued for a model.", self.waiting),
            ("engy_requests_generating", "Generations that own a model.", self.generating),
        ):
            metric(name, "gauge", text, [f"{name} {value}"])
        for name, kind, text, attr in (
            ("engy_cache_entries", "gauge", "Saved prompt states, by model and tier.", "entries"),
            ("engy_cache_bytes", "gauge", "Bytes the saved states take.", "bytes"),
            ("engy_cache_hits_total", "counter", "Prompts restored from a tier.", "hits"),
            ("engy_cache_restored_tokens_total", "counter", "Prompt tokens restores spared.",
             "restored_tokens"),
        ):  # fmt: skip
            metric(
                name,
                kind,
                text,
                [
                    f'{name}{{model="{_label(model)}",tier="{c.tier}"}} {getattr(c, attr)}'
                    for model, c in caches
                ],
            )
        for name, text, value in (
            ("engy_drafted_tokens_total", "Tokens speculative decoding drafted.", self.drafted),
            ("engy_accepted_tokens_total", "Drafted tokens the model agreed with.", self.accepted),
        ):
            metric(name, "counter", text, [f"{name} {value}"])
        metric(
            "engy_time_to_first_token_seconds",
            "histogram",
            "Seconds from submission to the first output.",
            self.ttft.lines("engy_time_to_first_token_seconds"),
        )
        metric(
            "engy_decode_tokens_per_second",
            "histogram",
            "Output tokens per second after the first.",
            self.speed.lines("engy_decode_tokens_per_second"),
        )
        metric(
            "engy_model_loaded",
            "gauge",
            "1 for each loaded model.",
            [f'engy_model_loaded{{model="{_label(m)}"}} 1' for m in sorted(loaded)],
        )
        return "\n".join(lines) + "\n"


class CountRequests:
    """ASGI middleware: counts each answer by route and status. Paths that
    are no route count as `other`, so a scan cannot grow the table."""

    def __init__(self, app: ASGIApp, metrics: Metrics, paths: Collection[str]) -> None:
        self.app = app
        self.metrics = metrics
        self.paths = paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        endpoint = path if path in self.paths else "other"

        async def counting(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.metrics.request(endpoint, int(message["status"]))
            await send(message)

        await self.app(scope, receive, counting)


_OUTPUT = (TextDelta, ThinkingDelta, ToolCallStart)


class Tracked:
    """A generation, counted in `metrics` and ended by `drain`: once the
    shutdown grace period is over, iterating it raises `NoWorker` (503,
    `overloaded_error` / `server_is_overloaded`), which the transport turns
    into the protocol's terminal error. `entry`, when given, is the
    request's row in the page's record (`activity`): it sees every event."""

    def __init__(
        self, inner: Generation, metrics: Metrics, drain: Drain, entry: Entry | None = None
    ) -> None:
        self.inner = inner
        self.prompt_tokens = inner.prompt_tokens
        self.metrics = metrics
        self.drain = drain
        self.entry = entry

    def cancel(self) -> None:
        self.inner.cancel()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)  # whatever else the backend's generation offers

    async def __aiter__(self) -> AsyncIterator[Event]:
        m, entry = self.metrics, self.entry
        submitted = time.monotonic()
        first: float | None = None
        state = "waiting"
        m.waiting += 1
        source = self.inner.__aiter__()
        expired = asyncio.ensure_future(self.drain.expired())
        step: asyncio.Future[Event] | None = None
        try:
            while True:
                step = asyncio.ensure_future(anext(source))
                await asyncio.wait({step, expired}, return_when=asyncio.FIRST_COMPLETED)
                if not step.done():
                    raise NoWorker("server is shutting down")
                try:
                    event = step.result()
                except StopAsyncIteration:
                    return
                if state == "waiting" and isinstance(event, (Started, *_OUTPUT)):
                    m.waiting, m.generating, state = m.waiting - 1, m.generating + 1, "generating"
                if first is None and isinstance(event, _OUTPUT):
                    first = time.monotonic()
                    m.ttft.observe(first - submitted)
                if isinstance(event, Finished):
                    u = event.usage
                    m.prompt_tokens += u.prompt_tokens
                    m.cached_tokens += u.cached_tokens
                    m.generated_tokens += u.output_tokens
                    m.drafted += u.drafted_tokens
                    m.accepted += u.accepted_tokens
                    elapsed = time.monotonic() - (first or submitted)
                    if u.output_tokens > 1 and elapsed > 0:
                        m.speed.observe((u.output_tokens - 1) / elapsed)
                if entry is not None:
                    entry.event(event)
                yield event
        except BaseException as exc:  # an error, or the consumer went away
            if entry is not None:
                entry.fail(exc)
            raise
        finally:
            if entry is not None:
                entry.close()
            expired.cancel()
            if state == "waiting":
                m.waiting -= 1
            else:
                m.generating -= 1
            self.inner.cancel()
            if step is not None and not step.done():
                step.cancel()
                await asyncio.wait({step})
                if not step.cancelled():
                    # The source may end (or fail) as it is cancelled: read it
                    # here, or asyncio logs "Task exception was never retrieved".
                    step.exception()
            aclose = getattr(source, "aclose", None)
            if aclose is not None:
                await aclose()
