"""Lesson 17's module: the block and its plans, the names and counts of collectives, the sentences generated from a
run's numbers (fed here with made-up ones), the notebook's prose free of results of its own run, and the script's
two demonstrations under torchrun (slow)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest
import torch
from torch import nn

from helpers import distributed
from lessons import lesson_17 as tp17

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "17_tensor_parallelism.ipynb"


def test_collectives_are_named_from_the_keys_commdebugmode_counts_under() -> None:
    assert tp17.collective_name("c10d_functional.all_gather_into_tensor") == "all-gather"
    assert tp17.collective_name("c10d_functional.reduce_scatter_tensor") == "reduce-scatter"
    assert tp17.collective_name(torch.ops._c10d_functional.all_reduce) == "all-reduce"
    assert tp17.collective_name("c10d.allgather_") == "all-gather"
    assert tp17.collective_name("c10d_functional.wait_tensor") == "c10d_functional.wait_tensor"


def test_named_counts_sum_the_overloads_and_leave_out_what_is_no_collective() -> None:
    counts = {"c10d_functional.all_reduce": 2, "c10d.allreduce_": 1, "c10d_functional.wait_tensor": 5, "x.b": 0}
    assert tp17.named_counts(counts) == {"all-reduce": 3}
    assert tp17.counts_line({"all-gather": 1, "reduce-scatter": 2}) == "1 all-gather, 2 reduce-scatters"
    assert tp17.counts_line({}) == "none"


class _Mode:
    """What module_counts reads of a CommDebugMode: its per-module counts, parents including their children's."""

    def __init__(self, counts: dict) -> None:
        self.comm_module_counts = counts


def test_module_counts_keep_each_module_its_own_collectives_in_the_modules_order() -> None:
    ar, ag = "c10d_functional.all_reduce", "c10d_functional.all_gather_into_tensor"
    mode = _Mode(
        {
            "Global": {"forward": {ar: 1, ag: 1}, "backward": {ar: 1}},
            "Block": {"forward": {ar: 1, ag: 1}, "backward": {ar: 1}},
            "Block.mlp.fc2": {"forward": {ar: 1}, "backward": {}},
            "Block.mlp": {"forward": {ar: 1, ag: 1}, "backward": {ar: 1}},
            "Block.mlp.fc1": {"forward": {}, "backward": {ar: 1}},
        }
    )
    found = tp17.module_counts(mode, ["", "mlp", "mlp.fc1", "mlp.fc2"])
    assert list(found) == ["mlp", "mlp.fc1", "mlp.fc2"]  # the root ran nothing of its own
    assert found["mlp"] == {"forward": {"all-gather": 1}}  # fc2's all-reduce is fc2's, not mlp's
    assert found["mlp.fc1"] == {"backward": {"all-reduce": 1}}
    assert found["mlp.fc2"] == {"forward": {"all-reduce": 1}}


def test_the_plans_name_submodules_of_the_block() -> None:
    names = {name for name, _ in tp17.Block(16, 4).named_modules()}
    for sequence_parallel in (False, True):
        assert set(tp17.tp_plan(sequence_parallel)) <= names
    assert {"norm1", "norm2", "attn", "mlp"} <= set(tp17.tp_plan(True))


def test_attention_works_with_the_heads_its_process_holds() -> None:
    """Split column-wise over two processes, q, k, v give each half the heads; the module must take the count from q's
    output. Built here by hand: half of each projection, and attention over those heads alone matches the whole."""
    torch.manual_seed(0)
    whole = tp17.Attention(16, 4)
    x = torch.randn(2, 5, 16)
    half = tp17.Attention(16, 4)
    for name in ("q", "k", "v"):
        layer = nn.Linear(16, 8)
        layer.weight.data, layer.bias.data = getattr(whole, name).weight[:8].clone(), getattr(whole, name).bias[:8]
        setattr(half, name, layer)
    half.o = nn.Linear(8, 16, bias=False)
    half.o.weight.data = whole.o.weight[:, :8].clone()
    other = tp17.Attention(16, 4)
    for name in ("q", "k", "v"):
        layer = nn.Linear(16, 8)
        layer.weight.data, layer.bias.data = getattr(whole, name).weight[8:].clone(), getattr(whole, name).bias[8:]
        setattr(other, name, layer)
    other.o = nn.Linear(8, 16, bias=False)
    other.o.weight.data = whole.o.weight[:, 8:].clone()
    summed = half(x) + other(x) + whole.o.bias  # the row-wise all-reduce, and the bias added once
    torch.testing.assert_close(summed, whole(x), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="does not split"):
        tp17.Attention(10, 4)


def test_check_verdict() -> None:
    assert "within the tolerance 1e-05: the same" in tp17.check_verdict(3e-7, 1e-5)
    assert "NOT the same" in tp17.check_verdict(2e-3, 1e-5)
    with pytest.raises(ValueError):
        tp17.check_verdict(-1.0, 1e-5)
    with pytest.raises(ValueError):
        tp17.check_verdict(1e-7, 0)


def test_speed_verdict_follows_the_ratio() -> None:
    slower = tp17.split_speed_verdict(0.030, 0.001, 6)
    assert slower.startswith("the split block took 30.0x") and "cost more than" in slower and "6 collectives" in slower
    faster = tp17.split_speed_verdict(0.6, 1.0, 1)
    assert "0.60x" in faster and "saved more than" in faster and "1 collective a step" in faster
    same = tp17.split_speed_verdict(1.05, 1.0, 2)
    assert "about one process's time" in same
    with pytest.raises(ValueError):
        tp17.split_speed_verdict(0, 1.0, 2)


