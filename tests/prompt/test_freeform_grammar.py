"""A freeform tool's grammar (Responses `custom` tools, such as Codex's
apply_patch) holds the input the model writes: run by llama.cpp's own
grammar sampler on a real vocabulary, the call grammar accepts exactly the
inputs that are sentences of the tool's Lark grammar or regex, JSON-escaped
in the call; what does not convert falls back to any string."""

from __future__ import annotations

import json
import random
import re

import lark
import pytest
from support.grammar import Vocab

from engy_local.chat import STRING_GRAMMAR, ToolCallEnd, ToolSpec
from engy_local.prompt.calls.forced import forced_call_grammar
from engy_local.prompt.parsing.toolparse import HermesParser
from engy_local.prompt.render.messages import to_template_tools
from engy_local.protocols.responses_request import parse_request
from engy_local.runtime.engine.sampling import check_grammar

# A patch-like format of our own, in the constructs tools use: rules and
# terminals, literals, regexes, ? + *, [ ], ranges, ~ n..m, an alias, a
# priority, continued alternatives, comments and an import.
NOTES = r"""
// a list of changes
start: begin item+ end
begin: "BEGIN " STAMP LF
end: "END" LF?
item: add
    | remove -> removal
    | tag
add: "+ " [TEXT] LF
remove.2: "- " NAME ["!"] LF
tag: "#" ("a".."f")~1..3 LF
STAMP: /[0-9]{4}/
NAME: /[a-z_][a-z0-9_]*/
TEXT: /.+/
%import common.LF
"""


def custom(name: str, syntax: str, definition: str) -> ToolSpec:
    """The tool as the Responses protocol hands it to the prompt half."""
    body = {
        "model": "m",
        "input": "hi",
        "tools": [
            {
                "type": "custom",
                "name": name,
                "description": "",
                "format": {"type": "grammar", "syntax": syntax, "definition": definition},
            }
        ],
    }
    return parse_request(body).chat.tools[0]


def call(name: str, text: str) -> str:
    arguments = json.dumps({"input": text}, ensure_ascii=False)
    return f'<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call>'


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("BEGIN 2026\n+ hello\nEND", True),
        ("BEGIN 2026\n+ hello\nEND\n", True),  # LF?
        ('BEGIN 2026\n+ say "hi" \\ there\n- old_name!\n#abc\nEND', True),  # quote, backslash
        ("BEGIN 2026\n+ \n#f\nEND", True),  # [TEXT]
        ("BEGIN 2026\n+ hello\n", False),  # no END: what Qwen2.5-Coder-1.5B wrote to Codex
        ("BEGIN 26\n+ hello\nEND", False),  # STAMP is four digits
        ("BEGIN 2026\nEND", False),  # item+
        ("BEGIN 2026\n- Old\nEND", False),  # NAME starts lower-case
        ("BEGIN 2026\n#abcd\nEND", False),  # ~1..3
        ("BEGIN 2026\n#g\nEND", False),  # "a".."f"
        ("BEGIN 2026\n+ two\nlines\nEND", False),  # . is not a newline
        ("Sure: BEGIN 2026\n+ x\nEND", False),
    ],
)
def test_lark_grammar_holds_the_input(vocab: Vocab, text: str, ok: bool) -> None:
    spec = custom("notes", "lark", NOTES)
    gbnf = forced_call_grammar([spec])
    assert check_grammar(gbnf)
    assert vocab.accepts(gbnf, call("notes", text)) is ok
    # the oracle: Lark itself agrees on every row
    parser = lark.Lark(NOTES, parser="earley", lexer="dynamic")
    try:
        parser.parse(text)
        parsed = True
    except lark.exceptions.LarkError:
        parsed = False
    assert parsed is ok


def test_a_raw_newline_in_the_string_is_taken_too(vocab: Vocab) -> None:
    """Models write raw newlines inside JSON strings; the parsers escape them.
    And a literal's character may come as its \\u escape, in either case."""
    gbnf = forced_call_grammar([custom("notes", "lark", NOTES)])
    coded = '{"input": "\\u0042EGIN 2026\\n+ x\\n\\u0045\\u004E\\u0044"}'
    assert json.loads(coded)["input"] == "BEGIN 2026\n+ x\nEND"
    assert vocab.accepts(
        gbnf, f'<tool_call>\n{{"name": "notes", "arguments": {coded}}}\n</tool_call>'
    )
    arguments = '{"input": "BEGIN 2026\n+ x\nEND"}'  # \n: raw newlines in the string
    raw = f'<tool_call>\n{{"name": "notes", "arguments": {arguments}}}\n</tool_call>'
    assert vocab.accepts(gbnf, raw)


@pytest.mark.parametrize("seed", range(8))
def test_random_inputs_are_sentences_of_the_grammar(vocab: Vocab, seed: int) -> None:
    """Whatever the grammar lets a model write decodes to a sentence Lark parses."""
    spec = custom("notes", "lark", NOTES)
    text = vocab.random_sentence(forced_call_grammar([spec]), random.Random(seed), limit=4000)
    if text is None:
        pytest.skip("the random walk did not finish")
    parser = HermesParser(tools=["notes"], thinking=False, new_id=lambda: "id")
    ends = [e for e in parser.feed(text) + parser.finish() if isinstance(e, ToolCallEnd)]
    assert len(ends) == 1, text
    lark.Lark(NOTES, parser="earley", lexer="dynamic").parse(json.loads(ends[0].arguments)["input"])


DATE = r"^(January|February|March) \d{1,2}(st|nd|rd|th)?, [12]\d{3}$"


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("January 5, 2026", True),
        ("March 21st, 1999", True),
        ("April 5, 2026", False),
        ("January 123, 2026", False),
        ("January 5, 2026 and more", False),
    ],
)
def test_regex_grammar_holds_the_input(vocab: Vocab, text: str, ok: bool) -> None:
    gbnf = forced_call_grammar([custom("date", "regex", DATE)])
    assert check_grammar(gbnf)
    assert vocab.accepts(gbnf, call("date", text)) is ok
    assert (re.fullmatch(DATE, text) is not None) is ok


@pytest.mark.parametrize(
    "definition",
    [
        'start: item\nitem: item "x" | "y"\n',  # left-recursive: llama.cpp refuses it
        'start: "a" WORD\n%import common.WORD\n%ignore " "\n',  # %ignore
        'start: "a"i\n',  # case-insensitive literal
        "item: 'x'\n",  # no start rule
        'start: "a" missing\n',
        "start: /(?=a)b/\n",  # a lookahead
    ],
)
def test_what_does_not_convert_is_any_string(vocab: Vocab, definition: str) -> None:
    gbnf = forced_call_grammar([custom("t", "lark", definition)])
    assert check_grammar(gbnf)
    assert vocab.accepts(gbnf, call("t", 'anything at all, "quoted"'))


def test_the_model_is_shown_the_grammar_in_words_not_as_a_keyword() -> None:
    spec = custom("notes", "lark", NOTES)
    assert STRING_GRAMMAR in json.dumps(spec.parameters)
    shown = json.dumps(to_template_tools([spec]))
    assert STRING_GRAMMAR not in shown
    assert "It must match this lark grammar" in shown
