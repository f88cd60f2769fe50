"""The grammar a call follows once a model starts one under tool_choice auto
(prompt/autocall.py): it compiles for every family with real clients' tools,
accepts the family's calls and the JSON forms small models write (pretty
printed too) and nothing else, and its triggers find where a call starts
in the output and nowhere in prose."""

from __future__ import annotations

import ctypes
import json
import random
import re

import jsonschema  # type: ignore[import-untyped]
import llama_cpp
import pytest
from support.grammar import CLIENTS, Vocab, captured_tools
from support.parsing import parse

from engy_local.chat import ToolSpec
from engy_local.prompt.calls.autocall import (
    LazyGrammar,
    call_or_answer_grammar,
    started_call_grammar,
)
from engy_local.prompt.calls.forced import forced_call_grammar
from engy_local.prompt.families import get, registry
from engy_local.runtime.engine.sampling import check_grammar

WEATHER = ToolSpec(
    "get_weather",
    "",
    {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"],
    },
)
PLAY = ToolSpec("play.song", "", {"type": "object", "properties": {"minutes": {"type": "number"}}})
TOOLS = [WEATHER, PLAY]
SENTENCES = 60  # random calls walked through the grammar


def lazy(family: str = "hermes", tools: list[ToolSpec] = TOOLS, after: str = "") -> LazyGrammar:
    grammar = started_call_grammar(tools, get(family), after=after)
    assert grammar is not None
    return grammar


@pytest.mark.parametrize("family", sorted(registry()))
@pytest.mark.parametrize("request_file", CLIENTS[:2])
def test_compiles_for_every_family_with_real_clients_tools(family: str, request_file: str) -> None:
    grammar = lazy(family, captured_tools(request_file))
    assert check_grammar(grammar.gbnf)
    for trigger in grammar.triggers:
        re.compile(trigger)  # Python's regexes read these patterns as ECMAScript's do


def test_a_grammar_made_before_is_the_same_tools_grammar_only() -> None:
    """An agent's next turn with the same tools gets the grammar made for the
    last (not compiled again); any change to a name, a parameter, the
    family or `after` gets its own."""
    first = lazy()
    assert lazy() is first
    assert lazy(tools=[ToolSpec(WEATHER.name, "other words", WEATHER.parameters), PLAY]) is first
    city = {**WEATHER.parameters, "required": ["city", "days"]}
    others = [
        lazy(tools=[ToolSpec(WEATHER.name, "", city), PLAY]),
        lazy(tools=[WEATHER]),
        lazy(tools=[ToolSpec("get_weather2", "", WEATHER.parameters), PLAY]),
        lazy(family="qwen3-coder"),
        lazy(after="</think>"),
    ]
    assert all(g != first for g in others)
    assert others[0] == started_call_grammar(
        [ToolSpec(WEATHER.name, "", city), PLAY], get("hermes")
    )


def test_no_tools_no_grammar() -> None:
    assert started_call_grammar([], get("hermes")) is None


CALL = '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}'
TAGGED = (
    "<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
    "<parameter=days>\n3\n</parameter>\n</function>"
)
PRETTY = (
    '{\n  "name": "get_weather",\n  "arguments": {\n    "city": "Paris",\n    "days": 20\n  }\n}'
)


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        (f"<tool_call>\n{CALL}\n</tool_call>", True),
        (f"<tool_call>\n{CALL}\n</tool_call>\n<tool_call>\n{CALL}\n</tool_call>", True),
        (f"```json\n{CALL}\n```", True),
        (f"```json\n{PRETTY}\n```", True),
        (f"```\n{CALL}\n{CALL}\n```", True),
        (CALL, True),
        (PRETTY, True),
        (f"[{CALL}, {CALL}]", True),
        (f"{CALL};{CALL}", True),
        ('{"name": "get.weather", "arguments": {"city": "Rome"}}', True),  # spelled so
        ('{"name": "play.song", "parameters": {"minutes": 20}}', True),
        ('{"name": "get_weather", "arguments": {"city": 7}}', False),  # a number for a string
        ('{"name": "get_weather", "arguments": {}}', False),  # city is required
        ('{"name": "rm", "arguments": {}}', False),
        # a name no tool has, in a fence: one tool's arguments (loosecalls
        # reads the call by them)
        ('```json\n{"name": "weather in Paris", "arguments": {"city": "Paris"}}\n```', True),
        ('```json\n{"name": "ls a.txt", "arguments": {"minutes": 2}}\n```', True),
        ('```json\n{"name": "ls a.txt", "arguments": {"city": 7}}\n```', False),
        ('```json\n{"name": "ls a.txt"}\n```', False),
        # a tool's name spelled with a ".": that tool's arguments alone
        ('```json\n{"name": "play.song", "arguments": {"minutes": 2}}\n```', True),
        ('```json\n{"name": "play.song", "arguments": {"city": "Rome"}}\n```', False),
        ('```json\n{"name": "a.txt", "arguments": {"minutes": 2}}\n```', False),
        (f"```json\n{CALL}\n``` and more", False),
        (f"```python\n{CALL}\n```", False),
        # Qwen3-Coder's tags without their block (Qwen2.5-Coder writes them
        # after Qwen Code's prompt), held to the tool's schema
        (TAGGED, True),
        (f"{TAGGED}\n{TAGGED}", True),
        ("<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>", True),
        ("<function=play.song>\n</function>", True),
        ("<function=get_weather>\n</function>", False),  # city is required
        (TAGGED.replace("\n3\n", "\nthree\n"), False),  # days is an integer
        ("<function=rm>\n</function>", False),
        (f"{TAGGED}\nDone.", False),
    ],
)
def test_accepts_the_calls_and_nothing_else(vocab: Vocab, text: str, ok: bool) -> None:
    assert vocab.accepts(lazy().gbnf, text) is ok


