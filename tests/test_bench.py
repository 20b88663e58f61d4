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
