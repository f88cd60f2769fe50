"""The one step from generated text to the answer's events, for the local
engine and for an upstream alike: each token's text goes through the
family's parser, a forced single call ends the answer once it is complete,
and the end becomes `Finished` with the neutral stop reason and `Usage`.

Where several calls may come, a call that repeats one of this answer's
earlier calls ends the answer and is dropped: small models loop on a call
once the grammar lets them write another. A repeat is the same tool with
arguments that agree on every key both calls give (Qwen2.5-Coder-0.5B
under Claude Code wrote the same command seven times, each time with
other optional keys). So each call after the first is held until it is
complete."""

from __future__ import annotations

import json
from typing import Any

from ...chat import (
    Event,
    Finished,
    StopReason,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    Usage,
)
from ...grammar.answercheck import AnswerCheck
from .detokenize import TextEnd
from .toolparse import ToolParser


class AnswerAssembler:
    def __init__(
        self, parser: ToolParser, single_call: bool, check: AnswerCheck | None = None
    ) -> None:
        self.parser = parser
        self.single_call = single_call
        self.check = check  # the schemas' parts the grammar could not hold
        self._text: list[str] = []  # the answer's text, where `check` reads it
        self.called = False  # a tool call was completed
        self.repeated = False  # a call repeated an earlier one (and was dropped)
        self.reasoning = 0  # tokens whose text went to thinking
        self.stop_reason: StopReason | None = None  # once finished
        self._calls: list[tuple[str, Any]] = []  # (name, arguments) of complete calls
        self._held: list[Event] = []  # a call after the first, until it is complete
        self._name = ""

    def feed(self, text: str) -> list[Event]:
        """The events of one token's text."""
        events = self._guard(self.parser.feed(text))
        if any(isinstance(e, ThinkingDelta) for e in events):
            self.reasoning += 1
        return events

    @property
    def done(self) -> bool:
        """One call was asked for and it is complete, or a call repeated an
        earlier one: the answer ends here, as at an end token."""
        return self.called and (self.single_call or self.repeated)

    def _guard(self, events: list[Event]) -> list[Event]:
        out: list[Event] = []
        for event in events:
            if self.repeated:
                break
            if isinstance(event, ToolCallStart):
                self._name = event.name
                if self.called:
                    self._held = [event]
                    continue
            elif isinstance(event, ToolCallDelta) and self._held:
                self._held.append(event)
                continue
            elif isinstance(event, ToolCallEnd):
                if self.check is not None:
                    self.check.call(self._name, event.arguments)
                call = (self._name, _arguments(event.arguments))
                held, self._held = self._held, []
                self.called = True
                if any(_repeats(call, earlier) for earlier in self._calls):
                    self.repeated = True
                    continue
                self._calls.append(call)
                out += held
            elif isinstance(event, TextDelta) and self.check is not None:
                self._text.append(event.text)
            out.append(event)
        return out

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
        events = self._guard(self.parser.finish()) if not self.repeated else []
        stop: StopReason = "tool_call" if end == "end" and self.called else end
        if self.check is not None and stop == "end":
            self.check.answer("".join(self._text))
        self.stop_reason = stop
        usage = Usage(prompt, cached, produced, self.reasoning, drafted, accepted)
        return [*events, Finished(stop, usage)]


def _arguments(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _repeats(call: tuple[str, Any], earlier: tuple[str, Any]) -> bool:
    """The same tool, and arguments equal on every key both give (at least
    one, or both without any); arguments that are no JSON object: equal."""
    (name, args), (before_name, before) = call, earlier
    if name != before_name:
        return False
    if not (isinstance(args, dict) and isinstance(before, dict)):
        return bool(args == before)
    shared = args.keys() & before.keys()
    if not shared:
        return not args and not before
    return all(args[k] == before[k] for k in shared)
