"""Lesson 04's pinned-copy findings when a repeat was disturbed: one slow repeat widens a way's range until it overlaps
the plain copy's, so the sentence says the repeats spread widely and asks for a rerun instead of a bare 'no clear
difference'."""

from __future__ import annotations

from helpers import pinning

US = 1e-6
STEADY_PLAIN = [264 * US, 265 * US, 265 * US, 266 * US, 270 * US]


def test_one_disturbed_repeat_gets_a_rerun_clause() -> None:
    in_loop = [160 * US, 165 * US, 169.5 * US, 172 * US, 350 * US]  # a 0.64x median, one repeat far above the plain
    times = {"plain": STEADY_PLAIN, "pin in the loop": in_loop, "pinned already": [63 * US] * 5}
    first, second = pinning.pinning_findings(times)
    assert first.startswith("Pinning each batch in the loop, then copying it, made no clear difference")
    assert "pin in the loop 112% of the median" in first
    assert "at least one was disturbed" in first and first.endswith("run the cell again.")
    assert "disturbed" not in second  # a clear verdict needs no rerun


def test_a_disturbed_plain_copy_is_named_too() -> None:
    plain = [200 * US, 265 * US, 265 * US, 266 * US, 400 * US]
    times = {"plain": plain, "pin in the loop": [250 * US, 255 * US, 260 * US], "pinned already": [63 * US] * 3}
    first = pinning.pinning_findings(times)[0]
    assert "no clear difference" in first and "plain 75% of the median" in first and "pin in the loop" not in first


def test_steady_repeats_that_overlap_get_no_rerun_clause() -> None:
    times = {"plain": STEADY_PLAIN, "pin in the loop": [262 * US, 266 * US, 268 * US], "pinned already": [63 * US] * 3}
    first = pinning.pinning_findings(times)[0]
    assert first.endswith("and the repeats overlap.")
    assert pinning.DISTURBED_SPREAD == 0.5
