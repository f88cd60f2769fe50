"""The grammar a tool call follows once the model starts one under
tool_choice auto: until then the model writes freely (it may answer in
text and never call), and from the moment a call begins the rest of it is
held to the family's call syntax and the chosen tool's schema, as a forced
call is.

A call begins at the family's own marker (`<tool_call>`), or in one of the
forms small models write instead: a JSON object (or a list of them), bare
or in a ```json fence, opening with `{"name": "<an offered tool>"`, or
Qwen3-Coder's tags outside their block, `<function=<an offered tool>>` and
a newline. llama.cpp's lazy grammar watches for those (`triggers`: regexes,
searched in the output so far; the grammar applies from the first group's
start); the parser reads these forms back as calls (loosecalls.py).
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ...chat import ToolSpec
from ...grammar.gbnf import fixed_start, literal
from ...grammar.schema import JSON_SPACE
from ..families import Family
from ..families.qwen3_coder import FORMAT as QWEN3_CODER
from ..families.xmlcalls import make_tool_rules
from ..parsing.loosecalls import NAME_CHARS, spellings
from .forced import (
    MAX_CALLS,
    MAX_GRAMMAR,
    bounded_answer,
    bounded_arguments,
    call_rules,
    grammar_text,
)


@dataclass(frozen=True)
class LazyGrammar:
    gbnf: str
    triggers: tuple[str, ...]  # ECMAScript regexes, as llama.cpp's std::regex reads them
    words: tuple[str, ...]  # marker texts that also trigger as a token of their own


# Qwen3-Coder's call without its block: from `<function=` to `</function>`.
_tagged_rules = make_tool_rules(
    replace(QWEN3_CODER, block_close="", grammar_head="<function="), "t"
)

# Grammars made lately, by family, `after` and the tools' names and
# parameters: an agent sends the same tools every turn, and Claude Code's 22
# take ~8 ms to compile. Shared by the threads that prepare requests.
_MADE: OrderedDict[tuple[int, str], tuple[Family, LazyGrammar]] = OrderedDict()
_MADE_LOCK = threading.Lock()
KEEP_MADE = 16


def started_call_grammar(
    tools: Sequence[ToolSpec], family: Family, *, after: str = ""
) -> LazyGrammar | None:
    """The lazy grammar of calls to `tools` under auto; None without tools.
    `after`: text the trigger must follow (the end of a reasoning block the
    prompt opened: a call the model thinks about is not a call)."""
    if not tools:
        return None
    spec = [after, [[t.name, t.parameters] for t in tools]]
    key = (id(family), json.dumps(spec, sort_keys=True, default=repr))
    with _MADE_LOCK:
        made = _MADE.get(key)
    if made is not None and made[0] is family:
        return made[1]
    grammar = _lazy_grammar(tools, family, after)
    with _MADE_LOCK:
        _MADE[key] = (family, grammar)
        while len(_MADE) > KEEP_MADE:
            _MADE.popitem(last=False)
    return grammar


def _lazy_grammar(tools: Sequence[ToolSpec], family: Family, after: str) -> LazyGrammar:
    rules: dict[str, str] = {}
    names = _json_call_rules(tools, rules)
    starts = _family_rules(tools, family, rules)
    marker = _marker(rules) if starts else ""
    starts += ["fenced", "jcalls", "stray"]
    tagged = _tagged(tools, rules)
    if tagged:
        starts.append("tagged")
    gbnf = grammar_text(rules, " | ".join(starts), family, False, "tools", "the call grammar")
    # Each trigger matches only what the grammar accepts from the group's
    # start (llama.cpp feeds it from there; text it rejected would be fatal),
    # so its whitespace is the grammar's own (`jsp`).
    alternation = "|".join(_escape(json.dumps(n, ensure_ascii=False)[1:-1]) for n in names)
    ws = r"(?: |\n[ \t]{0,40})?"
    opened = rf'(?:\[{ws})?\{{{ws}"name"{ws}:{ws}"'
    head = rf'{opened}(?:{alternation})"'
    lead = _escape(after) + r"[\s\S]*?" if after else ""
    fence = rf"```(?:json|JSON)?{ws}"
    triggers = []
    if marker:
        triggers.append(f"{lead}({_escape(marker)})")
    # A fenced object whose name no tool can have (the command the model
    # means: loosecalls reads it by its arguments) takes one tool's
    # arguments, once it says it gives arguments: JSON in an answer that
    # only has a "name" ({"name": "Ada Lovelace", "born": 1815}) stays free.
    stray = rf'"name"{ws}:{ws}"{_STRAY_NAME}",{ws}"arguments"{ws}:'
    triggers.append(rf"{lead}({fence}\{{{ws}{stray})")
    # A fenced or bare object is a call once it names an offered tool. One
    # naming a tool that does not exist stays text, as in every family: on
    # BFCL's irrelevance cases Qwen2.5-Coder writes calculate_triangle_area
    # where only determine_body_mass_index is offered, and a grammar picking
    # the name among the tools would make that a call to the wrong tool.
    triggers += [f"{lead}({fence}{head})", f"{lead}({head})"]
    if tagged:  # the newline: Llama 3.1's `<function=NAME>{...}` stays free
        triggers.append(f"{lead}(<function=(?:{'|'.join(map(_escape, tagged))})>\n)")
    return LazyGrammar(gbnf, tuple(triggers), (marker,) if marker and not after else ())


def _tagged(tools: Sequence[ToolSpec], rules: dict[str, str]) -> list[str]:
    """Adds the rule "tagged": calls in Qwen3-Coder's tags without their
    block, one or more; returns the tools' names, or [] where the grammar
    would grow past its limit (the tags are read as calls all the same)."""
    first = _first_by_name(tools)
    own: dict[str, str] = {}
    _tagged_rules(list(first.values()), own)
    own["tagged"] = f"tcall ([ \\t\\n]{{0,2}} tcall){{0,{MAX_CALLS - 1}}} [ \\t\\n]{{0,2}}"
    if sum(len(k) + len(v) + 5 for k, v in {**rules, **own}.items()) > MAX_GRAMMAR:
        return []
    rules.update(own)
    return list(first)


def call_or_answer_grammar(
    tools: Sequence[ToolSpec],
    family: Family,
    schema: dict[str, object] | None,
    *,
    reasoning: bool = False,
    may_think: bool = False,
) -> str:
    """A grammar (applied from the first token, not lazy) whose sentences
    are calls to `tools`, as under auto (the family's syntax, or the JSON
    objects small models write), or one JSON value following `schema`
    (None: any object): tools under auto with a response format.
    `reasoning` and `may_think` as for `forced.json_answer_grammar`."""
    rules: dict[str, str] = {}
    _json_call_rules(tools, rules)
    starts = _family_rules(tools, family, rules)
    rules["answer"] = bounded_answer(schema, "a-", rules)
    starts += ["fenced", "jcalls", "answer"]
    return grammar_text(
        rules,
        " | ".join(starts),
        family,
        reasoning,
        "tools",
        "the call-or-answer grammar",
        may_think=may_think,
    )


def _family_rules(tools: Sequence[ToolSpec], family: Family, rules: dict[str, str]) -> list[str]:
    """Adds the rule "family": calls in `family`'s own syntax, one or more;
    returns ["family"], or [] where the family has no call syntax (generic,
    none). Needs `_json_call_rules`' rules."""
    if family.json_call is not None:  # the JSON object inside, written freely
        opening, closing = family.json_call
        ws = "[ \\t\\n]{0,2}"
        rules["call"] = f"{literal(opening)} {ws} jcall {ws} {literal(closing)}"
    else:
        with contextlib.suppress(ValueError):  # no call syntax of its own (generic, none)
            rules.update(call_rules(tools, family))
    if "call" not in rules:
        return []
    rules["family"] = f"call (jsep call){{0,{MAX_CALLS - 1}}} [ \\t\\n]{{0,2}}"
    return ["family"]


