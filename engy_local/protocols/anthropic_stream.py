"""The Anthropic streaming state machine: neutral events in, SSE event data
out (wire-protocols.md A4-A5). The transport writes each returned dict as
`event: <type>` / `data: <json>`; nothing here does I/O."""

from __future__ import annotations

from typing import Any, Literal

from ..chat import (
    Event,
    Finished,
    PromptProgress,
    Started,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from ..errors import EngyError
from .anthropic import Parsed, error_json, signature, stop_reason_json, usage_json

Block = Literal["text", "thinking", "tool_use"]
PING: dict[str, Any] = {"type": "ping"}


class MessageStream:
    def __init__(self, parsed: Parsed, message_id: str, prompt_tokens: int) -> None:
        # configuration
        self.model = parsed.chat.model
        self.message_id = message_id
        self.prompt_tokens = prompt_tokens
        self.show_thinking = parsed.chat.thinking is not False
        # state
        self.index = -1  # index of the open block, if any
        self.open: Block | None = None
        self.thinking = ""  # text of the open thinking block

    def start(self) -> list[dict[str, Any]]:
        """Sent as soon as the request is accepted, before prompt processing."""
        message: dict[str, Any] = {
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": self.prompt_tokens,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
                "output_tokens": 0,
            },
        }
        return [{"type": "message_start", "message": message}]

    def keepalive(self) -> list[dict[str, Any]]:
        return [PING]

    def process(self, event: Event) -> list[dict[str, Any]]:
        if isinstance(event, TextDelta):
            if not event.text:
                return []
            out = self._open("text", {"type": "text", "text": ""})
            return [*out, self._delta({"type": "text_delta", "text": event.text})]
        if isinstance(event, ThinkingDelta):
            if not self.show_thinking or not event.text:
                return []
            out = self._open("thinking", {"type": "thinking", "thinking": "", "signature": ""})
            self.thinking += event.text
            return [*out, self._delta({"type": "thinking_delta", "thinking": event.text})]
        if isinstance(event, ToolCallStart):
            block = {"type": "tool_use", "id": event.id, "name": event.name, "input": {}}
            return self._open("tool_use", block, new=True)
        if isinstance(event, ToolCallDelta):
            if not event.arguments:
                return []
            return [self._delta({"type": "input_json_delta", "partial_json": event.arguments})]
        if isinstance(event, ToolCallEnd):
            return self._close()
        if isinstance(event, Finished):
            usage = usage_json(event.usage)
            return [
                *self._close(),
                {
                    "type": "message_delta",
                    "delta": {
                        "stop_reason": stop_reason_json(event.stop_reason),
                        "stop_sequence": None,
                    },
                    "usage": usage,
                },
                {"type": "message_stop"},
            ]
        if isinstance(event, (Started, PromptProgress)):
            return [PING]
        return []

    def fail(self, err: EngyError) -> list[dict[str, Any]]:
        """After the stream began an error is an `error` event; the
        transport closes the stream after it."""
        return [error_json(err)]

    # -- helpers ---------------------------------------------------------

    def _open(self, kind: Block, block: dict[str, Any], new: bool = False) -> list[dict[str, Any]]:
        if self.open == kind and not new:
            return []
        out = self._close()
        self.index += 1
        self.open = kind
        out.append({"type": "content_block_start", "index": self.index, "content_block": block})
        return out

    def _delta(self, delta: dict[str, Any]) -> dict[str, Any]:
        return {"type": "content_block_delta", "index": self.index, "delta": delta}

    def _close(self) -> list[dict[str, Any]]:
        if self.open is None:
            return []
        out = []
        if self.open == "thinking":
            sig = {"type": "signature_delta", "signature": signature(self.thinking)}
            out.append(self._delta(sig))
            self.thinking = ""
        out.append({"type": "content_block_stop", "index": self.index})
        self.open = None
        return out
