"""Lesson 17's exercise checker: a tensor-parallel plan for an MLP, run in two processes and set against one."""

from __future__ import annotations

from typing import Any

import torch

from exercises.core import exercise, first_line, ranks_in_processes

WORLD = 2
DIM = 8
TOLERANCE = 1e-5


def _plan_rank(plan: Any, rank: int, world: int, store: str, conn: Any) -> None:
    """One rank of check_tp_plan, in its own process: join a gloo group of ``world``, split the lesson's MLP with
    ``plan``, run a forward and backward next to an unsharded copy, and send back what was found."""
    import copy
    import os
    import sys
    from datetime import timedelta

    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor.parallel import parallelize_module

    from lessons.lesson_17 import FeedForward, named_counts

    torch.set_num_threads(1)
    sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115 (the process's own, closed at exit)
    os.dup2(sys.stdout.fileno(), 1)  # and what gloo's C++ code writes (torch 2.8 greets each peer there)
    os.dup2(sys.stdout.fileno(), 2)
    report: dict[str, Any] = {"rank": rank, "error": None, "stage": "parallelize_module"}
    try:
        dist.init_process_group(
            "gloo", init_method=f"file://{store}", rank=rank, world_size=world, timeout=timedelta(seconds=20)
        )
        mesh = init_device_mesh("cpu", (world,))
        torch.manual_seed(0)
        reference = FeedForward(DIM)
        x = torch.randn(4, DIM)
        expected = reference(x)
        expected.pow(2).mean().backward()
        model = copy.deepcopy(reference)
        model.zero_grad(set_to_none=True)
        try:
            parallelize_module(model, mesh, plan)
            report["sharded"] = {
                name: isinstance(layer.weight, DTensor) for name, layer in (("fc1", model.fc1), ("fc2", model.fc2))
            }
            report["stage"] = "forward"
            with CommDebugMode() as mode:
                out = model(x)
            report["forward"] = named_counts(mode.get_comm_counts())
            report["output_type"] = type(out).__name__
            if isinstance(out, DTensor):
                report["placements"] = str(tuple(out.placements))
                out = out.full_tensor()
            report["output_shape"] = list(out.shape)
            if out.shape == expected.shape:
                report["output_gap"] = (out - expected).abs().max().item()
                report["stage"] = "backward"
                out.pow(2).mean().backward()
                gaps = {}
                for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
                    grad = p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad
                    gaps[name] = float("inf") if grad is None else (grad - q.grad).abs().max().item()
                report["gradient_gaps"] = gaps
        except Exception as err:  # the learner's plan: the error goes back as text
            report["error"] = first_line(err)
        conn.send(report)
    except Exception as err:  # the group itself: the error goes back as text
        report["error"] = first_line(err)
        conn.send(report)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _keys_problem(plan: dict) -> str | None:
    import fnmatch

    known = ("fc1", "fc2")
    unknown = [key for key in plan if not isinstance(key, str) or not fnmatch.filter(known, key)]
    if unknown:
        return (
            f"the plan's key {unknown[0]!r} names no submodule of the MLP: a key is a submodule's name as "
            "model.named_modules() gives it, here 'fc1' and 'fc2' (parallelize_module matches keys to names, and a "
            "key that matches nothing splits nothing)"
        )
    return None


def _plan_hint(report: dict) -> str | None:
    """The first thing wrong with what one rank found."""
    from lessons.lesson_17 import counts_line  # here: importing the lesson's module imports DTensor and dynamo

    error, stage = (report["error"] or "").rstrip("."), report["stage"]
    sharded = report.get("sharded", {})
    if error:
        if stage == "parallelize_module":
            return f"parallelize_module(model, mesh, plan) raised {error}"
        if sharded and not all(sharded.values()):
            missing = [name for name, done in sharded.items() if not done][0]
            return (
                f"the {stage} raised {error}: {missing} has no plan, so it stayed whole and got the other layer's "
                "split tensor; give both layers a style"
            )
        return (
            f"the {stage} raised {error}. Each style expects an input layout: ColwiseParallel a whole (replicated) "
            "input, RowwiseParallel one split along its last dimension, the very thing ColwiseParallel leaves. Which "
            "layer takes the whole input, and which the split one?"
        )
    if sharded and not all(sharded.values()):
        missing = [name for name, done in sharded.items() if not done]
        return f"{' and '.join(missing)} stayed whole (a plain tensor on every rank): give each Linear a style"
    if report["output_type"] == "DTensor":
        return (
            f"the MLP returned a DTensor placed {report['placements']}, not a plain tensor: the layers after it "
            "expect the whole output on every rank, as one process computes it. Leave the last style's output "
            "as its default (a local tensor, Replicate)"
        )
    expected_shape = [4, DIM]
    if report["output_shape"] != expected_shape:
        return (
            f"each rank's output has shape {report['output_shape']}, not {expected_shape}: the output is still split "
            "across the ranks. ColwiseParallel leaves each rank its own columns; the layer that joins them is "
            "RowwiseParallel"
        )
    if report["output_gap"] > TOLERANCE:
        return f"the output differs from one process's by {report['output_gap']:.1e} (tolerance {TOLERANCE:.0e})"
    worst = max(report["gradient_gaps"], key=report["gradient_gaps"].get)
    if report["gradient_gaps"][worst] > TOLERANCE:
        return (
            f"the output matches, but the gradient of {worst} differs from one process's by "
            f"{report['gradient_gaps'][worst]:.1e} (tolerance {TOLERANCE:.0e})"
        )
    if report["forward"] != {"all-reduce": 1}:
        ran = counts_line(report["forward"]) if report["forward"] else "no collective"
        return (
            f"the results match, but the forward ran {ran}: split fc1 by columns and fc2 by rows, and the forward "
            "needs one all-reduce and nothing else"
        )
    return None


@exercise("17_tp_plan", "a tensor-parallel plan for Linear -> GELU -> Linear, against one process")
def check_tp_plan(plan: dict | None) -> str | None:
    """``plan`` is the ``parallelize_plan`` dict for lesson 17's ``FeedForward`` (``fc1``, GELU, ``fc2``). It is run
    in two processes joined by gloo, each with the same weights and batch as one unsharded copy; the output and every
    gradient (gathered with ``full_tensor``) must match the copy's to ``TOLERANCE``, the output must be a plain
    tensor of the copy's shape, and the forward must run one all-reduce."""
    import tempfile
    from pathlib import Path

    import torch._dynamo  # noqa: F401  before any process group (helpers.distributed.leaving_cleanly says why)

    if not isinstance(plan, dict):
        return f"plan should be a dict from submodule names to styles, got {type(plan).__name__}"
    if not plan:
        return "the plan is empty: name fc1 and fc2, each with a style"
    problem = _keys_problem(plan)
    if problem:
        return problem
    with tempfile.TemporaryDirectory() as folder:
        store = str(Path(folder) / "store")
        reports = ranks_in_processes(
            _plan_rank,
            lambda r: (plan, r, WORLD, store),
            WORLD,
            timeout=90,
            stuck="does every rank call parallelize_module with the same plan?",
            backward=True,
            spawned_timeout=180,
        )
    if isinstance(reports, str):
        return reports
    for report in reports:
        hint = _plan_hint(report)
        if hint:
            return f"rank {report['rank']}: {hint}"
    return None


MOVES = (("Shard(1)", "Replicate()"), ("Partial()", "Shard(1)"), ("Replicate()", "Shard(1)"))
"""The redistributions the second exercise asks about: none of them is in the lesson's table, which cuts dimension 0.
(Replicate -> Partial would be a fourth, but DTensor refuses it: "for internal use only" in torch 2.14.)"""

NAMES = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "broadcast", "none")

