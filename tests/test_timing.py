"""helpers.timing: synchronisation order, medians of repeats, argument errors (no real timings are asserted)."""

from __future__ import annotations

import contextlib
import timeit

import pytest
import torch
from fake_device import FakeDevice

from helpers import timing


def test_time_on_device_syncs_around_every_timed_call():
    fake = FakeDevice()
    timing.time_on_device(fake.work, repeats=3, warmup=2, sync=fake.sync, clock=fake.clock)
    warmup, timed = fake.events[:2], fake.events[2:]
    assert warmup == ["fn", "fn"]  # warm-up calls are neither synchronised nor timed
    assert timed == ["sync", "clock", "fn", "sync", "clock"] * 3


def test_time_on_device_without_sync_would_be_caught():
    # The same check fails for a timer that reads the clock before synchronising: the order matters.
    fake = FakeDevice()
    timing.time_on_device(fake.work, repeats=1, warmup=0, sync=fake.sync, clock=fake.clock)
    last_fn = max(i for i, e in enumerate(fake.events) if e == "fn")
    last_clock = max(i for i, e in enumerate(fake.events) if e == "clock")
    assert "sync" in fake.events[last_fn:last_clock]


def test_median_comes_from_the_repeats():
    # warm-up takes 100 s (must be ignored), then five repeats of 5, 1, 3, 9, 2 seconds
    fake = FakeDevice([100.0, 5.0, 1.0, 3.0, 9.0, 2.0])
    result = timing.time_on_device(fake.work, repeats=5, warmup=1, sync=fake.sync, clock=fake.clock)
    assert result.times == [5.0, 1.0, 3.0, 9.0, 2.0]
    assert result.median == 3.0
    assert result.warmup == 1
    assert result.spread == pytest.approx((9.0 - 1.0) / 3.0)


def test_median_of_an_even_number_of_repeats():
    fake = FakeDevice([4.0, 1.0, 2.0, 8.0])
    result = timing.time_on_device(fake.work, repeats=4, warmup=0, sync=fake.sync, clock=fake.clock)
    assert result.median == 3.0


def test_default_sync_synchronises_the_given_device(monkeypatch):
    calls = []
    monkeypatch.setattr(timing, "synchronize", lambda device: calls.append(torch.device(device)))
    timing.time_on_device(lambda: None, device="cpu", repeats=2, warmup=0)
    assert calls == [torch.device("cpu")] * 4


def test_device_timer_syncs_before_each_clock_read():
    fake = FakeDevice([2.5])
    with timing.DeviceTimer("cpu", sync=fake.sync, clock=fake.clock) as t:
        fake.work()
    assert fake.events == ["sync", "clock", "fn", "sync", "clock"]
    assert t.seconds == 2.5


def test_device_timer_default_sync(monkeypatch):
    calls = []
    monkeypatch.setattr(timing, "synchronize", lambda device: calls.append(str(device)))
    with timing.DeviceTimer("cpu") as t:
        pass
    assert calls == ["cpu", "cpu"]
    assert t.seconds >= 0


@pytest.mark.parametrize(("repeats", "warmup"), [(0, 1), (-1, 0), (3, -1)])
def test_bad_repeats_or_warmup(repeats, warmup):
    with pytest.raises(ValueError, match="repeats"):
        timing.time_on_device(lambda: None, repeats=repeats, warmup=warmup)


def test_not_callable():
    with pytest.raises(TypeError, match="callable"):
        timing.time_on_device(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="callable"):
        timing.benchmark("x @ x")  # type: ignore[arg-type]


def test_benchmark_rejects_non_positive_run_time():
    with pytest.raises(ValueError, match="min_run_time"):
        timing.benchmark(lambda: None, min_run_time=0)


def test_benchmark_wraps_torch_utils_benchmark():
    x = torch.ones(8, 8)
    m = timing.benchmark(lambda: x @ x, "cpu", label="matmul", min_run_time=0.01)
    assert m.label == "matmul"
    assert m.median > 0


def test_benchmark_synchronises_a_non_cpu_device_itself(monkeypatch):
    # torch.utils.benchmark syncs only the current accelerator (or only CUDA, on older releases): the wrapper syncs
    # the device it was given after every call.
    calls = []
    monkeypatch.setattr(timing, "synchronize", lambda device: calls.append(torch.device(device)))
    timing.benchmark(lambda: None, "meta", min_run_time=0.01)
    assert calls and set(calls) == {torch.device("meta")}
    calls.clear()
    timing.benchmark(lambda: None, "cpu", min_run_time=0.01)
    assert calls == []


def test_benchmark_times_cuda_without_its_own_synchronise(monkeypatch):
    # As the docstring says: the Timer synchronises CUDA around its blocks, so no sync is added to each call.
    calls = []
    monkeypatch.setattr(timing, "synchronize", lambda device: calls.append(torch.device(device)))
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())  # no GPU to make current here
    timing.benchmark(lambda: None, "cuda", min_run_time=0.01)
    assert calls == []


def test_benchmark_makes_the_measured_gpu_current_so_the_timer_waits_for_it(monkeypatch):
    # The Timer synchronises the current CUDA device only; with DEVICE = "cuda:1" that must be cuda:1.
    entered = []

    @contextlib.contextmanager
    def current(device):
        entered.append(torch.device(device))
        yield

    monkeypatch.setattr(torch.cuda, "device", current)
    timing.benchmark(lambda: None, "cuda:1", min_run_time=0.01)
    assert entered == [torch.device("cuda:1")]
    timing.benchmark(lambda: None, "cpu", min_run_time=0.01)
    assert entered == [torch.device("cuda:1")]


def test_benchmark_on_the_cpu_never_synchronises_a_gpu(monkeypatch):
    # Timer's default clock synchronises CUDA (torch 2.8) or the current accelerator (later releases) whenever one is
    # there; timing CPU code on a GPU machine must not start CUDA.
    syncs = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: syncs.append("cuda"))
    if hasattr(torch, "accelerator"):
        monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
        monkeypatch.setattr(torch.accelerator, "synchronize", lambda *a, **k: syncs.append("accelerator"))
    m = timing.benchmark(lambda: None, "cpu", min_run_time=0.01)
    assert m.median > 0
    assert syncs == []


def test_benchmark_gives_the_timer_a_plain_clock_on_the_cpu_only(monkeypatch):
    from torch.utils import benchmark as tb

    clocks = []

    class RecordingTimer(tb.Timer):
        def __init__(self, *args, **kwargs):
            clocks.append(kwargs.get("timer", "default"))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(tb, "Timer", RecordingTimer)
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())  # no GPU to make current here
    timing.benchmark(lambda: None, "cpu", min_run_time=0.01)
    timing.benchmark(lambda: None, "cuda", min_run_time=0.01)  # the Timer's own clock, which waits for the GPU
    assert clocks == [timeit.default_timer, "default"]
