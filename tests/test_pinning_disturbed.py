"""Lesson 04's pinned-copy findings when some repeats are slow: the verdict goes by the middle half of each way's
repeats, so one slow repeat of nine cannot overturn a difference the other eight show, and the sentence names the slow
repeats (for pinning in the loop, their likely cause) instead of calling the measurement disturbed."""

from __future__ import annotations

import pytest

from helpers.readings import KEPT, NO_CLEAR_DIFFERENCE, SLOWER
from lessons import lesson_04

US = 1e-6
STEADY_PLAIN = [264 * US, 265 * US, 265 * US, 266 * US, 270 * US]
PLAIN_9 = [265 * US, 270 * US, 275 * US, 280 * US, 284.3 * US, 286 * US, 290 * US, 300 * US, 315 * US]


def test_middle_half_is_the_range_between_the_quartiles() -> None:
    assert lesson_04.middle_half([5.0, 1.0, 3.0, 2.0, 4.0]) == (2.0, 4.0)
    assert lesson_04.middle_half([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 100.0]) == (3.0, 7.0)  # 100: outside
    assert lesson_04.middle_half([7.0]) == (7.0, 7.0)
    with pytest.raises(ValueError, match="at least one time"):
        lesson_04.middle_half([])


@pytest.mark.parametrize(
    ("upper_quartile", "expected"),
    # plain's middle half is 275-290 us; the candidate's runs from 110 us up to ``upper_quartile``
    [(274 * US, KEPT), (276 * US, NO_CLEAR_DIFFERENCE)],
)
def test_middle_half_verdict_on_both_sides_of_the_plain_copys_lower_quartile(upper_quartile, expected) -> None:
    candidate = [100 * US, 105 * US, 110 * US, 115 * US, 120 * US, 125 * US, upper_quartile, 500 * US, 900 * US]
    assert lesson_04.middle_half(candidate)[1] == upper_quartile
    assert lesson_04.middle_half_verdict(PLAIN_9, candidate) is expected


@pytest.mark.parametrize(("lower_quartile", "expected"), [(291 * US, SLOWER), (289 * US, NO_CLEAR_DIFFERENCE)])
def test_middle_half_verdict_on_both_sides_of_the_plain_copys_upper_quartile(lower_quartile, expected) -> None:
    candidate = [10 * US, 20 * US, lower_quartile, 400 * US, 410 * US, 420 * US, 430 * US, 440 * US, 450 * US]
    assert lesson_04.middle_half(candidate)[0] == lower_quartile
    assert lesson_04.middle_half_verdict(PLAIN_9, candidate) is expected


def test_one_slow_repeat_of_nine_does_not_overturn_a_lower_median() -> None:
    # 119.6 us against 284.3 us a batch, one repeat of pinning in the loop slower than every plain one
    in_loop = [100 * US, 105 * US, 110 * US, 115 * US, 119.6 * US, 122 * US, 125 * US, 130 * US, 420 * US]
    times = {"plain": PLAIN_9, "pin in the loop": in_loop, "pinned already": [63 * US] * 9}
    first, second = lesson_04.pinning_findings(times)
    assert first == (
        "Pinning each batch in the loop, then copying it, was faster than a plain copy: 119.6 us against 284.3 us per "
        "batch (0.42 times its time; the middle half of its 9 repeats below the plain copy's middle half, 8 of the 9 "
        "below every plain one). Its 1 other repeat took 420.0 us: the likely cause is that PyTorch now and then has "
        "to page-lock a fresh buffer, since with non_blocking=True it reuses a cached one only once the copy reading "
        "from it is done, and page-locking costs far more than a copy."
    )
    assert "disturbed" not in first and "run the cell again" not in first
    assert second.endswith("(0.22 times its time; every one of the 9 repeats below every plain one).")


def test_slow_repeats_of_a_copy_pinned_ahead_are_counted_without_a_cause() -> None:
    already = [60 * US, 61 * US, 62 * US, 63 * US, 64 * US, 280 * US, 290 * US]
    times = {"plain": PLAIN_9, "pin in the loop": PLAIN_9, "pinned already": already}
    second = lesson_04.pinning_findings(times)[1]
    assert second.startswith("Copying a batch that was pinned ahead of time was faster than a plain copy: 63.0 us")
    assert second.endswith("5 of the 7 below every plain one). Its 2 other repeats took up to 290.0 us.")


def test_a_slower_way_with_some_fast_repeats() -> None:
    in_loop = [200 * US, 400 * US, 410 * US, 420 * US, 430 * US]
    first = lesson_04.pinning_findings({"plain": STEADY_PLAIN, "pin in the loop": in_loop, "pinned already": in_loop})[
        0
    ]
    assert "was slower than a plain copy" in first and "4 of the 5 above every plain one)." in first
    assert first.endswith("one).")  # no cause is named for a slower way


def test_wide_repeats_whose_middle_halves_overlap_get_a_rerun_clause() -> None:
    plain = [150 * US, 200 * US, 265 * US, 300 * US, 400 * US]
    times = {"plain": plain, "pin in the loop": [250 * US, 255 * US, 260 * US], "pinned already": [63 * US] * 3}
    first = lesson_04.pinning_findings(times)[0]
    assert first.startswith("Pinning each batch in the loop, then copying it, made no clear difference")
    assert (
        "and the middle halves of their repeats overlap. The repeats spread widely (plain 94% of the median)" in first
    )
    assert "pin in the loop" not in first.split("(")[-1] and first.endswith("run the cell again.")


def test_steady_repeats_that_overlap_get_no_rerun_clause() -> None:
    times = {"plain": STEADY_PLAIN, "pin in the loop": [262 * US, 266 * US, 268 * US], "pinned already": [63 * US] * 3}
    first = lesson_04.pinning_findings(times)[0]
    assert first.endswith("and the middle halves of their repeats overlap.")
    assert lesson_04.DISTURBED_SPREAD == 0.5
