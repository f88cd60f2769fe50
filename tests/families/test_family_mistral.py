"""Mistral (Nemo, Small 3.2, Devstral, Ministral 3 reasoning): detection from
the real templates, rendering through them, the parser on realistic outputs
split at every offset and on every bad-output rule, the forced-call grammars,
and a forced call round trip on tiny GGUFs built with the real Nemo and
Ministral 3 templates through both endpoints."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import jsonschema
import llama_cpp
import openai
import pytest
from support.grammar import Vocab
from support.parsing import Result, assert_parses, calls, parse, random_value
from support.paths import CACHE, FIXTURES
from support.server import EngyServer

from engy_local.chat import (
    Message,
    Text,
    TextDelta,
    Thinking,
    ThinkingDelta,
    ToolCall,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolResult,
    ToolSpec,
)
from engy_local.prompt.families import detect_family, get, make_parser
from engy_local.prompt.families.mistral import MistralParser
from engy_local.prompt.forced import forced_call_grammar
from engy_local.prompt.messages import mistral_call_id, to_template_messages, to_template_tools
from engy_local.prompt.template import ChatTemplate

TEMPLATES = FIXTURES / "chat-templates"
NEMO = "mistralai-Mistral-Nemo-Instruct-2407"
SMALL = "Mistral-Small-3.2-24B-Instruct-2506"
DEVSTRAL = "unsloth-mistral-Devstral-Small-2507"
MINISTRAL = "mistralai-Ministral-3-14B-Reasoning-2512"


def template(name: str) -> ChatTemplate:
    path = TEMPLATES / f"{name}.jinja"
    if not path.is_file():
        pytest.skip(f"chat template fixture {path} is absent")
    return ChatTemplate(path.read_text(encoding="utf-8"), bos_token="<s>", eos_token="</s>")


# ---- detection -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "family"),
    [(NEMO, "mistral-nemo"), (SMALL, "mistral"), (DEVSTRAL, "mistral"), (MINISTRAL, "mistral")],
)
def test_detected_from_the_template_text(name: str, family: str) -> None:
    assert detect_family(template(name).source) == family
    chosen = get(family)
    assert (chosen.reasoning_start, chosen.reasoning_end) == ("[THINK]", "[/THINK]")
    # No template has a thinking switch: Ministral 3 reasons when its
    # default system prompt (or the client's) asks it to.
    assert chosen.thinking is None and template(name).thinking_switch is None


# ---- rendering through the real templates ----------------------------------------

READ_ARGS = '{"path": "/etc/hostname", "limit": 20}'
SEARCH_ARGS = '{"pattern": "TODO", "options": {"regex": false, "paths": ["src", "tests"]}}'
TOOLS = [
    ToolSpec(
        "read_file",
        "Read a file.",
        {
            "type": "object",
            "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["path"],
        },
    ),
    ToolSpec("search", "Search the code.", {"type": "object", "properties": {}}),
]
CONVERSATION = [
    Message("system", (Text("SYSTEM-TEXT"),)),
    Message("user", (Text("USER-ONE: hostname and TODOs?"),)),
    Message(
        "assistant",
        (
            Thinking("REASONING-ONE"),
            Text("Let me look."),
            ToolCall("toolu_01", "read_file", READ_ARGS),
            ToolCall("toolu_02", "search", SEARCH_ARGS),
        ),
    ),
    Message("tool", (ToolResult("toolu_01", "build-host-7"), ToolResult("toolu_02", "a.py:1"))),
]
FOLLOW_UP = [
    Message("assistant", (Text("It is build-host-7."),)),
    Message("user", (Text("USER-TWO: thanks"),)),
]
ID1, ID2 = mistral_call_id("toolu_01"), mistral_call_id("toolu_02")
TOOLS_JSON = json.dumps(to_template_tools(TOOLS))

# What each template must show of the conversation, in this order. Nemo and
# Small 3.2 drop the text beside calls, and only Ministral 3 keeps earlier
# reasoning (given to it as a `thinking` chunk), where the model wrote it.
RENDERED = {
    NEMO: [
        "[INST]SYSTEM-TEXT\n\nUSER-ONE: hostname and TODOs?[/INST]",
        f'[TOOL_CALLS][{{"name": "read_file", "arguments": {READ_ARGS}, "id": "{ID1}"}}, '
        f'{{"name": "search", "arguments": {SEARCH_ARGS}, "id": "{ID2}"}}]</s>',
        f'[TOOL_RESULTS]{{"content": build-host-7, "call_id": "{ID1}"}}[/TOOL_RESULTS]'
        f'[TOOL_RESULTS]{{"content": a.py:1, "call_id": "{ID2}"}}[/TOOL_RESULTS]',
    ],
    SMALL: [
        "[SYSTEM_PROMPT]SYSTEM-TEXT[/SYSTEM_PROMPT]",
        "[INST]USER-ONE: hostname and TODOs?[/INST]",
        f"[TOOL_CALLS]read_file[CALL_ID]{ID1}[ARGS]{READ_ARGS}"
        f"[TOOL_CALLS]search[CALL_ID]{ID2}[ARGS]{SEARCH_ARGS}</s>",
        f"[TOOL_RESULTS]{ID1}[TOOL_CONTENT]build-host-7[/TOOL_RESULTS]"
        f"[TOOL_RESULTS]{ID2}[TOOL_CONTENT]a.py:1[/TOOL_RESULTS]",
    ],
    **{
        name: [
            "[SYSTEM_PROMPT]SYSTEM-TEXT[/SYSTEM_PROMPT]",
            "[INST]USER-ONE: hostname and TODOs?[/INST]",
            f"{thinking}Let me look.[TOOL_CALLS]read_file[ARGS]{READ_ARGS}"
            f"[TOOL_CALLS]search[ARGS]{SEARCH_ARGS}</s>",
            "[TOOL_RESULTS]build-host-7[/TOOL_RESULTS][TOOL_RESULTS]a.py:1[/TOOL_RESULTS]",
        ]
        for name, thinking in ((DEVSTRAL, ""), (MINISTRAL, "[THINK]REASONING-ONE[/THINK]"))
    },
}


def render(name: str, conversation: list[Message]) -> str:
    chosen = template(name)
    messages = to_template_messages(conversation, quirks=chosen.quirks)
    return chosen.render(messages, tools=to_template_tools(TOOLS), add_generation_prompt=True)


def in_order(prompt: str, pieces: list[str]) -> None:
    at = 0
    for piece in pieces:
        found = prompt.find(piece, at)
        assert found >= 0, f"{piece!r} not found after offset {at} in {prompt[at:]!r}"
        at = found + len(piece)


@pytest.mark.parametrize("name", list(RENDERED))
def test_agent_turn_renders_with_the_markers(name: str) -> None:
    """The agent loop's prompt: it ends with the results, where the model
    writes next, and the tools are listed before the last user turn."""
    prompt = render(name, CONVERSATION)
    in_order(prompt, RENDERED[name])
    assert prompt.endswith("[/TOOL_RESULTS]")
    assert prompt.count("[AVAILABLE_TOOLS]") == 1
    assert TOOLS_JSON in prompt or name == NEMO  # Nemo writes the list itself
    assert ("REASONING-ONE" in prompt) is (name == MINISTRAL)
    assert prompt.index("[AVAILABLE_TOOLS]") < prompt.index("USER-ONE")


@pytest.mark.parametrize("name", list(RENDERED))
def test_follow_up_turn_renders(name: str) -> None:
    prompt = render(name, CONVERSATION + FOLLOW_UP)
    in_order(prompt, [*RENDERED[name], "It is build-host-7.</s>", "[INST]USER-TWO: thanks[/INST]"])
    assert prompt.endswith("[/INST]")
    assert prompt.index("[AVAILABLE_TOOLS]") < prompt.index("USER-TWO")


@pytest.mark.parametrize("name", list(RENDERED))
def test_user_text_after_results_joins_the_last_result(name: str) -> None:
    # Nemo, Small 3.2 and Ministral raise on a user turn right after tool
    # results; the text is folded into the last result instead.
    conversation = [*CONVERSATION, Message("user", (Text("USER-AFTER"),))]
    prompt = render(name, conversation)
    assert "USER-AFTER" in prompt
    assert prompt.endswith("[/TOOL_RESULTS]") or prompt.endswith("USER-AFTER[/INST]")


def test_ministral_keeps_reasoning_where_the_model_wrote_it() -> None:
    # A turn that is only reasoning (cut off by max_tokens) would make the
    # template raise as an empty turn; as a chunk it renders.
    conversation = [
        Message("user", (Text("u1"),)),
        Message("assistant", (Thinking("half a thought"),)),
        Message("user", (Text("u2"),)),
        Message("assistant", (Thinking("plan"), Text("The answer."))),
        Message("user", (Text("u3"),)),
    ]
    prompt = render(MINISTRAL, conversation)
    in_order(
        prompt,
        [
            "[INST]u1[/INST][THINK]half a thought[/THINK]</s>",
            "[INST]u2[/INST][THINK]plan[/THINK]The answer.</s>",
            "[INST]u3[/INST]",
        ],
    )


@pytest.mark.parametrize("name", list(RENDERED))
def test_rendered_calls_parse_back(name: str) -> None:
    """The history form of the calls, read by the parser, gives the calls."""
    prompt = render(name, CONVERSATION)
    start = prompt.index("[TOOL_CALLS]")
    output = prompt[start : prompt.index("</s>", start)]
    expected = Result(calls=calls(("read_file", READ_ARGS), ("search", SEARCH_ARGS)))
    assert_parses(output, expected, family=detect_family(template(name).source), tools=NAMES)


# ---- the parser on outputs written in each variant's format --------------------------

NAMES = ("read_file", "search", "get_time")
WRITE = json.dumps({"content": 'x = "[TOOL_CALLS]a[ARGS]{}"\n\u00e9', "n": -1.5e-3})
BOTH = calls(("read_file", READ_ARGS), ("search", SEARCH_ARGS))

# name, family, output, expected
GOOD = [
    (
        "nemo parallel calls",
        "mistral-nemo",
        f'[TOOL_CALLS][{{"name": "read_file", "arguments": {READ_ARGS}, "id": "a1B2c3D4e"}}, '
        f'{{"name": "search", "arguments": {SEARCH_ARGS}, "id": "Zz9Yy8Xx7"}}]',
        Result(calls=BOTH),
    ),
    (
        "nemo text, a spaced list, keys in another order",
        "mistral-nemo",
        "I will check.\n[TOOL_CALLS] [\n"
        f'  {{"id": "a1B2c3D4e", "arguments": {READ_ARGS}, "name": "read_file"}},\n'
        f'  {{"name": "search", "id": "Zz9Yy8Xx7", "arguments": {SEARCH_ARGS}}}\n]\n',
        Result(text="I will check.", calls=BOTH),
    ),
    (
        "nemo single object, string-encoded arguments",
        "mistral-nemo",
        '[TOOL_CALLS]{"name": "read_file", "arguments": "{\\"path\\": \\"/x\\"}"}',
        Result(calls=calls(("read_file", '{"path": "/x"}'))),
    ),
    ("nemo plain answer", "mistral-nemo", "It is 42.", Result(text="It is 42.")),
    (
        "small 3.2 calls with ids",
        "mistral",
        f"I'll check both.[TOOL_CALLS]read_file[CALL_ID]a1B2c3D4e[ARGS]{READ_ARGS}"
        f"[TOOL_CALLS]search[CALL_ID]Zz9Yy8Xx7[ARGS]{SEARCH_ARGS}",
        Result(text="I'll check both.", calls=BOTH),
    ),
    (
        "devstral calls and text after",
        "mistral",
        f"I'll check both.\n\n[TOOL_CALLS]read_file[ARGS]{READ_ARGS}\n"
        f"[TOOL_CALLS]search[ARGS]{SEARCH_ARGS}\n\nBoth running.",
        Result(text="I'll check both.Both running.", calls=BOTH),
    ),
    (
        "ministral reasoning, text and calls",
        "mistral",
        "[THINK]The user wants the hostname and the TODOs.\nBoth at once.[/THINK]"
        f"Checking both.[TOOL_CALLS]read_file[ARGS]{READ_ARGS}"
        f"[TOOL_CALLS]search[ARGS]{SEARCH_ARGS}",
        Result(
            text="Checking both.",
            thinking="The user wants the hostname and the TODOs.\nBoth at once.",
            calls=BOTH,
        ),
    ),
    (
        "ministral reasoning then an answer",
        "mistral",
        "[THINK]\nSimple arithmetic.\n[/THINK]\n\nThe answer is **42**.",
        Result(text="The answer is **42**.", thinking="Simple arithmetic."),
    ),
    (
        "a marker inside reasoning is reasoning",
        "mistral",
        "[THINK]I could write [TOOL_CALLS]read_file[ARGS]{} here.[/THINK]"
        '[TOOL_CALLS]read_file[ARGS]{"path": "/x"}',
        Result(
            thinking="I could write [TOOL_CALLS]read_file[ARGS]{} here.",
            calls=calls(("read_file", '{"path": "/x"}')),
        ),
    ),
    (
        "text that only looks like markers",
        "mistral",
        "Use a[i], [TOOL], [TOOL_CALL] and [THINK] [/THINK] freely.",
        Result(text="Use a[i], [TOOL], [TOOL_CALL] and [THINK] [/THINK] freely."),
    ),
    (
        "strings holding markers, escapes and control characters",
        "mistral",
        f"[TOOL_CALLS]get_time[ARGS]{WRITE}",
        Result(calls=calls(("get_time", WRITE))),
    ),
    (
        "compact v11 call without [ARGS], no arguments",
        "mistral",
        '[TOOL_CALLS]read_file{"path": "/a"}[TOOL_CALLS]get_time[ARGS]{}',
        Result(calls=calls(("read_file", '{"path": "/a"}'), ("get_time", "{}"))),
    ),
]


@pytest.mark.parametrize(
    ("family", "output", "expected"), [row[1:] for row in GOOD], ids=[row[0] for row in GOOD]
)
def test_outputs(family: str, output: str, expected: Result) -> None:
    assert_parses(output, expected, family=family, tools=NAMES)
    # Either family's parser reads either syntax.
    other = "mistral" if family == "mistral-nemo" else "mistral-nemo"
    assert_parses(output, expected, family=other, tools=NAMES)


def test_tool_names_that_are_prefixes_of_others() -> None:
    output = '[TOOL_CALLS]read[ARGS]{"a": 1}[TOOL_CALLS]read_file[ARGS]{"b": 2}'
    expected = Result(calls=calls(("read", '{"a": 1}'), ("read_file", '{"b": 2}')))
    assert_parses(output, expected, family="mistral", tools=("read_file", "read"))


BAD = [
    (
        "a tool that was not offered is text",
        'Sure.\n[TOOL_CALLS]rm_rf[ARGS]{"p": "/"}\nAfter.',
        Result(text='Sure.\n[TOOL_CALLS]rm_rf[ARGS]{"p": "/"}\nAfter.'),
    ),
    (
        "a list call to a tool that was not offered is text",
        'Sure. [TOOL_CALLS][{"name": "rm_rf", "arguments": {}}] After.',
        Result(text='Sure. [TOOL_CALLS][{"name": "rm_rf", "arguments": {}}] After.'),
    ),
    (
        "a name without [ARGS] is text",
        "[TOOL_CALLS]read_file and then [TOOL_CALLS]read_file[ARG]{}",
        Result(text="[TOOL_CALLS]read_file and then [TOOL_CALLS]read_file[ARG]{}"),
    ),
    (
        "a list broken before the name is text",
        'A [TOOL_CALLS][{"nam: "read_file"}] B',
        Result(text='A [TOOL_CALLS][{"nam: "read_file"}] B'),
    ),
    (
        "a list object without a name is text",
        '[TOOL_CALLS][{"arguments": {}}]',
        Result(text='[TOOL_CALLS][{"arguments": {}}]'),
    ),
    ("an empty list is text", "[TOOL_CALLS][]", Result(text="[TOOL_CALLS][]")),
    ("a lone marker is text", "Hi [TOOL_CALLS]  ", Result(text="Hi [TOOL_CALLS]  ")),
    ("output ending inside a marker", "Hello [TOOL_CA", Result(text="Hello [TOOL_CA")),
    (
        "output ending inside a name",
        "[TOOL_CALLS]read_fi",
        Result(text="[TOOL_CALLS]read_fi"),
    ),
    (
        "a marker just after a failed one still calls",
        "[TOOL_CALLS][TOOL_CALLS]get_time[ARGS]{}",
        Result(text="[TOOL_CALLS]", calls=calls(("get_time", "{}"))),
    ),
    (
        "JSON broken after the start is cut back, the rest is text",
        '[TOOL_CALLS]read_file[ARGS]{"path": "/a", oops} then text',
        Result(text="oops} then text", calls=calls(("read_file", '{"path": "/a"}'))),
    ),
    (
        "arguments cut off inside a string",
        '[TOOL_CALLS]search[ARGS]{"pattern": "TO',
        Result(calls=calls(("search", '{"pattern": "TO"}'))),
    ),
    (
        "arguments cut off inside a key, in nested arrays",
        '[TOOL_CALLS]search[ARGS]{"a": [[1, 2], [3',
        Result(calls=calls(("search", '{"a": [[1, 2], [3]]}'))),
    ),
    ("no arguments at all", "[TOOL_CALLS]get_time[ARGS]", Result(calls=calls(("get_time", "{}")))),
    (
        "a call id without [ARGS]",
        "[TOOL_CALLS]get_time[CALL_ID]abc12 and more",
        Result(text="abc12 and more", calls=calls(("get_time", "{}"))),
    ),
    (
        "arguments that are not an object",
        "[TOOL_CALLS]get_time[ARGS][1, 2][TOOL_CALLS]get_time[ARGS]null"
        '[TOOL_CALLS]read_file[ARGS]"{\\"path\\": \\"/x\\"}"',
        Result(
            calls=calls(("get_time", "{}"), ("get_time", "{}"), ("read_file", '{"path": "/x"}'))
        ),
    ),
    (
        "arguments that are not JSON",
        "[TOOL_CALLS]get_time[ARGS]now please",
        Result(text="now please", calls=calls(("get_time", "{}"))),
    ),
    (
        "raw control characters in strings are escaped",
        '[TOOL_CALLS]get_time[ARGS]{"a": "x\ny\tz"}',
        Result(calls=calls(("get_time", '{"a": "x\\ny\\tz"}'))),
    ),
    (
        "a stray brace after the arguments is text",
        "[TOOL_CALLS]get_time[ARGS]{}}",
        Result(text="}", calls=calls(("get_time", "{}"))),
    ),
    (
        "a later list object naming an unknown tool is text from its brace",
        '[TOOL_CALLS][{"name": "get_time", "arguments": {}}, {"name": "rm", "arguments": {}}]',
        Result(text='{"name": "rm", "arguments": {}}]', calls=calls(("get_time", "{}"))),
    ),
    (
        "a list object broken after the start",
        '[TOOL_CALLS][{"name": "read_file", "arguments": {"path": "/a", oops}}]',
        Result(text="oops}}]", calls=calls(("read_file", '{"path": "/a"}'))),
    ),
    (
        "an unclosed list",
        '[TOOL_CALLS][{"name": "read_file", "arguments": {"path": "/a"}',
        Result(calls=calls(("read_file", '{"path": "/a"}'))),
    ),
    (
        "a missing comma and a trailing comma in the list",
        '[TOOL_CALLS][{"name": "get_time", "arguments": {}} {"name": "search", '
        '"parameters": {"q": 1}},]',
        Result(calls=calls(("get_time", "{}"), ("search", '{"q": 1}'))),
    ),
    (
        "junk after a list object ends the list",
        '[TOOL_CALLS][{"name": "get_time", "arguments": {}}} ]',
        Result(text="} ]", calls=calls(("get_time", "{}"))),
    ),
    (
        "unclosed reasoning",
        "[THINK]still going [/THI",
        Result(thinking="still going [/THI"),
    ),
]


@pytest.mark.parametrize(("output", "expected"), [row[1:] for row in BAD], ids=[r[0] for r in BAD])
def test_bad_outputs(output: str, expected: Result) -> None:
    assert_parses(output, expected, family="mistral", tools=NAMES)


PIECES = [
    "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "[THINK]", "[/THINK]", "[TOOL_", "[", "]", "{", "}",
    "\n", " ", '"name"', '"arguments"', ":", ",", '"a\\"', "1", "n", "\\u12", "read_file",
]  # fmt: skip


def random_output(rng: random.Random) -> str:
    """A plausible output in either syntax, then damaged a little."""
    parts = []
    if rng.random() < 0.3:
        parts.append("[THINK]plan " + rng.choice(["a", "[b", "[/THI"]) + "[/THINK]")
    for _ in range(rng.randrange(4)):
        args = json.dumps({"x": random_value(rng)} if rng.random() < 0.8 else random_value(rng))
        name = rng.choice([*NAMES, "nope"])
        kind = rng.random()
        if kind < 0.3:
            parts.append(rng.choice(["Sure.", "a[i] < b\n", " ok "]))
        elif kind < 0.6:
            parts.append(f"[TOOL_CALLS]{name}[ARGS]{args}")
        elif kind < 0.7:
            parts.append(f"[TOOL_CALLS]{name}[CALL_ID]a1B2c3D4e[ARGS]{args}")
        else:
            items = ", ".join(
                f'{{"name": "{rng.choice(NAMES)}", "arguments": {args}, "id": "a1B2c3D4e"}}'
                for _ in range(rng.randint(1, 2))
            )
            parts.append(f"[TOOL_CALLS][{items}]")
    output = "".join(parts)
    for _ in range(rng.randrange(4)):
        at, kind = rng.randint(0, len(output)), rng.random()
        if kind < 0.4:
            output = output[:at] + output[at + rng.randint(1, 5) :]
        elif kind < 0.8:
            output = output[:at] + rng.choice(PIECES) + output[at:]
        else:
            output = output[:at]
    return output


def test_random_outputs_never_break_and_split_the_same() -> None:
    rng = random.Random(7)
    started = 0
    for _ in range(500):
        output = random_output(rng)
        whole = parse([output], family="mistral", tools=NAMES)
        started += bool(whole.calls)
        assert parse(list(output), family="mistral", tools=NAMES) == whole, output
        cut = rng.randint(0, len(output))
        assert parse([output[:cut], output[cut:]], family="mistral", tools=NAMES) == whole, output
        if not whole.calls and not output.lstrip().startswith("[THINK]"):  # nothing lost
            assert whole.text == output, output
    assert started > 100


def test_no_tools_offered_means_calls_are_text() -> None:
    for output in ["x [TOOL_CALLS]get_time[ARGS]{}", 'x [TOOL_CALLS][{"name": "get_time"}]']:
        assert_parses(output, Result(text=output), family="mistral", tools=())


def test_event_sequence_streams_arguments() -> None:
    """The exact events for a stream cut the way a model's tokens would be."""
    parser = MistralParser(tools=["search"], thinking=False, new_id=lambda: "toolu_1")
    steps: list[tuple[str, list[Any]]] = [
        ("[THINK]", []),
        ("Plan", [ThinkingDelta("Plan")]),
        (".[/TH", [ThinkingDelta(".")]),
        ("INK]Running", [TextDelta("Running")]),
        (" it.\n", [TextDelta(" it.")]),
        ("[TOOL_CALLS]", []),
        ("sea", []),
        ("rch[AR", []),
        ("GS]", [ToolCallStart(0, "toolu_1", "search")]),
        ('{"pattern', [ToolCallDelta(0, "{")]),
        ('": "TO', [ToolCallDelta(0, '"pattern": "TO')]),
        ('DO", "n": 1', [ToolCallDelta(0, 'DO", "n": 1')]),
        ("}", [ToolCallDelta(0, "}"), ToolCallEnd(0, '{"pattern": "TODO", "n": 1}')]),
        ("\n", []),
    ]
    for chunk, expected in steps:
        assert parser.feed(chunk) == expected, chunk
    assert parser.finish() == []


