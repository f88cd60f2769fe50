"""What only gpt-oss does: the template's quirks, a grammar that names the
recipient in the channel header, and a result rendered into the prompt of a
tiny model's server. Its data and the shared tests:
support/families/harmony.py, test_families*.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest
from support.families.harmony import GPT_OSS, LIST_DIR, READ, SCHEMA, TINY
from support.families.prompts import template
from support.families.roundtrip import TIMEOUT, model_id, tiny_server

from engy_local.prompt.calls.forced import forced_call_grammar
from engy_local.runtime.engine.sampling import check_grammar


def test_quirks_of_the_template() -> None:
    quirks = template(GPT_OSS).quirks
    assert quirks.reasoning_key == "thinking"
    assert quirks.call_text_in_reasoning and quirks.one_call_per_turn


def test_forced_call_grammar() -> None:
    gbnf = forced_call_grammar([LIST_DIR, READ], "gpt-oss")
    assert check_grammar(gbnf)
    assert '"<|channel|>commentary to=functions." (call-0 | call-1)' in gbnf
    assert 'call-1 ::= "read_file <|constrain|>json<|message|>" t1-root' in gbnf


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    with tiny_server(TINY) as url:
        yield url


def test_the_result_is_in_the_prompt(server_url: str) -> None:
    tools: list[Any] = [
        {"type": "function", "name": "read_file", "description": "Read a file."}
        | {"parameters": SCHEMA},
        {"type": "function", "name": "list_dir", "description": "List a directory."}
        | {"parameters": LIST_DIR.parameters},
    ]
    with openai.OpenAI(
        base_url=server_url + "/v1", api_key="x", max_retries=0, timeout=TIMEOUT
    ) as gpt:
        model = model_id(server_url)

        def usage(output: str) -> int:
            r = gpt.responses.create(
                model=model,
                input=[
                    {"role": "user", "content": "Read it."},
                    {
                        "type": "function_call",
                        "call_id": "c1",
                        "name": "list_dir",
                        "arguments": '{"path": "."}',
                    },
                    {"type": "function_call_output", "call_id": "c1", "output": output},
                ],
                tools=tools,
                max_output_tokens=1,
            )
            assert r.usage is not None
            return r.usage.input_tokens

        assert usage("host-7 " * 20) > usage("host-7") + 20
