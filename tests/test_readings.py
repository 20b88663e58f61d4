"""The one verdict vocabulary (readings.Verdict) and the one ladder rule (readings.keep_verdict) that the
try_change of lessons 08 and 09 (through compare), the benchmark's rows and the speedrun's rungs all use."""

from __future__ import annotations

import json
import math

import pytest

from exercises.lesson_11 import _SAID, _SPREADS
from helpers.readings import (
    KEPT,
    MIN_NOISE,
    NO_CLEAR_DIFFERENCE,
    NOT_REACHED,
    SLOWER,
    Verdict,
    compare,
    keep_verdict,
    speed_comparison,
)
from helpers.text import format_rows


def test_each_verdict_prints_the_words_the_lessons_print():
    assert [f"{v}" for v in Verdict] == [
        "kept",
        "not kept: slower",
        "no clear difference",
        "not kept: target not reached in every run",
    ]
    assert [v.direction for v in Verdict] == ["faster", "slower", "no clear difference", "missed the target"]
    assert [v.kept for v in Verdict] == [True, False, False, False]
    assert str(KEPT) == "kept" and format_rows([["verdict"], [SLOWER]]).endswith("not kept: slower")
    assert json.dumps({"verdict": NOT_REACHED}) == '{"verdict": "not kept: target not reached in every run"}'


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [  # the speedrun's rungs: times to target, one per seed, math.inf for a missed target
        ([10.0, 11.0, 12.0], [5.0, 5.5, 6.0], KEPT),
        ([10.0, 11.0, 12.0], [9.5, 10.5, 11.5], NO_CLEAR_DIFFERENCE),
        ([10.0, 11.0, 12.0], [12.5, 13.0, 14.0], SLOWER),
        ([10.0, 11.0], [5.0, math.inf], NOT_REACHED),
        ([math.inf, math.inf], [5.0, math.inf], NOT_REACHED),
        ([10.0, math.inf], [5.0, 6.0], KEPT),
        ([10.0], [9.0], KEPT),
    ],
)
def test_the_ladder_rule_on_the_speedruns_cases(before, after, expected):
    assert keep_verdict(before, after) is expected


def test_the_ladder_rule_on_lesson_08s_and_the_benchmarks_cases():
    # lessons 08 and 09's try_change: the ranges alone decide, however small the gain
    assert keep_verdict([1.02, 1.021], [1.00, 1.001]) is KEPT
    assert compare([1.02, 1.021], [1.00, 1.001]).verdict is KEPT
    # the benchmark's rows: medians closer than MIN_NOISE are no clear difference, whatever the ranges
    assert keep_verdict([1.02, 1.021], [1.00, 1.001], MIN_NOISE) is NO_CLEAR_DIFFERENCE
    assert keep_verdict([1.2, 1.21], [1.00, 1.001], MIN_NOISE) is KEPT
    assert keep_verdict([1.0, 1.01], [1.2, 1.21], MIN_NOISE) is SLOWER
    assert keep_verdict([0.7, 1.0, 1.4], [0.6, 0.8, 1.3], MIN_NOISE) is NO_CLEAR_DIFFERENCE  # overlapping ranges
    with pytest.raises(ValueError, match="at least one time on each side"):
        keep_verdict([], [1.0])


@pytest.mark.parametrize(("before", "after", "expected"), _SPREADS)
def test_lesson_11s_keep_rule_cases_follow_the_ladder_rule(before, after, expected):
    assert keep_verdict(before, after) is expected
    assert _SAID[expected] in ("kept", "slower", "no clear difference")


# --- comparing two timed ways of doing one job ---


def test_speed_comparison_clear_gain_and_loss():
    fast = [1e-3, 1.1e-3, 1.2e-3]
    slow = [30e-3, 31e-3, 33e-3]
    assert speed_comparison("the GPU", fast, "the CPU", slow) == "the GPU was 28.18x faster than the CPU"
    assert speed_comparison("the CPU", slow, "the GPU", fast) == "the CPU was 28.18x slower than the GPU"
    # medians 1.05 and 2.55, printed by text.ratio_text like every ratio in the course
    assert speed_comparison("a", [1.0, 1.1], "b", [2.5, 2.6]) == "a was 2.43x faster than b"


def test_speed_comparison_inside_the_spread_is_no_clear_difference():
    noisy = [1e-3, 2e-3, 4e-3]  # one slow outlier reaches the other's range
    steady = [3e-3, 3.1e-3, 3.2e-3]
    sentence = speed_comparison("pinned", noisy, "pageable", steady)
    assert sentence.startswith("no clear difference between pinned and pageable")
    assert "1.55x apart" in sentence
    assert speed_comparison("x", [5e-3], "y", [5e-3]).startswith("no clear difference")


def test_speed_comparison_rejects_missing_or_impossible_timings():
    with pytest.raises(ValueError, match="No timings for 'the GPU'"):
        speed_comparison("the GPU", [], "the CPU", [1.0])
    with pytest.raises(ValueError, match="must be positive seconds"):
        speed_comparison("the GPU", [1.0], "the CPU", [0.0])