def test_nemo_list_streams_each_call() -> None:
    parser = MistralParser(tools=["search"], thinking=False, new_id=lambda: "toolu_1")
    assert parser.feed('[TOOL_CALLS][{"name": "sea') == []
    assert parser.feed('rch", "arguments": {"q": "a') == [
        ToolCallStart(0, "toolu_1", "search"),
        ToolCallDelta(0, '{"q": "a'),
    ]
    assert parser.feed('b"}, "id": "a1B2c3D4e"}') == [
        ToolCallDelta(0, 'b"}'),
        ToolCallEnd(0, '{"q": "ab"}'),
    ]
    assert parser.feed("]") == []
    assert parser.finish() == []


def test_text_is_held_only_while_it_may_be_a_marker() -> None:
    parser = MistralParser(tools=["search"], thinking=False, new_id=lambda: "x")
    assert parser.feed("Hello") == [TextDelta("Hello")]
    assert parser.feed(" [TOOL") == []
    assert parser.feed("S] ") == [TextDelta(" [TOOLS]")]
    assert parser.feed("[") == []  # and the space before it, which a call drops
    assert parser.finish() == [TextDelta(" [")]


# ---- forced-call grammars ---------------------------------------------------------

BASH = ToolSpec(
    "Bash",
    "Run a command",
    {
        "type": "object",
        "properties": {
            "command": {"type": "string"},
            "env": {"type": "object", "properties": {"HOME": {"type": "string"}}},
            "timeout": {"type": "number"},
        },
        "required": ["command"],
        "additionalProperties": False,
    },
)
FREE = ToolSpec("Free", "", {"type": "object"})