def test_a_pretty_printed_forced_call_keeps_its_values(vocab: Vocab) -> None:
    """A model that wants a newline after `20` may write one (before, only a
    space was allowed there, and it wrote more digits instead)."""
    gbnf = forced_call_grammar([WEATHER])
    args = '{\n  "city": "Paris",\n  "days": 20\n}'
    assert vocab.accepts(
        gbnf, f'<tool_call>\n{{"name": "get_weather", "arguments": {args}}}\n</tool_call>'
    )


def test_a_forced_call_may_be_several_where_parallel_calls_are_allowed(vocab: Vocab) -> None:
    two = f"<tool_call>\n{CALL}\n</tool_call>\n<tool_call>\n{CALL}\n</tool_call>"
    assert vocab.accepts(forced_call_grammar(TOOLS, parallel=True), two)
    assert not vocab.accepts(forced_call_grammar(TOOLS), two)


def start(grammar: LazyGrammar, output: str) -> int | None:
    """Where llama.cpp starts applying the grammar in `output` (the first
    non-empty group of the first trigger that matches), None: nowhere."""
    for trigger in grammar.triggers:
        m = re.search(trigger, output)
        if m:
            return next((m.start(i) for i in range(1, len(m.groups()) + 1) if m[i]), m.start())
    return None


@pytest.mark.parametrize(
    ("output", "at"),
    [
        ("Sure.\n<tool_call>\n{", 6),
        (f"I'll check.\n```json\n{CALL}", 12),
        (f"```json\n[{CALL}", 0),
        (f"Let me see: {CALL}", 12),
        ('{\n  "name": "play.song"', 0),
        ('Here:\n```json\n{\n  "name": "get_weather"', 6),
        # a tool that was not offered: text, fenced or bare
        ('Here:\n```json\n{\n  "name": "calculate_triangle_area"', None),
        ('{"name": "calculate_triangle_area"', None),
        # a fenced name no tool can have: a call by its arguments; bare, prose
        ('Here:\n```json\n{\n  "name": "echo hi > a.txt",\n  "arguments":', 6),
        ('```json\n{"name": "echo hi > a.txt", "arguments": {', 0),
        ('{"name": "echo hi > a.txt", "arguments": {', None),
        # ... not before it says it gives arguments: JSON in an answer stays free
        ('```json\n{"name": "echo hi > a.txt"', None),
        ('```json\n{"name": "Ada Lovelace", "born": 1815}', None),
        ('```json\n{"name": "proof.txt", "arguments": {', None),
        # prose and other JSON: no call
        ('Use {"name": "Paris"} in the config.', None),
        ('{"city": "Paris"}', None),
        ("```python\nprint(1)\n```", None),
        ('{"name": "get_weathe', None),
        # Qwen3-Coder's tags to an offered tool; not Llama 3.1's JSON in them
        ("Sure.\n<function=get_weather>\n<parameter=city>", 6),
        ("<function=play.song>\n", 0),
        ("<function=rm>\n<parameter=path>", None),
        ('<function=get_weather>{"city": "Paris"}', None),
        ("<function=get_weather", None),
    ],
)
def test_triggers_find_where_a_call_starts(output: str, at: int | None) -> None:
    assert start(lazy(), output) == at


