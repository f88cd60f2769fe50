"""Every value a schema's grammar lets a model write validates against the
schema, checked by an oracle that is not engy's compiler: hypothesis draws
schemas over every keyword the grammar holds (support/schemas.py), each is
compiled as a structured answer's grammar, llama.cpp's own grammar sampler
walks it with random choices (every branch gets taken, one character a
step), and the `jsonschema` library with its format checker judges each
finished value. Schemas whose grammar is looser (gaps) are not promised
here: the answer check catches those (test_answer_check.py)."""

from __future__ import annotations

import json
import os
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.grammar import Vocab
from support.schemas import schemas, validates

from engy_local.grammar.schema import gaps
from engy_local.prompt.calls.forced import json_answer_grammar
from engy_local.prompt.families import get

pytestmark = pytest.mark.timeout(900)


@settings(
    max_examples=int(os.environ.get("ENGY_SCHEMA_EXAMPLES", "300")),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(schema=schemas, seed=st.integers(0, 2**32 - 1))
def test_every_value_the_grammar_allows_validates(
    vocab: Vocab, schema: dict[str, Any], seed: int
) -> None:
    assert gaps(schema) == [], "the strategy draws only keywords the grammar holds"
    gbnf = json_answer_grammar(schema, get("hermes"))
    rng = random.Random(seed)
    for _ in range(3):
        text = vocab.random_sentence(gbnf, rng, limit=1500)
        if text is None:
            continue  # the walk ran long (a deep recursion): no verdict
        value = json.loads(text, strict=False)  # raw newlines: the parsers escape them
        broken = validates(value, schema)
        assert broken is None, f"{text!r} breaks {json.dumps(schema)}: {broken}"
