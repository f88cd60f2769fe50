"""Neutral events -> OpenAI Chat Completions stream chunks.

`CompletionStream` is an explicit state machine: each method returns the
chunks to send, as dicts; the transport writes each as `data: <json>`, ends
the stream with `data: [DONE]` and fills quiet stretches with SSE comments.

    start()         the first chunk: delta {"role": "assistant", "content": null}
    process(event)  for each chat.Event
    keepalive()     nothing (an SSE comment is the transport's)
    fail(err)       a chunk {"error": {...}}; terminal

Text is `delta.content`, thinking `delta.reasoning_content`; a call is a
`tool_calls` delta with its index, id, name and empty arguments, then
deltas of its arguments as they are generated. The last choice chunk has an
empty delta and the finish reason; with `stream_options.include_usage`
every chunk carries `"usage": null` and one more, with no choices, the
usage. Text that is only whitespace is held back and dropped if a call
comes next, as `render_completion` drops it.
"""

from __future__ import annotations

from typing import Any

from ..chat import (
    Event,
    Finished,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from ..errors import EngyError
from .chat_completions_render import (
    envelope,
    error_json,
    finish_reason,
    render_usage,
    tool_call_json,
)
from .chat_completions_request import CompletionsRequest


class CompletionStream:
    def __init__(self, parsed: CompletionsRequest, *, completion_id: str, created: int) -> None:
        # configuration
        self.parsed = parsed
        self.completion_id = completion_id
        self.created = created
        # state
        self._started = False
        self._finished = False
        self._pending = ""  # whitespace not yet sent
        self._sent_text = False
        self._calls: dict[int, str] = {}  # engine call index -> arguments sent

    # ---- public ----

    def start(self) -> list[dict[str, Any]]:
        if self._started:
            return []
        self._started = True
        # content null, as llama-server sends it: an answer that turns out
        # to be only calls folds to content null, as render_completion says.
        return [self._chunk({"role": "assistant", "content": None})]

    def keepalive(self) -> list[dict[str, Any]]:
        return self.start()

    def process(self, event: Event) -> list[dict[str, Any]]:
        out = self.start()
        if self._finished:
            return out
        if isinstance(event, TextDelta):
            out += self._text(event.text)
        elif isinstance(event, ThinkingDelta):
            if event.text:
                out.append(self._chunk({"reasoning_content": event.text}))
        elif isinstance(event, ToolCallStart):
            self._pending = ""  # whitespace before a call is not worth sending
            self._calls[event.index] = ""
            call = tool_call_json(event.index, event.id, event.name, "")
            out.append(self._chunk({"tool_calls": [call]}))
        elif isinstance(event, ToolCallDelta):
            out += self._arguments(event.index, event.arguments)
        elif isinstance(event, ToolCallEnd):
            sent = self._calls.get(event.index)
            if sent is not None and event.arguments.startswith(sent):
                out += self._arguments(event.index, event.arguments[len(sent) :])
        elif isinstance(event, Finished):
            out += self._finish(event)
        # Started, PromptProgress and Heartbeat make no chunks.
        return out

    def fail(self, err: EngyError) -> list[dict[str, Any]]:
        out = self.start()
        if self._finished:
            return out
        self._finished = True
        return [*out, error_json(err)]

    # ---- helpers ----

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        chunk = envelope(self.parsed, self.completion_id, self.created, "chat.completion.chunk")
        chunk["choices"] = [choice]
        if self.parsed.include_usage:
            chunk["usage"] = None
        return chunk

    def _text(self, text: str) -> list[dict[str, Any]]:
        if not self._sent_text:
            self._pending += text
            if not self._pending.strip():
                return []
            text, self._pending, self._sent_text = self._pending, "", True
        return [self._chunk({"content": text})] if text else []

    def _arguments(self, index: int, piece: str) -> list[dict[str, Any]]:
        if not piece or index not in self._calls:
            return []
        self._calls[index] += piece
        return [self._chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})]

    def _finish(self, event: Finished) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if self._pending and not self._calls:  # an answer that is only whitespace
            out.append(self._chunk({"content": self._pending}))
        self._pending = ""
        self._finished = True
        out.append(self._chunk({}, finish_reason(event.stop_reason)))
        if self.parsed.include_usage:
            usage = envelope(self.parsed, self.completion_id, self.created, "chat.completion.chunk")
            out.append({**usage, "choices": [], "usage": render_usage(event.usage)})
        return out
