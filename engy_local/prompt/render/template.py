"""Render a model's Hugging Face style Jinja chat template.

Templates are small programs written against `transformers.apply_chat_template`:
they get `messages`, `tools`, `add_generation_prompt`, `bos_token`, `eos_token`
and any extra switches (`enable_thinking`, `reasoning_effort`, ...), and call a
few helpers HF provides (`raise_exception`, `strftime_now`, a `tojson` that
does not HTML-escape). This module supplies that environment and nothing more;
`prompt.py` builds the `messages` and `tools` it is given.

    BadTemplate        the source does not compile (raised at load)
    TemplateRaised     the template called raise_exception(msg)
    InvalidRequest     what `render` raises for any failure while rendering

A template comes with the model file, so it is treated as hostile: it runs in
jinja's immutable sandbox (no attributes starting with `_`, no Python
internals: the published template-injection payloads render nothing or
fail), and one render is limited in time (`RENDER_SECONDS`: a watchdog
interrupts the rendering thread) and in output (`MAX_OUTPUT_CHARS`, checked
as output is produced and before `*`, `**` and padding methods build a huge
value). Either limit is a clear error, never a hung server.
"""

from __future__ import annotations

import copy
import ctypes
import json
import re
import threading
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import jinja2
import jinja2.meta
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.parser import Parser
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ...errors import BadTemplate, EngyError, InvalidRequest, TemplateLimitHit
from .messages import Quirks, needs_short_call_ids

# Variables a template may read to toggle thinking, best first: DeepSeek's
# templates read `thinking` but fall back to `enable_thinking`, so when both
# appear `enable_thinking` is the one every such template honours.
_THINKING_SWITCHES = ("enable_thinking", "thinking", "reasoning")

# List methods that templates use to keep local queues (Kimi-K2 builds one
# with `ns.ids.append(...)` / `ns.ids.pop(0)`). Every list a template sees is
# built fresh for one render, so letting it mutate them cannot leak state.
_LIST_MUTATORS = frozenset({"append", "pop", "extend", "insert"})

# Limits of one render. Real templates render a long conversation in
# milliseconds, and a prompt never outgrows the 32 MiB request body by much.
RENDER_SECONDS = 10.0
MAX_OUTPUT_CHARS = 64 * 1024 * 1024
# String methods whose integer argument is the size of what they build.
_PADDING = frozenset({"center", "ljust", "rjust", "zfill", "expandtabs"})
_FORMAT_WIDTH = re.compile(r"\d+")


class TemplateRaised(jinja2.TemplateError):
    """The template called `raise_exception(message)`."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.text = message


class _GenerationTag(Extension):
    """`{% generation %}...{% endgeneration %}`: HF marks the assistant's
    tokens with it for training masks; for inference it renders its body."""

    tags = {"generation"}  # noqa: RUF012 (jinja's Extension API declares it so)

    def parse(self, parser: Parser) -> list[nodes.Node]:
        next(parser.stream)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


class TemplateLimit(BaseException):
    """A render went past a limit (raised into the rendering thread; not an
    Exception, so that no `except Exception` on the way can swallow it)."""


class _Sandbox(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**"})
    max_output = MAX_OUTPUT_CHARS

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        if isinstance(obj, list) and attr in _LIST_MUTATORS:
            return True
        return super().is_safe_attribute(obj, attr, value)

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "**" and isinstance(right, int) and abs(right) > 4096:
            raise TemplateLimit(f"chat template: exponent {right} is too large")
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                sized = isinstance(seq, (str, list, tuple)) and isinstance(n, int)
                if sized and len(seq) * n > self.max_output:
                    raise TemplateLimit("chat template: output is too large")
        return super().call_binop(context, operator, left, right)

    def call(self, context: Any, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
        method = getattr(obj, "__wrapped__", obj)  # the sandbox wraps str.format
        owner = getattr(method, "__self__", None)
        if isinstance(owner, str):
            name = getattr(method, "__name__", "")
            sizes = [a for a in (*args, *kwargs.values()) if isinstance(a, int)]
            too_big = name in _PADDING and any(n > self.max_output for n in sizes)
            widths = _FORMAT_WIDTH.findall(owner) if name in ("format", "format_map") else []
            if too_big or any(int(w) > self.max_output for w in widths):
                raise TemplateLimit("chat template: output is too large")
        return super().call(context, obj, *args, **kwargs)


class _Watchdog:
    """Raises `TemplateLimit` in the calling thread after `seconds`, unless
    the `with` block ends first. Pure Python loops (what a template compiles
    to) see it at their next bytecode."""

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds
        self._lock = threading.Lock()
        self._done = False
        self._fired = False
        self._thread = threading.get_ident()
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True

    def __enter__(self) -> _Watchdog:
        self._timer.start()
        return self

    def _fire(self) -> None:
        with self._lock:
            if not self._done:
                self._fired = True
                ctypes.pythonapi.PyThreadState_SetAsyncExc(
                    ctypes.c_ulong(self._thread), ctypes.py_object(TemplateLimit)
                )

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._done = True
            self._timer.cancel()
            if self._fired:  # not delivered yet if the render just ended: drop it
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._thread), None)


class _Undefined(jinja2.Undefined):
    """Jinja's default Undefined (as in HF), except that `+` with a string
    gives the string: templates concatenate tool-schema fields (a parameter's
    `description`) that real agents' schemas often leave out."""

    def __add__(self, other: Any) -> Any:
        return other if isinstance(other, str) else self._fail_with_undefined_error()

    def __radd__(self, other: Any) -> Any:
        return other if isinstance(other, str) else self._fail_with_undefined_error()


