"""Lesson 14's exercise checkers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from exercises.core import exercise, first_line, ranks_in_processes

SHARD_WORLD = 2
"""The fully_shard exercise's ranks: two forked CPU processes in a gloo group."""


class _DefaultMesh(BaseException):
    """Raised where fully_shard would build its default mesh (a BaseException: ``except Exception`` lets it by)."""


def _shard_problem() -> tuple[torch.nn.Sequential, torch.Tensor]:
    """The exercise's model, three linear layers with ReLUs between them, and a batch to run it on."""
    with torch.random.fork_rng(devices=[]):  # the caller's random state stays as it was
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(8, 6), torch.nn.ReLU(), torch.nn.Linear(6, 6), torch.nn.ReLU(), torch.nn.Linear(6, 3)
        )
        return model, torch.randn(4, 8)


def _shard_rank(shard: Callable, rank: int, store: str, conn: Any) -> None:
    """One rank of check_fully_shard, in a forked process: join a gloo group, call ``shard``, send back what it made
    of the model. fully_shard's default mesh is made to raise, so that a call without ``mesh=`` shows on any machine
    (that default picks CUDA whenever CUDA is present)."""
    import copy
    import os
    import sys
    from datetime import timedelta
    from unittest import mock

    import torch.distributed as dist
    from torch.distributed.fsdp import FSDPModule

    torch.set_num_threads(1)
    sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115 (the process's own, closed at exit)
    os.dup2(sys.stdout.fileno(), 1)  # and what gloo's C++ code writes (torch 2.8 greets each peer there)
    os.dup2(sys.stdout.fileno(), 2)
    report: dict[str, Any] = {"rank": rank, "error": None, "default_mesh": False}

    def default_accelerator() -> torch.device:
        raise _DefaultMesh

    try:
        timeout = timedelta(seconds=20)  # a rank that skips a collective: an error, not a hang
        dist.init_process_group(
            "gloo", init_method=f"file://{store}", rank=rank, world_size=SHARD_WORLD, timeout=timeout
        )
        model, X = _shard_problem()
        expected = copy.deepcopy(model)(X).detach()
        try:
            with mock.patch.object(torch._C, "_get_accelerator", default_accelerator):
                returned = shard(model, torch.device("cpu"))
        except _DefaultMesh:
            report["default_mesh"] = True
        except Exception as err:  # the learner's code: the error goes back as text
            report["error"] = first_line(err)
        linears = [m for m in model if isinstance(m, torch.nn.Linear)]
        report["returned_model"] = returned is model if not (report["error"] or report["default_mesh"]) else True
        report["root"] = isinstance(model, FSDPModule)
        report["layers"] = [isinstance(m, FSDPModule) for m in linears]
        report["meshes"] = sorted({p.device_mesh.device_type for p in model.parameters() if hasattr(p, "device_mesh")})
        report["local_rows"] = [
            list(p.to_local().shape)[0] if hasattr(p, "to_local") else None for p in model.parameters()
        ]
        report["full_rows"] = [p.shape[0] for p in model.parameters()]
        if report["root"] and all(report["layers"]) and not report["error"] and not report["default_mesh"]:
            state = model._get_fsdp_state()
            group = state._fsdp_param_group
            report["root_params"] = 0 if group is None else len(group.fsdp_params)
            report["output_gap"] = (model(X).detach() - expected).abs().max().item()
        conn.send(report)
    except Exception as err:  # the group itself, or reading the model: the error goes back as text
        report["error"] = first_line(err)
        conn.send(report)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _shard_hint(report: dict) -> str | None:
    """The first thing wrong with what one rank's ``shard`` made of the model."""
    layers, root = report["layers"], report["root"]
    if report["default_mesh"]:
        return (
            "a fully_shard call had no mesh=: its default mesh picks CUDA whenever CUDA is present, even for CPU "
            "processes; make mesh = init_device_mesh(device.type, (world_size,)) and pass mesh=mesh to every call"
        )
    if report["error"]:
        if root and not any(layers):
            return (
                f"{report['error']}: the whole model was sharded first; shard each Linear first, then the whole "
                "model, which takes the parameters no layer took"
            )
        return f"shard raised {report['error']}"
    if not any(layers) and not root:
        return "nothing is sharded: call fully_shard(layer, mesh=mesh) on each nn.Linear, then fully_shard(model, ...)"
    if not all(layers):
        return (
            "fully_shard each nn.Linear before the whole model: sharded as one piece, every layer's weights are "
            "gathered at once, and the memory a rank needs at its peak is the whole model's"
        )
    if not root:
        return "the layers are sharded but not the model: end with fully_shard(model, mesh=mesh)"
    if report["meshes"] != ["cpu"]:
        return f"the parameters sit on a {report['meshes']} mesh; name the mesh with device.type (here 'cpu')"
    if not report["returned_model"]:
        return "return the model you sharded (fully_shard changes it in place and returns it)"
    first = [(rows + SHARD_WORLD - 1) // SHARD_WORLD for rows in report["full_rows"]]  # rank 0's rows of each
    expected = first if report["rank"] == 0 else [rows - f for rows, f in zip(report["full_rows"], first, strict=True)]
    if report["local_rows"] != expected:
        return (
            f"each rank should hold about 1/{SHARD_WORLD} of each parameter's rows; it holds {report['local_rows']} "
            f"of {report['full_rows']}: the mesh spans every rank, (world_size,)"
        )
    if report.get("output_gap", 1.0) > 1e-6:
        return f"the sharded model's output differs from the model's by {report['output_gap']:.1e}"
    return None


@exercise("14_fully_shard", "shard a model with fully_shard, each layer and then the root", function=True)
def check_fully_shard(shard: Callable | None) -> str | None:
    """``shard(model, device)``, called on every rank of a process group, applies fully_shard to each nn.Linear of the
    Sequential ``model`` and then to the model itself, all on one named mesh over every rank, and returns the model.
    Run in two forked CPU processes (gloo)."""
    import tempfile
    from pathlib import Path

    import torch._dynamo  # noqa: F401  before any process group (helpers.distributed.leaving_cleanly says why)

    with tempfile.TemporaryDirectory() as folder:
        store = str(Path(folder) / "store")
        reports = ranks_in_processes(
            _shard_rank,
            lambda r: (shard, r, store),
            SHARD_WORLD,
            timeout=90,
            stuck="does every rank call fully_shard on the same modules?",
        )
    if isinstance(reports, str):
        return reports
    for rank, report in enumerate(reports):
        hint = _shard_hint(report)
        if hint:
            return hint if rank == 0 else f"rank {rank}: {hint}"
    return None


@exercise("14_rank_bytes", "bytes per rank for {parameters:,} float32 parameters with Adam on {ranks} ranks")
def check_rank_bytes(ddp_bytes: int | None, fsdp_bytes: int | None, parameters: int, ranks: int) -> str | None:
    """What each rank holds of a model's float32 parameters, their gradients and Adam's two state tensors (exp_avg and
    exp_avg_sq), under DDP (all of it) and under FSDP (1/ranks of it); activations and buffers left out."""
    for name, value in (("ddp_bytes", ddp_bytes), ("fsdp_bytes", fsdp_bytes)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"expected a number for {name}, got {type(value).__name__}"
    per_parameter = {
        4: "the parameters alone",
        8: "parameters and gradients, without Adam's state",
        12: "parameters, gradients and one Adam tensor: Adam keeps two per parameter (exp_avg, exp_avg_sq)",
        16: None,
    }
    ddp_right = 16 * parameters
    if ddp_bytes != ddp_right:
        for n, what in per_parameter.items():
            if what and ddp_bytes == n * parameters:
                return f"ddp_bytes counts {what}: 4 bytes each of parameters, gradients, exp_avg and exp_avg_sq"
        if ddp_bytes == ddp_right // ranks:
            return "that is FSDP's figure: under DDP every rank holds the whole of all four"
        return f"ddp_bytes: {ddp_bytes:,} is not 4 bytes times 4 tensors' worth of {parameters:,} parameters"
    if fsdp_bytes == ddp_bytes:
        return "fsdp_bytes equals DDP's: FSDP splits all four across the ranks"
    if fsdp_bytes in (4 * parameters / ranks + 12 * parameters, 4 * parameters // ranks + 12 * parameters):
        return "FSDP shards the gradients and the optimizer state too, not only the parameters"
    if fsdp_bytes != ddp_right / ranks:
        return f"fsdp_bytes: each of the {ranks} ranks holds 1/{ranks} of everything DDP holds on each rank"
    return None