@pytest.fixture(scope="module")
def vocab() -> Iterator[Vocab]:
    path = FIXTURES / "vocab" / "ggml-vocab-qwen2.gguf"
    if not path.is_file():
        pytest.skip(f"vocab fixture not found: {path}")
    v = Vocab(path)
    yield v
    llama_cpp.llama_model_free(v.model)


def nemo(name: str, args: str, call_id: str = "a1B2c3D4e") -> str:
    return f'[TOOL_CALLS][{{"name": "{name}", "arguments": {args}, "id": "{call_id}"}}]'


@pytest.mark.parametrize(
    ("family", "text", "ok"),
    [
        ("mistral", '[TOOL_CALLS]Bash[ARGS]{"command": "ls -la"}', True),
        ("mistral", '[TOOL_CALLS]Bash[ARGS]{"command": "ls", "env": {"HOME": "/"}}', True),
        ("mistral", "[TOOL_CALLS]Free[ARGS]{}", True),
        ("mistral", "[TOOL_CALLS]Bash[ARGS]{}", False),  # command is required
        ("mistral", '[TOOL_CALLS]Bash[CALL_ID]a1B2c3D4e[ARGS]{"command": "ls"}', False),
        ("mistral", '[TOOL_CALLS]Write[ARGS]{"command": "ls"}', False),
        ("mistral", 'Sure.[TOOL_CALLS]Bash[ARGS]{"command": "ls"}', False),
        ("mistral", "[TOOL_CALLS]Free[ARGS]{}[TOOL_CALLS]Free[ARGS]{}", False),
        ("mistral", nemo("Bash", '{"command": "ls"}'), False),
        ("mistral-nemo", nemo("Bash", '{"command": "ls", "timeout": 1.5}'), True),
        ("mistral-nemo", nemo("Free", "{}", "000000000"), True),
        ("mistral-nemo", nemo("Bash", '{"command": "ls"}', "a1B2c3D4"), False),
        ("mistral-nemo", nemo("Bash", '{"command": "ls"}', "a1B2c3D4_"), False),
        ("mistral-nemo", '[TOOL_CALLS][{"name": "Bash", "arguments": {"command": "ls"}}]', False),
        ("mistral-nemo", '[TOOL_CALLS]Bash[ARGS]{"command": "ls"}', False),
    ],
)
def test_grammar_accepts_exactly_one_call(vocab: Vocab, family: str, text: str, ok: bool) -> None:
    assert vocab.accepts(forced_call_grammar([BASH, FREE], family), text) is ok


