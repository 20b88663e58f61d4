"""The rules behind lesson 05's generated sentences (helpers.timing's, shared with lesson 08), fed with synthetic
measurements of each kind.

Launch-bound (step time flat in the batch size, the device idle most of the step), compute-bound (step time in
proportion to the batch), and within noise (repeats that overlap): each must give its own sentence.
"""

from __future__ import annotations

import pytest
import torch

from helpers import readings
from helpers.readings import MIN_NOISE
from lessons import lesson_05


def around(seconds: float, spread: float = 0.02) -> list[float]:
    """Three repeats of ``seconds`` whose (slowest - fastest) / median is ``spread``."""
    return [seconds * (1 - spread / 2), seconds, seconds * (1 + spread / 2)]


# --- compare with the benchmarks' noise floor: a difference is called only outside the spread --------------------


def test_compare_calls_a_clear_speed_up_and_slow_down():
    faster = readings.compare(around(2.0), around(1.0), MIN_NOISE)
    assert faster.clear and faster.direction == "faster" and faster.speedup == pytest.approx(2.0)
    slower = readings.compare(around(1.0), around(2.0), MIN_NOISE)
    assert slower.clear and slower.direction == "slower" and slower.speedup == pytest.approx(0.5)


def test_compare_within_the_spread_is_no_clear_difference():
    # medians 1.0 and 0.8 (1.25x apart), but the repeats overlap: noise alone could give that
    c = readings.compare([0.7, 1.0, 1.4], [0.6, 0.8, 1.3], MIN_NOISE)
    assert not c.clear and c.direction == "no clear difference"
    assert c.speedup == pytest.approx(1.25) and c.spread == pytest.approx(0.875)
    assert c.why_unclear == "inside the 88% spread of the repeats"


def test_compare_ignores_a_tiny_difference_even_without_overlap():
    tiny = readings.compare([1.02, 1.021], [1.00, 1.001], MIN_NOISE)  # 2% apart: below MIN_NOISE
    assert not tiny.clear and tiny.why_unclear == "less than the 5% below which no difference is called"
    assert readings.compare([1.02, 1.021], [1.00, 1.001], min_noise=0.01).clear
    assert readings.compare([1.02, 1.021], [1.00, 1.001]).kept  # lesson 08's rule: ranges alone


@pytest.mark.parametrize("times", [[], [0.0, 1.0], [-1.0], [float("nan")], [float("inf")]])
def test_compare_refuses_what_is_not_a_measurement(times):
    with pytest.raises(ValueError, match="positive, finite seconds"):
        readings.compare([1.0], times)
    with pytest.raises(ValueError, match="positive, finite seconds"):
        readings.compare(times, [1.0])


# --- batch_scaling: what bounds a training step ----------------------------------------------------------------


def test_flat_step_time_is_overhead_bound():
    # the course CNN on a large GPU: ~2.5 ms a step whatever the batch
    steps = {32: around(2.5e-3), 256: around(2.45e-3), 2048: around(2.6e-3)}
    d = lesson_05.batch_scaling(steps, label="cuda")
    assert d.kind == lesson_05.OVERHEAD_BOUND
    assert d.sentence == (
        "cuda: step time stayed nearly flat: 2.5 ms a step at batch 32, 2.6 ms at batch 2048, 1.04x the time for 64x "
        "the images (less than the 5% below which no difference is called). Fixed costs per step (Python, dispatching "
        "or launching each operation, the optimizer) set the pace, not arithmetic, so a larger batch trains more "
        "images per second almost for free."
    )


def test_proportional_step_time_is_compute_bound():
    d = lesson_05.batch_scaling({32: around(10e-3), 256: around(78e-3)}, label="cpu")
    assert d.kind == lesson_05.COMPUTE_BOUND
    assert d.sentence.startswith("cpu: step time grew about in proportion to the batch: 10.0 ms a step at batch 32")
    assert "7.80x the time for 8x the images. The arithmetic sets the pace" in d.sentence


def test_step_time_between_flat_and_proportional_says_so():
    d = lesson_05.batch_scaling({32: around(10e-3), 256: around(35e-3)})
    assert d.kind == lesson_05.IN_BETWEEN
    assert d.sentence.startswith("Step time grew, but less than the batch did: ")
    assert "part is arithmetic that grows with the batch" in d.sentence


def test_step_time_growth_inside_the_noise_counts_as_flat():
    # medians 10 ms and 19 ms (1.9x for 8x the batch would read "in between"), but the repeats overlap
    d = lesson_05.batch_scaling({32: [6e-3, 10e-3, 15e-3], 256: [12e-3, 19e-3, 30e-3]})
    assert d.kind == lesson_05.OVERHEAD_BOUND
    assert "1.90x the time for 8x the images (inside the 95% spread of the repeats)" in d.sentence
    assert "almost for free" in d.sentence  # no growth is measured: the larger batch costs nothing that shows


