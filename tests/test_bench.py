"""helpers.bench runs end to end on a small subset and prints its table (no timing is asserted)."""

from __future__ import annotations

import pytest

from helpers import bench, data


def test_quick_run_prints_the_table(capsys):
    if not data.is_present("FashionMNIST") and not data.prepare_offline("FashionMNIST"):
        pytest.skip("Fashion-MNIST is not available offline on this machine")
    argv = ["--quick", "--dataset", "FashionMNIST", "--device", "cpu", "--subset", "640", "--batches", "2"]
    assert bench.main([*argv, "--repeats", "1", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "FashionMNIST (640 training images) on cpu" in out
    for pipeline in bench.PIPELINES:
        assert bench.pipeline_title(pipeline, workers=1) in out
    assert "(1.0x)" in out  # the lab's own row
    assert out.count("goal >=") == 3


def test_bad_arguments_exit_with_usage():
    with pytest.raises(SystemExit):
        bench.main(["--repeats", "0"])
    assert bench.main(["--device", "tpu", "--subset", "10"]) == 2


def test_speedups_divide_by_the_lab():
    results = [
        bench.Measurement("lab", "data", images=100, seconds=1.0),
        bench.Measurement("resident", "data", images=100, seconds=0.01),
    ]
    assert bench.speedups(results)[("resident", "data")] == pytest.approx(100.0)
    assert "goal >= 100x: met" in bench.goal_lines(results)[0]


def _results(lab: float, workers: float, wrapper: float, resident: float, linear: float, cnn: float):
    """Measurements of 1,000 images whose rates give the stated ratios to the lab's."""
    rates = {
        ("lab", "data"): lab, ("workers", "data"): workers, ("wrapper", "data"): wrapper,
        ("resident", "data"): resident, ("lab", "linear"): 1.0, ("resident", "linear"): linear,
        ("lab", "cnn"): 1.0, ("resident", "cnn"): cnn,
    }  # fmt: skip
    return [bench.Measurement(p, t, images=1000, seconds=1000 / rate) for (p, t), rate in rates.items()]


def test_findings_follow_the_numbers():
    slow_workers = " ".join(bench.findings(_results(1.0, 0.6, 7.0, 90.0, 10.0, 1.5)))
    assert "90.0x" in slow_workers and "slowed the DataLoader down (0.6x" in slow_workers
    assert "12.9x faster again" in slow_workers
    assert "shrinks" in slow_workers and "10.0x with the linear model, 1.5x with the CNN" in slow_workers
    fast_workers = " ".join(bench.findings(_results(1.0, 1.8, 7.0, 5.0, 2.0, 3.0)))
    assert "sped the DataLoader up 1.8x" in fast_workers
    assert "no faster here" in fast_workers and "shrinks" not in fast_workers


def test_grid_findings_compare_batch_sizes_and_devices():
    lines = bench.grid_findings({"cpu": {32: 1000.0, 256: 3000.0}, "cuda": {32: 2000.0, 256: 30000.0}})
    assert lines[0] == "cpu: batch 256 trained 3.0x as many images/s as batch 32."
    assert lines[2] == "cuda against the CPU: 2.0x at batch 32, 10.0x at batch 256."
    assert bench.grid_findings({"cpu": {32: 1.0, 128: 1.0}}) == [
        "cpu: batch 128 trained 1.0x as many images/s as batch 32."
    ]