@pytest.mark.parametrize("family", ["mistral", "mistral-nemo"])
@pytest.mark.parametrize("seed", range(6))
def test_random_sentences_are_valid_calls(vocab: Vocab, family: str, seed: int) -> None:
    """Whatever the grammar lets a model write parses into one call whose
    arguments validate against the tool's schema."""
    text = vocab.random_sentence(forced_call_grammar([BASH, FREE], family), random.Random(seed))
    if text is None:
        pytest.skip("the random walk did not finish")
    parser = make_parser(family, tools=["Bash", "Free"], thinking=False, new_id=lambda: "id")
    events = parser.feed(text) + parser.finish()
    [start] = [e for e in events if isinstance(e, ToolCallStart)]
    [end] = [e for e in events if isinstance(e, ToolCallEnd)]
    assert not [e for e in events if isinstance(e, TextDelta)], text
    schema = {"Bash": BASH.parameters, "Free": FREE.parameters}[start.name]
    jsonschema.validate(json.loads(end.arguments), schema)


# ---- end to end on tiny GGUFs with the real templates -----------------------------
# The tiny models' weights are zero: what they write is decided by the
# grammar a forced call runs under. The llama-spm vocabulary has Mistral's
# <s> and </s>; the [TOOL_CALLS] / [THINK] markers are plain text in it.

