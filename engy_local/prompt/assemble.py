"""The one step from generated text to the answer's events, for the local
engine and for an upstream alike: each token's text goes through the
family's parser, a forced single call ends the answer once it is complete,
and the end becomes `Finished` with the neutral stop reason and `Usage`."""

from __future__ import annotations

from ..chat import Event, Finished, StopReason, ThinkingDelta, ToolCallEnd, Usage
from .detokenize import TextEnd
from .toolparse import ToolParser


class AnswerAssembler:
    def __init__(self, parser: ToolParser, single_call: bool) -> None:
        self.parser = parser
        self.single_call = single_call
        self.called = False  # a tool call was completed
        self.reasoning = 0  # tokens whose text went to thinking
        self.stop_reason: StopReason | None = None  # once finished

    def feed(self, text: str) -> list[Event]:
        """The events of one token's text."""
        events = self.parser.feed(text)
        if any(isinstance(e, ThinkingDelta) for e in events):
            self.reasoning += 1
        self.called = self.called or any(isinstance(e, ToolCallEnd) for e in events)
        return events

    @property
    def done(self) -> bool:
        """One call was asked for and it is complete: the answer ends here,
        as at an end token."""
        return self.called and self.single_call

    def finish(
        self,
        end: TextEnd,
        prompt: int,
        cached: int,
        produced: int,
        *,
        drafted: int = 0,
        accepted: int = 0,
    ) -> list[Event]:
        """What the parser still holds, then `Finished`."""
        events = self.parser.finish()
        self.called = self.called or any(isinstance(e, ToolCallEnd) for e in events)
        stop: StopReason = "tool_call" if end == "end" and self.called else end
        self.stop_reason = stop
        usage = Usage(prompt, cached, produced, self.reasoning, drafted, accepted)
        return [*events, Finished(stop, usage)]
