"""lessons/lesson_14.py: FSDP2 holds 1/N of the parameters, gradients and optimizer state on each rank, and N sharded
processes take the step of one process on the global batch, or the check says they did not and the script's fix
(--divide-loss) makes them (torch 2.8 with gloo sums the gradients instead of averaging: pytorch/pytorch#162338)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from helpers import distributed
from lessons.lesson_14 import gradient_rule, gradient_sentence, held_bytes, shard_of, speed_verdict, wide_mlp

MODULE = "lessons.lesson_14"


@pytest.mark.parametrize(
    ("ratio", "world", "rule"),
    [
        (1.0, 2, "averaged"),
        (1.004, 4, "averaged"),
        (2.0, 2, "summed"),
        (3.98, 4, "summed"),
        (1.5, 2, "other"),
        (0.5, 2, "other"),
        (1.0, 1, "averaged"),
    ],
)
def test_gradient_rule_reads_the_ratio(ratio: float, world: int, rule: str) -> None:
    assert gradient_rule(ratio, world) == rule


@pytest.mark.parametrize(
    ("fsdp", "ddp", "starts"),
    [
        (0.045, 0.006, "FSDP took 7.5x DDP's time per step: sharding cost time here"),
        (0.011, 0.010, "FSDP and DDP took about the same time per step (1.10x)"),
        (0.010, 0.011, "FSDP and DDP took about the same time per step (0.91x)"),
        (0.005, 0.010, "FSDP took 0.50x DDP's time per step: sharding was faster here"),
    ],
)
def test_speed_verdict_follows_the_numbers(fsdp: float, ddp: float, starts: str) -> None:
    assert speed_verdict(fsdp, ddp).startswith(starts)


def test_gradient_sentence_says_what_to_do() -> None:
    averaged = gradient_sentence("averaged", 1.0, 2, "2.14.1")
    assert averaged.startswith("torch 2.14.1 averaged the 2 ranks' gradients") and "no change" in averaged
    summed = gradient_sentence("summed", 2.0, 2, "2.8.0")
    assert "summed" in summed and "2 times too large" in summed and "--divide-loss" in summed
    assert "1.500x" in gradient_sentence("other", 1.5, 2, "2.8.0")


def test_speed_verdict_refuses_a_time_that_was_not_measured() -> None:
    with pytest.raises(ValueError, match="positive"):
        speed_verdict(0.0, 0.01)


def test_shard_of_a_plain_parameter_is_none() -> None:
    assert shard_of(torch.nn.Linear(3, 2).weight) is None


def test_held_bytes_counts_parameters_gradients_and_optimizer_state() -> None:
    model = wide_mlp(8, 2)  # 784*8+8 + 8*8+8 + 8*10+10 parameters
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    count = 784 * 8 + 8 + 8 * 8 + 8 + 8 * 10 + 10
    assert held_bytes(model, optimizer) == {"parameters": 4 * count, "gradients": 0, "optimizer state": 0}
    model(torch.randn(2, 1, 28, 28)).sum().backward()
    optimizer.step()
    assert held_bytes(model, optimizer) == {
        "parameters": 4 * count,
        "gradients": 4 * count,
        "optimizer state": 4 * count,
    }


@pytest.mark.parametrize("view", [False, True])
def test_held_bytes_counts_ddps_buckets_unless_the_gradients_are_views_into_them(view: bool) -> None:
    """DDP copies each gradient into a flat bucket for its all-reduce and keeps the buckets: 4 more bytes a parameter,
    none with gradient_as_bucket_view=True, where the gradients are those buckets."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        model = DDP(wide_mlp(8, 2), gradient_as_bucket_view=view)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        model(torch.randn(2, 1, 28, 28)).sum().backward()
        optimizer.step()
        held = held_bytes(model, optimizer)
    finally:
        dist.destroy_process_group()
    count = 784 * 8 + 8 + 8 * 8 + 8 + 8 * 10 + 10
    assert held == {
        "parameters": 4 * count,
        "gradients": 4 * count,
        "optimizer state": 4 * count,
        "DDP's buckets": 0 if view else 4 * count,
    }


def run(wrap: str, out: Path, *extra: str) -> dict:
    args = ["--wrap", wrap, "--check", "--steps", "6", "--width", "64", "--depth", "2", "--out", str(out), *extra]
    done = distributed.torchrun(2, args, timeout=180, module=MODULE)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((out / "summary.json").read_text())


@pytest.mark.slow
def test_sharded_processes_match_one_process_or_say_why_and_the_fix_works(tmp_path: Path) -> None:
    fsdp = run("fsdp", tmp_path / "fsdp")
    ddp = run("ddp", tmp_path / "ddp")
    for rank, found in enumerate(fsdp["ranks"]):  # the first layer's weight, 64 rows: 32 on each rank
        shard = found["shard"]
        assert shard["placements"] == "(Shard(dim=0),)" and shard["mesh"] == "cpu", shard
        assert shard["local_shape"] == [32, 784] and shard["full_shape"] == [64, 784], (rank, shard)
        assert found["step_seconds"] > 0
    assert all(found["shard"] is None for found in ddp["ranks"])
    assert ddp["gradients"] == "averaged" and ddp["reference_max_abs_diff"] < 1e-6
    for kind in ("parameters", "gradients", "optimizer state"):  # half each, give or take the padding of a shard
        for rank in fsdp["ranks"]:
            assert 0.45 < rank["held_bytes"][kind] / ddp["held_bytes"][kind] < 0.55, (kind, rank)
    if fsdp["gradients"] == "summed":  # this torch sums: the check caught it, and dividing the loss repairs it
        assert fsdp["reference_max_abs_diff"] > 1e-3
        fsdp = run("fsdp", tmp_path / "fixed", "--divide-loss")
    assert fsdp["gradients"] == "averaged" and fsdp["reference_max_abs_diff"] < 1e-6