def _json_call_rules(tools: Sequence[ToolSpec], rules: dict[str, str]) -> list[str]:
    """Rules "fenced" and "jcalls": calls as JSON objects {"name": ...,
    "arguments": {...}}, bare or in a ```json fence, one or a list; "stray":
    a fenced one whose name no tool can have. Returns the tools' names, in
    order."""
    first = _first_by_name(tools)
    rules["jsp"] = JSON_SPACE
    alternatives = []
    roots = []
    for i, spec in enumerate(first.values()):
        root = bounded_arguments(spec, f"j{i}-", rules)
        roots.append(root)
        name = " | ".join(literal(json.dumps(n, ensure_ascii=False)) for n in spellings(spec.name))
        arguments = f'"," jsp ("\\"arguments\\"" | "\\"parameters\\"") jsp ":" jsp {root}'
        # Without arguments where the tool requires none ({"name": "ls"}).
        optional = "?" if not _requires(spec) else ""
        rules[f"jcall-{i}"] = f"({name}) jsp ({arguments}){optional}"
        alternatives.append(f"jcall-{i}")
    rules["jcall"] = f'"{{" jsp "\\"name\\"" jsp ":" jsp ({" | ".join(alternatives)}) "}}" jsp'
    # Calls one after another (Llama 3.2 puts a ";" between them), or a list.
    rules["jsep"] = '[ \\t\\n]{0,2} (";" [ \\t\\n]{0,2})?'
    more = f"{{0,{MAX_CALLS - 1}}}"
    rules["jcalls"] = f'jcall (jsep jcall){more} | "[" jsp jcall ("," jsp jcall){more} "]" jsp'
    rules["fence"] = '"```" ("json" | "JSON")? jsp jcalls "```"'
    rules["fenced"] = f"fence ([ \\t\\n]{{0,3}} fence){more}"
    # A fenced object named as no tool can be: one of the tools' arguments.
    named = '"\\"name\\"" jsp ":" jsp strayname'
    stray = f'{named} "," jsp "\\"arguments\\"" jsp ":" jsp ({" | ".join(roots)})'
    rules["strayname"] = f'"\\"" {_STRAY_NAME} "\\""'  # GBNF reads the class so too
    rules["stray"] = f'"```" ("json" | "JSON")? jsp "{{" jsp {stray} jsp "}}" jsp "```"'
    return [n for name in first for n in spellings(name)]


