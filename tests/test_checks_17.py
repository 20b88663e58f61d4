"""Lesson 17's checker: the reference plan passes, wrong plans that look right fail with a hint that names the fault,
the cell as handed out waits, and every 17_ checker is covered. Each check that runs a plan starts two processes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

from exercises.checks import CHECKERS

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "17_tensor_parallelism.ipynb"
COVERED = {"17_tp_plan", "17_redistribute"}


def test_every_lesson_17_checker_is_covered() -> None:
    assert {k for k in CHECKERS if k.startswith("17_")} == COVERED


def _verdict(capsys: pytest.CaptureFixture[str], plan: object) -> tuple[bool, str]:
    passed = CHECKERS["17_tp_plan"](plan)
    return passed, capsys.readouterr().out


def test_the_cell_as_handed_out_waits(capsys: pytest.CaptureFixture[str]) -> None:
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    cells = [
        "".join(c["source"])
        for c in nb["cells"]
        if c["cell_type"] == "code" and "check_tp_plan" in "".join(c["source"])
    ]
    assert len(cells) == 2
    namespace: dict = {}
    exec(cells[0].split("\nchecks.")[0], namespace)  # the placeholder cell, up to its check
    passed, out = _verdict(capsys, namespace["plan"])
    assert not passed and out.startswith("[waiting]")


@pytest.mark.slow
def test_the_solution_cell_passes(capsys: pytest.CaptureFixture[str]) -> None:
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    solution = ["".join(c["source"]) for c in nb["cells"] if "check_tp_plan" in "".join(c["source"])][1]
    namespace: dict = {"ColwiseParallel": ColwiseParallel, "RowwiseParallel": RowwiseParallel}
    exec(solution.split("\nchecks.")[0], namespace)
    passed, out = _verdict(capsys, namespace["plan"])
    assert passed, out
    assert out.startswith("[pass]")


@pytest.mark.slow
def test_a_pattern_key_that_names_both_layers_is_a_key_like_any_other(capsys: pytest.CaptureFixture[str]) -> None:
    passed, out = _verdict(capsys, {"fc1": ColwiseParallel(), "fc*2": RowwiseParallel()})
    assert passed, out


@pytest.mark.slow
@pytest.mark.parametrize(
    ("plan", "hint"),
    [
        pytest.param(
            {"fc1": RowwiseParallel(), "fc2": ColwiseParallel()},
            "Which layer takes the whole input",
            id="rowwise-first",
        ),
        pytest.param(
            {"fc1": ColwiseParallel(), "fc2": ColwiseParallel()}, "Which layer takes the whole input", id="colwise-both"
        ),
        pytest.param({"fc1": ColwiseParallel()}, "fc2 has no plan", id="no-plan-for-fc2"),
        pytest.param({"fc2": RowwiseParallel()}, "fc1 has no plan", id="no-plan-for-fc1"),
        pytest.param(
            {"fc1": ColwiseParallel(output_layouts=Replicate()), "fc2": ColwiseParallel(output_layouts=Replicate())},
            "the forward ran 2 all-gathers",
            id="colwise-both-gathered",
        ),
        pytest.param(
            {"fc1": ColwiseParallel(), "fc2": RowwiseParallel(use_local_output=False)},
            "returned a DTensor",
            id="dtensor-out",
        ),
        pytest.param(
            {"fc1": ColwiseParallel(), "fc2": RowwiseParallel(output_layouts=Shard(0))},
            "still split across the ranks",
            id="output-left-sharded",
        ),
    ],
)
def test_wrong_plans_that_look_right_fail_with_a_hint(
    capsys: pytest.CaptureFixture[str], plan: dict, hint: str
) -> None:
    passed, out = _verdict(capsys, plan)
    assert not passed
    assert out.startswith("[not yet]") and hint in out, out


@pytest.mark.parametrize(
    ("plan", "hint"),
    [
        ({"mlp.fc1": ColwiseParallel(), "mlp.fc2": RowwiseParallel()}, "names no submodule"),
        ({"0": ColwiseParallel(), "2": RowwiseParallel()}, "names no submodule"),
        ({}, "the plan is empty"),
        ([("fc1", ColwiseParallel())], "should be a dict"),
    ],
)
def test_plans_that_name_nothing_fail_before_any_process_starts(
    capsys: pytest.CaptureFixture[str], plan: object, hint: str
) -> None:
    passed, out = _verdict(capsys, plan)
    assert not passed and hint in out, out


def test_redistribute_waits_for_every_answer(capsys: pytest.CaptureFixture[str]) -> None:
    assert not CHECKERS["17_redistribute"]("all-gather", None, "none")
    assert capsys.readouterr().out.startswith("[waiting]")


@pytest.mark.slow
@pytest.mark.parametrize(
    "answers", [("all-gather", "reduce-scatter", "none"), ("All gather", "reduce_scatter", "nothing")], ids=str
)
def test_redistribute_passes_the_right_names_however_spelled(
    capsys: pytest.CaptureFixture[str], answers: tuple[str, str, str]
) -> None:
    assert CHECKERS["17_redistribute"](*answers), capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize(
    ("answers", "hint"),
    [
        (
            ("all-gather", "all-reduce", "none"),
            "Partial() -> Shard(1) is not all-reduce: each rank holds a full-shaped",
        ),
        (("all-to-all", "reduce-scatter", "none"), "Shard(1) -> Replicate() is not all-to-all"),
        (("all-gather", "reduce-scatter", "broadcast"), "Replicate() -> Shard(1) is not broadcast"),
        (("all-gather", "reduce-scatter", "scatter"), "'scatter' is none of"),
    ],
    ids=["sum-kept-whole", "all-to-all", "broadcast", "no-such-collective"],
)
def test_redistribute_fails_names_that_look_right(
    capsys: pytest.CaptureFixture[str], answers: tuple[str, str, str], hint: str
) -> None:
    assert not CHECKERS["17_redistribute"](*answers)
    out = capsys.readouterr().out
    assert out.startswith("[not yet]") and hint in out, out


@pytest.mark.slow
def test_the_redistribute_cells_wait_as_handed_out_and_pass_as_solved(capsys: pytest.CaptureFixture[str]) -> None:
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    cells = ["".join(c["source"]) for c in nb["cells"] if "check_redistribute" in "".join(c["source"])]
    assert len(cells) == 2
    for cell, verdict in zip(cells, ("[waiting]", "[pass]"), strict=True):
        namespace: dict = {}
        exec(cell.split("\nchecks.")[0], namespace)
        names = ("shard1_to_replicate", "partial_to_shard1", "replicate_to_shard1")
        CHECKERS["17_redistribute"](*(namespace[name] for name in names))
        assert capsys.readouterr().out.startswith(verdict)
