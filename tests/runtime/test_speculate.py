"""Speculative decoding from a sequence's own tokens, on real llama.cpp:
drafts come from what repeats, greedy output is the same token for token
with it on and off (one stream and four at once), a forced call still
parses, cancelling one request mid-draft leaves the others alone, and the
gate turns drafting off where the measured step costs say it cannot pay."""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from support.flows import logit_margin

from engy_local.chat import (
    ChatRequest,
    Finished,
    Message,
    Sampling,
    Text,
    TextDelta,
    ToolCallEnd,
    ToolChoice,
    ToolSpec,
    Usage,
)
from engy_local.prompt.parsing.detokenize import TextEnd, TokenText
from engy_local.runtime.engine import scheduler as scheduler_module
from engy_local.runtime.engine.job import Job
from engy_local.runtime.engine.local import ServedModel
from engy_local.runtime.engine.speculate import (
    LEAD,
    RECENT,
    RETRY,
    RUN,
    SIZES,
    Costs,
    Drafter,
    Gate,
    Recent,
)
from engy_local.runtime.loading.model import LoadOptions
from engy_local.runtime.pool import ModelPool

FILE = "\n".join(
    f"The keeper climbed the {w} stairs at dusk and lit lamp number {i}."
    for i, w in enumerate(["old", "narrow", "winding", "stone", "iron", "wet", "long"] * 3)
)
COPY = FILE + "\n\nRepeat the text above exactly, nothing else."
FREE = "Write a short story about a harbour at night."


# ---- drafts and the gate, pure ------------------------------------------------


def test_a_draft_is_what_followed_the_longest_repeated_suffix() -> None:
    d = Drafter([1, 2, 3, 4, 5, 6, 9, 2, 3, 4])
    assert d.draft(3) == [5, 6, 9]  # ..2 3 4 came before, followed by 5 6 9
    assert d.draft(1) == [5]
    d.push([5, 6])
    assert d.draft(8) == [9, 2, 3, 4, 5, 6]  # up to the sequence's end
    assert Drafter([7, 8, 9]).draft(4) == []  # nothing repeats
    # Byte matches across token boundaries are not token matches.
    assert Drafter([256, 1, 0, 0, 1]).draft(2) == []


def test_a_draft_follows_the_look_alike_that_agrees_furthest_back() -> None:
    """Two functions alike but for one token each: the copy of the first
    drafts the first's end, not the second's (the latest occurrence), and
    the next draft goes on from where the last one left its source."""
    body = [5, 6, 7, 8, 9, 10, 13, 14, 15]  # longer than the longest suffix looked for
    f1, f2 = [1, 2, 100, *body, 11, 3], [1, 2, 200, *body, 12, 3]
    d = Drafter([*f1, *f2, 0, 1, 2, 100, *body])
    assert d.draft(2) == [11, 3]
    d.push([11, 3, 1])  # the output agrees with the source: followed
    assert d.draft(3) == [2, 200, 5]
    d.push([2, 300])  # an edit: the source is left, the next draft searches again
    assert d.draft(3) == []  # (300 never came before)


def test_a_drafter_counts_the_output_that_went_as_its_source_said() -> None:
    """Drafted or not: what a draft would have kept (the gate's evidence)."""
    d = Drafter([1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2])
    assert d.draft(2) == [3, 4] and d.followed == 0
    d.push([3])
    d.push([4, 5])
    assert d.followed == 3
    d.push([0])  # the output leaves its source
    assert d.followed == 0 and d.draft(2) == []


def answered(recent: Recent, prompt: list[int], answer: list[int]) -> None:
    """A request that was answered: its drafter saw `answer` after `prompt`."""
    d = Drafter(prompt, recent.blob)
    d.push(answer)
    recent.add(d)