def _raise_exception(message: str) -> None:
    raise TemplateRaised(str(message))


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | str | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # HF semantics: plain json.dumps, non-ASCII kept, no HTML escaping
    # (jinja's own tojson turns `<` into `\u003c`, which changes prompts).
    return json.dumps(
        value,
        ensure_ascii=ensure_ascii,
        indent=indent,
        separators=separators,
        sort_keys=sort_keys,
        default=_json_default,
    )


def _json_default(value: Any) -> Any:
    # `tools | map(attribute='function') | tojson` hands over a generator.
    if isinstance(value, Iterator):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _from_json(text: str) -> Any:
    return json.loads(text)


def _environment(now: Callable[[], datetime]) -> _Sandbox:
    env = _Sandbox(
        undefined=_Undefined,
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=["jinja2.ext.loopcontrols", _GenerationTag],
    )
    env.filters["tojson"] = _tojson
    env.filters["from_json"] = _from_json
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: now().strftime(fmt)
    # `namespace`, `range`, `dict` and the string methods templates call
    # (strip, split, startswith, format, ...) are jinja/sandbox builtins.
    return env


class ChatTemplate:
    """A compiled chat template. Compiling happens once, here; `render` is
    called per request and never mutates the template."""

    def __init__(
        self,
        source: str,
        bos_token: str = "",
        eos_token: str = "",
        *,
        now: Callable[[], datetime] = datetime.now,
        seconds: float = RENDER_SECONDS,
        max_output: int = MAX_OUTPUT_CHARS,
    ) -> None:
        self.source = source
        self.bos_token = bos_token
        self.eos_token = eos_token
        self._now = now
        self._seconds = seconds
        self._max_output = max_output
        env = _environment(now)
        env.max_output = max_output
        try:
            ast = env.parse(source)
            self._template = env.from_string(ast)
        except jinja2.TemplateSyntaxError as e:
            raise BadTemplate(
                f"chat template does not compile: line {e.lineno}: {e.message}"
            ) from e
        # Names the template reads from its context (not ones it only sets).
        self._reads = frozenset(jinja2.meta.find_undeclared_variables(ast))
        self._probed: Quirks | TemplateLimitHit | None = None
        self._openings: dict[str, str] = {}
        self._turn_marker: str | None = None

    @property
    def supports_tools(self) -> bool:
        return "tools" in self._reads

    @property
    def thinking_switch(self) -> str | None:
        """The variable the template reads to turn thinking on or off."""
        return next((name for name in _THINKING_SWITCHES if name in self._reads), None)

    def reads(self, name: str) -> bool:
        """Whether the template reads the variable `name` (e.g. `reasoning_effort`)."""
        return name in self._reads

    def render(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        **extra: Any,
    ) -> str:
        context: dict[str, Any] = {"bos_token": self.bos_token, "eos_token": self.eos_token}
        context.update(self._card_variables(tools))
        context.update(extra)
        context["messages"] = messages
        context["add_generation_prompt"] = add_generation_prompt
        # No tools: leave `tools` undefined, as llama.cpp does. Templates test
        # `tools is defined`/`tools is not none` inconsistently, and undefined
        # satisfies both spellings of "no tools" where None fails `| length`.
        if tools:
            context["tools"] = tools
        try:
            return self._render(context)
        except TemplateLimit as e:
            limit = str(e) or f"chat template: rendering took over {self._seconds:g} s"
            raise TemplateLimitHit(limit) from None
        except TemplateRaised as e:
            raise InvalidRequest(f"chat template: {e.text}") from e
        except Exception as e:
            # Anything else a template trips on (an undefined attribute, a
            # type error, an empty pop) comes from the conversation's shape.
            raise InvalidRequest(f"chat template: {type(e).__name__}: {e}") from e

    def _render(self, context: dict[str, Any]) -> str:
        pieces, size = [], 0
        with _Watchdog(self._seconds):
            for piece in self._template.generate(context):
                size += len(piece)
                if size > self._max_output:
                    raise TemplateLimit(f"chat template: output over {self._max_output} characters")
                pieces.append(piece)
        return "".join(pieces)

    def _card_variables(self, tools: list[dict[str, Any]] | None) -> dict[str, Any]:
        """Variables a few templates read but never define, filled the way
        their model cards fill them (Firefunction v2). A date, not a time:
        a clock in the prompt would defeat KV-cache reuse."""
        found: dict[str, Any] = {}
        if "functions" in self._reads:
            found["functions"] = json.dumps([t["function"] for t in tools or ()], indent=4)
        if "datetime" in self._reads:
            found["datetime"] = self._now().strftime("%Y-%m-%d")
        return found

    def answer_opening(self, **extra: Any) -> str:
        """What the generation prompt writes after the assistant's header
        that the same answer, once rendered as a message, does not start
        with (Qwen3's empty think block with thinking off; "" for most).
        Found once per set of template switches by rendering a probe both
        ways; "" where the probe does not render."""
        key = repr(sorted(extra.items()))
        if key not in self._openings:
            asked = [{"role": "user", "content": "Q"}]
            # An answer as the next turn renders it: no longer the last message.
            answered = [*asked, {"role": "assistant", "content": "ANSWER"}, *asked]
            try:
                prompt = self.render(asked, add_generation_prompt=True, **extra)
                done = self.render(answered, add_generation_prompt=False, **extra)
            except EngyError:
                prompt = done = ""
            pairs = enumerate(zip(prompt, done, strict=False))
            n = next((i for i, (a, b) in pairs if a != b), min(len(prompt), len(done)))
            self._openings[key] = prompt[n:] if done[n:].startswith("ANSWER") else ""
        return self._openings[key]

    @property
    def turn_marker(self) -> str:
        """The marker that opens every turn, the user's and the assistant's
        alike (ChatML's <|im_start|>, Gemma's <start_of_turn>): the longest
        start of the generation prompt that also stands before the user's
        message, in the shape of a special token (<...>). A model that
        writes it has begun a turn that is not its own. "" where the
        template has none, or the probe does not render."""
        if self._turn_marker is None:
            asked = [{"role": "user", "content": "QPROBE"}]
            try:
                prompt = self.render(asked, add_generation_prompt=True)
                done = self.render(asked, add_generation_prompt=False)
            except EngyError:
                prompt = done = ""
            generation = prompt[len(done) :] if prompt.startswith(done) else ""
            header = done[: done.find("QPROBE")] if "QPROBE" in done else ""
            found = ""
            for n in range(len(generation), 2, -1):
                if generation[:n] in header:
                    found = generation[:n]
                    break
            shaped = found.startswith("<") and found.endswith(">") and found.strip() == found
            self._turn_marker = found if shaped else ""
        return self._turn_marker

    @property
    def quirks(self) -> Quirks:
        """What this template cannot take, found once by rendering tiny probe
        conversations (llama.cpp's minja probes capabilities the same way).
        A probe that hits the render limit stops the probing, and the
        template is refused from then on: a looping template costs the
        first request one limit, not one per probe."""
        if self._probed is None:
            try:
                self._probed = self._probe()
            except TemplateLimitHit as e:
                self._probed = e
        if isinstance(self._probed, TemplateLimitHit):
            raise TemplateLimitHit(self._probed.message)
        return self._probed

    def _probe(self) -> Quirks:
        null_content = not self._shows_call("") and self._shows_call(None)
        empty = None if null_content else ""
        calls_apart = self._shows_call(empty) and not self._shows_call(_TEXT)
        text_arguments = not self._renders([_USER, _call({"a": "b"}, content=empty)]) and (
            self._renders([_USER, _call('{"a": "b"}', content=empty)])
        )
        call = _call('{"a": "b"}' if text_arguments else {"a": "b"}, content=empty)
        tool_role = self._renders([_USER, call, _RESULT], expect=_RESULT["content"])
        system_role = self._renders([_SYSTEM, _USER], expect=_SYSTEM["content"]) and (
            not tool_role
            or self._renders([_SYSTEM, _USER, call, _RESULT], expect=_SYSTEM["content"])
        )
        # Reasoning beside a call, followed by its result: every template
        # that keeps reasoning at all keeps it there.
        keys = [
            key
            for key in ("reasoning_content", "thinking")
            if self._renders([_USER, {**call, key: _THINKING}, _RESULT], expect=_THINKING)
        ]
        reasoning_key = keys[0] if keys else "reasoning_content"
        both = {**call, "content": "engy-probe-text", reasoning_key: _THINKING}
        return Quirks(
            no_system_role=not system_role,
            no_tool_role=not tool_role,
            no_user_after_tool=tool_role and not self._renders([_USER, call, _RESULT, _USER]),
            text_arguments=text_arguments,
            short_call_ids=needs_short_call_ids(self.source),
            reasoning_key=reasoning_key,
            call_text_in_reasoning=self._raises([_USER, both, _RESULT])
            and self._renders([_USER, {**call, reasoning_key: _THINKING}, _RESULT]),
            one_call_per_turn=tool_role and self._drops_second_call(text_arguments),
            calls_apart=calls_apart,
            null_call_content=null_content,
            reasoning_chunks=not keys and self._shows_thinking_chunk(call),
        )

    def _shows_thinking_chunk(self, call: dict[str, Any]) -> bool:
        """Whether reasoning given as a `thinking` chunk of a call turn's
        content renders (as itself, not as the chunk's repr or JSON)."""
        turn = {**call, "content": [{"type": "thinking", "thinking": _THINKING}]}
        try:
            messages, tools = copy.deepcopy([_USER, turn, _RESULT]), copy.deepcopy(_PROBE_TOOLS)
            text = self.render(messages, tools=tools)
        except TemplateLimitHit:
            raise
        except InvalidRequest:
            return False
        return _THINKING in text and not any(
            shown in text for shown in ("'type': 'thinking'", '"type": "thinking"')
        )

    def _shows_call(self, content: str | None) -> bool:
        """Whether a turn of one call and this content renders the call."""
        arguments: list[dict[str, Any] | str] = [{"a": _FIRST}, json.dumps({"a": _FIRST})]
        return any(
            self._renders([_USER, _call(a, content=content)], expect=_FIRST) for a in arguments
        )

    def _drops_second_call(self, text_arguments: bool) -> bool:
        """Whether a turn's first call renders and its second does not."""

        def call(value: str, call_id: str) -> dict[str, Any]:
            arguments = {"a": value}
            return _call(json.dumps(arguments) if text_arguments else arguments, call_id)

        first, second = call(_FIRST, "call00001"), call(_SECOND, "call00002")
        two = {**first, "tool_calls": first["tool_calls"] + second["tool_calls"]}
        return self._renders([_USER, first, _RESULT], expect=_FIRST) and not self._renders(
            [_USER, two, _RESULT, _RESULT_2], expect=_SECOND
        )

    def _renders(self, messages: list[dict[str, Any]], expect: str = "") -> bool:
        try:
            # Copies: templates may mutate lists, and the probe pieces are shared.
            return expect in self.render(copy.deepcopy(messages), tools=copy.deepcopy(_PROBE_TOOLS))
        except TemplateLimitHit:
            raise
        except InvalidRequest:
            return False

    def _raises(self, messages: list[dict[str, Any]]) -> bool:
        try:
            self.render(copy.deepcopy(messages), tools=copy.deepcopy(_PROBE_TOOLS))
        except TemplateLimitHit:
            raise
        except InvalidRequest:
            return True
        return False


# Probe conversation pieces. The call id is 9 alphanumerics, which every id
# rule seen in the wild accepts.
_SYSTEM = {"role": "system", "content": "engy-probe-system"}
_USER = {"role": "user", "content": "engy-probe-user"}
_RESULT = {
    "role": "tool",
    "tool_call_id": "call00001",
    "name": "probe",
    "content": "engy-probe-result",
}
_THINKING = "engy-probe-thinking"
_TEXT = "engy-probe-text"
_FIRST = "engy-probe-first"
_SECOND = "engy-probe-second"
_RESULT_2 = {**_RESULT, "tool_call_id": "call00002", "content": "engy-probe-result-2"}
_PROBE_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "probe",
            "description": "A probe.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "string", "description": "A."}},
                "required": ["a"],
            },
        },
    }
]


def _call(
    arguments: dict[str, Any] | str, call_id: str = "call00001", content: str | None = ""
) -> dict[str, Any]:
    function = {"name": "probe", "arguments": arguments}
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [{"id": call_id, "type": "function", "function": function}],
    }
