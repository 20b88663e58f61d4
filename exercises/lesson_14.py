"""Lesson 14's exercise checkers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from exercises.core import exercise, first_line, ranks_in_processes

SHARD_RUNS = ((2, "cpu"), (3, "meta"))
"""The fully_shard exercise's two runs, each a group of forked processes joined by gloo: two CPU processes, where the
sharded model also runs; then three processes handed a device of another type, ``meta`` (tensors with a shape and no
data), so that an answer passes only with the world size and the device type it is given."""


def _shard_problem(device_type: str) -> tuple[torch.nn.Sequential, torch.Tensor]:
    """The exercise's model, three linear layers with ReLUs between them, built on ``device_type``, and a batch."""
    with torch.random.fork_rng(devices=[]), torch.device(device_type):  # the caller's random state stays as it was
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(8, 6), torch.nn.ReLU(), torch.nn.Linear(6, 6), torch.nn.ReLU(), torch.nn.Linear(6, 3)
        )
        return model, torch.randn(4, 8)


def _meta_as_a_device() -> None:
    """Lets ``meta`` stand for an accelerator in this process: init_device_mesh and fully_shard look up a device type's
    module (``torch.cuda`` for cuda) for its current device; meta has none, so it gets one that answers index 0."""
    import types

    if not hasattr(torch, "meta"):
        module = types.SimpleNamespace(
            current_device=lambda: 0,
            device_count=lambda: 1,
            is_available=lambda: True,
            is_initialized=lambda: True,
            set_device=lambda index: None,
        )
        torch._register_device_module("meta", module)


def _reference_shard(model: torch.nn.Module, device: torch.device) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)