def test_a_request_asked_again_drafts_the_last_answer_from_its_first_token() -> None:
    recent = Recent()
    prompt = list(range(100, 140))
    answered(recent, prompt, [7, 8, 9, 10])
    answered(recent, [1, 2, 3], [4, 5, 6])  # another request since
    again = Drafter(prompt, recent.blob)
    assert again.draft(8) == [7, 8, 9, 10]  # up to that answer's end, not into the next
    # Kept of it: the prompt's last LEAD tokens and the answer.
    again.push([7, 8, 9, 10])
    assert again.output() == np.asarray([*prompt[-LEAD:], 7, 8, 9, 10], dtype="<i4").tobytes()
    # A request never seen drafts nothing from them, and its own tokens still count.
    assert Drafter([50, 51, 52], recent.blob).draft(4) == []
    assert Drafter([50, 51, 52, 53, 50, 51], recent.blob).draft(2) == [52, 53]
    # What follows the prompt's end in the same conversation wins over a
    # recent answer only where it agrees further back.
    assert Drafter([0, *prompt], recent.blob).draft(2) == [7, 8]


def test_recent_keeps_the_last_answers_that_said_something() -> None:
    recent = Recent()
    for i in range(RECENT + 2):
        answered(recent, [1000 + i, 1100 + i], [2000 + i, 3000 + i])
    answered(recent, [5, 6, 7], [])  # an answer with no tokens (cancelled at once)
    assert Drafter([1000, 1100], recent.blob).draft(2) == []  # the oldest two are gone
    assert Drafter([1001, 1101], recent.blob).draft(2) == []
    assert Drafter([1002, 1102], recent.blob).draft(2) == [2002, 3002]
    assert Recent().blob == b"" and Drafter([1, 2, 1, 2], b"").draft(1) == [1]


def costs(per_token: float, fixed: float) -> Costs:
    return Costs(tuple(fixed + per_token * b for b in SIZES))


@pytest.mark.parametrize(("tokens", "seconds"), [
    (0, 0.010), (1, 0.010), (2, 0.020),  # below and at the timed sizes
    (3, 0.025), (12, 0.050),             # between two: a straight line
    (64, 0.200), (128, 0.400),           # past the widest: its cost a row
])  # fmt: skip
def test_a_step_costs_what_the_timed_sizes_around_it_say(tokens: int, seconds: float) -> None:
    timed = Costs((0.010, 0.020, 0.030, 0.040, 0.060, 0.100, 0.200))
    assert timed.of(tokens) == pytest.approx(seconds)
    assert Costs((0.010, 0.020, 0.030)).of(8) == pytest.approx(0.060)  # fewer sizes timed


def test_the_gate_drafts_where_it_pays_and_not_where_it_does_not() -> None:
    cheap = Gate(costs(per_token=0.001, fixed=0.02))  # a step's cost is mostly fixed
    assert cheap.pays_at_all()
    assert cheap.lengths(1, {0: 8}) == {0: 4}  # the starting length, all of it worth it
    linear = Gate(costs(per_token=0.02, fixed=0.0))  # each token costs a step of its own
    assert not linear.pays_at_all()
    assert linear.lengths(1, {0: 8}) == {}
    # Two rows cost almost two steps, seventeen far less than seventeen (as
    # gemma-3-270m's steps at 3.8k tokens of context on a 2-core AMD VM):
    # a long draft accepted whole still pays.
    steep = Gate(Costs((0.010, 0.018, 0.022, 0.026, 0.034, 0.050, 0.090)))
    assert steep.pays_at_all()


def test_drafts_lengthen_when_accepted_and_stop_when_they_fail() -> None:
    gate = Gate(costs(per_token=0.001, fixed=0.02), cap=16)
    gate.account(0, 4, 4)
    assert gate.stats[0].length == 8
    assert gate.lengths(1, {0: 16}) == {0: 8}
    gate.account(0, 8, 0)  # one miss: it drafts on, less far
    assert gate.lengths(1, {0: 16}) == {0: 1}
    for _ in range(16):
        gate.account(0, 8, 0)  # nothing accepted, again and again
    assert gate.lengths(1, {0: 16}) == {}  # it rests
    for _ in range(RETRY - 2):
        assert gate.lengths(1, {0: 16}) == {}
    assert gate.lengths(1, {0: 16}) == {0: 1}  # and tries again, one token


