"""Kimi K2 and K3: the real templates they are detected from, an agent
conversation rendered through each, realistic outputs, every bad-output
rule, forced-call grammars, and a forced call end to end on a tiny GGUF with
the K3 template."""

from __future__ import annotations

from engy_local.chat import ToolSpec
from engy_local.prompt.families import get
from support.families.damage import spliced
from support.families.framed import (
    CONVERSATION,
    LOOP,
    READ_ARGS,
    WRITE_ARGS,
    WRITE_OUT,
    prompt,
    read_file_schema,
)
from support.families.grammars import byte_walk
from support.families.prompts import shown
from support.families.spec import (
    Accepts,
    Case,
    Compiles,
    Damage,
    Output,
    RandomCalls,
    Rendered,
    RoundTrip,
)
from support.parsing import TOOLS, Result, calls

SECTION = "<|tool_calls_section_begin|>"
SECTION_END = "<|tool_calls_section_end|>"
CALL = "<|tool_call_begin|>"
ARGS = "<|tool_call_argument_begin|>"
CALL_END = "<|tool_call_end|>"
K2_INSTRUCT = "Kimi-K2-Instruct.jinja"
K2_FIRST = "moonshotai-Kimi-K2.jinja"
K3 = "Kimi-K3.jinja"
LABELS = {K2_INSTRUCT: "K2 Instruct", K2_FIRST: "K2 first", K3: "K3"}
FAMILIES = ["kimi-k2", "kimi-k3"]
TOOL_NAMES = ("Bash", "Read", "Write", 'say "hi" & go')


def tag(name: str, attrs: str = "") -> str:
    return f"<|open|>{name}{attrs}<|sep|>"


def end(name: str) -> str:
    return f"<|close|>{name}<|sep|>"


# ---- rendering -----------------------------------------------------------------------------

K2_CALLS = (
    f"TEXT-ONE{SECTION}{CALL}functions.Read:0{ARGS}{READ_ARGS}{CALL_END}"
    f"{CALL}functions.Write:1{ARGS}{WRITE_ARGS}{CALL_END}{SECTION_END}<|im_end|>"
)


def k3_argument(key: str, kind: str, value: str) -> str:
    return tag("argument", f' key="{key}" type="{kind}"') + value + end("argument")


K3_CALLS = (
    f"{tag('response')}TEXT-ONE{end('response')}{tag('tools')}"
    f"{tag('call', ' tool=' + chr(34) + 'Read' + chr(34) + ' index=' + chr(34) + '1' + chr(34))}"
    f"{k3_argument('path', 'string', '/etc/hosts')}{k3_argument('limit', 'number', '20')}"
    f"{end('call')}"
    f"{tag('call', ' tool=' + chr(34) + 'Write' + chr(34) + ' index=' + chr(34) + '2' + chr(34))}"
    f"{k3_argument('path', 'string', '/tmp/a.py')}"
    f"{k3_argument('content', 'string', 'x = 1' + chr(10) + 'print(x)')}"
    f"{k3_argument('options', 'object', '{' + chr(34) + 'mode' + chr(34) + ': 420}')}"
    f"{end('call')}{end('tools')}{end('message')}<|end_of_msg|>"
)

# template, the calls as rendered, the results as rendered
RENDERED = [
    (
        K2_INSTRUCT,
        K2_CALLS,
        "<|im_system|>Read<|im_middle|>## Return of functions.Read:0\nRESULT-ONE<|im_end|>"
        "<|im_system|>Write<|im_middle|>## Return of functions.Write:1\nRESULT-TWO<|im_end|>",
    ),
    (
        # The first K2 template names results by the client's call id, and
        # writes a literal backslash-n after it.
        K2_FIRST,
        K2_CALLS,
        "<|im_system|>tool<|im_middle|>## Return of toolu_1\\nRESULT-ONE<|im_end|>"
        "<|im_system|>tool<|im_middle|>## Return of toolu_2\\nRESULT-TWO<|im_end|>",
    ),
    (
        K3,
        K3_CALLS,
        tag("message", ' role="tool" tool="Read" index="1"')
        + f"RESULT-ONE{end('message')}<|end_of_msg|>"
        + tag("message", ' role="tool" tool="Write" index="2"')
        + f"RESULT-TWO{end('message')}<|end_of_msg|>",
    ),
]
# The tools are declared by the template itself, before the conversation.
RENDERS = [
    Rendered(
        f"calls and results, {LABELS[t]}",
        lambda t=t: prompt(t, CONVERSATION, thinking=False),
        contains=(rendered_calls, results, "SYSTEM-TEXT", "USER-TWO"),
        orders=(
            ("USER-ONE", rendered_calls, results),
            ('"name":"Read"' if t == K3 else '"name": "Read"', "SYSTEM-TEXT"),
        ),
    )
    for t, rendered_calls, results in RENDERED
]

