"""Kimi K3: the turn is tagged markup, `<|open|>TAG attrs<|sep|>` ...
`<|close|>TAG<|sep|>`: reasoning, the answer, then the calls.

    <|open|>think<|sep|>REASONING<|close|>think<|sep|>
    <|open|>response<|sep|>TEXT<|close|>response<|sep|>
    <|open|>tools<|sep|>
    <|open|>call tool="NAME" index="1"<|sep|>
    <|open|>argument key="path" type="string"<|sep|>/a b<|close|>argument<|sep|>
    <|open|>argument key="limit" type="number"<|sep|>20<|close|>argument<|sep|>
    <|close|>call<|sep|>...<|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>

(no whitespace between tags in the template). A call's arguments may instead
be one JSON object in `<|open|>json type="object"<|sep|>` ... `<|close|>json<|sep|>`.
String values are written as they are; the others (number, boolean, null,
object, array) as JSON. Attribute values escape `&` and `"` as entities.

Thinking is the template's `thinking` switch, on unless turned off: the
prompt ends inside `<|open|>think<|sep|>` or `<|open|>response<|sep|>`.
While it is on the template renders the reasoning of every earlier turn;
with it off, none.

Rules beyond `framed` and `MarkupCallsParser`: `type="string"` marks a
string value, any other type a JSON one; the frame's own tags around the
answer (`response`, the message's close, `<|end_of_msg|>`) are dropped.
Forced calls write one argument element per parameter, typed from the schema.
"""

from __future__ import annotations

from typing import Any

from ...chat import ToolSpec
from ...grammar.gbnf import literal
from .base import Family
from .elements import ElementLayout, element_call_rules
from .framed import MarkupCallsParser

OPEN, CLOSE, SEP = "<|open|>", "<|close|>", "<|sep|>"


def opening(tag: str, attrs: str = "") -> str:
    return f"{OPEN}{tag}{attrs}{SEP}"


def closing(tag: str) -> str:
    return f"{CLOSE}{tag}{SEP}"


def escaped(value: str) -> str:
    """An attribute value as the template writes it."""
    return value.replace("&", "&amp;").replace('"', "&quot;")


class KimiK3Parser(MarkupCallsParser):
    think_open = opening("think")
    think_close = closing("think")
    section_open = (opening("tools"),)
    section_close = closing("tools")
    call_open = OPEN + "call"
    call_close = closing("call")
    head_end = SEP
    name_key = "tool"
    param_open = OPEN + "argument"
    param_close = closing("argument")
    param_head_end = SEP
    param_key = "key"
    json_open = OPEN + "json"
    json_close = closing("json")
    entities = True
    dropped = (opening("response"), closing("response"), closing("message"), "<|end_of_msg|>")

    def _is_string(self, attrs: dict[str, str]) -> bool:
        return attrs.get("type") == "string"


LAYOUT = ElementLayout(
    call_head=lambda name: opening("call", f' tool="{escaped(name)}" index="1"'),
    key_open=OPEN + 'argument key="',
    key_close=lambda kind: f'" type="{kind}"{SEP}',
    value_close=closing("argument"),
    after_value="",
    call_close=closing("call"),
    escape=escaped,
)


def tool_rules(tools: list[ToolSpec], rules: dict[str, str]) -> None:
    """One call, as the template writes calls (see `elements.element_call_rules`),
    after the answer's (empty) response element."""
    alternatives = element_call_rules(tools, rules, LAYOUT)
    head = literal(closing("response") + opening("tools"))
    response = literal(opening("response"))
    rules["call"] = f"{response}? {head} ({alternatives}) {literal(closing('tools'))}"


def thinking(on: bool) -> dict[str, Any]:
    return {"thinking": on}


FAMILY = Family(
    name="kimi-k3",
    markers=(OPEN, CLOSE, SEP),
    parser=KimiK3Parser,
    tool_rules=tool_rules,
    priority=60,
    thinking=thinking,
    reasoning_start=opening("think"),
    reasoning_end=closing("think"),
)
