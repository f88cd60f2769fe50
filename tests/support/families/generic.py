"""The generic family, for templates that cannot render tools: the tools
as system-prompt text, calls and results as text in the real templates'
prompts, detection, the parser, and forced calls end to end on the real
gemma-3-270m (the base model from its wheels)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engy_local.chat import Message, Text, ToolCall, ToolChoice, ToolResult, ToolSpec
from engy_local.models.catalog import load_catalog
from engy_local.prompt.families.generic import describe
from engy_local.prompt.render.template import ChatTemplate
from support.families.prompts import prepared, source
from support.families.spec import Case, Output, Rendered, RoundTrip
from support.parsing import Result, calls

FAMILY = "generic"
GEMMA2 = "google-gemma-2-2b-it.jinja"
PHI35 = "microsoft-Phi-3.5-mini-instruct.jinja"


def gemma3_source() -> str:
    """The pretrained gemma-3-270m's template (it ships in the catalog)."""
    text = load_catalog().entries["gemma-3-270m-base"].chat_template
    assert text
    return text


READ = ToolSpec(
    "read_file",
    "Read a file.",
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)
NOTE = ToolSpec("note", "Écrire une note.", {})


def sys_(text: str) -> Message:
    return Message("system", (Text(text),))


def user(text: str) -> Message:
    return Message("user", (Text(text),))


CALL = ToolCall("toolu_1", "read_file", '{"path": "/etc/hostname"}')
CALL_TEXT = (
    '<tool_call>\n{"name": "read_file", "arguments": {"path": "/etc/hostname"}}\n</tool_call>'
)
TOOLS_TEXT = describe([READ])
CONVERSATION = (
    sys_("Be brief."),
    user("Read /etc/hostname."),
    Message("assistant", (CALL,)),
    Message("tool", (ToolResult("toolu_1", "host-7"),)),
)


def prompt(template_source: str, messages: Sequence[Message], **request: Any) -> str:
    chat = ChatTemplate(template_source, bos_token="<bos>")
    return prepared(chat, FAMILY, messages, (READ,), **request)


RENDERS = (
    Rendered(
        "gemma-3-270m",
        lambda: prompt(gemma3_source(), CONVERSATION),
        equals=(
            "<bos><start_of_turn>user\n"
            f"Be brief.\n\n{TOOLS_TEXT}\n\nRead /etc/hostname.<end_of_turn>\n"
            f"<start_of_turn>model\n{CALL_TEXT}<end_of_turn>\n"
            "<start_of_turn>user\nResult of read_file:\n"
            "<tool_response>\nhost-7\n</tool_response><end_of_turn>\n"
            "<start_of_turn>model\n"
        ),
    ),
    Rendered(
        "gemma-2: results are user text",
        lambda: prompt(source(GEMMA2), CONVERSATION),
        equals=(
            "<bos><start_of_turn>user\n"
            f"Be brief.\n\n{TOOLS_TEXT}\n\nRead /etc/hostname.<end_of_turn>\n"
            f"<start_of_turn>model\n{CALL_TEXT}<end_of_turn>\n"
            "<start_of_turn>user\n<tool_response>\nhost-7\n</tool_response><end_of_turn>\n"
            "<start_of_turn>model\n"
        ),
    ),
    Rendered(
        "phi-3.5",
        lambda: prompt(source(PHI35), CONVERSATION),
        contains=(
            f"<|system|>\nBe brief.\n\n{TOOLS_TEXT}<|end|>",
            f"<|assistant|>\n{CALL_TEXT}<|end|>",
            "<|user|>\n<tool_response>\nhost-7\n</tool_response><|end|>",
        ),
    ),
    Rendered(
        "tool_choice none describes no tools",
        lambda: prompt(gemma3_source(), CONVERSATION, tool_choice=ToolChoice("none")),
        absent=("# Tools",),
        contains=(CALL_TEXT,),
    ),
)
PARSER_ROUND_TRIP = Output(
    "calls in the text the tools ask for",
    "Let me read it.\n" + CALL_TEXT + "\n"
    '<tool_call>\n{"name": "note", "arguments": {"text": "a\\nb", "n": [1, 2.5]}}\n'
    "</tool_call>",
    Result(
        text="Let me read it.",
        calls=calls(
            ("read_file", '{"path": "/etc/hostname"}'),
            ("note", '{"text": "a\\nb", "n": [1, 2.5]}'),
        ),
    ),
)

# Bounded: left to itself, the 270M model runs a path on to any token limit
# ("/etc/hostname/my_hostname.mydomain.com/my_hostname..."); the forced-call
# grammar keeps a string within maxLength, so the call always completes.
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"path": {"type": "string", "maxLength": 48}},
    "required": ["path"],
}

CASE = Case(
    name="generic",
    family=FAMILY,
    tools=("read_file", "note"),
    detected={GEMMA2: FAMILY, PHI35: FAMILY, "Qwen-Qwen3-0.6B.jinja": "hermes"},
    renders=RENDERS,
    outputs=(PARSER_ROUND_TRIP,),
    # The real gemma-3-270m may answer a result with another call.
    round_trips=(RoundTrip("gemma-3-270m", None, SCHEMA),),
)
