"""lessons/lesson_14.py: FSDP2 holds 1/N of the parameters, gradients and optimizer state on each rank, and N sharded
processes take the step of one process on the global batch, or the check says they did not and the script's fix
(--divide-loss) makes them (torch 2.8 with gloo sums the gradients instead of averaging: pytorch/pytorch#162338)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from helpers import distributed, nodes
from lessons.lesson_14 import (
    gradient_rule,
    gradient_sentence,
    held_bytes,
    init_sentence,
    meta_sentence,
    parse_args,
    precision_sentence,
    reshard_sentence,
    shard_of,
    speed_verdict,
    wide_mlp,
    width_for,
)

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
    assert averaged.startswith("torch 2.14.1 averaged the gradients over every process") and "no change" in averaged
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


def test_meta_sentence_says_whether_a_rank_held_the_whole_model() -> None:
    half = meta_sentence(2 * 2**20, 4 * 2**20, 2)
    assert half.startswith("this rank allocated 2.00 MiB for its shards, 0.500 of the whole model's 4.00 MiB")
    assert half.endswith("(1/2 = 0.500): no process held the whole model")
    assert meta_sentence(4 * 2**20, 4 * 2**20, 2).endswith("it held the whole model after all")
    with pytest.raises(ValueError, match="bytes"):
        meta_sentence(1, 0, 2)


def test_init_sentence_follows_what_was_measured() -> None:
    trap = init_sentence(True, False, 2)
    assert "the 2 shards of the first weight came out equal" in trap and "repeated" in trap
    assert trap.endswith("with a seed of each shard's own they came out different")
    kept_apart = init_sentence(False, False, 4)
    assert "came out different: this mesh's random numbers keep the shards apart" in kept_apart
    assert init_sentence(True, True, 2).endswith("they came out equal all the same")


def test_precision_sentence_reads_the_dtypes_and_bytes() -> None:
    seen = {"gathered": "bfloat16", "gathered_bytes": 50, "float32_bytes": 100}
    seen.update({"sharded": "float32", "gradient": "float32", "optimizer state": "float32"})
    line = precision_sentence(seen)
    assert line.startswith("the gathered weight was bfloat16, 0.50x the bytes of its float32 copy")
    assert line.endswith("the shards, their gradients and the optimizer state stayed float32")
    plain = precision_sentence({**seen, "gathered": "float32", "gathered_bytes": 100})
    assert plain.startswith("the gathered weight was float32, as stored (1.00x")
    mixed = precision_sentence({**seen, "gradient": "bfloat16"})
    assert mixed.endswith("stayed bfloat16/float32")


def test_reshard_sentence_states_both_sides_of_the_trade() -> None:
    trade = {
        "True": {"all_gathers": 10, "held_after_forward": 0},
        "False": {"all_gathers": 5, "held_after_forward": 3 * 2**20},
    }
    assert reshard_sentence(trade) == (
        "reshard_after_forward=False ran 5 all-gathers a step instead of 10, and held 3.00 MiB of gathered parameters "
        "between forward and backward instead of 0.00 MiB"
    )
    same = {"all_gathers": 4, "held_after_forward": 0}
    assert "changed neither" in reshard_sentence({"True": same, "False": same})


@pytest.mark.parametrize("memory", [15 * 2**30, 80 * 2**30])
def test_width_for_puts_a_share_of_the_memory_in_parameters(memory: int) -> None:
    width = width_for(memory, 8)
    assert width % 256 == 0
    with torch.device("meta"):
        count = sum(p.numel() for p in wide_mlp(width, 8).parameters())
    assert 0.25 < 4 * count / memory <= 0.31  # parameters ~30%: DDP's four copies ~120%, no fit
    with pytest.raises(ValueError, match="depth"):
        width_for(memory, 1)


@pytest.mark.parametrize(
    "argv",
    [
        ["--wrap", "ddp", "--meta"],
        ["--wrap", "ddp", "--replicas", "2"],
        ["--meta", "--check"],
        ["--param-dtype", "bfloat16", "--check"],
    ],
)
def test_options_that_do_not_go_together_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(argv)


def test_the_summed_sentence_divides_by_the_processes_a_shard_spans() -> None:
    assert "Divide the loss by 2, the processes a shard spans" in gradient_sentence("summed", 2.0, 2, "2.8.0")


@pytest.mark.slow
def test_built_on_meta_in_bfloat16_holds_half_and_counts_the_trade(tmp_path: Path) -> None:
    args = ["--meta", "--param-dtype", "bfloat16", "--steps", "3", "--width", "64", "--depth", "2"]
    done = distributed.torchrun(2, [*args, "--out", str(tmp_path)], timeout=180, module=MODULE)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads((tmp_path / "summary.json").read_text())
    count = 784 * 64 + 64 + 64 * 64 + 64 + 64 * 10 + 10
    for rank in found["ranks"]:
        meta = rank["meta"]
        assert meta["whole"] == 4 * count and meta["allocated"] < 0.55 * meta["whole"], meta
        assert meta["same_seed_repeats"] and not meta["own_seed_repeats"], meta  # CPU: one seed repeats the rows
    precision = found["precision"]
    assert precision["gathered"] == "bfloat16" and precision["gathered_bytes"] == 2 * 64 * 784
    assert {precision[k] for k in ("sharded", "gradient", "optimizer state")} == {"float32"}
    trade = found["reshard"]
    assert trade["True"]["all_gathers"] == 6 and trade["False"]["all_gathers"] == 3  # 3 layers, twice or once
    assert trade["True"]["held_after_forward"] == 0 and trade["False"]["held_after_forward"] == 2 * count


@pytest.mark.slow
def test_hsdp_on_two_agents_matches_one_process(tmp_path: Path) -> None:
    args = ["--replicas", "2", "--check", "--steps", "4", "--width", "64", "--depth", "2", "--out", str(tmp_path)]
    results = nodes.rehearse(2, 2, args, module=MODULE, env=nodes.NO_SHARED_STORE, run_id="test14", timeout=240)
    assert all(getattr(r, "returncode", None) == 0 for r in results), [nodes.outcome(r) for r in results]
    found = json.loads((tmp_path / "summary.json").read_text())
    assert found["world_size"] == 4 and found["shards"] == 2
    for rank in found["ranks"]:
        assert rank["shard"]["placements"] == "(Replicate(), Shard(dim=0))" and rank["shard"]["local_shape"] == [
            32,
            784,
        ]
    assert found["reshard"]["True"]["collectives"].get("allreduce_") == 3  # across the replicas, one per layer
    if found["gradients"] == "summed":  # torch 2.8 with gloo: summed within each replica group; the fix repairs it
        results = nodes.rehearse(
            2, 2, [*args, "--divide-loss"], module=MODULE, env=nodes.NO_SHARED_STORE, run_id="test14b", timeout=240
        )
        found = json.loads((tmp_path / "summary.json").read_text())
    assert found["gradients"] == "averaged" and found["reference_max_abs_diff"] < 1e-6