# A JSON string holding a character no tool name has, as the trigger and
# the grammar's "strayname" see it.
# Not a ".": a tool's name spelled with one (math.factorial) takes that
# tool's arguments alone. No control character: JSON has none raw in a
# string, and the parser reads a name holding one as text.
_STRAY_NAME = rf'[{NAME_CHARS}]*[^"\\\x00-\x1F{NAME_CHARS}][^"\\\x00-\x1F]{{0,200}}'


def _first_by_name(tools: Sequence[ToolSpec]) -> dict[str, ToolSpec]:
    """Each name's first tool, in order (a name offered twice is one tool)."""
    first: dict[str, ToolSpec] = {}
    for tool in tools:
        first.setdefault(tool.name, tool)
    return first


def _requires(spec: ToolSpec) -> bool:
    required = spec.parameters.get("required") if isinstance(spec.parameters, dict) else None
    return bool(required)


def _marker(rules: dict[str, str]) -> str:
    """The family's call marker: the fixed start of its call, up to the
    first whitespace or brace (`<tool_call>`, `[TOOL_CALLS]`)."""
    start = fixed_start(rules, "call")
    return re.split(r"[\s{\"]", start, maxsplit=1)[0]


def _escape(text: str) -> str:
    """`text` as an ECMAScript regex matching it literally."""
    return "".join("\\" + c if c in _SPECIAL else c for c in text)


_SPECIAL = frozenset("\\^$.|?*+()[]{}/")