# template, thinking switch, how the prompt ends, whether earlier reasoning is kept
SWITCH = [
    (K2_INSTRUCT, None, "<|im_assistant|>assistant<|im_middle|>", False),
    (K2_FIRST, True, "<|im_assistant|>assistant<|im_middle|>", False),
    (K3, None, tag("message", ' role="assistant"') + tag("think"), True),
    (K3, True, tag("message", ' role="assistant"') + tag("think"), True),
    (K3, False, tag("message", ' role="assistant"') + tag("response"), False),
]
THINKING = [
    Rendered(
        f"{LABELS[t]}, thinking {thinking}{', in a loop' if conversation is LOOP else ''}",
        lambda t=t, thinking=thinking, conversation=conversation: prompt(
            t, conversation, thinking=thinking
        ),
        ends=ending,
        **shown(kept, "THINK-ONE"),
    )
    for t, thinking, ending, kept in SWITCH
    for conversation in (CONVERSATION, LOOP)
]

# ---- parsing: realistic outputs ---------------------------------------------------------------

PARSED = Result(
    text="Let me look at both.",
    thinking="The user wants the hosts file.\nThen write a.py.",
    calls=calls(("Read", '{"path": "/etc/hosts", "limit": 20}'), ("Write", WRITE_OUT)),
)
K3_OUTPUT = (
    "The user wants the hosts file.\nThen write a.py."
    f"{end('think')}{tag('response')}Let me look at both.{end('response')}{tag('tools')}"
    + tag("call", ' tool="Read" index="1"')
    + k3_argument("path", "string", "/etc/hosts")
    + k3_argument("limit", "number", "20")
    + end("call")
    + tag("call", ' tool="Write" index="2"')
    + k3_argument("path", "string", "/tmp/a.py")
    + k3_argument("content", "string", 'x = {"a": [1, 2]}\n')
    + k3_argument("options", "object", '{"mode": 420}')
    + f"{end('call')}{end('tools')}{end('message')}<|end_of_msg|>"
)
# name, family, thinking flag, output
OUTPUTS = [
    (
        "kimi-k2, compact",
        "kimi-k2",
        False,
        "<think>The user wants the hosts file.\nThen write a.py.</think>"
        f"Let me look at both.{SECTION}{CALL}functions.Read:0{ARGS}"
        f'{{"path": "/etc/hosts", "limit": 20}}{CALL_END}{CALL}functions.Write:1{ARGS}{WRITE_OUT}'
        f"{CALL_END}{SECTION_END}",
    ),
    (
        "kimi-k2, one marker a line",
        "kimi-k2",
        True,
        "The user wants the hosts file.\nThen write a.py.\n</think>\n\n"
        f"Let me look at both.\n{SECTION}\n{CALL}\nfunctions.Read:3{ARGS}\n"
        f'{{"path": "/etc/hosts", "limit": 20}}\n{CALL_END}\n{CALL} functions.Write:4 {ARGS}'
        f"{WRITE_OUT}\n{CALL_END}\n{SECTION_END}",
    ),
    ("kimi-k3", "kimi-k3", True, K3_OUTPUT),
    (
        "kimi-k3, a JSON element for the second call's arguments",
        "kimi-k3",
        True,
        K3_OUTPUT.split(tag("call", ' tool="Write" index="2"'))[0]
        + tag("call", ' tool="Write" index="2"')
        + tag("json", ' type="object"')
        + WRITE_OUT
        + end("json")
        + f"{end('call')}{end('tools')}",
    ),
]


