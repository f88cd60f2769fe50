"""The answer's end where several calls may come: a call that repeats one of
the same answer (same tool, arguments equal on every key both give) ends the
answer and is dropped; different calls all come out, whole."""

from __future__ import annotations

import pytest

from engy_local.chat import ToolCallEnd, ToolCallStart
from engy_local.prompt.parsing.assemble import AnswerAssembler
from engy_local.prompt.parsing.toolparse import HermesParser


def call(name: str, arguments: str) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call>\n'


A, B = call("Read", '{"path": "a"}'), call("Read", '{"path": "b"}')
A_LIMITED = call("Read", '{"path": "a", "limit": 5}')
A_OFFSET = call("Read", '{"offset": 2, "path": "a"}')
A_ELSEWHERE = call("Read", '{"path": "a", "limit": 6}')


@pytest.mark.parametrize(
    ("output", "calls", "done"),
    [
        (A, ['{"path": "a"}'], False),
        (A + B, ['{"path": "a"}', '{"path": "b"}'], False),
        (A + A, ['{"path": "a"}'], True),  # the loop ends at the repeat
        (A + B + A + B, ['{"path": "a"}', '{"path": "b"}'], True),
        # Other optional keys, the same on every key both give: a repeat.
        (A_LIMITED + A_OFFSET, ['{"path": "a", "limit": 5}'], True),
        (A + A_LIMITED, ['{"path": "a"}'], True),
        # A key both give that differs: another call.
        (
            A_LIMITED + A_ELSEWHERE,
            ['{"path": "a", "limit": 5}', '{"path": "a", "limit": 6}'],
            False,
        ),
    ],
)
def test_a_repeated_call_ends_the_answer(output: str, calls: list[str], done: bool) -> None:
    answer = AnswerAssembler(
        HermesParser(tools=["Read"], thinking=False, new_id=lambda: "id"), False
    )
    events = []
    for c in output:  # a character a token
        if answer.done:
            break
        events += answer.feed(c)
    assert answer.done is done
    events += answer.finish("end", 1, 0, 1)
    assert [e.arguments for e in events if isinstance(e, ToolCallEnd)] == calls
    assert len([e for e in events if isinstance(e, ToolCallStart)]) == len(calls)
    assert answer.stop_reason == "tool_call"