TIMEOUT = 300
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "limit": {"type": "integer"},
        "options": {
            "type": "object",
            "properties": {"follow": {"type": "boolean"}, "encoding": {"type": "string"}},
            "required": ["follow"],
            "additionalProperties": False,
        },
        "mode": {"type": "string", "enum": ["text", "lines"]},
    },
    "required": ["path", "limit", "options", "mode"],
    "additionalProperties": False,
}
OTHER: dict[str, Any] = {"type": "object", "properties": {"pattern": {"type": "string"}}}
ASK = [{"role": "user", "content": "Read /etc/hostname for me."}]


@pytest.fixture(
    scope="module",
    params=[f"{NEMO}.jinja", f"{MINISTRAL}.jinja"],
    ids=["nemo", "ministral"],
)
def server(request: pytest.FixtureRequest) -> Iterator[EngyServer]:
    from support.ggufs import fixtures_missing_reason, tiny_gguf_cached

    reason = fixtures_missing_reason("llama-spm", request.param)
    if reason:
        pytest.skip(reason)
    path = tiny_gguf_cached(CACHE / "ggufs", vocab="llama-spm", template=request.param)
    engy = EngyServer(str(path), "--ctx-size", "8192")
    yield engy
    engy.stop()


@pytest.fixture(scope="module")
def model(server: EngyServer) -> str:
    models = httpx.get(server.url + "/v1/models", timeout=TIMEOUT).json()["data"]
    name: str = models[0]["id"]
    return name


