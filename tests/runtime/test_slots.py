"""Which sequence a request takes and where its prefix comes from (pure), the
RAM cache's bookkeeping, and the CPU guard's decision: table tests."""

from __future__ import annotations

import pytest

from engy_local.runtime.cache.ram import PromptCache
from engy_local.runtime.cache.slots import Checkpoint, Option, Slot, choose, common_prefix
from engy_local.runtime.loading.cpu import build_has_amx, cpu_reports_amx, decide

SYSTEM = list(range(1000, 1400))  # a 400-token system prompt shared by two agents
CONV_A = [*SYSTEM, *range(1, 301)]  # conversation A after its first turn
CONV_B = [*SYSTEM, *range(5001, 5301)]
TITLE = [7, 8, 9, 10]


def slots(*held: list[int], busy: tuple[int, ...] = (), used: tuple[int, ...] = ()) -> list[Slot]:
    return [Slot(i, list(h), i in busy, used[i] if used else i) for i, h in enumerate(held)]


@pytest.mark.parametrize(
    ("a", "b", "n"),
    [
        ([], [], 0),
        ([1, 2, 3], [1, 2, 3], 3),
        ([1, 2, 3], [1, 2], 2),
        ([1, 2, 3], [1, 9, 3], 1),
        ([5], [6], 0),
        (list(range(999)), [*range(500), -1], 500),
    ],
)
def test_common_prefix(a: list[int], b: list[int], n: int) -> None:
    assert common_prefix(a, b) == n


def test_next_turn_goes_back_to_its_own_sequence() -> None:
    turn2 = [*CONV_A, 42, 43]
    plan = choose(turn2, slots(TITLE, CONV_A, []), 0, 256)
    assert plan is not None
    assert plan.slot == 1 and not plan.save
    assert plan.options[0] == Option("self", len(CONV_A))


def test_a_side_request_does_not_overwrite_the_conversation() -> None:
    # Claude Code's title request between two turns: another system prompt.
    plan = choose(TITLE, slots(CONV_A, [], []), 0, 256)
    assert plan is not None and plan.slot in (1, 2) and not plan.save


def test_a_shared_prefix_is_copied_into_a_free_sequence() -> None:
    # Two agents sharing a system prompt: B must not truncate A (the
    # llama-server 50% rule made them overwrite each other).
    plan = choose(CONV_B, slots(CONV_A, []), 0, 256)
    assert plan is not None and plan.slot == 1
    assert plan.options[0] == Option("copy", len(SYSTEM), 0)


def test_a_busy_sequence_can_donate_its_prefix() -> None:
    plan = choose(CONV_B, slots(CONV_A, [], busy=(0,)), 0, 256)
    assert plan is not None and plan.slot == 1
    assert plan.options[0] == Option("copy", len(SYSTEM), 0)


def test_all_busy_means_wait() -> None:
    assert choose(TITLE, slots(CONV_A, CONV_B, busy=(0, 1)), 0, 256) is None


def test_a_full_house_saves_the_least_recently_used_before_overwriting() -> None:
    conv_c = [*range(9000, 9600)]
    plan = choose(TITLE, slots(CONV_A, CONV_B, conv_c, used=(5, 2, 9)), 0, 256)
    assert plan is not None and plan.slot == 1 and plan.save


def test_small_leftovers_are_not_saved() -> None:
    plan = choose(TITLE, slots(list(range(100))), 0, 256)
    assert plan is not None and not plan.save


def test_the_ram_cache_wins_when_it_holds_more() -> None:
    turn2 = [*CONV_A, 42]
    plan = choose(turn2, slots(CONV_B, []), len(CONV_A), 256)
    assert plan is not None
    assert plan.options[0] == Option("cache", len(CONV_A))


def test_one_token_is_always_left_to_evaluate_and_images_stay_whole() -> None:
    prompt = [*SYSTEM, -5, -5, -5, -5, 1, 2]
    held = [*SYSTEM, -5, -5, -5, -5, 1, 2, 3]

    def usable(n: int) -> int:
        n = min(n, len(prompt) - 1)
        return len(SYSTEM) if len(SYSTEM) < n < len(SYSTEM) + 4 else n

    plan = choose(prompt, slots(held), 0, 256, usable)
    assert plan is not None and plan.options[0].reuse == len(prompt) - 1
    cut = [*SYSTEM, -5, -5]  # a different image: shares 2 of its placeholders
    plan = choose([*cut, -7, -7, 9], slots(held), 0, 256, usable)
    assert plan is not None and plan.options[0].reuse == len(SYSTEM)


def test_cache_keeps_the_longest_and_drops_what_it_extends() -> None:
    cache = PromptCache(budget=10_000)
    assert cache.put(CONV_A[:350], b"x" * 100, 0)
    assert cache.put(CONV_A, b"y" * 100, 0)
    assert len(cache.entries) == 1  # the shorter one is a prefix of the longer
    entry, n = cache.best([*CONV_A, 1, 2])
    assert entry is not None and n == len(CONV_A)
    assert cache.covers(CONV_A[:10]) and not cache.covers(CONV_B)