WHY = {
    "all-gather": "each rank holds a piece and must end with the whole: every piece travels to every rank",
    "all-reduce": "each rank holds one term of a sum and must end with the whole sum",
    "reduce-scatter": "each rank holds a full-shaped term of a sum and must end with only its own piece of the sum",
    "none": "each rank already holds all it must end with, so it can take its part without hearing from the others",
}


def _moves_rank(rank: int, world: int, store: str, conn: Any) -> None:
    """One rank of check_redistribute: run each of ``MOVES`` on a 4x4 DTensor inside CommDebugMode, send the counts."""
    import os
    import sys
    from datetime import timedelta

    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.debug import CommDebugMode

    from lessons.lesson_17 import named_counts

    torch.set_num_threads(1)
    sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115 (the process's own, closed at exit)
    os.dup2(sys.stdout.fileno(), 1)
    os.dup2(sys.stdout.fileno(), 2)
    try:
        dist.init_process_group(
            "gloo", init_method=f"file://{store}", rank=rank, world_size=world, timeout=timedelta(seconds=20)
        )
        mesh = init_device_mesh("cpu", (world,))
        placements = {"Shard(1)": Shard(1), "Replicate()": Replicate(), "Partial()": Partial()}
        whole = torch.arange(16.0).reshape(4, 4)
        ran = []
        for start, target in MOVES:
            if start == "Partial()":
                tensor = DTensor.from_local(whole + rank, mesh, [Partial()])
            else:
                tensor = distribute_tensor(whole, mesh, [placements[start]])
            with CommDebugMode() as mode:
                tensor.redistribute(mesh, [placements[target]]).to_local()
            ran.append(named_counts(mode.get_comm_counts()))
        conn.send(ran)
    except Exception as err:  # this torch's DTensor refused a move: the error goes back as text
        conn.send(first_line(err))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _spelled(answer: object) -> str:
    """The answer as one of ``NAMES`` where it is one, however spelled ("All gather", "allgather", "nothing")."""
    text = str(answer).strip().lower().replace("_", "").replace(" ", "").replace("-", "")
    if text in ("nothing", "nocollective", "nocommunication", ""):
        return "none"
    return next((name for name in NAMES if name.replace("-", "") == text), str(answer))


@exercise(
    "17_redistribute",
    "the collective each redistribute runs, checked by running it in 2 processes",
    answers=len(MOVES),
)
def check_redistribute(
    shard1_to_replicate: str | None, partial_to_shard1: str | None, replicate_to_shard1: str | None
) -> str | None:
    """The learner names the collective each of ``MOVES`` runs (one of ``NAMES``); two processes joined by gloo run
    each move inside CommDebugMode, and each answer must name what ran ("none" where nothing did)."""
    import tempfile
    from pathlib import Path

    import torch._dynamo  # noqa: F401  before any process group (helpers.distributed.leaving_cleanly says why)

    answers = [shard1_to_replicate, partial_to_shard1, replicate_to_shard1]
    for (start, target), answer in zip(MOVES, answers, strict=True):
        if _spelled(answer) not in NAMES:
            return f"{start} -> {target}: {answer!r} is none of {', '.join(NAMES)}"
    with tempfile.TemporaryDirectory() as folder:
        store = str(Path(folder) / "store")
        found = ranks_in_processes(
            _moves_rank, lambda r: (r, WORLD, store), WORLD, timeout=60, stuck="the machine may be very busy"
        )
    if isinstance(found, str):
        return found
    ran = found[0]
    if isinstance(ran, str):
        return f"this torch could not run the moves ({ran})"
    for (start, target), answer, counts in zip(MOVES, answers, ran, strict=True):
        truth = next(iter(counts)) if len(counts) == 1 else ("none" if not counts else ", ".join(counts))
        if _spelled(answer) != truth:
            why = WHY.get(truth, f"it ran {truth}")
            return f"{start} -> {target} is not {_spelled(answer)}: {why}"
    return None