# ---- parsing: bad output -----------------------------------------------------------------

# name, family, output, expected
BAD = [
    (
        "a tool that was not offered is text",
        "kimi-k2",
        f'Sure.{SECTION}{CALL}functions.rm:0{ARGS}{{"p": "/"}}{CALL_END}{SECTION_END}',
        Result(text=f'Sure.{SECTION}{CALL}functions.rm:0{ARGS}{{"p": "/"}}{CALL_END}{SECTION_END}'),
    ),
    (
        "an id without prefix or index still names the tool",
        "kimi-k2",
        f"{SECTION}{CALL}Read{ARGS}{{}}{CALL_END}{CALL}Bash:7{ARGS}{{}}{CALL_END}{SECTION_END}",
        Result(calls=calls(("Read", "{}"), ("Bash", "{}"))),
    ),
    (
        "JSON broken after the start is cut back and closed",
        "kimi-k2",
        f'{SECTION}{CALL}functions.Read:0{ARGS}{{"path": "/a", "n": tru}}{CALL_END}{SECTION_END}',
        Result(calls=calls(("Read", '{"path": "/a"}'))),
    ),
    (
        "an unclosed call is closed",
        "kimi-k2",
        f'{SECTION}{CALL}functions.Write:0{ARGS}{{"content": "a\nb',
        Result(calls=calls(("Write", '{"content": "a\\nb"}'))),
    ),
    (
        "a head cut off by another marker is text",
        "kimi-k2",
        f"{SECTION}{CALL}functions.Read:0{CALL_END}{SECTION_END}",
        Result(text=f"{SECTION}{CALL}functions.Read:0{CALL_END}{SECTION_END}"),
    ),
    (
        "output ending inside a marker is text",
        "kimi-k2",
        "Hi <|tool_calls_sec",
        Result(text="Hi <|tool_calls_sec"),
    ),
    (
        "K3: a tool that was not offered is text, its tools element with it",
        "kimi-k3",
        f"{tag('tools')}{tag('call', ' tool=' + chr(34) + 'rm' + chr(34))}{end('call')}"
        f"{end('tools')}",
        Result(
            text=f"{tag('tools')}{tag('call', ' tool=' + chr(34) + 'rm' + chr(34))}{end('call')}"
            f"{end('tools')}"
        ),
    ),
    (
        "K3: attributes are unescaped; a value that is not its type's JSON is a string",
        "kimi-k3",
        tag("tools")
        + tag("call", ' tool="say &quot;hi&quot; &amp; go" index="1"')
        + k3_argument("k&quot;", "boolean", "true")
        + k3_argument("n", "number", "many")
        + k3_argument("m", "mystery", "[1]")
        + end("call")
        + end("tools"),
        Result(calls=calls(('say "hi" & go', '{"k\\"": true, "n": "many", "m": [1]}'))),
    ),
    (
        "K3: a JSON element after arguments is dropped",
        "kimi-k3",
        tag("tools")
        + tag("call", ' tool="Read" index="1"')
        + k3_argument("a", "string", "x")
        + tag("json", ' type="object"')
        + '{"b": 1}'
        + end("json")
        + end("call")
        + end("tools"),
        Result(calls=calls(("Read", '{"a": "x"}'))),
    ),
    (
        "K3: the frame's tags are dropped around verbatim text",
        "kimi-k3",
        f"{tag('response')}\n\nHello\n{end('response')}{end('message')}<|end_of_msg|>",
        Result(text="\n\nHello\n"),
    ),
    (
        "K3: an unclosed argument and call are closed",
        "kimi-k3",
        tag("tools") + tag("call", ' tool="Write" index="1"') + tag("argument", ' key="c"')[:-7],
        Result(calls=calls(("Write", "{}"))),
    ),
]

JUNK = [SECTION, SECTION_END, CALL, CALL_END, ARGS, "<|tool_call", "{", "}", '"', "\n"]
JUNK += ["<|open|>", "<|close|>", "<|sep|>", tag("argument", ' key="z"'), end("argument"), "x"]


def answers(family: str) -> list[str]:
    """The family's realistic outputs without their reasoning, and plain text."""
    good = [o for _, f, _, o in OUTPUTS if f == family]
    return [o.split("</think>")[-1].split(end("think"))[-1] for o in good] + ["Plain text. "]