def test_a_run_broken_by_one_miss_keeps_its_long_drafts() -> None:
    """Copying is accepted in runs: after 60-odd tokens kept and one edit
    that missed, a draft is still worth its full length where a row costs a
    fifth of a step (a per-token average of 0.85 would have cut it short)."""
    gate = Gate(costs(per_token=0.004, fixed=0.02), cap=16)
    for _ in range(4):
        gate.account(0, 16, 16)
    gate.account(0, 16, 12)  # the edit
    gate.account(0, 13, 13)
    assert gate.stats[0].rate > 0.95
    assert gate.lengths(1, {0: 16}) == {0: 16}


def test_several_busy_sequences_draft_less() -> None:
    """A step of four already pays one token's cost four times over: what a
    draft adds costs more than it saves where rows are not cheap."""
    gate = Gate(Costs((0.010, 0.013, 0.019, 0.031, 0.055, 0.103, 0.199)))
    alone = gate.lengths(1, {0: 8})
    busy = Gate(gate.costs).lengths(4, {0: 8, 1: 8, 2: 8, 3: 8})
    assert sum(alone.values()) > 0
    assert sum(busy.values()) < 4 * sum(alone.values())


def test_an_early_miss_does_not_stop_a_sequence_for_good() -> None:
    """A copy whose first draft missed (a fresh answer's opening words)
    drafts again once it has rested: its acceptance only moves when it
    drafts, so resting must end in a new try."""
    gate = Gate(costs(per_token=0.015, fixed=0.02), cap=16)
    gate.account(0, 4, 0)  # the first draft: all of it wrong
    assert gate.lengths(1, {0: 16}) == {}  # one token does not pay at that rate
    for _ in range(RETRY - 2):
        assert gate.lengths(1, {0: 16}) == {}
    assert gate.lengths(1, {0: 16}) == {0: 1}
    gate.account(0, 1, 1)
    gate.account(0, 2, 2)
    assert gate.lengths(1, {0: 16})[0] > 1  # and lengthens as it is accepted


def test_a_resting_sequence_whose_output_follows_its_source_drafts_at_length() -> None:
    """A copy's sequence resting after a miss (its opening words) or after
    drafts of one token that did not pay: the output it writes meanwhile
    goes as its drafter's source says, so it drafts again at once and
    long, not one token after RETRY steps."""
    gate = Gate(Costs((0.010, 0.018, 0.022, 0.026, 0.034, 0.050, 0.090)), cap=16)
    gate.account(0, 4, 0)  # the first draft: all of it wrong
    assert gate.lengths(1, {0: 16}, {0: 0}) == {}  # it rests
    assert gate.lengths(1, {0: 16}, {0: RUN - 1}) == {}  # too short a run to go on
    assert gate.lengths(1, {0: 16}, {0: 40}) == {0: 16}  # a copy: drafted whole
    # Without a run, a newcomer at its prior drafts short or not at all.
    assert sum(Gate(gate.costs, cap=16).lengths(1, {1: 16}, {1: 0}).values()) < 16


def test_the_gate_follows_what_steps_cost_while_serving() -> None:
    """Start-up timings taken in a burst of other work (a token more
    costing a step of its own) do not stop drafting for good: one sequence
    probes with a one-token draft every RETRY steps, each generating step
    times its size again, and once a step of two rows is seen to cost
    little more than one, drafts go on; where it really costs a step, they
    stay off but for the probes."""
    gate = Gate(costs(per_token=0.02, fixed=0.0))
    assert not gate.pays_at_all()
    seen = [gate.lengths(1, {0: 16}) for _ in range(2 * RETRY)]
    assert seen.count({0: 1}) == 2 and seen.count({}) == 2 * RETRY - 2  # the probes
    assert gate.lengths(2, {0: 16, 1: 16}) == {}  # not beside another sequence
    for _ in range(3):  # what serving sees: a step's cost mostly fixed
        gate.observe(1, 0.021)
        gate.observe(2, 0.022)
    assert gate.pays_at_all()
    assert gate.lengths(1, {0: 16}) != {}
    for _ in range(60):  # the machine gets slower: a token more costs a step again
        gate.observe(2, 0.06)
    assert not gate.pays_at_all()
    fixed = Gate(Costs(tuple(1.0 for _ in SIZES)), fixed=True)  # "on": drafts whatever
    fixed.observe(2, 5.0)
    assert fixed.pays_at_all()


