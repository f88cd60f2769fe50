"""gpt-oss (harmony channels): the real templates it is detected from,
rendering through the real template (reasoning effort as the thinking
switch), realistic outputs and every bad-output rule, and a forced call
round trip on a tiny GGUF with the real template."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from engy_local.chat import (
    Message,
    Text,
    Thinking,
    ToolCall,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolChoice,
    ToolResult,
    ToolSpec,
)
from engy_local.prompt.families import make_parser
from support.families.prompts import prepared, template
from support.families.spec import Case, Output, Rendered, RoundTrip, Stream
from support.parsing import Result, calls

FAMILY = "gpt-oss"
GPT_OSS = "openai-gpt-oss-120b.jinja"

# ---- rendering --------------------------------------------------------------------

LIST_DIR = ToolSpec(
    "list_dir",
    "List a directory.",
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)
READ = ToolSpec(
    "read_file",
    "Read a file.",
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)


def user(text: str) -> Message:
    return Message("user", (Text(text),))


CONVERSATION = (
    Message("system", (Text("SYSTEM-TEXT"),)),
    user("USER-ONE"),
    Message(
        "assistant",
        (
            Thinking("I will list."),
            Text("Let me look."),
            ToolCall("toolu_1", "list_dir", '{"path": "."}'),
        ),
    ),
    Message("tool", (ToolResult("toolu_1", "a.txt b.txt"),)),
    Message(
        "assistant",
        (
            Thinking("Read both."),
            ToolCall("toolu_2", "read_file", '{"path": "a.txt"}'),
            ToolCall("toolu_3", "read_file", '{"path": "b.txt"}'),
        ),
    ),
    Message("tool", (ToolResult("toolu_2", "AAA"), ToolResult("toolu_3", "BBB"))),
)


def prompt(messages: Sequence[Message], **request: Any) -> str:
    return prepared(template(GPT_OSS), FAMILY, messages, (LIST_DIR, READ), **request)


RENDERS = (
    Rendered(
        "an agent conversation",
        lambda: prompt(CONVERSATION),
        contains=(
            "<|start|>developer<|message|># Instructions\n\nSYSTEM-TEXT\n\n# Tools",
            "type list_dir = (_: {\npath: string,\n}) => any;",
            # Earlier reasoning and text beside a call are its analysis, then the call.
            "<|start|>user<|message|>USER-ONE<|end|>"
            "<|start|>assistant<|channel|>analysis<|message|>I will list.\n\nLet me look.<|end|>"
            "<|start|>assistant to=functions.list_dir<|channel|>commentary json<|message|>"
            '{"path": "."}<|call|>'
            '<|start|>functions.list_dir to=assistant<|channel|>commentary<|message|>"a.txt b.txt"'
            "<|end|>",
            # Two calls in one turn: one call per turn, each answered by its result.
            "<|start|>assistant<|channel|>analysis<|message|>Read both.<|end|>"
            "<|start|>assistant to=functions.read_file<|channel|>commentary json<|message|>"
            '{"path": "a.txt"}<|call|>'
            '<|start|>functions.read_file to=assistant<|channel|>commentary<|message|>"AAA"<|end|>'
            "<|start|>assistant to=functions.read_file<|channel|>commentary json<|message|>"
            '{"path": "b.txt"}<|call|>'
            '<|start|>functions.read_file to=assistant<|channel|>commentary<|message|>"BBB"<|end|>',
        ),
        ends="<|start|>assistant",
    ),
    Rendered(
        "reasoning is dropped once a final answer follows",
        lambda: prompt(
            (*CONVERSATION, Message("assistant", (Text("Both read."),)), user("USER-TWO"))
        ),
        absent=("I will list.", "Read both."),
        contains=("<|start|>assistant<|channel|>final<|message|>Both read.<|end|>",),
    ),
)
# The thinking switch is the reasoning effort; a forced call reasons low.
THINKING = (
    *(
        Rendered(
            f"thinking {thinking}: reasoning {effort}",
            lambda thinking=thinking: prompt((user("Hi"),), thinking=thinking),
            contains=(f"\nReasoning: {effort}\n",),
        )
        for thinking, effort in [(None, "medium"), (True, "high"), (False, "low")]
    ),
    Rendered(
        "a forced call reasons low",
        lambda: prompt((user("Hi"),), thinking=True, tool_choice=ToolChoice("tool", "read_file")),
        contains=("\nReasoning: low\n",),
    ),
)

# ---- the parser -------------------------------------------------------------------

TOOLS = ("Bash", "Read", "Write", "get_goal")
NESTED = {
    "file_path": "/tmp/a.py",
    "content": 'def f():\n    return "}{ <|en" + "d|>"\n\u00e9',
    "mode": 420,
    "options": {"backup": True, "tags": ["x", {"y": None}], "ratio": -0.5e-3},
}
NESTED_JSON = json.dumps(NESTED)

# name, output, expected
GOOD = [
    (
        "reasoning then the answer",
        "<|channel|>analysis<|message|>The user greets me. I answer briefly.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Hello! How can I help?<|return|>",
        Result(thinking="The user greets me. I answer briefly.", text="Hello! How can I help?"),
    ),
    (
        "end-of-generation markers are not fed",
        "<|channel|>analysis<|message|>Short.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Done.",
        Result(thinking="Short.", text="Done."),
    ),
    (
        "text keeps its whitespace, markdown and lookalikes",
        "<|channel|>final<|message|>\n  Use `<|end` or a <b>tag</b>:\n\n- one\n",
        Result(text="\n  Use `<|end` or a <b>tag</b>:\n\n- one\n"),
    ),
    (
        "reasoning then two calls with string, number and nested arguments",
        "<|channel|>analysis<|message|>I need to read the file, then write it back.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.Read <|constrain|>json"
        '<|message|>{"file_path": "/tmp/a.py", "limit": 20}<|call|>'
        "<|start|>assistant<|channel|>commentary to=functions.Write <|constrain|>json"
        "<|message|>" + NESTED_JSON + "<|call|>",
        Result(
            thinking="I need to read the file, then write it back.",
            calls=calls(
                ("Read", '{"file_path": "/tmp/a.py", "limit": 20}'), ("Write", NESTED_JSON)
            ),
        ),
    ),
    (
        "the recipient in the role, as the template writes calls",
        "<|channel|>analysis<|message|>List it.<|end|>"
        "<|start|>assistant to=functions.Bash<|channel|>commentary json"
        '<|message|>{"command": "ls -la"}<|call|>',
        Result(thinking="List it.", calls=calls(("Bash", '{"command": "ls -la"}'))),
    ),
    (
        "the recipient right after the prompt's role",
        ' to=functions.Bash<|channel|>commentary <|constrain|> json<|message|>{"command":"pwd"}',
        Result(calls=calls(("Bash", '{"command":"pwd"}'))),
    ),
    (
        "a preamble before the call is text",
        "<|channel|>analysis<|message|>Check first.<|end|>"
        "<|start|>assistant<|channel|>commentary<|message|>Let me check the goal.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.get_goal <|constrain|>json"
        "<|message|>{}<|call|>",
        Result(
            thinking="Check first.", text="Let me check the goal.", calls=calls(("get_goal", "{}"))
        ),
    ),
    (
        "a call on the analysis channel, an empty body, whitespace between messages",
        "<|channel|>analysis to=functions.get_goal code<|message|><|call|>\n"
        '<|start|>assistant<|channel|>commentary to=functions.Read json<|message|> {"file_path":'
        ' "/b"} <|call|>',
        Result(calls=calls(("get_goal", "{}"), ("Read", '{"file_path": "/b"}'))),
    ),
    (
        "a final answer with a content type",
        '<|channel|>final <|constrain|>json<|message|>{"ok": true}',
        Result(text='{"ok": true}'),
    ),
    (
        "a missing end marker before the next header",
        "<|channel|>analysis<|message|>hmm<|start|>assistant<|channel|>final<|message|>Hi"
        "<|channel|>final<|message|>!",
        Result(thinking="hmm", text="Hi!"),
    ),
]

# name, output, expected
BAD = [
    ("output without any header is text", "Hello there <|", Result(text="Hello there <|")),
    (
        "an unclosed analysis is thinking to the end",
        "<|channel|>analysis<|message|>Still thinking about <|en",
        Result(thinking="Still thinking about <|en"),
    ),
    (
        "an unclosed header is text",
        "<|channel|>final<|message|>Hi<|end|><|start|>assistant<|channel|>analy",
        Result(text="Hi<|start|>assistant<|channel|>analy"),
    ),
    (
        "a lone role at the end is dropped",
        "<|channel|>final<|message|>Hi<|end|><|start|>assistant",
        Result(text="Hi"),
    ),
    (
        "a header cut by an end marker is text, and so is its message",
        "<|channel|>final<|end|>Hi",
        Result(text="<|channel|>finalHi"),
    ),
    (
        "a malformed header is text with its body",
        '<|channel|>commentary to=functions.Bash {"x"}<|message|>{}<|call|>',
        Result(text='<|channel|>commentary to=functions.Bash {"x"}<|message|>{}'),
    ),
    (
        "a header past 256 characters is text",
        "<|channel|>" + "a" * 300 + "<|message|>x",
        Result(text="<|channel|>" + "a" * 300 + "<|message|>x"),
    ),
    (
        "a tool that was not offered is text",
        "<|channel|>analysis<|message|>Delete it.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.rm_rf <|constrain|>json"
        '<|message|>{"p": "/"}<|call|>',
        Result(
            thinking="Delete it.",
            text="<|start|>assistant<|channel|>commentary to=functions.rm_rf <|constrain|>json"
            '<|message|>{"p": "/"}',
        ),
    ),
    (
        "a built-in tool is text",
        "<|channel|>analysis to=python code<|message|>print(1)<|call|>",
        Result(text="<|channel|>analysis to=python code<|message|>print(1)"),
    ),
    (
        "arguments that are not an object are text",
        '<|channel|>commentary to=functions.Bash json<|message|> ["ls"]<|call|>',
        Result(text='<|channel|>commentary to=functions.Bash json<|message|> ["ls"]'),
    ),
    (
        "broken JSON is cut back and closed, the rest dropped",
        '<|channel|>commentary to=functions.Bash json<|message|>{"command": "ls", oops}<|call|>'
        "<|start|>assistant<|channel|>final<|message|>ok",
        Result(text="ok", calls=calls(("Bash", '{"command": "ls"}'))),
    ),
    (
        "an unclosed call inside a string is closed",
        "<|channel|>commentary to=functions.Write json<|message|>"
        '{"file_path": "/a", "content": "he',
        Result(calls=calls(("Write", '{"file_path": "/a", "content": "he"}'))),
    ),
    (
        "an end marker inside a string ends the call",
        '<|channel|>commentary to=functions.Bash json<|message|>{"command": "echo <|end|>',
        Result(calls=calls(("Bash", '{"command": "echo "}'))),
    ),
    (
        "text after the object is dropped",
        "<|channel|>commentary to=functions.get_goal json<|message|>{}} and more<|call|>",
        Result(calls=calls(("get_goal", "{}"))),
    ),
    (
        "raw control characters in strings are escaped",
        '<|channel|>commentary to=functions.Write json<|message|>{"content": "a\nb\tc"}',
        Result(calls=calls(("Write", '{"content": "a\\nb\\tc"}'))),
    ),
    (
        "text after an end marker without a header is text",
        "<|channel|>final<|message|>Hi.<|end|>\n\nAnd more.",
        Result(text="Hi.And more."),
    ),
]

STREAM = Stream(
    "arguments stream as generated",
    lambda: make_parser(FAMILY, tools=TOOLS, thinking=False, new_id=lambda: "call_0"),
    [
        ("<|channel|>commentary to=functions.Bash", []),
        (" <|constrain|>json<|message|>", []),
        # Deltas run up to where the object could be closed.
        ('{"command": ', [ToolCallStart(0, "call_0", "Bash"), ToolCallDelta(0, "{")]),
        ('"ls <', [ToolCallDelta(0, '"command": "ls ')]),  # "<" may start a marker
        ('-la"}', [ToolCallDelta(0, '<-la"}'), ToolCallEnd(0, '{"command": "ls <-la"}')]),
    ],
)

# ---- end to end on a tiny GGUF ------------------------------------------------------

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "limit": {"type": "integer"},
        "options": {
            "type": "object",
            "properties": {"encoding": {"type": "string"}},
            "required": ["encoding"],
        },
    },
    "required": ["path", "limit", "options"],
    "additionalProperties": False,
}
TINY = RoundTrip(FAMILY, GPT_OSS, SCHEMA, answer_is_text=True)

CASE = Case(
    name="harmony",
    family=FAMILY,
    tools=TOOLS,
    detected={GPT_OSS: FAMILY, "llm-jp-llm-jp-4.1-8b-thinking.jinja": FAMILY},
    not_taken=("google-gemma-4-31B-it.jinja",),  # its channels are not harmony
    renders=RENDERS,
    thinking=THINKING,
    outputs=tuple(Output(name, output, expected) for name, output, expected in GOOD),
    bad=tuple(Output(name, output, expected) for name, output, expected in BAD),
    untooled=(
        (FAMILY, '<|channel|>commentary to=functions.Bash json<|message|>{"command": "ls"}'),
    ),
    streams=(STREAM,),
    round_trips=(TINY,),
)