def test_a_call_inside_the_reasoning_the_prompt_opened_is_no_trigger() -> None:
    grammar = lazy(after="</think>")
    assert start(grammar, f"thinking of {CALL}") is None
    assert start(grammar, f"thinking of {CALL}</think>\n\n{CALL}") is not None
    assert grammar.words == ()
    assert lazy().words == ("<tool_call>",)


def test_names_are_matched_literally() -> None:
    grammar = lazy()
    assert start(grammar, '{"name": "playXsong"') is None
    assert start(grammar, json.dumps({"name": "play.song"})[:-1]) == 0


@pytest.mark.parametrize("family", sorted(registry()))
def test_llama_cpp_takes_the_lazy_grammar_and_its_triggers(vocab: Vocab, family: str) -> None:
    """std::regex compiles the triggers (a pattern it rejects would abort)."""
    grammar = lazy(family, captured_tools(CLIENTS[0]))
    patterns = (ctypes.c_char_p * len(grammar.triggers))(*(t.encode() for t in grammar.triggers))
    none = (llama_cpp.llama_token * 1)()
    sampler = llama_cpp.llama_sampler_init_grammar_lazy_patterns(
        vocab.vocab, grammar.gbnf.encode(), b"root", patterns, len(patterns), none, 0
    )
    assert sampler
    llama_cpp.llama_sampler_free(sampler)


# ---- tools under auto with a response format ---------------------------------------

TAGGED = f"<tool_call>\n{CALL}\n</tool_call>"
ANSWER = {
    "type": "object",
    "properties": {"title": {"type": "string"}, "done": {"type": "boolean"}},
    "required": ["title", "done"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        (TAGGED, True),  # the family's call
        (f"{TAGGED}\n{TAGGED}", True),
        ('{"name": "get_weather", "arguments": {"city": "Oslo"}}', True),  # as small models write
        ('```json\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n```', True),
        ('{"title": "Oslo", "done": true}', True),  # the answer, in its format
        ('{\n  "title": "Oslo",\n  "done": false\n}', True),
        ('{"title": "Oslo"}', False),  # not the format: done is required
        ("It is sunny in Oslo.", False),  # free text is neither
        (f"Let me look. {TAGGED}", False),  # nor text before a call
        ('{"title": "Oslo", "done": true} and more', False),
        ('{"name": "get_weather", "arguments": {"days": 2}}', False),  # the tool's schema holds
    ],
)
def test_call_or_answer_grammar(vocab: Vocab, text: str, ok: bool) -> None:
    gbnf = call_or_answer_grammar(TOOLS, get("hermes"), ANSWER)
    assert check_grammar(gbnf)
    assert vocab.accepts(gbnf, text) is ok


def test_call_or_answer_after_reasoning_and_for_every_family(vocab: Vocab) -> None:
    gbnf = call_or_answer_grammar(TOOLS, get("hermes"), None, reasoning=True)
    assert vocab.accepts(gbnf, 'Hm.</think>\n{"any": 1}')
    assert vocab.accepts(gbnf, f"Hm.</think>\n{TAGGED}")
    assert not vocab.accepts(gbnf, '{"any": 1}')
    codex = captured_tools(CLIENTS[1])  # codex exec --output-schema: its tools and a format
    for family in sorted(registry()):
        assert check_grammar(call_or_answer_grammar(codex, get(family), ANSWER)), family


def test_random_calls_the_grammar_allows_are_read_and_validate(vocab: Vocab) -> None:
    """Whatever the started call's grammar lets a model write (the family's
    blocks, the JSON forms small models write, Qwen3-Coder's tags) is read
    as calls (as tool_choice auto reads them) whose arguments validate
    against their tool's schema, by `jsonschema`; every form comes up.
    Each tool here requires a parameter: a stray call (a name no tool can
    have) with empty arguments is in the grammar where a tool requires
    none, and the parser reads it as text (no evidence of a tool)."""
    song = ToolSpec("play.song", "", {**PLAY.parameters, "required": ["minutes"]})
    tools = [WEATHER, song]
    schemas = {t.name: t.parameters for t in tools}
    gbnf = lazy(tools=tools).gbnf
    rng = random.Random(58)
    forms: set[str] = set()
    for _ in range(SENTENCES):
        text = vocab.random_sentence(gbnf, rng)
        if text is None:
            continue  # the walk ran long: no verdict
        result = parse([text], tools=schemas, loose=True)
        assert result.calls and not result.text.strip(), repr(text)
        for _, name, arguments in result.calls:
            jsonschema.validate(json.loads(arguments), schemas[name])
        forms.add("tagged" if text.startswith("<function=") else text[:1])
    assert {"tagged", "<", "{", "`"} <= forms, forms
