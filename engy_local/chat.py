"""Neutral types shared by every protocol, the engine and the REPL.

These are plain values: no wire format leaks in here. A protocol module turns
its JSON into a `ChatRequest`, the engine turns a `ChatRequest` into a stream
of `Event`s, and the protocol turns those events back into its own JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "tool"]
# Why an answer ended, in no protocol's words: the model ended its turn
# ("end"), ended it with tool calls ("tool_call"), max_tokens or the window
# cut it ("length"), a stop sequence matched ("stop"). Each protocol module
# says these in its own words.
StopReason = Literal["end", "tool_call", "length", "stop"]


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class Image:
    """An inline image; `data` is the base64 text as sent. `where` names the
    block it came from (`messages[0].content[1]`), for error messages only."""

    media_type: str
    data: str
    where: str = field(default="", compare=False)


@dataclass(frozen=True)
class Thinking:
    """Reasoning from an earlier assistant turn, replayed to the template."""

    text: str


@dataclass(frozen=True)
class ToolCall:
    """A call the model made. `arguments` is JSON object text, kept byte for
    byte as it came so re-rendering a conversation reproduces the same prompt
    (and so the same KV-cache prefix)."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class ToolResult:
    """`content` is the result's text; when it holds images too, `parts` is
    the whole content in order (its texts joined are `content`)."""

    call_id: str
    content: str
    is_error: bool = False
    name: str | None = None
    parts: tuple[Text | Image, ...] = ()


Part = Text | Image | Thinking | ToolCall | ToolResult


@dataclass(frozen=True)
class Message:
    """One turn. System messages may appear anywhere (clients send them
    mid-conversation); the engine folds them into what a template accepts.
    A `tool` message carries exactly the `ToolResult` parts of one turn."""

    role: Role
    parts: tuple[Part, ...]

    def text(self) -> str:
        return "".join(p.text for p in self.parts if isinstance(p, Text))


# A keyword of engy's own in a string's JSON Schema: {"syntax": "lark" or
# "regex", "definition": ...}, a grammar the string must match (a freeform
# tool's input). The prompt half enforces it where it can convert it.
STRING_GRAMMAR = "x-engy-grammar"


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]  # JSON Schema (with STRING_GRAMMAR where a tool gives one)
    # The request asked for calls that always validate (OpenAI's `strict`):
    # a schema the grammar cannot hold whole is then refused.
    strict: bool = False

    def shown_parameters(self) -> dict[str, Any]:
        """The schema as the model is shown it: without STRING_GRAMMAR (a
        tool with a grammar says it in its description)."""
        shown: dict[str, Any] = _without_grammar(self.parameters)
        return shown


def _without_grammar(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_grammar(v) for k, v in value.items() if k != STRING_GRAMMAR}
    if isinstance(value, list):
        return [_without_grammar(v) for v in value]
    return value


@dataclass(frozen=True)
class ToolChoice:
    """`auto`: the model decides; `any`: it must call some tool; `tool`: it
    must call `name`; `none`: it must not call tools."""

    mode: Literal["auto", "any", "tool", "none"] = "auto"
    name: str | None = None
    parallel: bool = True


@dataclass(frozen=True)
class Sampling:
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None  # the sampler's seed (0 .. 2^32-1); None: a random one


def with_defaults(sampling: Sampling, defaults: Sampling) -> Sampling:
    """`sampling` with a model's defaults where it sets nothing; the model's
    stop words are added to the request's (they end its turns)."""
    return Sampling(
        max_tokens=sampling.max_tokens if sampling.max_tokens is not None else defaults.max_tokens,
        temperature=sampling.temperature
        if sampling.temperature is not None
        else defaults.temperature,
        top_p=sampling.top_p if sampling.top_p is not None else defaults.top_p,
        top_k=sampling.top_k if sampling.top_k is not None else defaults.top_k,
        stop=tuple(dict.fromkeys((*sampling.stop, *defaults.stop))),
        seed=sampling.seed if sampling.seed is not None else defaults.seed,
    )


