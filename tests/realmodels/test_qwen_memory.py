"""A quantized KV cache on a real model: Qwen2.5-Coder-0.5B-Instruct with a
q8_0 cache takes half the KV memory llama.cpp allocates for f16, and calls
the same tools with the same arguments (bench/bfcl.py measures it on BFCL's
simple category: docs/benchmarks.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from support.realmodels import QWEN_05B, need
from support.server import EngyServer

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {key: {"type": kind} for key, kind in params.items()},
                "required": list(params),
            },
        },
    }
    for name, description, params in [
        ("get_weather", "The current weather in a city.", {"city": "string"}),
        ("convert_currency", "Convert money.", {"amount": "number", "to": "string"}),
        ("read_file", "Read a file of the project.", {"path": "string"}),
    ]
]
ASKS = [
    "What's the weather in Lisbon?",
    "How much is 250 US dollars in euros (EUR)?",
    # "Show me what is in src/main.py." drew a get_weather call from this
    # model, its city a near tie that f16 and q8_0 broke apart on a CPU
    # without repacking: a call the model is sure of is the one to compare.
    "Read the file src/main.py.",
]


def answers(server: EngyServer) -> list[Any]:
    model = httpx.get(server.url + "/v1/models").json()["data"][0]["id"]
    out = []
    with openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0) as client:
        for ask in ASKS:
            message = (
                client.chat.completions.create(
                    model=model,
                    messages=[{"role": "user", "content": ask}],
                    tools=TOOLS,  # type: ignore[arg-type]
                    temperature=0,
                    max_tokens=120,
                )
                .choices[0]
                .message
            )
            calls = message.tool_calls or []
            out.append([(c.function.name, json.loads(c.function.arguments)) for c in calls])
    return out


def served(path: Path, kv: str) -> tuple[list[Any], dict[str, Any]]:
    # Drafting off: only the cache type differs between the two runs (drafts,
    # timed at load, would add rounding of their own at near ties).
    server = EngyServer(
        str(path), "--ctx-size", "8192", "--parallel", "1", "-ctk", kv, "-ctv", kv,
        "--speculative", "off",
    )  # fmt: skip
    try:
        got = answers(server)
        status: dict[str, Any] = httpx.get(server.url + "/engy/ps").json()["models"][0]
        return got, status
    finally:
        server.stop()


def test_q8_0_halves_the_kv_cache_and_calls_the_same() -> None:
    path = need(QWEN_05B)
    f16, full = served(path, "f16")
    q8_0, half = served(path, "q8_0")
    assert half["kv_bytes"] / full["kv_bytes"] == pytest.approx(34 / 64, rel=0.02)
    assert sum(bool(calls) for calls in f16) >= 2, f16  # calls, not only text
    assert q8_0 == f16
