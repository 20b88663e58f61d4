"""helpers/fsdp_train.py: FSDP2 holds 1/N of the parameters, gradients and optimizer state on each rank, and N sharded
processes take the step of one process on the global batch, or the check says they did not and the script's fix
(--divide-loss) makes them (torch 2.8 with gloo sums the gradients instead of averaging: pytorch/pytorch#162338)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from helpers import distributed
from helpers.fsdp_train import gradient_rule, held_bytes, wide_mlp

MODULE = "helpers.fsdp_train"


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


def run(wrap: str, out: Path, *extra: str) -> dict:
    args = ["--wrap", wrap, "--check", "--steps", "6", "--width", "64", "--depth", "2", "--out", str(out), *extra]
    done = distributed.torchrun(2, args, timeout=180, module=MODULE)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((out / "summary.json").read_text())


@pytest.mark.slow
def test_sharded_processes_match_one_process_or_say_why_and_the_fix_works(tmp_path: Path) -> None:
    fsdp = run("fsdp", tmp_path / "fsdp")
    ddp = run("ddp", tmp_path / "ddp")
    assert ddp["gradients"] == "averaged" and ddp["reference_max_abs_diff"] < 1e-6
    for kind in ("parameters", "gradients", "optimizer state"):  # half each, give or take the padding of a shard
        for rank in fsdp["ranks"]:
            assert 0.45 < rank["held_bytes"][kind] / ddp["held_bytes"][kind] < 0.55, (kind, rank)
    if fsdp["gradients"] == "summed":  # this torch sums: the check caught it, and dividing the loss repairs it
        assert fsdp["reference_max_abs_diff"] > 1e-3
        fsdp = run("fsdp", tmp_path / "fixed", "--divide-loss")
    assert fsdp["gradients"] == "averaged" and fsdp["reference_max_abs_diff"] < 1e-6
