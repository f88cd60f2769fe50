"""`x-engy-cache-reuse` through the official SDKs on the tiny model: a new
session in another folder (the folder's path early in the prompt, the same
environment after it) reads the rest from the cache on all three APIs when
the header asks, only the shared prefix when it does not; a malformed value
is a 400 in each API's own format naming the header, and the server goes
on serving. (Where the run is found and what the answer is on a real
model: tests/runtime/test_shift.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
from support.server import EngyServer

from engy_local.chat import ChatRequest
from engy_local.errors import InvalidRequest
from engy_local.server.cachereuse import with_cache_reuse

TIMEOUT = 120
HEADER = "x-engy-cache-reuse"
# Ours, shaped like a coding client's environment section.
ENVIRONMENT = "\n".join(
    f" - Setting {i}: keep the value {i * 7} for module {i * 13} unless told otherwise."
    for i in range(16)
)


def asked(folder: str) -> str:
    return f"Fix the failing test.\n\n# Environment\n - Working directory: {folder}\n{ENVIRONMENT}"


@pytest.fixture(scope="module")
def server(tiny_qwen3: Path) -> Iterator[EngyServer]:
    """A server of its own: a run is kept aside in cells read back as one
    block, which a KV cache other modules' requests fragmented may not have
    (then the prompt reads only its shared prefix)."""
    s = EngyServer(str(tiny_qwen3), "--ctx-size", "8192")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def model(server: EngyServer) -> str:
    name: str = httpx.get(server.url + "/v1/models").json()["data"][0]["id"]
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


@pytest.mark.parametrize(
    ("value", "want"),
    [
        (None, 0),
        ("", 0),
        (" 160 ", 160),
        ("0", 0),
        ("16", 16),
        ("15", None),
        ("²", None),
        ("1e3", None),
    ],
)
def test_the_header_s_values(value: str | None, want: int | None) -> None:
    chat = ChatRequest("m", ())
    if want is None:
        with pytest.raises(InvalidRequest, match=HEADER):
            with_cache_reuse(chat, value)
    else:
        assert with_cache_reuse(chat, value).cache_reuse == want


_FOLDERS = iter(["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"])


def folder() -> str:
    """A folder no earlier request of this module's server named: one word,
    so the path is a few tokens whatever the run (a random hex name
    tokenized into 20-30 and left 94.96% cached in one CI run)."""
    return f"/home/dev/{next(_FOLDERS)}/service"


def messages_cached(
    claude: anthropic.Anthropic, model: str, where: str, **extra: object
) -> tuple[int, int]:
    m = claude.messages.create(
        model=model,
        max_tokens=4,
        system="You are a coding agent. " * 40,
        messages=[{"role": "user", "content": asked(where)}],
        **extra,  # type: ignore[arg-type]
    )
    read = m.usage.cache_read_input_tokens or 0
    return read, m.usage.input_tokens + read


def test_messages_a_new_session_elsewhere_reads_the_rest_when_asked(
    claude: anthropic.Anthropic, model: str
) -> None:
    messages_cached(claude, model, folder())
    plain, total = messages_cached(claude, model, folder())
    assert plain < 0.9 * total  # the shared prefix: up to the path
    shifted, total = messages_cached(claude, model, folder(), extra_headers={HEADER: "32"})
    assert shifted >= 0.95 * total, (shifted, total)
    assert shifted > plain


def test_responses_and_chat_completions_read_the_rest_when_asked(
    gpt: openai.OpenAI, model: str
) -> None:
    system = "You are a coding agent. " * 40
    gpt.responses.create(
        model=model, instructions=system, input=asked(folder()), max_output_tokens=4
    )
    r = gpt.responses.create(
        model=model,
        instructions=system,
        input=asked(folder()),
        max_output_tokens=4,
        extra_headers={HEADER: "32"},
    )
    assert r.usage is not None
    assert r.usage.input_tokens_details.cached_tokens >= 0.95 * r.usage.input_tokens, r.usage
    c = gpt.chat.completions.create(
        model=model,
        messages=[
            {"role": "system", "content": system},
            {"role": "user", "content": asked(folder())},
        ],
        max_tokens=4,
        extra_headers={HEADER: "32"},
    )
    assert c.usage is not None and c.usage.prompt_tokens_details is not None
    assert c.usage.prompt_tokens_details.cached_tokens >= 0.95 * c.usage.prompt_tokens, c.usage


@pytest.mark.parametrize("value", ["yes", "8", "-64", "64.5"])
def test_a_malformed_value_is_refused_in_each_api_s_format(
    claude: anthropic.Anthropic, gpt: openai.OpenAI, model: str, value: str
) -> None:
    with pytest.raises(anthropic.BadRequestError, match=HEADER) as a:
        claude.messages.create(
            model=model,
            max_tokens=4,
            messages=[{"role": "user", "content": "Hi"}],
            extra_headers={HEADER: value},
        )
    assert a.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError, match=HEADER) as r:
        gpt.responses.create(
            model=model, input="Hi", max_output_tokens=4, extra_headers={HEADER: value}
        )
    assert r.value.body["param"] == HEADER  # type: ignore[index]
    with pytest.raises(openai.BadRequestError, match=HEADER):
        gpt.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Hi"}],
            max_tokens=4,
            extra_headers={HEADER: value},
        )
    # And the server goes on serving; 0 is off, not an error.
    ok = gpt.responses.create(
        model=model, input="Hi", max_output_tokens=4, extra_headers={HEADER: "0"}
    )
    assert ok.status in ("completed", "incomplete")