def test_cache_evicts_least_recently_used_within_its_budget() -> None:
    cache = PromptCache(budget=3 * (1000 + 4 * 10))
    for k in range(3):
        cache.put([k] * 10, b"s" * 1000, 0)
    cache.touch(cache.entries[0])  # [0]*10 used again
    cache.put([9] * 10, b"s" * 1000, 0)
    kept = sorted(e.tokens[0] for e in cache.entries)
    assert kept == [0, 2, 9] and cache.used <= cache.budget
    assert not cache.put([1] * 10, b"s" * 10_000, 0)  # larger than the whole budget


@pytest.mark.parametrize(
    ("asked", "env", "build", "cpu", "repack"),
    [
        (None, None, True, True, False),  # the crash case: guarded
        (None, None, True, False, True),
        (None, None, False, True, True),
        (None, None, False, False, True),
        (True, None, True, True, True),  # the user asked for it
        (None, "1", True, True, True),
        (None, "0", False, False, False),
        (False, "1", False, False, False),  # the flag wins over the environment
        (None, "", True, True, False),
    ],
)
def test_cpu_guard(
    asked: bool | None, env: str | None, build: bool, cpu: bool, repack: bool
) -> None:
    assert decide(asked, env, build, cpu) is repack


def test_amx_detection_reads_the_flags() -> None:
    assert cpu_reports_amx("processor: 0\nflags\t: fpu sse avx2 amx_bf16 amx_tile amx_int8\n")
    assert not cpu_reports_amx("flags\t: fpu sse avx2 avx512f\n")
    assert build_has_amx("CPU : SSE3 = 1 | AVX2 = 1 | AMX_INT8 = 1 |")
    assert not build_has_amx("CPU : SSE3 = 1 | AVX2 = 1 |")


def test_a_conversation_is_not_overwritten_by_a_short_stranger() -> None:
    # A 134-token conversation is too short to be worth saving, but an
    # empty sequence is there: the stranger takes that one.
    short_a = [*range(1, 8), *range(100, 227)]
    stranger = [*range(1, 8), *range(500, 600)]
    plan = choose(stranger, slots(short_a, [], []), 0, 256)
    assert plan is not None and plan.slot == 1


def test_older_turns_held_elsewhere_are_taken_first() -> None:
    turn1, turn2 = CONV_A[:350], [*CONV_A, 1, 2, 3]
    plan = choose(CONV_B, slots(turn2, turn1, CONV_B[:5] + [0] * 400), 0, 256)
    assert plan is not None and plan.slot == 1 and not plan.save


def test_what_the_ram_cache_holds_is_not_saved_again() -> None:
    plan = choose(TITLE, slots(CONV_A), 0, 256, saved=lambda t: t == CONV_A)
    assert plan is not None and plan.slot == 0 and not plan.save


def test_a_stale_conversation_goes_before_the_one_that_just_spoke() -> None:
    # Four sequences hold short conversations (too short to save); the one
    # in sequence 2 just spoke. A stranger takes the least recently used.
    held = [list(range(k * 1000, k * 1000 + n)) for k, n in enumerate((200, 60, 140, 90))]
    plan = choose(TITLE, slots(*held, used=(3, 1, 9, 2)), 0, 256)
    assert plan is not None and plan.slot == 1 and not plan.save


def test_a_stale_long_conversation_is_saved_rather_than_a_fresh_short_one_dropped() -> None:
    stale = list(range(5000, 5600))  # worth saving, but idle for long
    fresh = list(range(7000, 7140))  # too short to save, but it just spoke
    plan = choose(TITLE, slots(stale, fresh, used=(1, 9)), 0, 256)
    assert plan is not None and plan.slot == 0 and plan.save


def test_a_window_that_no_longer_reaches_resumes_at_a_checkpoint() -> None:
    """A sliding-window sequence holding turn 1 and its answer: turn 2
    leaves it where the answer began; the window layers reach back only a
    window from the end, so it resumes at the checkpoint kept there."""
    answer = list(range(9000, 9020))
    held = [*CONV_A, *answer]
    slot = Slot(0, list(held), checkpoints=[Checkpoint(len(SYSTEM), b"m", True),
                                            Checkpoint(len(CONV_A), b"e")])  # fmt: skip
    turn2 = [*CONV_A, *answer[:5], 77, 78]
    # The window reaches back 10 tokens (an answer's few tokens more: no).
    plan = choose(turn2, [slot, Slot(1)], 0, 256, cuts=lambda s, n: n >= len(s.held) - 10)
    assert plan is not None and plan.options[0] == Option("self", len(CONV_A))
    # Where it still reaches, the whole shared prefix.
    plan = choose(turn2, [slot, Slot(1)], 0, 256)
    assert plan is not None and plan.options[0] == Option("self", len(CONV_A) + 5)
    # A new conversation with the same system prompt copies it at the mark.
    plan = choose(CONV_B, [slot, Slot(1)], 0, 256, cuts=lambda s, n: n >= len(s.held) - 10)
    assert plan is not None and plan.options[0] == Option("copy", len(SYSTEM), 0)