def test_step_time_too_noisy_to_tell_says_so():
    # 10 ms and 16 ms for 2x the batch, but the repeats overlap both "flat" and "in proportion"
    d = lesson_05.batch_scaling({32: [8e-3, 10e-3, 15e-3], 64: [14e-3, 16e-3, 18e-3]})
    assert d.kind == lesson_05.UNCLEAR
    assert d.sentence.startswith("The repeats spread too widely to tell a flat step time from one in proportion")
    assert "fixed cost" not in d.sentence and "arithmetic" not in d.sentence


@pytest.mark.parametrize(("spread", "unclear"), [(0.99, False), (1.01, True), (1.73, True)])
def test_repeats_that_spread_more_than_their_median_leave_the_reading_unclear(spread, unclear):
    # lesson 08 on a CPU: 2.9 ms at batch 64, 3.8 ms at 256, 5.1 ms at 512 whose repeats spread 173%
    d = lesson_05.batch_scaling({64: around(2.9e-3, 0.05), 256: around(3.8e-3, 0.03), 512: around(5.1e-3, spread)})
    assert (d.kind == lesson_05.UNCLEAR) is unclear
    assert ("The reading is unclear: the repeats spread " in d.sentence) is unclear
    if unclear:
        assert f"{spread:.0%} at batch 512" in d.sentence and "fixed cost" not in d.sentence.lower()
        assert "almost for free" not in d.sentence
    else:  # 1.76x is inside the 99% spread: no growth is measured
        assert "1.76x the time for 8x the images (inside the 99% spread of the repeats)" in d.sentence


@pytest.mark.parametrize(("growth", "free"), [(1.24, True), (1.26, False), (1.76, False)])
def test_almost_for_free_only_for_a_small_growth(growth, free):
    # step time clearly grew (2% spreads) but far less than the 8x batch: flat either way; free only when small
    d = lesson_05.batch_scaling({64: around(2.9e-3), 512: around(2.9e-3 * growth)})
    assert d.kind == lesson_05.OVERHEAD_BOUND
    assert ("almost for free" in d.sentence) is free
    assert ("stayed nearly flat" in d.sentence) is free
    if not free:
        assert "step time grew far less than the batch did" in d.sentence.lower()
        assert f"({8 / growth:.2f}x here), though each step takes longer" in d.sentence


def test_a_fall_in_images_per_second_stops_the_reading_and_is_named():
    # lesson 05's CPU rows: images/s rose up to batch 512 (101,146/s) and fell at batch 2048 (63,789/s)
    steps = {32: around(1.79e-3, 0.2), 128: around(2.73e-3, 0.17), 512: around(5.06e-3, 0.04), 2048: around(32.11e-3)}
    d = lesson_05.batch_scaling(steps, label="cpu")
    assert d.kind == lesson_05.IN_BETWEEN
    assert d.sentence.startswith(
        "cpu: step time grew, but less than the batch did: 1.8 ms a step at batch 32, 5.1 ms at batch 512, 2.83x "
        "the time for 16x the images."
    )
    assert "so a larger batch (up to batch 512) raises images per second, less than in proportion." in d.sentence
    assert (
        "Images per second fell from batch 512 to batch 2048 (5.1 ms to 32.1 ms a step, 6.35x the time for 4x the "
        "images)" in d.sentence
    )
    assert d.sentence.endswith("Of the sizes timed, batch 512 trained the most images per second (101,186).")


def test_images_per_second_level_within_the_noise_is_no_fall():
    # batch 2048 takes 4x the time of batch 512: images/s level, not fallen, so the reading runs to 2048
    d = lesson_05.batch_scaling({32: around(1.8e-3), 512: around(5e-3), 2048: around(5e-3 * 4.1)})
    assert "fell" not in d.sentence and "up to batch" not in d.sentence
    assert "at batch 2048" in d.sentence


def test_a_fall_from_the_smallest_batch_on():
    d = lesson_05.batch_scaling({32: around(1e-3), 64: around(3e-3)})
    assert d.kind == lesson_05.COMPUTE_BOUND
    assert d.sentence.startswith("Step time grew more than in proportion to the batch")
    assert "Images per second fell from batch 32 to batch 64" in d.sentence
    assert d.sentence.endswith("batch 32 trained the most images per second (32,000).")


def test_step_time_growth_inside_the_noise_of_proportional_is_compute_bound():
    d = lesson_05.batch_scaling({32: [9e-3, 10e-3, 11e-3], 256: [50e-3, 60e-3, 90e-3]})  # 6x: exponent 0.86
    assert d.kind == lesson_05.COMPUTE_BOUND
    d = lesson_05.batch_scaling({32: [9e-3, 10e-3, 11e-3], 256: [30e-3, 45e-3, 75e-3]})  # 4.5x, overlaps 8x
    assert d.kind == lesson_05.COMPUTE_BOUND