@pytest.fixture(scope="module")
def claude(server: EngyServer) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(
        base_url=server.url, api_key="unused", max_retries=0, timeout=TIMEOUT
    ) as client:
        yield client


@pytest.fixture(scope="module")
def gpt(server: EngyServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=TIMEOUT
    ) as client:
        yield client


MESSAGES_TOOLS: list[Any] = [
    {"name": "read_file", "description": "Read a file.", "input_schema": SCHEMA},
    {"name": "search", "description": "Search the code.", "input_schema": OTHER},
]
RESPONSES_TOOLS: list[Any] = [
    {"type": "function", "name": "read_file", "description": "Read a file.", "parameters": SCHEMA},
    {"type": "function", "name": "search", "description": "Search.", "parameters": OTHER},
]


@pytest.mark.parametrize("stream", [False, True])
def test_messages_forced_call_and_follow_up(
    claude: anthropic.Anthropic, model: str, stream: bool
) -> None:
    kwargs: Any = {
        "model": model,
        "max_tokens": 300,
        "messages": ASK,
        "tools": MESSAGES_TOOLS,
        "tool_choice": {"type": "tool", "name": "read_file"},
    }
    if stream:
        with claude.messages.stream(**kwargs) as s:
            events = list(s)
            message = s.get_final_message()
        partial = [
            e.delta.partial_json
            for e in events
            if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
        ]
        assert len(partial) > 1  # the input streams as it is generated
    else:
        message = claude.messages.create(**kwargs)
    assert message.stop_reason == "tool_use"
    [call] = [b for b in message.content if b.type == "tool_use"]
    assert call.name == "read_file"
    jsonschema.validate(call.input, SCHEMA)
    if stream:
        assert json.loads("".join(partial)) == call.input

    # The call and its result go back through the template and are answered.
    def follow_up(result: str) -> list[Any]:
        return [
            *ASK,
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": call.id, "name": call.name, "input": call.input}
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": call.id, "content": result},
                    {"type": "text", "text": "What does it say?"},
                ],
            },
        ]

    answer = claude.messages.create(
        model=model, max_tokens=8, messages=follow_up("build-host-7"), tools=MESSAGES_TOOLS
    )
    assert answer.content and answer.stop_reason in ("end_turn", "max_tokens", "tool_use")
    short = claude.messages.count_tokens(
        model=model, messages=follow_up("build-host-7"), tools=MESSAGES_TOOLS
    )
    longer = claude.messages.count_tokens(
        model=model, messages=follow_up("build-host-7 " * 20), tools=MESSAGES_TOOLS
    )
    assert longer.input_tokens > short.input_tokens + 20