def _shard_rank(shard: Callable, rank: int, world: int, device_type: str, store: str, conn: Any) -> None:
    """One rank of check_fully_shard, in a forked process: join a gloo group of ``world``, call
    ``shard(model, torch.device(device_type))``, send back what it made of the model."""
    import copy
    import os
    import sys
    from datetime import timedelta

    import torch.distributed as dist
    from torch.distributed.fsdp import FSDPModule

    torch.set_num_threads(1)
    sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115 (the process's own, closed at exit)
    os.dup2(sys.stdout.fileno(), 1)  # and what gloo's C++ code writes (torch 2.8 greets each peer there)
    os.dup2(sys.stdout.fileno(), 2)
    report: dict[str, Any] = {"rank": rank, "world": world, "device": device_type, "error": None, "usable": True}
    try:
        timeout = timedelta(seconds=20)  # a rank that skips a collective: an error, not a hang
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world, timeout=timeout)
        device = torch.device(device_type)
        if device_type != "cpu":
            _meta_as_a_device()
            try:  # the checker's own answer first: a torch on which meta cannot stand in skips this run
                _reference_shard(_shard_problem(device_type)[0], device)
            except Exception:  # whatever this torch raises: the run is not used, the learner is not judged by it
                report["usable"] = False
                conn.send(report)
                return
        model, X = _shard_problem(device_type)
        expected = copy.deepcopy(model)(X).detach() if device_type == "cpu" else None
        try:
            returned = shard(model, device)
        except Exception as err:  # the learner's code: the error goes back as text
            report["error"] = first_line(err)
        linears = [m for m in model if isinstance(m, torch.nn.Linear)]
        report["returned_model"] = report["error"] is not None or returned is model
        report["root"] = isinstance(model, FSDPModule)
        report["layers"] = [isinstance(m, FSDPModule) for m in linears]
        report["meshes"] = sorted({p.device_mesh.device_type for p in model.parameters() if hasattr(p, "device_mesh")})
        report["mesh_sizes"] = sorted({p.device_mesh.size() for p in model.parameters() if hasattr(p, "device_mesh")})
        report["local_rows"] = [
            list(p.to_local().shape)[0] if hasattr(p, "to_local") else None for p in model.parameters()
        ]
        report["full_rows"] = [p.shape[0] for p in model.parameters()]
        sharded = report["root"] and all(report["layers"]) and not report["error"]
        if sharded and expected is not None and report["meshes"] == [device_type]:
            report["output_gap"] = (model(X).detach() - expected).abs().max().item()
        conn.send(report)
    except Exception as err:  # the group itself, or reading the model: the error goes back as text
        report["error"] = first_line(err)
        conn.send(report)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _rows(full: int, world: int, rank: int) -> int:
    """The rows of a ``full``-row parameter that rank ``rank`` of ``world`` holds: ``torch.chunk``'s pieces."""
    piece = -(-full // world)
    return max(0, min(piece, full - rank * piece))


def _shard_hint(report: dict) -> str | None:
    """The first thing wrong with what one rank's ``shard`` made of the model."""
    layers, root, world, device_type = report["layers"], report["root"], report["world"], report["device"]
    if report["meshes"] and report["meshes"] != [device_type]:
        return (
            f"the parameters sit on a {report['meshes']} mesh, and the device given was {device_type!r}: make the "
            "mesh with device.type and pass mesh=mesh to every fully_shard call (without mesh=, fully_shard makes "
            "its own on the accelerator it finds, CUDA whenever CUDA is present)"
        )
    if report["error"]:
        if root and not any(layers):
            return (
                f"{report['error']}: the whole model was sharded first; shard each Linear first, then the whole "
                "model, which takes the parameters no layer took"
            )
        if device_type != "cpu" or "cuda" in report["error"].lower():
            return (
                f"shard raised {report['error']}: take the mesh's device type and size from what is given, "
                "init_device_mesh(device.type, (dist.get_world_size(),)), and pass mesh=mesh to every fully_shard "
                "call (without it, fully_shard makes its own mesh on the accelerator it finds)"
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
    if not report["returned_model"]:
        return "return the model you sharded (fully_shard changes it in place and returns it)"
    expected = [_rows(rows, world, report["rank"]) for rows in report["full_rows"]]
    if report["local_rows"] != expected or report["mesh_sizes"] != [world]:
        return (
            f"each of the {world} processes should hold about 1/{world} of each parameter's rows; this one holds "
            f"{report['local_rows']} of {report['full_rows']}: the mesh spans every process, "
            "(dist.get_world_size(),)"
        )
    if report.get("output_gap", 0.0) > 1e-6:
        return f"the sharded model's output differs from the model's by {report['output_gap']:.1e}"
    return None


@exercise("14_fully_shard", "shard a model with fully_shard, each layer and then the root", function=True)
def check_fully_shard(shard: Callable | None) -> str | None:
    """``shard(model, device)``, called on every rank of a process group, applies fully_shard to each nn.Linear of the
    Sequential ``model`` and then to the model itself, all on one mesh over every rank named with ``device.type``, and
    returns the model. Run twice in forked processes joined by gloo (``SHARD_RUNS``): two ranks given the CPU, then
    three given ``meta``, a device type that no answer written for the CPU can match by chance."""
    import tempfile
    from pathlib import Path

    import torch._dynamo  # noqa: F401  before any process group (helpers.distributed.leaving_cleanly says why)

    for world, device_type in SHARD_RUNS:
        with tempfile.TemporaryDirectory() as folder:
            store = str(Path(folder) / "store")
            reports = ranks_in_processes(
                _shard_rank,
                lambda r, world=world, device_type=device_type, store=store: (shard, r, world, device_type, store),
                world,
                timeout=90,
                stuck="does every rank call fully_shard on the same modules?",
            )
        if isinstance(reports, str):
            return reports
        if not all(report["usable"] for report in reports):
            continue  # this torch cannot stand meta in for a device; the CPU run has judged the answer
        for rank, report in enumerate(reports):
            hint = _shard_hint(report)
            if hint:
                return f"{world} processes given torch.device({device_type!r}), rank {rank}: {hint}"
    return None


@exercise("14_rank_bytes", "bytes per rank for {parameters:,} float32 parameters with Adam on {ranks} ranks")
def check_rank_bytes(ddp_bytes: int | None, fsdp_bytes: int | None, parameters: int, ranks: int) -> str | None:
    """What each rank holds of a model's float32 parameters, their gradients and Adam's two state tensors (exp_avg and
    exp_avg_sq), under DDP with gradient_as_bucket_view=True (all of it; its buckets are the gradients) and under FSDP
    (1/ranks of it); activations and buffers left out."""
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
        if ddp_bytes == 20 * parameters:
            return (
                "that counts DDP's gradient buckets as well; with gradient_as_bucket_view=True the gradients are views "
                "into the buckets, so they are counted once"
            )
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


def _meta_rank(build: Callable, rank: int, world: int, store: str, conn: Any) -> None:
    """One rank of check_meta_build, in a forked process: join a gloo group of ``world``, call
    ``build(make_model, torch.device("cpu"))``, send back how the model was built and what each shard holds."""
    import os
    import sys
    from datetime import timedelta

    import torch.distributed as dist
    from torch.distributed.fsdp import FSDPModule

    torch.set_num_threads(1)
    sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115 (the process's own, closed at exit)
    os.dup2(sys.stdout.fileno(), 1)  # and what gloo's C++ code writes
    os.dup2(sys.stdout.fileno(), 2)
    report: dict[str, Any] = {"rank": rank, "error": None, "built_on": []}

    def make_model() -> torch.nn.Sequential:
        model = torch.nn.Sequential(
            torch.nn.Linear(8, 6), torch.nn.ReLU(), torch.nn.Linear(6, 6), torch.nn.ReLU(), torch.nn.Linear(6, 4)
        )
        report["built_on"].append(model[0].weight.device.type)
        return model

    try:
        timeout = timedelta(seconds=20)  # a rank that skips a collective: an error, not a hang
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world, timeout=timeout)
        try:
            model = build(make_model, torch.device("cpu"))
        except Exception as err:  # the learner's code: the error goes back as text
            report["error"] = f"build raised {first_line(err)}"
            conn.send(report)
            return
        if not isinstance(model, torch.nn.Module):
            report["error"] = f"build returned {type(model).__name__}, not the model"
            conn.send(report)
            return
        linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
        report["root"] = isinstance(model, FSDPModule)
        report["layers"] = [isinstance(m, FSDPModule) for m in linears]
        shards = [p.to_local() if hasattr(p, "to_local") else p for p in model.parameters()]
        report["devices"] = sorted({s.device.type for s in shards})
        if report["devices"] == ["cpu"]:
            bounds = [1 / layer.in_features**0.5 for layer in linears]  # nn.Linear's own init: U(-bound, bound)
            weights = [
                layer.weight.to_local() if hasattr(layer.weight, "to_local") else layer.weight for layer in linears
            ]
            report["initialised"] = all(
                w.numel() > 1 and bool(w.abs().max() <= b + 1e-6) and bool(w.std() > 0.2 * b)
                for w, b in zip(weights, bounds, strict=True)
            )
            report["first_shard"] = weights[0].detach().tolist()
        conn.send(report)
    except Exception as err:  # the group itself, or reading the model: the error goes back as text
        report["error"] = first_line(err)
        conn.send(report)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _meta_hint(report: dict) -> str | None:
    """The first thing wrong with what one rank's ``build`` made."""
    if report["error"]:
        return report["error"]
    if not report["built_on"]:
        return "build the model by calling make_model(), inside with torch.device('meta'):"
    if report["built_on"] != ["meta"]:
        return (
            f"make_model() ran on {report['built_on']}: every process held the whole model before sharding it; "
            "call it inside with torch.device('meta'):, where tensors get a shape and no memory"
        )
    if not report["root"] or not all(report["layers"]):
        return (
            "shard on the meta device as in exercise 1: fully_shard(layer, mesh=mesh) on each nn.Linear, then "
            "fully_shard(model, mesh=mesh), on a mesh init_device_mesh(device.type, (dist.get_world_size(),))"
        )
    if "meta" in report["devices"]:
        return (
            "the shards are still on the meta device, with no data: after fully_shard, "
            "model.to_empty(device=device) gives each process memory for its own shards"
        )
    if report["devices"] != ["cpu"]:
        return f"the shards ended on {report['devices']}: pass the device given to to_empty"
    if not report["initialised"]:
        return (
            "the shards hold whatever to_empty's memory held, not initial weights: call reset_parameters() on each "
            "nn.Linear after to_empty"
        )
    return None


@exercise("14_meta_build", "build on the meta device, shard, to_empty and initialise", function=True)
def check_meta_build(build: Callable | None) -> str | None:
    """``build(make_model, device)``, called on every rank, builds ``make_model()`` on the meta device, shards each
    nn.Linear and then the model on one mesh over every rank, allocates the shards on ``device`` (``to_empty``) and
    initialises them so that each rank's shard gets values of its own. Run in two forked CPU processes joined by
    gloo; the ranks' shards of the first weight are compared here."""
    import tempfile
    from pathlib import Path

    import torch._dynamo  # noqa: F401  before any process group (helpers.distributed.leaving_cleanly says why)

    world = 2
    with tempfile.TemporaryDirectory() as folder:
        store = str(Path(folder) / "store")
        reports = ranks_in_processes(
            _meta_rank,
            lambda r: (build, r, world, store),
            world,
            timeout=90,
            stuck="does every rank call fully_shard on the same modules?",
        )
    if isinstance(reports, str):
        return reports
    for rank, report in enumerate(reports):
        hint = _meta_hint(report)
        if hint:
            return f"rank {rank}: {hint}"
    if reports[0]["first_shard"] == reports[1]["first_shard"]:
        return (
            "both ranks drew the same values for their shards of the first weight, so the whole weight is one block "
            "of rows repeated: seed each rank differently before reset_parameters, torch.manual_seed(seed + rank)"
        )
    return None