@dataclass(frozen=True)
class JsonOutput:
    """The answer's text must be one JSON value following `schema` (a JSON
    Schema); with no schema, any JSON object."""

    schema: dict[str, Any] | None = None
    # `strict: true` (Responses, Chat Completions): a schema the grammar
    # cannot hold whole is refused, naming `field` (the request's own path).
    strict: bool = False
    field: str = ""


@dataclass(frozen=True)
class Provider:
    """Worker requirements (the `provider` object of both protocols)."""

    only: tuple[str, ...] | None = None
    ignore: tuple[str, ...] = ()
    quantizations: tuple[str, ...] | None = None
    min_context: int | None = None
    gpu: bool | None = None


@dataclass(frozen=True)
class ChatRequest:
    model: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: ToolChoice = field(default_factory=ToolChoice)
    sampling: Sampling = field(default_factory=Sampling)
    # None: the model's own default; True/False: the template's switch.
    thinking: bool | None = None
    # How an over-long request is handled: "shrink" lowers max_tokens to fit
    # (Messages), "reject" refuses prompt + max_tokens over the window
    # (Responses).
    overflow: Literal["shrink", "reject"] = "shrink"
    provider: Provider | None = None
    # The answer's text is JSON (generation follows it as a grammar; with
    # tools under auto the answer is calls or that JSON, a forced call wins);
    # None: free text. prompt/calls/answerformat.py.
    json_output: JsonOutput | None = None
    # > 0: a run of at least this many tokens that a cached prompt held
    # after where this one leaves it may be read from the cache at its new
    # place (runtime/cache/shift.py), trading exactness for a shorter read.
    cache_reuse: int = 0


# ---- the event stream -----------------------------------------------------


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    cached_tokens: int = 0  # of prompt_tokens, read from the KV cache
    output_tokens: int = 0
    reasoning_tokens: int = 0  # of output_tokens, spent thinking
    # Speculative decoding (the engine's, no protocol shows it): tokens it
    # drafted, and of those, the ones the model agreed with.
    drafted_tokens: int = 0
    accepted_tokens: int = 0


@dataclass(frozen=True)
class Started:
    """The request left the queue and owns the model; prompt processing
    starts now. Carries the exact prompt size. `miss`: when the prompt was
    not read from the cache in full, where it left the longest prefix any
    cache holds, in a few words ("token 5120 of 5210, in messages[3]");
    empty when it was read in full."""

    prompt_tokens: int
    cached_tokens: int
    miss: str = ""


@dataclass(frozen=True)
class PromptProgress:
    """Prompt processing progress; lets transports keep a stream alive."""

    done: int
    total: int


@dataclass(frozen=True)
class Heartbeat:
    """Nothing happened for a while (queued, or a slow prompt); transports
    send something clients ignore so idle timeouts do not fire."""


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class ThinkingDelta:
    text: str


@dataclass(frozen=True)
class ToolCallStart:
    index: int  # 0, 1, ... within this answer
    id: str
    name: str


@dataclass(frozen=True)
class ToolCallDelta:
    index: int
    arguments: str  # a piece of the JSON object text


@dataclass(frozen=True)
class ToolCallEnd:
    index: int
    arguments: str  # the whole JSON object text


@dataclass(frozen=True)
class Finished:
    stop_reason: StopReason
    usage: Usage


Event = (
    Started
    | PromptProgress
    | Heartbeat
    | TextDelta
    | ThinkingDelta
    | ToolCallStart
    | ToolCallDelta
    | ToolCallEnd
    | Finished
)


@dataclass
class Answer:
    """A whole answer, folded from events (for non-streaming responses)."""

    text: str = ""
    thinking: str = ""
    calls: list[ToolCall] = field(default_factory=list)
    stop_reason: StopReason = "end"
    usage: Usage = field(default_factory=Usage)

    def add(self, event: Event) -> None:
        if isinstance(event, TextDelta):
            self.text += event.text
        elif isinstance(event, ThinkingDelta):
            self.thinking += event.text
        elif isinstance(event, ToolCallStart):
            self.calls.append(ToolCall(event.id, event.name, ""))
        elif isinstance(event, ToolCallEnd):
            call = self.calls[event.index]
            self.calls[event.index] = ToolCall(call.id, call.name, event.arguments)
        elif isinstance(event, Finished):
            self.stop_reason = event.stop_reason
            self.usage = event.usage