@pytest.mark.parametrize("stream", [False, True])
def test_responses_forced_call_and_follow_up(gpt: openai.OpenAI, model: str, stream: bool) -> None:
    kwargs: Any = {
        "model": model,
        "input": "Read /etc/hostname for me.",
        "tools": RESPONSES_TOOLS,
        "tool_choice": {"type": "function", "name": "read_file"},
        "max_output_tokens": 300,
    }
    if stream:
        with gpt.responses.stream(**kwargs) as s:
            events = list(s)
            response = s.get_final_response()
        deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
        [done] = [e for e in events if e.type == "response.function_call_arguments.done"]
        assert len(deltas) > 1 and "".join(deltas) == done.arguments
    else:
        response = gpt.responses.create(**kwargs)
    assert response.status == "completed"
    [call] = [item for item in response.output if item.type == "function_call"]
    assert call.name == "read_file"
    jsonschema.validate(json.loads(call.arguments), SCHEMA)

    def follow_up(output: str) -> Any:
        items: list[Any] = [
            {"role": "user", "content": "Read /etc/hostname for me."},
            {
                "type": "function_call",
                "call_id": call.call_id,
                "name": call.name,
                "arguments": call.arguments,
            },
            {"type": "function_call_output", "call_id": call.call_id, "output": output},
        ]
        return gpt.responses.create(
            model=model, input=items, tools=RESPONSES_TOOLS, max_output_tokens=8
        )

    answer = follow_up("build-host-7")
    assert answer.status in ("completed", "incomplete") and answer.output
    longer = follow_up("build-host-7 " * 20)
    assert answer.usage is not None and longer.usage is not None
    assert longer.usage.input_tokens > answer.usage.input_tokens + 20
