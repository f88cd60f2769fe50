"""The upstream's completions endpoints, as pure functions: the request
body for a prepared prompt, and what one streamed chunk says.

Two dialects (`Kind`):

    llamacpp  llama-server's native POST /completion: `prompt` as token ids,
              `cache_prompt`, `n_predict`, `grammar` (GBNF), and with
              `return_tokens` the sampled token ids in every chunk, with
              `return_progress` prompt progress (and the cached count) while
              the prompt is read. The final chunk has `stop_type` and
              `timings.cache_n`.
    openai    POST /v1/completions as vLLM and SGLang serve it: `prompt` as a
              list of ids, `skip_special_tokens: false` so the family's
              markers come back as text, the forced call's grammar in the
              engine's own parameter (`Grammar` below),
              `return_token_ids` (vLLM) for the ids, and the usage chunk's
              `prompt_tokens_details.cached_tokens` (vLLM with
              --enable-prompt-tokens-details, SGLang with --enable-cache-report).

Where the upstream sends token ids, engy decodes them with the same
vocabulary as the local engine (special tokens as text, the end token seen as
such); where it sends only text, the text is used as it comes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ..prompt.parsing.detokenize import TextEnd
from ..prompt.prepare import SamplingParams

Kind = Literal["llamacpp", "openai"]
# Why an answer ended: its end token, max_tokens, a stop string (the
# upstream's words for them are mapped to these).
Reason = TextEnd
KINDS: tuple[Kind, ...] = ("llamacpp", "openai")

ENDPOINTS: dict[Kind, str] = {"llamacpp": "/completion", "openai": "/v1/completions"}

# Where a forced call's GBNF grammar goes in an openai-kind request:
#   structured_outputs  vLLM 0.10.2 and later ({"structured_outputs": {"grammar": G}})
#   guided_grammar      vLLM before 0.10.2 (removed in 0.12)
#   ebnf                SGLang (xgrammar reads GBNF)
#   grammar             llama.cpp-compatible servers (llama-server's /v1/completions)
#   none                the engine takes no grammar: the call is parsed as written
Grammar = Literal["structured_outputs", "guided_grammar", "ebnf", "grammar", "none"]
GRAMMARS: tuple[Grammar, ...] = ("structured_outputs", "guided_grammar", "ebnf", "grammar", "none")


def grammar_dialect(engine: str, version: str) -> Grammar:
    """The grammar parameter of an engine as discovered ("vllm", "sglang",
    or "" when it did not say), by its version where that matters."""
    if engine == "sglang":
        return "ebnf"
    if engine == "vllm":
        parts = [int(p) for p in version.split(".")[:3] if p.isdigit()]
        return "structured_outputs" if parts >= [0, 10, 2] or not parts else "guided_grammar"
    return "grammar"


# llama-server's stop_type, OpenAI's finish_reason -> why the answer ended.
_LLAMACPP_STOPS: dict[str, Reason] = {"eos": "end", "limit": "length", "word": "stop"}
_OPENAI_STOPS: dict[str, Reason] = {"stop": "end", "length": "length"}


@dataclass(frozen=True)
class Chunk:
    """What one streamed chunk says; a field the upstream left out is empty."""

    tokens: tuple[int, ...] = ()
    text: str = ""  # only where the upstream sends no token ids
    progress: tuple[int, int] | None = None  # prompt tokens read, of total
    finish: Reason | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    output_tokens: int | None = None
    has_tokens: bool = False  # the upstream sends token ids (use them, not text)


def request_body(
    kind: Kind,
    tokens: list[int],
    params: SamplingParams,
    model: str | None,
    grammar: Grammar = "grammar",
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "prompt": tokens,
        "stream": True,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "top_k": params.top_k,
        "min_p": params.min_p,
    }
    if params.stop:
        body["stop"] = list(params.stop)
    if params.seed is not None:  # both dialects call it seed
        body["seed"] = params.seed
    if params.triggers:  # a lazy grammar (tool_choice auto): engines apply grammars whole
        grammar = "none"
    if kind == "llamacpp":
        body |= {
            "n_predict": params.max_tokens,
            "cache_prompt": True,
            "return_tokens": True,
            "return_progress": True,
        }
        if params.grammar and grammar != "none":
            body["grammar"] = params.grammar
        return body
    body |= {
        "max_tokens": params.max_tokens,
        "skip_special_tokens": False,
        "return_token_ids": True,
        "stream_options": {"include_usage": True},
    }
    if model:
        body["model"] = model
    if params.grammar and grammar == "structured_outputs":
        body["structured_outputs"] = {"grammar": params.grammar}
    elif params.grammar and grammar != "none":
        body[grammar] = params.grammar
    return body


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _ids(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(t for t in value if isinstance(t, int) and not isinstance(t, bool))


def parse_chunk(kind: Kind, data: dict[str, Any]) -> Chunk:
    return _parse_llamacpp(data) if kind == "llamacpp" else _parse_openai(data)


def _parse_llamacpp(data: dict[str, Any]) -> Chunk:
    progress = data.get("prompt_progress")
    cached = _int(_dict(data.get("timings")).get("cache_n"))
    done: tuple[int, int] | None = None
    if isinstance(progress, dict):
        total, processed = _int(progress.get("total")), _int(progress.get("processed"))
        if total is not None and processed is not None:
            done = (processed, total)
        cached = _int(progress.get("cache")) if cached is None else cached
    finish = None
    if data.get("stop") is True:
        finish = _LLAMACPP_STOPS.get(str(data.get("stop_type")), "end")
    content = data.get("content")
    if isinstance(progress, dict):
        # A progress chunk's `tokens` holds an empty token (id 0): no output.
        return Chunk(progress=done, cached_tokens=cached, has_tokens=True)
    return Chunk(
        tokens=_ids(data.get("tokens")),
        text=content if isinstance(content, str) else "",
        progress=done,
        finish=finish,
        prompt_tokens=_int(data.get("tokens_evaluated")) if finish else None,
        cached_tokens=cached,
        output_tokens=_int(data.get("tokens_predicted")) if finish else None,
        has_tokens="tokens" in data,
    )


def _parse_openai(data: dict[str, Any]) -> Chunk:
    choices = data.get("choices")
    choice: dict[str, Any] = {}
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        choice = choices[0]
    usage = _dict(data.get("usage"))
    cached = _int(_dict(usage.get("prompt_tokens_details")).get("cached_tokens"))
    finish: Reason | None = None
    reason = choice.get("finish_reason")
    if isinstance(reason, str):
        finish = _OPENAI_STOPS.get(reason, "end")
        # vLLM names the stop string that matched; an end token is an id.
        if finish == "end" and isinstance(choice.get("stop_reason"), str):
            finish = "stop"
    text = choice.get("text")
    return Chunk(
        tokens=_ids(choice.get("token_ids")),
        text=text if isinstance(text, str) else "",
        finish=finish,
        prompt_tokens=_int(usage.get("prompt_tokens")),
        cached_tokens=cached,
        output_tokens=_int(usage.get("completion_tokens")),
        has_tokens="token_ids" in choice,
    )


def error_message(body: Any) -> str:
    """The message of an upstream's error body (llama-server, vLLM and
    OpenAI all nest it under `error`), or the body's text."""
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return str(err["message"])
        if isinstance(err, str):
            return err
        if isinstance(body.get("detail"), str):  # FastAPI's shape
            return str(body["detail"])
    return str(body)[:500]
