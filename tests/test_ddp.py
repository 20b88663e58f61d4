"""helpers.ddp_train under torchrun with two gloo (CPU) processes: equivalence, repeated launches, a failing rank."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch

from helpers import ddp_train
from helpers.checkpoints import load_checkpoint
from helpers.models import build_model

QUICK = ["--device", "cpu", "--epochs", "1", "--synthetic-size", "64", "--batch-size", "16"]
"""A launch that does every collective the real run does (DDP's broadcast, all-reduces, barrier) in little time."""


def _report(result) -> str:
    return f"exit code {result.returncode}\n--- stdout\n{result.stdout[-3000:]}\n--- stderr\n{result.stderr[-3000:]}"


def test_two_processes_equal_one_process_on_the_global_batch(tmp_path: Path) -> None:
    args = ["--device", "cpu", "--epochs", "2", "--synthetic-size", "256", "--batch-size", "16", "--check-equivalence"]
    result = ddp_train.launch(2, [*args, "--out", str(tmp_path)], timeout=180)
    assert result.returncode == 0, _report(result)
    summary = json.loads((tmp_path / ddp_train.SUMMARY_FILE).read_text())
    assert summary["world_size"] == 2 and summary["backend"] == "gloo"
    assert summary["reference_max_abs_diff"] < ddp_train.EQUIVALENCE_TOLERANCE
    assert summary["replica_max_abs_diff"] == 0.0
    assert "below 1e-06: True" in result.stdout
    # Rank 0 alone logs: the per-epoch lines appear once, not once per process.
    assert result.stdout.count("epoch 1/2:") == 1
    # The checkpoint holds the unwrapped model's keys, so a plain model loads it strictly.
    state = load_checkpoint(tmp_path / ddp_train.CHECKPOINT_FILE, map_location="cpu")
    assert state["epoch"] == 2 and not any(k.startswith("module.") for k in state["model"])
    build_model("mlp").load_state_dict(state["model"])


def test_ten_launches_in_a_row_all_succeed(tmp_path: Path) -> None:
    start = time.perf_counter()
    for attempt in range(10):
        result = ddp_train.launch(2, [*QUICK, "--out", str(tmp_path / str(attempt))], timeout=120)
        assert result.returncode == 0, f"launch {attempt + 1} of 10 failed:\n{_report(result)}"
        assert (tmp_path / str(attempt) / ddp_train.CHECKPOINT_FILE).is_file()
    print(f"10 launches in {time.perf_counter() - start:.1f} s")


def test_a_failing_rank_ends_the_job_with_an_error(tmp_path: Path) -> None:
    start = time.perf_counter()
    result = ddp_train.launch(2, [*QUICK, "--out", str(tmp_path), "--fail-rank", "1", "--timeout", "30"], timeout=120)
    assert result.returncode != 0
    assert time.perf_counter() - start < 120
    cause = ddp_train.root_cause(result.stderr)
    assert cause[:2] == ["rank: 1 (local_rank: 1)", "exitcode: 1"], _report(result)
    assert cause[-1] == "RuntimeError: rank 1 fails on purpose (--fail-rank 1)"
    assert not (tmp_path / ddp_train.SUMMARY_FILE).exists()


@pytest.mark.filterwarnings("ignore:Unable to enable fault handler")  # @record under pytest's captured stderr
def test_refuses_to_run_without_torchrun(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.delenv("RANK", raising=False)
    assert ddp_train.main([]) == 2
    assert "torchrun" in capsys.readouterr().err


def test_global_batches_are_the_union_of_the_rank_batches() -> None:
    data = ddp_train.synthetic_data(10, 0, 0)
    batches = list(ddp_train.global_batches(data, world_size=2, batch_size=2, seed=3, epoch=1))
    assert [len(y) for _, y in batches] == [4, 4, 2]
    shares = []
    for rank in range(2):
        sampler = torch.utils.data.DistributedSampler(data, num_replicas=2, rank=rank, shuffle=True, seed=3)
        sampler.set_epoch(1)
        shares.append(list(sampler))
    first = [*shares[0][:2], *shares[1][:2]]
    assert torch.equal(batches[0][0], data.tensors[0][first])


def test_root_cause_without_a_report() -> None:
    assert ddp_train.root_cause("all good") == []
