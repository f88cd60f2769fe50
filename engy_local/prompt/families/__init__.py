"""Tool-call families: how a model writes tool calls and reasoning.

Each module in this package describes one family with a `FAMILY` object and
is found by discovery, so adding a family is adding a module. A family has:

    markers      strings that must all be in a chat template for it to speak
                 this family (detection works on the template text, never on
                 the file name; `priority` orders the checks, lower first, so
                 a family whose markers include another's goes before it)
    parser       an incremental parser of the model's output into neutral
                 events (text, thinking, tool calls streamed as generated)
    call_rules   GBNF rules for exactly one call in the family's own syntax,
                 used when tool_choice forces a call (None: cannot be forced)
    tool_rules   instead of call_rules, for syntaxes that write each parameter
                 in its own tag: builds "call" from the tools' whole specs
    thinking     template variables that switch thinking on or off, when the
                 template's switch is not a plain enable_thinking / thinking
    reasoning_start  the text that opens a reasoning block: a prompt that ends
                 with it leaves the model reasoning from its first token
    reasoning_end  the text that closes a reasoning block (for grammars that
                 must let reasoning the prompt opened finish first)
    notation     how argument values are written under a forced call's grammar
                 (JSON unless the family writes its own, as Gemma 4 does)
    json_call    the markers around a call written as a JSON object (Hermes'
                 <tool_call>): under tool_choice auto that object may be
                 written as freely as JSON allows
    tools_as_text  for templates that cannot render tools at all: rewrites a
                 conversation so that the tools (described in the system
                 prompt), earlier calls and their results are plain text; the
                 template then gets no `tools`

Detection takes the first family whose markers are all in the template; a
template with none of them that does not render `tools` gets "generic"
(tools described in the system prompt), any other "none".

`models.toml` may name a family for a model to override detection.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Collection
from functools import cache

from ...errors import BadTemplate
from ..parsing.toolparse import ToolParser
from ..render.template import ChatTemplate
from .base import CallRules, Family, ToolRules

__all__ = ["CallRules", "Family", "ToolRules", "detect", "detect_family", "get", "make_parser"]


@cache
def registry() -> dict[str, Family]:
    found: dict[str, Family] = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        family = getattr(module, "FAMILY", None)
        if isinstance(family, Family):
            found[family.name] = family
    return found


def get(name: str) -> Family:
    try:
        return registry()[name]
    except KeyError:
        known = ", ".join(sorted(registry()))
        raise ValueError(f"unknown tool-call family {name!r} (known: {known})") from None


def detect(template_source: str) -> Family:
    """The family a chat template speaks: "generic" when it cannot render
    tools, "none" when it can but in no syntax known here."""
    candidates = sorted(
        (f for f in registry().values() if f.markers), key=lambda f: (f.priority, f.name)
    )
    for family in candidates:
        if all(m in template_source for m in family.markers):
            return family
    return get("none" if _renders_tools(template_source) else "generic")


def _renders_tools(template_source: str) -> bool:
    try:
        return ChatTemplate(template_source).supports_tools
    except BadTemplate:
        return True  # not ours to describe tools to; loading reports the error


def detect_family(template_source: str) -> str:
    return detect(template_source).name


def make_parser(
    family: str, *, tools: Collection[str], thinking: bool, new_id: Callable[[], str]
) -> ToolParser:
    return get(family).parser(tools=tools, thinking=thinking, new_id=new_id)