# Qwen2.5-Coder-0.5B's steps on a 2-core Xeon VM with flash attention, as
# timed at start-up (a nearly empty cache), and as served over 3.2k cached
# tokens: a step of 1 row 79 ms, of 17 rows 0.9 s.
QWEN_EMPTY = Costs((0.036, 0.039, 0.052, 0.078, 0.119, 0.227, 0.391))
OVER_3200 = ((1, 0.079), (17, 0.9))
# What a sequence's drafts kept: (drafted, accepted) a draft.
WHOLE = ((16, 16), (16, 16))
EDITED = ((16, 16), (16, 12), (13, 13))
SO_SO = ((4, 2), (4, 3), (4, 2))


@pytest.mark.parametrize(("kept", "timed", "cells", "drafts"), [
    (WHOLE, False, 3200, 16),
    (WHOLE, True, 3200, 16),  # kept whole, a long draft still pays
    (EDITED, False, 3200, 16),
    (EDITED, True, 3200, 13),  # one miss in 45: shorter, now that a row costs ~34 ms more
    (SO_SO, False, 3200, 3),
    (SO_SO, True, 3200, 1),
    (SO_SO, True, 800, 2),  # over a shorter sequence a row costs less again
    (SO_SO, True, 100, 3),
])  # fmt: skip
def test_the_gate_counts_what_a_row_attends_to(
    kept: tuple[tuple[int, int], ...], timed: bool, cells: int, drafts: int
) -> None:
    """Each row of a step attends to its sequence's tokens: over a long
    sequence a drafted row costs far more than start-up's timings say, so
    once steps over one are timed, drafts that may miss are cut short; the
    cost goes by the sequence's length, and the weights' part stays as timed."""
    gate = Gate(QWEN_EMPTY, cap=16)
    for drafted, accepted in kept:
        gate.account(0, drafted, accepted)
    for rows, seconds in OVER_3200 if timed else ():
        gate.observe(rows, seconds, 3200)
    assert gate.costs == QWEN_EMPTY
    assert gate.lengths(1, {0: 16}, held={0: cells}) == {0: drafts}


