"""The tool-call families' test data, one module a family (its `CASE`),
read by the shared suites in tests/families/test_families*.py; spec.py
describes the rows, the other modules hold what the data shares."""

from __future__ import annotations

from support.families import (
    deepseek,
    gemma4,
    generic,
    glm,
    granite4,
    harmony,
    kimi,
    lfm2,
    llama3,
    minimax_m2,
    mistral,
    qwen3_coder,
)
from support.families.spec import Case

CASES: list[Case] = [
    m.CASE
    for m in (
        deepseek,
        gemma4,
        generic,
        glm,
        granite4,
        harmony,
        kimi,
        lfm2,
        llama3,
        minimax_m2,
        mistral,
        qwen3_coder,
    )
]
