"""From a neutral `ChatRequest` to what the token loop needs: the rendered and
tokenized prompt, the sampling parameters, a grammar for forced tool calls
and the parser for this model's output format."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from ..chat import ChatRequest, Message, ToolSpec
from ..errors import InvalidRequest, PromptTooLong, UndecodableImage
from ..grammar.answercheck import AnswerCheck, answer_check
from ..grammar.gbnf import fixed_start
from ..grammar.schema import gaps
from .calls.answerformat import told
from .calls.autocall import call_or_answer_grammar, started_call_grammar
from .calls.forced import forced_call_grammar, json_answer_grammar
from .families import Family
from .families.qwen3_coder import Qwen3CoderParser
from .parsing.loosecalls import LooseCallParser, spellings
from .parsing.toolparse import ForcedCallParser, ToolParser
from .render.images import PlacedImages, image_placeholder, images_of, place_images
from .render.layout import first_token_at, layout, token_offsets
from .render.messages import ImageSlots, to_template_messages, to_template_tools
from .render.template import ChatTemplate

# Defaults for what a request leaves out (llama.cpp's own defaults).
DEFAULT_TEMPERATURE = 0.8
DEFAULT_TOP_P = 0.95
DEFAULT_TOP_K = 40


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int
    temperature: float = 0.8
    top_p: float = 0.95
    top_k: int = 40
    min_p: float = 0.05
    stop: tuple[str, ...] = ()
    grammar: str | None = None  # GBNF; constrains every sampled token
    # With triggers the grammar is lazy: it applies from where one of these
    # regexes matches the output (autocall.py); words: marker texts that
    # also trigger as a single token
    triggers: tuple[str, ...] = ()
    trigger_words: tuple[str, ...] = ()
    seed: int | None = None  # None: a random one
    # Tokens that end the answer besides the vocabulary's own end tokens: the
    # template's turn marker (a small model may open a new turn instead).
    ends: tuple[int, ...] = ()


class Media(Protocol):
    """One image of a tokenized prompt: a run of `n_tokens` placeholder ids
    starting at `start` (the runtime's vision.Media evaluates it)."""

    @property
    def start(self) -> int: ...
    @property
    def n_tokens(self) -> int: ...


class Tokenized(Protocol):
    @property
    def tokens(self) -> list[int]: ...
    @property
    def media(self) -> tuple[Media, ...]: ...


class Projector(Protocol):
    """What rendering needs of a vision projector (the runtime's
    vision.Projector): its media marker, and a tokenizer that puts each image
    where the marker stands (raising UndecodableImage for one it cannot
    read)."""

    @property
    def marker(self) -> str: ...

    def tokenize(self, text: str, images: list[bytes]) -> Tokenized: ...


class PromptModel(Protocol):
    """What rendering and tokenizing need of a model: the loaded `Model`,
    or a vocabulary alone (vocab.py) for a backend that runs it elsewhere."""

    @property
    def path(self) -> Path: ...
    @property
    def n_ctx(self) -> int: ...
    @property
    def template(self) -> ChatTemplate: ...
    @property
    def family(self) -> Family: ...
    @property
    def projector(self) -> Projector | None: ...

    def tokenize(self, text: str) -> list[int]: ...
    def piece(self, token: int) -> bytes: ...


@dataclass(frozen=True)
class Prepared:
    tokens: list[int]
    params: SamplingParams
    new_parser: Callable[[], ToolParser]
    single_call: bool
    # The prompt's images, each standing at `start` in `tokens` as a run of
    # placeholder ids; prefill evaluates each with `media.eval` there.
    media: tuple[Media, ...] = ()
    # Where the conversation's own messages begin, after the system prompt
    # and tools (a checkpoint there serves new conversations that share them).
    marks: tuple[int, ...] = ()
    # Where the answer would begin once the next turn renders it (just
    # after the assistant's header; 0: the prompt's end, or not known).
    answer_start: int = 0
    # Token index -> the part of the request it comes from ("messages[3]").
    where: Callable[[int], str] = lambda index: ""
    # A forced call's fixed start (its markers, the one tool's name), as
    # tokens the engine takes without sampling.
    scaffold: tuple[int, ...] = ()
    # The schemas' parts the grammar does not hold, checked once the answer
    # (or a call) ends; None where the grammar holds them whole.
    check: AnswerCheck | None = None


def new_call_id() -> str:
    return "call_" + secrets.token_hex(12)


def json_answer(request: ChatRequest) -> bool:
    """Whether the answer is held to JSON by grammar alone: a response
    format was asked for and no tool may be called."""
    no_tools = not request.tools or request.tool_choice.mode == "none"
    return request.json_output is not None and no_tools


def thinks_first(request: ChatRequest) -> bool:
    """Whether an answer in a response format may think first: only where
    the request asks for thinking (the grammar then lets a reasoning block
    come before the JSON); else thinking is off under a format, as under
    a forced call."""
    return request.json_output is not None and request.thinking is True


def render(
    model: PromptModel, request: ChatRequest, then: Sequence[Message] = ()
) -> tuple[PlacedImages, bool]:
    """The prompt text with its images, and whether tool calls are forced by
    grammar. `then`: messages after the request's, rendered as a later
    request would (no generation prompt; see nextturn.py)."""
    if model.projector is None and images_of(request.messages):
        raise InvalidRequest(f"model {model.path.name} does not support images", param="messages")
    choice = request.tool_choice
    tools = () if choice.mode == "none" else request.tools
    if choice.mode == "tool" and not any(t.name == choice.name for t in tools):
        raise InvalidRequest(f"tool_choice: no tool named {choice.name!r}", param="tool_choice")
    forced = choice.mode in ("any", "tool") and bool(tools)
    extra = _switches(model, request, forced)
    conversation: Sequence[Message] = (*request.messages, *then)
    if not forced:  # the model is told the format where the request does not say it
        conversation = told(conversation, request.json_output)
    template_tools = to_template_tools(tools)
    if model.family.tools_as_text is not None:
        # The template cannot take tools: they (or only the calls) and
        # results become text.
        conversation = model.family.tools_as_text(conversation, tools)
        if not model.family.template_lists_tools:
            template_tools = []

    def render_with(images: ImageSlots | None) -> str:
        quirks = model.template.quirks
        messages = to_template_messages(conversation, quirks=quirks, images=images)
        return model.template.render(
            messages,
            tools=template_tools or None,
            add_generation_prompt=not then,
            **extra,
        )

    if model.projector is None:
        return PlacedImages(render_with(None), [], []), forced
    placeholder = image_placeholder(model.template)
    return place_images(conversation, render_with, placeholder, model.projector.marker), forced


def _switches(model: PromptModel, request: ChatRequest, forced: bool) -> dict[str, object]:
    """The template variables a request sets (thinking on or off)."""
    extra: dict[str, object] = {}
    # A forced call or JSON answer is constrained from the first token, so
    # no thinking first, unless the request asks to think before its JSON.
    held = forced or (request.json_output is not None and not thinks_first(request))
    thinking = False if held else request.thinking
    switch = model.template.thinking_switch
    if thinking is not None and model.family.thinking is not None:
        extra.update(model.family.thinking(thinking))
    elif thinking is not None and switch:
        extra[switch] = thinking
    return extra


def turn_ends(model: PromptModel) -> tuple[int, ...]:
    """The template's turn marker as the one token it is (none where the
    family's answers span turns, or the marker is not a single token)."""
    marker = model.template.turn_marker
    if not marker or model.family.answer_spans_turns:
        return ()
    tokens = model.tokenize(marker)
    ends = tuple(t for t in tokens if model.piece(t) == marker.encode("utf-8"))
    return ends if len(ends) == 1 and len(tokens) <= 2 else ()


def answer_start(model: PromptModel, request: ChatRequest, text: str, offsets: np.ndarray) -> int:
    """The token where the answer to this prompt would begin once the next
    turn renders it as a message: the prompt's end, less what the
    generation prompt writes after the assistant's header that a rendered
    answer does not repeat (an empty think block). 0 where that is not a
    token boundary."""
    forced = request.tool_choice.mode in ("any", "tool") and bool(request.tools)
    opening = model.template.answer_opening(**_switches(model, request, forced))
    if not opening or not text.endswith(opening):
        return 0
    byte = len(text.encode("utf-8")) - len(opening.encode("utf-8"))
    at = first_token_at(offsets, byte)
    return at if 0 < at < len(offsets) and int(offsets[at]) == byte else 0


def tokenize(model: PromptModel, prompt: PlacedImages) -> tuple[list[int], tuple[Media, ...]]:
    """The prompt's tokens, images as placeholder runs (see vision.py)."""
    if not prompt.images or model.projector is None:
        return model.tokenize(prompt.text), ()
    try:
        tokenized = model.projector.tokenize(prompt.text, prompt.images)
    except UndecodableImage as exc:
        where = prompt.sources[exc.index].where or f"image {exc.index + 1}"
        raise InvalidRequest(f"{where}: the image could not be decoded", where) from None
    return tokenized.tokens, tokenized.media


def _scaffold(model: PromptModel, tokens: list[int], text: str, grammar: str) -> list[int]:
    """The tokens of the text every sentence of `grammar` starts with,
    where the prompt and that text tokenize as the prompt's tokens then
    those (else none: the model samples them under the grammar)."""
    rules = dict(line.split(" ::= ", 1) for line in grammar.splitlines() if " ::= " in line)
    start = fixed_start(rules)
    if not start:
        return []
    both = model.tokenize(text + start)
    if both[: len(tokens)] != tokens:
        return []
    return both[len(tokens) :]


def count_tokens(model: PromptModel, request: ChatRequest) -> int:
    return len(tokenize(model, render(model, request)[0])[0])


def refuse_gaps(request: ChatRequest) -> None:
    """Under `strict` (a format's or a tool's), a schema with a part no
    grammar here holds is a 400 naming the keyword: the answer could break
    it, and strict promises it will not."""
    fmt = request.json_output
    if fmt is not None and fmt.strict and fmt.schema is not None:
        found = gaps(fmt.schema)
        if found:
            raise InvalidRequest(
                f"{fmt.field}: strict is true, but engy's grammar cannot hold "
                f"{'; '.join(found)}: drop it, or set strict to false (the answer is then "
                "checked against the whole schema when it ends)",
                fmt.field,
            )
    for tool in request.tools:
        found = gaps(tool.parameters) if tool.strict else []
        if found:
            raise InvalidRequest(
                f"tools: {tool.name} is strict, but engy's grammar cannot hold its "
                f"parameters' {'; '.join(found)}: drop it, or set strict to false",
                "tools",
            )


def prepare(model: PromptModel, request: ChatRequest, output_cap: int) -> Prepared:
    refuse_gaps(request)
    prompt, forced = render(model, request)
    tokens, media = tokenize(model, prompt)
    text = prompt.text
    n, window = len(tokens), model.n_ctx
    if n >= window:
        raise PromptTooLong(n, window)
    room = window - n
    asked = request.sampling.max_tokens
    if request.overflow == "reject" and asked is not None and n + asked > window:
        raise PromptTooLong(
            n,
            window,
            f"prompt is too long: {n} tokens + {asked} max output tokens > {window} maximum",
        )
    max_tokens = min(asked or output_cap, output_cap, room)

    family = model.family
    # Templates that open the reasoning block themselves leave the model
    # inside it from the first token.
    in_thinking = text.rstrip().endswith(family.reasoning_start)
    choice = request.tool_choice
    tools = () if choice.mode == "none" else request.tools
    grammar = None
    # A thinking answer in a format: the JSON after a reasoning block the
    # model opens (one the prompt opened is `in_thinking`).
    may_think = thinks_first(request) and not in_thinking
    scaffold: list[int] = []
    chosen: tuple[ToolSpec, ...] = tools
    if forced:
        if choice.mode == "tool":
            chosen = tuple(t for t in tools if t.name == choice.name)
        grammar = forced_call_grammar(
            chosen, family, reasoning=in_thinking, parallel=choice.parallel
        )
        scaffold = _scaffold(model, tokens, text, grammar)
    elif json_answer(request):
        assert request.json_output is not None
        schema = request.json_output.schema
        grammar = json_answer_grammar(schema, family, reasoning=in_thinking, may_think=may_think)
    # The answer's text in the format (not under a forced call).
    output = request.json_output.schema if request.json_output and not forced else None
    # Under auto, a call the model starts follows the same rules (lazily).
    lazy = None
    if tools and not forced and request.json_output is not None:
        # Calls, or the answer in its format (answerformat.py).
        schema = request.json_output.schema
        grammar = call_or_answer_grammar(
            tools, family, schema, reasoning=in_thinking, may_think=may_think
        )
    elif tools and not forced:
        after = family.reasoning_end if in_thinking else ""
        lazy = started_call_grammar(tools, family, after=after)
        grammar = lazy.gbnf if lazy is not None else None
    # The names the model may call (under a grammar, only those it allows);
    # as a mapping to each tool's parameters schema, so that families
    # writing a tag per parameter can type the values.
    names = {t.name: t.parameters for t in chosen}
    parser_class = family.parser

    def new_parser() -> ToolParser:
        if forced or not names:
            parser = parser_class(tools=names, thinking=in_thinking, new_id=new_call_id)
            return ForcedCallParser(parser, list(names), new_call_id) if forced else parser
        # Under auto the call grammar lets a tool be named as a model may
        # spell it (math.factorial for math_factorial); the family parser
        # reads those too, and LooseCallParser gives the offered name back.
        spelled = {s: schema for name, schema in names.items() for s in spellings(name)}
        parser = parser_class(tools=spelled, thinking=in_thinking, new_id=new_call_id)
        return LooseCallParser(parser, names, new_call_id, Qwen3CoderParser)

    s = request.sampling
    params = SamplingParams(
        max_tokens=max_tokens,
        temperature=DEFAULT_TEMPERATURE if s.temperature is None else s.temperature,
        top_p=DEFAULT_TOP_P if s.top_p is None else s.top_p,
        top_k=DEFAULT_TOP_K if s.top_k is None else s.top_k,
        stop=s.stop,
        grammar=grammar,
        triggers=lazy.triggers if lazy is not None else (),
        trigger_words=lazy.words if lazy is not None else (),
        seed=s.seed,
        ends=turn_ends(model),
    )
    offsets = token_offsets(tokens, model)
    parts = layout(text, request.messages, tools)
    marks: tuple[int, ...] = ()
    if parts.messages_start > 0:
        mark = first_token_at(offsets, parts.messages_start)
        marks = (mark,) if 0 < mark < n else ()

    def where(index: int) -> str:
        return parts.label(int(offsets[index])) if 0 <= index < n else ""

    return Prepared(
        tokens=tokens,
        params=params,
        new_parser=new_parser,
        single_call=not choice.parallel,
        media=media,
        marks=marks,
        answer_start=answer_start(model, request, text, offsets),
        where=where,
        scaffold=tuple(scaffold),
        check=answer_check(names, output),
    )
