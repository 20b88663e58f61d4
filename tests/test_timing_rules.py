"""helpers.readings' rules, fed synthetic measurements: noise, launch-bound and compute-bound steps."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from fake_device import FakeDevice
from torch.autograd import DeviceType

from helpers import readings, timing
from lessons import lesson_05


def t(*seconds: float) -> readings.Timing:
    import statistics

    return readings.Timing(statistics.median(seconds), list(seconds))


# compare: keep only beyond the spread of both measurements


def test_faster_beyond_both_spreads_is_kept():
    c = readings.compare(t(10.0, 10.5, 11.0), t(8.0, 8.2, 8.4))
    assert c.verdict == readings.KEPT and c.kept
    assert c.speedup == pytest.approx(10.5 / 8.2)


def test_slower_beyond_both_spreads_is_not_kept():
    c = readings.compare(t(10.0, 10.5, 11.0), t(12.0, 12.5, 13.0))
    assert c.verdict == readings.SLOWER and not c.kept


@pytest.mark.parametrize("after", [(9.0, 9.5, 10.2), (10.8, 11.5, 12.0), (10.4, 10.5, 10.6)])
def test_overlapping_ranges_are_no_clear_difference(after):
    # The median of the first is 9.5 (10% faster), yet one of its repeats was slower than the fastest before.
    c = readings.compare(t(10.0, 10.5, 11.0), t(*after))
    assert c.verdict == readings.NO_CLEAR_DIFFERENCE and not c.kept


def test_a_large_median_gain_inside_a_large_spread_is_not_kept():
    # 1.5x by the medians, but the slower step's range (3 to 12) covers the faster one's: noise could explain it.
    c = readings.compare(t(3.0, 9.0, 12.0), t(5.0, 6.0, 7.0))
    assert c.speedup == pytest.approx(1.5)
    assert c.verdict == readings.NO_CLEAR_DIFFERENCE
    assert "no clear difference" in str(c)


def test_per_unit_times_compare_different_batch_sizes():
    # 64 images in 10 ms against 512 images in 40 ms: per image the second is 2x faster.
    c = readings.compare(t(0.009, 0.010, 0.011).per(64), t(0.039, 0.040, 0.041).per(512))
    assert c.kept and c.speedup == pytest.approx(2.0)
    with pytest.raises(ValueError, match="units"):
        t(1.0).per(0)


# launch_diagnosis: the steps' wall time against device time


def test_launch_bound_when_the_steps_take_far_longer_than_the_device_works():
    d = lesson_05.launch_diagnosis(step_s=12.6e-3, device_s=1.2e-3)  # three steps of a small CNN on a fast GPU
    assert d.kind == lesson_05.LAUNCH_BOUND
    assert "launch-bound" in d.sentence and "10%" in d.sentence


def test_device_bound_when_the_device_is_busy():
    d = lesson_05.launch_diagnosis(step_s=10e-3, device_s=9.5e-3)
    assert d.kind == lesson_05.DEVICE_BOUND


def test_partly_launch_bound_in_between():
    assert lesson_05.launch_diagnosis(step_s=10e-3, device_s=6e-3).kind == lesson_05.PARTLY_LAUNCH_BOUND


def test_no_device_timeline_on_a_cpu():
    d = lesson_05.launch_diagnosis(step_s=0.08, device_s=None)
    assert d.kind == lesson_05.NO_DEVICE_TIMELINE
    assert "batch size" in d.sentence
    with pytest.raises(ValueError, match="step_s"):
        lesson_05.launch_diagnosis(0.0, 1.0)


def test_the_diagnosis_of_several_profiled_steps_prints_them_per_step_and_names_the_profiler():
    # Three profiled steps of 3.1 ms each on a GPU that worked 214.8 us in each: the figures of one step, not three.
    d = lesson_05.launch_diagnosis(step_s=9.3e-3, device_s=644.4e-6, steps=3)
    assert d.kind == lesson_05.LAUNCH_BOUND
    assert d.sentence.startswith("3 profiled steps: 3.1 ms a step against 214.8 us of device time a step")
    assert "profiler's own overhead" in d.sentence and "7%" in d.sentence
    assert "9.3 ms" not in d.sentence
    one = lesson_05.launch_diagnosis(step_s=3.1e-3, device_s=3.0e-3, steps=1)
    assert one.kind == lesson_05.DEVICE_BOUND and one.sentence.startswith("1 profiled step: 3.1 ms a step")
    cpu = lesson_05.launch_diagnosis(step_s=26.1e-3, device_s=None, steps=3)
    assert cpu.kind == lesson_05.NO_DEVICE_TIMELINE
    assert cpu.sentence.startswith("3 profiled steps took 26.1 ms, 8.7 ms a step (the profiler's own overhead")
    # Without steps the sentence is the one the benchmarks print for a single step's figures.
    assert lesson_05.launch_diagnosis(9.3e-3, 644.4e-6).sentence.startswith("9.3 ms of steps against 644.4 us")
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="steps"):
            lesson_05.launch_diagnosis(9.3e-3, 644.4e-6, steps=bad)


# reference_drift: the same step timed at two moments of a run


def test_a_reference_that_moved_by_more_than_its_spread_drifted():
    earlier = t(0.96, 1.0, 1.04)  # spread 8%
    assert readings.reference_drift(earlier, t(1.06, 1.07, 1.08)).kind == "steady"  # 7% slower: inside 8%
    slower = readings.reference_drift(earlier, t(1.08, 1.09, 1.10), "batch 512")  # 9% slower: beyond it
    assert slower.kind == "drifted"
    assert slower.sentence.startswith("batch 512 took 1.09x the time it took when timed before (slower by 9%")
    assert "8% and 2%" in slower.sentence
    assert readings.reference_drift(earlier, t(0.925, 0.93, 0.935)).kind == "steady"  # 7% faster
    faster = readings.reference_drift(earlier, t(0.905, 0.91, 0.915))  # 9% faster
    assert faster.kind == "drifted" and "faster by 9%" in faster.sentence


def test_drift_is_read_against_the_larger_spread_of_the_two_and_never_below_the_noise_floor():
    # The later measurement is the noisier one: 20% spread, so a 15% move is noise.
    assert readings.reference_drift(t(1.0, 1.0, 1.0), t(1.05, 1.15, 1.28)).kind == "steady"
    assert readings.reference_drift(t(1.0, 1.0, 1.0), t(1.24, 1.25, 1.26)).kind == "drifted"
    # Both steady to the microsecond: moves up to MIN_NOISE (5%) are not called drift.
    assert readings.reference_drift(t(1.0, 1.0, 1.0), t(1.04, 1.04, 1.04)).kind == "steady"
    assert readings.reference_drift(t(1.0, 1.0, 1.0), t(1.06, 1.06, 1.06)).kind == "drifted"
    # The lesson-08 case: a reference timed at 98,273 images/s (spread 8%), then at 59,748 (spread 7%) in the turns.
    lesson = readings.reference_drift(
        [1 / 98_273 * k for k in (0.96, 1.0, 1.04)], [1 / 59_748 * k for k in (0.965, 1.0, 1.035)]
    )
    assert lesson.kind == "drifted" and "1.64x" in lesson.sentence
    with pytest.raises(ValueError):
        readings.reference_drift([], [1.0])


# batch_scaling: step time against batch size


def test_flat_step_time_is_overhead_bound():
    # 2.5 ms at every batch size from 32 to 2048
    d = lesson_05.batch_scaling({32: t(2.4e-3, 2.5e-3, 2.6e-3), 2048: t(2.5e-3, 2.6e-3, 2.7e-3)})
    assert d.kind == lesson_05.OVERHEAD_BOUND


def test_proportional_step_time_is_compute_bound():
    d = lesson_05.batch_scaling(
        {64: t(4e-3, 4.1e-3, 4.2e-3), 256: t(15e-3, 16e-3, 17e-3), 1024: t(62e-3, 64e-3, 66e-3)}
    )
    assert d.kind == lesson_05.COMPUTE_BOUND
    assert "15.61x the time for 16x the images" in d.sentence


def test_in_between():
    d = lesson_05.batch_scaling({64: t(9e-3, 10e-3, 11e-3), 1024: t(38e-3, 40e-3, 42e-3)})  # exponent 0.5
    assert d.kind == lesson_05.IN_BETWEEN


def test_growth_inside_the_noise_is_flat():
    # the medians grew 1.2x (exponent 0.13), but the repeats overlap: no measurable growth
    d = lesson_05.batch_scaling({64: t(4e-3, 5e-3, 6e-3), 256: t(5.5e-3, 6e-3, 7e-3)})
    assert d.kind == lesson_05.OVERHEAD_BOUND


def test_batch_scaling_needs_two_sizes():
    with pytest.raises(ValueError, match="two or more batch sizes"):
        lesson_05.batch_scaling({64: t(1.0)})


# time_on_device with a minimum repeat time


def test_min_repeat_time_makes_long_repeats_and_reports_per_call_times():
    fake = FakeDevice([0.0] + [0.01] * 100)  # warm-up, then every call takes 10 ms
    result = timing.time_on_device(
        fake.work, repeats=3, warmup=1, sync=fake.sync, clock=fake.clock, min_repeat_time=0.05
    )
    assert result.calls == 5  # 5 calls of 10 ms reach 50 ms
    assert result.times == pytest.approx([0.01] * 3)
    assert fake.events.count("fn") == 1 + 1 + 3 * 5  # warm-up, the call that chose the count, three repeats
    assert "5 calls each" in str(result)


def test_max_calls_caps_the_count():
    fake = FakeDevice([0.0] * 50)  # a call the clock cannot see
    result = timing.time_on_device(
        fake.work, repeats=2, warmup=0, sync=fake.sync, clock=fake.clock, min_repeat_time=1.0, max_calls=7
    )
    assert result.calls == 7


# profile_summary: totals that never double-count


def ev(key, self_cpu_us, self_device_us=0.0, device_type=DeviceType.CPU, annotation=False, count=1, cpu_total_us=None):
    return SimpleNamespace(
        key=key,
        count=count,
        self_cpu_time_total=self_cpu_us,
        cpu_time_total=self_cpu_us if cpu_total_us is None else cpu_total_us,
        self_device_time_total=self_device_us,
        device_type=device_type,
        is_user_annotation=annotation,
    )


def test_profile_summary_on_a_gpu():
    events = [
        ev("train step", 500.0, annotation=True),  # Python between operators: CPU side
        ev("train step", 0.0, 3000.0, DeviceType.CUDA, annotation=True),  # the range on the GPU timeline: not a kernel
        ev("aten::convolution", 300.0, 200.0),
        ev("aten::addmm", 100.0, 600.0),
        ev("cudaLaunchKernel", 400.0),
        ev("void sgemm_kernel", 0.0, 600.0, DeviceType.CUDA),
        ev("void conv_kernel", 0.0, 200.0, DeviceType.CUDA),
    ]
    s = lesson_05.profile_summary(events, device_timeline=True)
    assert s.cpu_side_s == pytest.approx(1300e-6)
    assert s.device_s == pytest.approx(800e-6)  # the 3 ms range is not counted
    assert [r.name for r in s.rows] == ["aten::addmm", "aten::convolution", "cudaLaunchKernel"]
    table = s.table()
    assert "75.0%" in table  # addmm's share of the device time
    assert "% device" in table
    assert lesson_05.launch_diagnosis(s.cpu_side_s, s.device_s).kind == lesson_05.PARTLY_LAUNCH_BOUND


def test_the_diagnosis_reads_the_steps_wall_time_not_the_cpu_time_of_every_thread():
    # Three CUDA steps of 4 ms wall time each. The calling thread waits 3 ms of each inside backward() (self time of its
    # range) while autograd's device thread runs the backward's operators, 2.5 ms of CPU time: 16.5 ms of CPU time in
    # all, for 12 ms of wall time, and 7 ms of device work.
    events = [
        ev("ProfilerStep#2", 50.0, cpu_total_us=4000.0),
        ev("ProfilerStep#3", 50.0, cpu_total_us=4000.0),
        ev("ProfilerStep#4", 50.0, cpu_total_us=4000.0),
        ev("train step", 9000.0, annotation=True),
        ev("aten::convolution_backward", 7500.0, 6000.0, count=3),
        ev("void conv_kernel", 0.0, 7000.0, DeviceType.CUDA),
    ]
    s = lesson_05.profile_summary(events, device_timeline=True)
    assert s.cpu_side_s == pytest.approx(16.65e-3)
    assert s.step_s == pytest.approx(12e-3)
    assert lesson_05.launch_diagnosis(s.step_s, s.device_s).kind == lesson_05.PARTLY_LAUNCH_BOUND
    assert (
        lesson_05.launch_diagnosis(s.cpu_side_s, s.device_s).kind == lesson_05.LAUNCH_BOUND
    )  # what counting twice said
    assert lesson_05.profile_summary(events[3:], device_timeline=True).step_s is None  # no schedule, no steps


def test_profile_summary_on_a_cpu_sorts_by_cpu_time_and_has_no_device_column():
    events = [ev("ProfilerStep#2", 50.0), ev("aten::mm", 100.0), ev("aten::mkldnn_convolution", 700.0)]
    s = lesson_05.profile_summary(events, device_timeline=False)
    assert s.device_s is None
    assert [r.name for r in s.rows] == ["aten::mkldnn_convolution", "aten::mm"]
    assert s.cpu_side_s == pytest.approx(850e-6)
    table = s.table()
    assert "device" not in table.splitlines()[0]
    assert "no device timeline" in table
    assert "82.4%" in table


def test_every_share_is_at_most_the_whole():
    events = [ev(f"op{i}", 10.0 * i, 5.0 * i) for i in range(1, 6)] + [ev("k", 0.0, 75.0, DeviceType.CUDA)]
    s = lesson_05.profile_summary(events, device_timeline=True)
    assert sum(r.self_cpu_s for r in s.rows) <= s.cpu_side_s + 1e-12
    assert all(r.self_device_s <= s.device_s for r in s.rows)


def test_every_speed_verdict_in_the_course_comes_from_one_rule():
    import random

    rng = random.Random(7)
    words = {readings.KEPT: "faster", readings.SLOWER: "slower", readings.NO_CLEAR_DIFFERENCE: "no clear difference"}
    for _ in range(200):
        before = [rng.uniform(1.0, 2.0) for _ in range(rng.randint(1, 5))]
        after = [rng.uniform(0.5, 2.5) for _ in range(rng.randint(1, 5))]
        rule = readings.ranges_verdict(before, after)
        assert readings.keep_verdict(before, after) is rule
        assert readings.compare(before, after).verdict is rule
        assert readings.compare(t(*before), t(*after)).verdict is rule
        assert readings.compare(before, after).direction == words[rule]
        sentence = readings.speed_comparison("after", after, "before", before)
        assert sentence.startswith("no clear difference") == (rule is readings.NO_CLEAR_DIFFERENCE)
        assert words[rule] in sentence
        assert readings.compare(before, after).clear == (rule is not readings.NO_CLEAR_DIFFERENCE)


def test_range_totals_come_from_the_cpu_side_entry_only():
    # On a GPU key_averages lists each record_function range twice under one name: on the CPU, and on the device
    # timeline with no CPU time. Whichever comes last, the range's CPU total is the CPU entry's.
    cpu_first = [
        ev("next batch", 40.0, annotation=True, cpu_total_us=300.0),
        ev("train step", 500.0, annotation=True, cpu_total_us=9000.0),
        ev("next batch", 0.0, 250.0, DeviceType.CUDA, annotation=True, cpu_total_us=0.0),
        ev("train step", 0.0, 3000.0, DeviceType.CUDA, annotation=True, cpu_total_us=0.0),
        ev("ProfilerStep#2", 50.0, cpu_total_us=9500.0),
        ev("aten::mm", 100.0, 600.0, cpu_total_us=120.0),
    ]
    for events in (cpu_first, cpu_first[::-1]):
        s = lesson_05.profile_summary(events, device_timeline=True)
        assert s.ranges_cpu_s == pytest.approx({"next batch": 300e-6, "train step": 9000e-6})
    assert lesson_05.profile_summary(cpu_first[:2], device_timeline=False).ranges_cpu_s == pytest.approx(
        {"next batch": 300e-6, "train step": 9000e-6}
    )


def test_kernel_launches_are_added_up_under_a_table_sorted_by_device_time():
    events = [
        ev("aten::convolution", 300.0, 200.0),
        ev("aten::addmm", 100.0, 600.0),
        ev("cudaLaunchKernel", 400.0, count=30),
        ev("cuLaunchKernel", 100.0, count=5),
        ev("cudaMemcpyAsync", 50.0, count=2),  # a copy, not a launch
        ev("void sgemm_kernel", 0.0, 600.0, DeviceType.CUDA),
    ]
    s = lesson_05.profile_summary(events, device_timeline=True)
    assert (s.launch_calls, s.launch_cpu_s) == (35, pytest.approx(500e-6))
    table = s.table(limit=2)
    assert "cudaLaunchKernel" not in table.split("CPU-side time")[0]  # no device time: not among the top rows
    assert "kernel launches (cudaLaunchKernel and the like): 35 calls, 500.0 us of self CPU time, 52.6% of" in table
    on_cpu = lesson_05.profile_summary([ev("aten::mm", 100.0), ev("aten::addmm", 50.0)], device_timeline=False)
    assert on_cpu.launch_calls == 0 and "kernel launches" not in on_cpu.table()
