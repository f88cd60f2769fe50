"""Mistral's bad outputs, and random plausible outputs in either of its
syntaxes, damaged (the rest of its data: mistral.py)."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

from support.parsing import Result, calls, random_value

NAMES = ("read_file", "search", "get_time")

# name, output, expected
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


def damaged() -> Iterator[tuple[str, int]]:
    """500 random outputs, each cut anywhere."""
    rng = random.Random(7)
    for _ in range(500):
        output = random_output(rng)
        yield output, rng.randint(0, len(output))