def test_traffic_verdict_compares_with_the_gradients_data_parallelism_moves() -> None:
    less = tp17.traffic_verdict(96 * 1024, 195 * 1024, 64)
    assert "96 KiB per rank for 64 tokens, less than the 195 KiB" in less and "(0.49x)" in less
    more = tp17.traffic_verdict(400 * 1024, 100 * 1024, 4096)
    assert "more than" in more and "(4.00x)" in more
    with pytest.raises(ValueError):
        tp17.traffic_verdict(1, 0, 1)


def test_dp_gradient_sentence_names_the_dp_size_not_the_world_size() -> None:
    assert 'averaged the gradients of the 2 "dp" ranks' in tp17.dp_gradient_sentence("averaged", 1.0, 2, "2.14.1")
    summed = tp17.dp_gradient_sentence("summed", 2.0, 2, "2.8.0")
    assert "summed" in summed and "2.00x" in summed and 'divided by the size of "dp", 2' in summed
    assert "neither" in tp17.dp_gradient_sentence("other", 1.4, 2, "2.8.0")


def _sources(kind: str) -> str:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    return "\n".join(c.source for c in nb.cells if c.cell_type == kind)


def test_the_sentences_about_speed_and_checks_come_from_the_run() -> None:
    code = _sources("code")
    assert 'tp17.split_speed_verdict(timed["tp_seconds"], timed["one_seconds"], collectives)' in code
    assert "tp17.traffic_verdict(handed" in code
    assert "tp17.check_verdict(run['output_diff'], TOLERANCE)" in code
    assert "tp17.dp_gradient_sentence(rule" in code
    assert 'if rule == "summed":' in code  # the 2-D run repeated with the loss divided only where the check caught it


def test_the_prose_states_no_result_of_its_own_run() -> None:
    prose = _sources("markdown")
    assert not re.search(r"\d+(\.\d+)? ?ms\b", prose)
    assert not re.search(r"\d+(\.\d+)?x (one process|slower|faster)", prose)
    assert not re.search(r"\b(tensor parallelism|the split block) (was|is) (slower|faster)\b", prose, re.IGNORECASE)
    assert not re.search(r"\bthis (torch|run)\b[^.]*\b(sums|summed|averages|averaged)\b", prose, re.IGNORECASE)


def _torchrun(tmp_path: Path, nproc: int, *args: str) -> dict:
    out = tmp_path / "out"
    result = distributed.torchrun(
        nproc, ["--device", "cpu", "--out", str(out), *args], timeout=240, module="lessons.lesson_17"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads((out / tp17.SUMMARY_FILE).read_text())


@pytest.mark.slow
def test_the_tp_demo_counts_the_collectives_and_matches_one_process(tmp_path: Path) -> None:
    found = _torchrun(tmp_path, 2, "--demo", "tp", "--dim", "32", "--heads", "4", "--seq", "8", "--repeats", "1")
    moves = {(m["from"], m["to"]): m["ran"] for m in found["placements"]["moves"]}
    assert moves[("Shard(0)", "Replicate()")] == {"all-gather": 1}
    assert moves[("Partial()", "Replicate()")] == {"all-reduce": 1}
    assert moves[("Partial()", "Shard(0)")] == {"reduce-scatter": 1}
    assert moves[("Replicate()", "Shard(0)")] == {}
    assert found["placements"]["partial_full"] == [[3.0, 3.0], [3.0, 3.0]]
    tp, sp = found["tp"], found["sp"]
    assert tp["totals"] == {"all-reduce": 6}
    assert tp["modules"]["attn.o"] == {"forward": {"all-reduce": 1}}
    assert tp["modules"]["mlp.fc2"] == {"forward": {"all-reduce": 1}}
    assert tp["modules"]["mlp.fc1"] == {"backward": {"all-reduce": 1}}
    assert sp["totals"] == {"all-gather": 4, "reduce-scatter": 4}
    assert sp["modules"]["attn"] == {"forward": {"all-gather": 1}}
    for run in (tp, sp):
        assert run["output_diff"] < 1e-5 and run["gradient_diff"] < 1e-5
        assert run["gradients_compared"] == 16
    assert sp["norm_grad"] == "(Partial(sum),)"
    assert tp["fc1_weight"] == {"placements": "(Shard(dim=0),)", "local": [64, 32], "full": [128, 32]}
    assert set(found["timing"]) == {"tp_seconds", "one_seconds", "all_reduce_seconds"}


@pytest.mark.slow
def test_the_2d_demo_trains_like_one_process(tmp_path: Path) -> None:
    """On a torch whose FSDP2 sums over gloo (2.8) the check needs the loss divided, as the lesson's cell does."""
    found = _torchrun(tmp_path, 4, "--demo", "2d", "--dim", "32", "--steps", "2")
    assert found["mesh"] == {"shape": [2, 2], "names": ["dp", "tp"]}
    assert found["fc1_weight"]["local"] == [32, 32] and found["fc1_weight"]["full"] == [128, 32]
    if abs(found["gradient_ratio"] - 2) < 0.02:
        found = _torchrun(tmp_path, 4, "--demo", "2d", "--dim", "32", "--steps", "2", "--divide-loss")
    assert abs(found["gradient_ratio"] - 1) < 0.01
    assert found["weight_diff"] < 1e-5