def test_bad_start_up_timings_do_not_stop_drafting(
    tiny_qwen3: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """As after a restart on a busy machine: the start-up timings say a
    token more costs a step; the copy is drafted anyway once serving has
    timed its own steps."""
    monkeypatch.setattr(scheduler_module, "measure", lambda run: costs(0.02, 0.0))
    caplog.set_level(logging.INFO, "engy.requests")
    pool = pool_of(tiny_qwen3, "auto")
    try:
        out = answers(pool, [chat(COPY, max_tokens=200)])[0]
    finally:
        pool.close()
    assert "speculative decoding waits" in caplog.text
    assert out[1].usage.accepted_tokens > 20, out[1].usage


def test_a_request_asked_again_drafts_its_last_answer(tiny_qwen3: Path) -> None:
    """The same request twice on one server (a retry, a bench's next
    round): the second drafts the first's answer and keeps it, with the
    same text."""
    pool = pool_of(tiny_qwen3, "on")
    try:
        first, second = (answers(pool, [chat(FREE, max_tokens=64)])[0] for _ in range(2))
    finally:
        pool.close()
    assert second[0] == first[0]
    made, kept = second[1].usage.output_tokens, second[1].usage.accepted_tokens
    print(f"first kept {first[1].usage.accepted_tokens}, second {kept} of {made}")
    assert kept >= 0.8 * made > 0 and kept > first[1].usage.accepted_tokens


def test_a_seeded_request_asked_again_takes_the_same_steps(tiny_qwen3: Path) -> None:
    """With a seed the answer is to be the same when asked again: it drafts
    from its own tokens only, as the first time, not from that answer."""
    seeded = replace(chat(FREE), sampling=Sampling(max_tokens=64, temperature=1.0, seed=7))
    pool = pool_of(tiny_qwen3, "on")
    try:
        first, second = (answers(pool, [seeded])[0] for _ in range(2))
    finally:
        pool.close()
    assert second[0] == first[0]
    assert second[1].usage.drafted_tokens == first[1].usage.drafted_tokens


# ---- on real models ------------------------------------------------------------------


def pool_of(model: Path | ServedModel, speculative: str, parallel: int = 4) -> ModelPool:
    if isinstance(model, Path):
        model = ServedModel("m", LoadOptions(model, ctx_size=4096))
    options = replace(model.options, speculative=speculative, parallel=parallel, threads=2)
    return ModelPool([replace(model, id="m", aliases=(), options=options)], primary="m")


def chat(text: str, max_tokens: int = 96, **fields: object) -> ChatRequest:
    sampling = Sampling(max_tokens=max_tokens, temperature=0)
    return ChatRequest("m", (Message("user", (Text(text),)),), sampling=sampling, **fields)  # type: ignore[arg-type]


def answers(
    pool: ModelPool, requests: list[ChatRequest], cancel: int | None = None
) -> list[tuple[str, Finished]]:
    """Each request's text and Finished, all at once; `cancel`: that one's
    client goes away after its first piece of text."""

    async def one(i: int, request: ChatRequest) -> tuple[str, Finished]:
        generation = await pool.submit(request)
        text, finished, pieces = "", None, 0
        async for event in generation:
            if isinstance(event, TextDelta):
                text += event.text
                pieces += 1
                if i == cancel and pieces == 1:
                    generation.cancel()
                    break
            elif isinstance(event, Finished):
                finished = event
        return text, finished or Finished("end", Usage())  # a cancelled one has none

    async def all_of() -> list[tuple[str, Finished]]:
        return list(await asyncio.gather(*(one(i, r) for i, r in enumerate(requests))))

    return asyncio.run(all_of())


def same_with_and_without(model: Path | ServedModel, requests: list[ChatRequest]) -> int:
    """Runs `requests` at once with speculation off and on; the texts are
    equal token for token. Returns the tokens the drafts gave."""
    results = {}
    for mode in ("off", "on"):
        pool = pool_of(model, mode)
        try:
            results[mode] = answers(pool, requests)
        finally:
            pool.close()
    off, on = results["off"], results["on"]
    assert [t for t, _ in on] == [t for t, _ in off]
    assert [f.usage.output_tokens for _, f in on] == [f.usage.output_tokens for _, f in off]
    return sum(f.usage.accepted_tokens for _, f in on)


@pytest.mark.parametrize("prompts", [[COPY], [FREE], [COPY, FREE, COPY + " ", FREE + " "]],
                         ids=["copy", "free text", "four streams"])  # fmt: skip
def test_greedy_output_is_the_same_with_speculation_on_a_tiny_model(
    tiny_qwen3: Path, prompts: list[str]
) -> None:
    same_with_and_without(tiny_qwen3, [chat(p) for p in prompts])


@pytest.fixture(scope="module")
def gemma(gemma_path: Path) -> ServedModel:
    from engy_local.server.backends import resolve_model
    from engy_local.server.options import ServeOptions

    return resolve_model(str(gemma_path), ServeOptions(ctx_size=4096))


# The most llama.cpp moved one of gemma's logits between a step of one row
# and a step of several rows of the same sequence, measured on this suite's
# machines (1.64 at 3k tokens of context: its CPU kernels split the work by
# rows, so the sums are added in another order).
ROUNDING = 2.0


def greedy_tokens(
    model: ServedModel, request: ChatRequest, mode: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[int], list[int], Finished]:
    """The prompt's tokens, the answer's tokens and its Finished, speculation
    `mode`, through the real pool and scheduler."""
    seen: list[tuple[list[int], list[int]]] = []
    admit = scheduler_module.Scheduler.admit

    def watch(text: TokenText, out: list[int]) -> None:
        push = text.push_token

        def push_and_keep(token: int) -> tuple[str, TextEnd | None]:
            out.append(token)
            return push(token)

        text.push_token = push_and_keep  # type: ignore[method-assign]

    def admit_and_watch(self: scheduler_module.Scheduler, job: Job) -> None:
        admit(self, job)
        for r in self.running:
            if r.job is job:
                seen.append((list(job.tokens), []))
                watch(r.text, seen[-1][1])

    with monkeypatch.context() as m:
        m.setattr(scheduler_module.Scheduler, "admit", admit_and_watch)
        pool = pool_of(model, mode)
        try:
            ((_, finished),) = answers(pool, [request])
        finally:
            pool.close()
    ((prompt, output),) = seen
    return prompt, output, finished


def margin_at(model: ServedModel, tokens: list[int], a: int, b: int) -> float:
    """How far apart the logits of `a` and `b` are after `tokens`, one row."""
    return logit_margin(replace(model.options, parallel=1, threads=2), tokens, a, b)


@pytest.mark.parametrize(("text", "max_tokens"), [(COPY, 160), (FREE, 64)],
                         ids=["copy", "free text"])  # fmt: skip
def test_greedy_output_with_speculation_on_gemma_parts_only_at_a_near_tie(
    gemma: ServedModel, text: str, max_tokens: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every token a draft step keeps is the model's own greedy choice from
    that step's logits. A step of several rows adds the same numbers in
    another order than a step of one (as batching beside other requests
    does), so where two candidates are nearly tied the choice may go the
    other way: the answers are the same token for token, or they part where
    the model stood at such a tie, never anywhere else."""
    request = chat(text, max_tokens)
    prompt, off, _ = greedy_tokens(gemma, request, "off", monkeypatch)
    prompt_on, on, finished = greedy_tokens(gemma, request, "on", monkeypatch)
    assert prompt_on == prompt
    assert finished.usage.drafted_tokens > 0
    if text == COPY:
        assert finished.usage.accepted_tokens > 60  # the copy is drafted and kept
    if on == off:
        return
    at = next(i for i, (x, y) in enumerate(zip(on, off, strict=False)) if x != y)
    margin = margin_at(gemma, prompt + off[:at], off[at], on[at])
    assert margin < ROUNDING, f"parted at output token {at}, not a tie: {margin:.2f} apart"


def test_cancelling_one_mid_draft_leaves_the_others_alone(tiny_qwen3: Path) -> None:
    # The cancelled one is long: text reaches the client merged (at most
    # every 40 ms), and 80 tokens of this tiny model can all come in a few
    # pieces, before any cancel.
    requests = [chat(COPY + f" ({i})", 400 if i == 1 else 80) for i in range(4)]
    pool = pool_of(tiny_qwen3, "on")
    try:
        whole = answers(pool, requests)
        cut = answers(pool, requests, cancel=1)
    finally:
        pool.close()
    for i in (0, 2, 3):
        assert cut[i][0] == whole[i][0]
    assert len(cut[1][0]) < len(whole[1][0]), (len(cut[1][0]), len(whole[1][0]))


def test_a_forced_call_parses_with_speculation(tiny_qwen3: Path) -> None:
    """The call's fixed start is taken without sampling, the rest drafted
    and verified under the grammar: one valid call."""
    tool = ToolSpec(
        "read_file",
        "Read a file.",
        {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    )
    request = replace(
        chat("Read /etc/hostname, then /etc/hostname again.", 64),
        tools=(tool,),
        tool_choice=ToolChoice("tool", "read_file"),
    )
    pool = pool_of(tiny_qwen3, "on")
    try:

        async def run() -> list[ToolCallEnd]:
            generation = await pool.submit(request)
            return [e async for e in generation if isinstance(e, ToolCallEnd)]

        calls = asyncio.run(run())
    finally:
        pool.close()
    assert len(calls) == 1
    assert isinstance(json.loads(calls[0].arguments).get("path"), str)