def test_step_time_that_shrinks_is_not_called_flat():
    d = lesson_05.batch_scaling({32: around(10e-3), 256: around(5e-3)})
    assert d.kind == lesson_05.OVERHEAD_BOUND and "did not grow with the batch" in d.sentence


def test_batch_scaling_needs_two_batch_sizes():
    with pytest.raises(ValueError, match="two or more batch sizes"):
        lesson_05.batch_scaling({32: [1.0]})


def cnn_steps(device: str, busy: dict[int, float]) -> dict[str, dict[int, lesson_05.Measurement]]:
    """A batch-size grid of the CNN on ``device``: about 2 ms a step, with the profiler's busy seconds per step."""
    grid = {}
    for size, seconds in {32: 1.95e-3, 2048: 2.0e-3}.items():
        times = around(seconds)
        grid[size] = lesson_05.Measurement("resident", "cnn", size, readings.Timing(seconds, times), 1, busy.get(size))
    return {device: grid}


def test_device_busy_share_marks_a_launch_bound_step():
    # busy 0.25 ms of a 1.95 ms step: the GPU waited for the CPU most of the time
    lines = lesson_05.grid_findings(cnn_steps("cuda", {32: 0.25e-3, 2048: 1.9e-3}))
    assert lines[2].startswith(
        "cuda: at batch 32, 1.9 ms of steps against 250.0 us of device time (the device was busy 13% of it): "
        "launch-bound."
    )
    assert lines[3].startswith("cuda: at batch 2048, 2.0 ms of steps against 1.9 ms of device time") and (
        "device-bound" in lines[3]
    )
    middle = lesson_05.grid_findings(cnn_steps("cuda", {32: 1.2e-3}))
    assert len(middle) == 3 and "partly launch-bound" in middle[2]
    assert len(lesson_05.grid_findings(cnn_steps("cpu", {}))) == 2  # no busy time measured: no such sentence


# --- rate_trend: rising, levelling off, falling ----------------------------------------------------------------


def per_image(rates: dict[int, float], spread: float = 0.02) -> dict[int, list[float]]:
    return {b: around(1 / r, spread) for b, r in rates.items()}


def test_rising_rate():
    assert lesson_05.rate_trend(per_image({32: 1000, 256: 2100}), "cpu") == (
        "cpu: images per second rose from batch 32 to batch 256 (2.10x)."
    )


def test_rising_then_levelling_off():
    line = lesson_05.rate_trend(per_image({32: 1000, 128: 3000, 512: 6000, 2048: 6100}))
    assert line == (
        "images per second rose from batch 32 to batch 512 (6.00x), then levelled off to batch 2048 (1.02x)."
    )


def test_falling_rate_is_never_called_levelling_off():
    line = lesson_05.rate_trend(per_image({32: 400, 128: 800, 512: 500}), "cpu")
    assert line == "cpu: images per second rose from batch 32 to batch 128 (2.00x), then fell to batch 512 (0.62x)."
    assert "level" not in line


def test_rate_inside_the_noise_stays_level():
    line = lesson_05.rate_trend({32: [1.0, 2.0, 3.0], 256: [0.9, 1.8, 2.9]})
    assert line == "images per second stayed level from batch 32 to batch 256 (1.11x)."


# --- busy time from the profiler ------------------------------------------------------------------------------


def test_device_busy_is_not_measured_on_the_cpu():
    called = []
    assert lesson_05.device_busy(lambda: called.append(1), torch.device("cpu")) is None
    assert called == []  # nothing run for nothing


# --- agreement of two measurements of the same work ------------------------------------------------------------


def test_agreement_within_and_outside_the_spread():
    same = lesson_05.agreement("A", [1.0e-3, 1.2e-3, 1.4e-3], "B", [1.1e-3, 1.3e-3, 1.5e-3])
    assert same == "A (1.2 ms) and B (1.3 ms) agree within the spread of their repeats."
    apart = lesson_05.agreement("A", around(52e-3), "B", around(4e-3))
    assert apart.startswith("A (52.0 ms) and B (4.0 ms) differ by 13.00x, more than the spread of their repeats")


def test_measure_counts_the_images_of_a_timed_pass_not_of_the_warm_up():
    loader = [(torch.zeros(4, 1, 28, 28), torch.zeros(4, dtype=torch.long)) for _ in range(10)]
    m = lesson_05.measure_feed(loader, "data", torch.device("cpu"), batches=None, repeats=2, warmup_batches=3)
    assert (m.images, m.batches) == (40, 10)  # the warm-up ran 3 batches, 12 images
    assert m.images_per_second == pytest.approx(40 / m.seconds)
    assert m.step_seconds == pytest.approx(m.seconds / 10)