# ---- forced calls ----------------------------------------------------------------------------

SCHEMA_TOOLS = [
    ToolSpec(
        'read "file"',
        "",
        {
            "type": "object",
            "properties": {
                "path": {"type": "string", "maxLength": 30},
                "mode": {"type": "string", "enum": ["text", "lines"]},
                "limit": {"type": "integer"},
                "options": {
                    "type": "object",
                    "properties": {"follow": {"type": "boolean"}},
                    "required": ["follow"],
                },
            },
            "required": ["path", "mode", "options"],
            "additionalProperties": False,
        },
    ),
    ToolSpec("anything", "", {"type": "object"}),
]
WRITTEN = {
    "kimi-k2": (
        f'{SECTION}{CALL}functions.read "file":0{ARGS}'
        f'{{"path": "/a", "mode": "text", "options": {{"follow": true}}}}{CALL_END}{SECTION_END}'
    ),
    "kimi-k3": (
        f"{tag('response')}{end('response')}{tag('tools')}"
        + tag("call", ' tool="read &quot;file&quot;" index="1"')
        + k3_argument("path", "string", "/a")
        + k3_argument("mode", "string", "text")
        + k3_argument("options", "object", '{"follow": true}')
        + f"{end('call')}{end('tools')}"
    ),
}
WRITTEN_ARGS = {"path": "/a", "mode": "text", "options": {"follow": True}}


def accepts(family: str, good: str) -> list[Accepts]:
    """The call as written is accepted, and read back; a tool not offered,
    a value outside the enum, a wrong type or a string too long are not;
    reasoning closed by the family's own marker may come first."""
    bad = [
        good.replace("file", "fil"),
        good.replace("text", "binary"),
        good.replace("true", '"yes"'),
        good.replace("/a", "/" + "a" * 40),
    ]
    closer = get(family).reasoning_end
    return [
        Accepts(family, SCHEMA_TOOLS, good, True, parsed=('read "file"', WRITTEN_ARGS)),
        *[Accepts(family, SCHEMA_TOOLS, text, False) for text in bad],
        Accepts(family, SCHEMA_TOOLS, "Hm." + closer + good, True, reasoning=True),
    ]


NAMES = [t.name for t in SCHEMA_TOOLS]
MARKERS = (SECTION, SECTION_END, CALL, ARGS, CALL_END, "<|open|>", "<|close|>")

CASE = Case(
    name="kimi",
    family="kimi-k2",
    tools=TOOLS,
    detected={K2_INSTRUCT: "kimi-k2", K2_FIRST: "kimi-k2", K3: "kimi-k3"},
    prefix="kimi",
    no_other=True,
    catalog_prefix="kimi",
    renders=tuple(RENDERS),
    thinking=tuple(THINKING),
    outputs=tuple(
        Output(name, output, PARSED, family=family, thinking=thinking)
        for name, family, thinking, output in OUTPUTS
    ),
    bad=tuple(
        Output(name, output, expected, family=family, tools=TOOL_NAMES)
        for name, family, output, expected in BAD
    ),
    damage=tuple(
        Damage(
            family,
            lambda family=family: spliced(answers(family), JUNK, 150, len(family)),
            TOOL_NAMES,
            min_started=40,
            # K3's frame tags are dropped around text: only K2 keeps it all.
            keeps_text=lambda output, family=family: family == "kimi-k2",
        )
        for family in FAMILIES
    ),
    compiles=tuple(
        Compiles(f, "codex-0.171.0-first-turn.json", reasoning_all=True) for f in FAMILIES
    ),
    accepts=tuple(row for family, good in WRITTEN.items() for row in accepts(family, good)),
    random_calls=tuple(
        RandomCalls(f, SCHEMA_TOOLS, NAMES, range(6), byte_walk(MARKERS), min_finished=3)
        for f in FAMILIES
    ),
    # Strings are free text in K3's argument elements; the zero-weight model
    # never ends free text (it always prefers `"`), so strings here are bounded.
    round_trips=(RoundTrip("kimi-k3", K3, read_file_schema({"type": "string", "maxLength": 24})),),
)
