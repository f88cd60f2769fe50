"""What every tool-call family must do, written once over each family's
data (support/families/<family>.py): detection from the real templates,
rendering through them, the parser on realistic and bad outputs split at
every offset, streamed events, damaged outputs. The forced-call grammars
are in test_families_grammar.py, the tiny-model round trips in
test_families_roundtrip.py; what only one family does, beside its data in
test_family_<name>.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from support.families import CASES
from support.families.prompts import TEMPLATES, check_rendered, source
from support.families.spec import Case, Damage, Output, ParseBack, Rendered, Stream
from support.parsing import Result, assert_parses, parse, splits

from engy_local.prompt.families import detect_family, get


def rows(attr: str, label: Callable[[Any], str]) -> list[Any]:
    """(case, row) for every row of every case, named case-row."""
    return [
        pytest.param(case, row, id=f"{case.name}-{label(row)}")
        for case in CASES
        for row in getattr(case, attr)
    ]


def named(row: Any) -> str:
    return str(row.name)


# ---- detection -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("template", "family"),
    [
        pytest.param(template, family, id=f"{case.name}-{template}")
        for case in CASES
        for template, family in case.detected.items()
    ],
)
def test_detected_from_the_template(template: str, family: str) -> None:
    assert detect_family(source(template)) == family


def taken(case: Case) -> list[Any]:
    if case.no_other:  # one test over every template the fixtures hold
        return [pytest.param(case, None, id=f"{case.name}-every other template")]
    return [pytest.param(case, name, id=f"{case.name}-{name}") for name in case.not_taken]


@pytest.mark.parametrize(("case", "template"), [p for case in CASES for p in taken(case)])
def test_other_templates_are_not_taken(case: Case, template: str | None) -> None:
    prefix = case.prefix or case.family
    if template is not None:
        assert not detect_family(source(template)).startswith(prefix)
        return
    for path in sorted(TEMPLATES.glob("*.jinja")):
        if path.name not in case.detected:
            assert not detect_family(path.read_text()).startswith(prefix), path.name


@pytest.mark.parametrize("case", [c for c in CASES if c.catalog_prefix], ids=lambda c: c.name)
def test_catalog_families_exist(case: Case) -> None:
    from engy_local.models.catalog import load_catalog

    listed = {e.family for e in load_catalog().entries.values() if e.family}
    ours = {f for f in listed if case.catalog_prefix and f.startswith(case.catalog_prefix)}
    assert ours and all(get(f).name == f for f in ours)


# ---- rendering through the real templates --------------------------------------------


@pytest.mark.parametrize(("case", "row"), rows("renders", named))
def test_conversation_renders_the_way_the_template_expects(case: Case, row: Rendered) -> None:
    check_rendered(row)


@pytest.mark.parametrize(("case", "row"), rows("thinking", named))
def test_thinking_switch_and_earlier_reasoning(case: Case, row: Rendered) -> None:
    check_rendered(row)


@pytest.mark.parametrize(("case", "row"), rows("parse_back", named))
def test_rendered_calls_parse_back(case: Case, row: ParseBack) -> None:
    """The template's own writing of the calls, read by the parser however
    it is split, gives the calls back."""
    turns = row.turns()
    assert len(turns) == len(row.calls)
    for turn, expected in zip(turns, row.calls, strict=True):
        for chunks in splits(turn):
            got = parse(chunks, family=row.family, tools=row.tools)
            assert [(n, json.loads(a)) for _, n, a in got.calls] == list(expected), chunks
            if row.text is not None:
                assert got.text == row.text, chunks
            if row.exact is not None:
                assert got == row.exact, chunks


# ---- parsing ------------------------------------------------------------------------


def check_output(case: Case, row: Output) -> None:
    tools = case.tools if row.tools is None else row.tools
    family = row.family or case.family
    assert_parses(row.text, row.expected, family=family, tools=tools, thinking=row.thinking)


@pytest.mark.parametrize(("case", "row"), rows("outputs", named))
def test_realistic_outputs_parse_the_same_at_every_split(case: Case, row: Output) -> None:
    check_output(case, row)


@pytest.mark.parametrize(("case", "row"), rows("bad", named))
def test_bad_outputs(case: Case, row: Output) -> None:
    check_output(case, row)


@pytest.mark.parametrize(
    ("family", "output"),
    [
        pytest.param(family, output, id=f"{case.name}-{family}-{i}")
        for case in CASES
        for i, (family, output) in enumerate(case.untooled)
    ],
)
def test_no_tools_offered_means_calls_are_text(family: str, output: str) -> None:
    assert_parses(output, Result(text=output), family=family, tools=())


@pytest.mark.parametrize(("case", "row"), rows("streams", named))
def test_event_sequence_streams_arguments(case: Case, row: Stream) -> None:
    """The exact events for a stream cut the way a model's tokens would be."""
    parser = row.parser()
    for chunk, expected in row.steps:
        assert parser.feed(chunk) == list(expected), chunk
    assert parser.finish() == list(row.finish)


@pytest.mark.parametrize(("case", "row"), rows("damage", lambda row: row.family))
def test_damaged_outputs_never_break_and_split_the_same(case: Case, row: Damage) -> None:
    started = 0
    for output, cut in row.samples():
        whole = parse([output], family=row.family, tools=row.tools)
        started += bool(whole.calls)
        assert parse(list(output), family=row.family, tools=row.tools) == whole, output
        halves = [output[:cut], output[cut:]]
        assert parse(halves, family=row.family, tools=row.tools) == whole, output
        if not whole.calls and row.keeps_text(output):  # nothing is lost
            assert whole.text == (output.lstrip() if row.lead_dropped else output), output
    assert started > row.min_started
