"""Lesson 16's exercise checkers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from exercises.core import exercise, first_line, ranks_in_processes

SAVE_RANKS, LOAD_RANKS = 2, 3
"""The DCP exercise saves from two processes and loads into three: only a checkpoint that can be resharded passes."""


COLLECTIVE = " (dcp.save and dcp.load are collectives: every rank calls them, each with the state dicts of its shards)"


def _without_source(message: str) -> str:
    """An error message without the C++ source path gloo puts in front of it."""
    import re

    return re.sub(r"\[/[^\]]*\] ", "", message)


def _sharded_problem(seed: int) -> tuple[torch.nn.Sequential, torch.optim.Optimizer]:
    """The exercise's model, three linear layers built from ``seed``, each sharded and then the whole over every
    process of the group, with an AdamW optimizer on its shards."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = torch.nn.Sequential(
            torch.nn.Linear(8, 6), torch.nn.ReLU(), torch.nn.Linear(6, 6), torch.nn.ReLU(), torch.nn.Linear(6, 3)
        )
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, torch.optim.AdamW(model.parameters(), lr=0.01)


def _full_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """The model's weights and the optimizer's state, whole, on every rank (a collective)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    weights, optim = get_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True))
    return {"model": weights, "optim": optim.get("state", {})}


def _as_bytes(state: dict) -> bytes:
    import io

    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def _from_bytes(data: bytes) -> dict:
    import io

    return torch.load(io.BytesIO(data), weights_only=True)


def _dcp_rank(task: str, answer: Callable, rank: int, world: int, store: str, folder: str, conn: Any) -> None:
    """One rank of check_dcp_reshard, in a process of its own: join a gloo group of ``world``; for ``task`` "save",
    train the exercise's sharded model one step and call ``answer(model, optimizer, folder)``; for "load", build it
    from another seed and call ``answer`` to load it back. Rank 0 sends the whole weights and optimizer state."""
    import os
    import sys
    from datetime import timedelta

    import torch.distributed as dist

    torch.set_num_threads(1)
    sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115 (the process's own, closed at exit)
    os.dup2(sys.stdout.fileno(), 1)  # and what gloo's C++ code writes (torch 2.8 greets each peer there)
    os.dup2(sys.stdout.fileno(), 2)
    report: dict[str, Any] = {"rank": rank, "error": None}
    try:
        timeout = timedelta(seconds=15)  # a rank that skips a collective: an error, not a hang
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world, timeout=timeout)
        model, optimizer = _sharded_problem(0 if task == "save" else 1)
        if task == "save":
            torch.manual_seed(2)
            X, y = torch.randn(5, 8), torch.randint(0, 3, (5,))
            torch.nn.functional.cross_entropy(model(X), y).backward()
            optimizer.step()
        try:
            answer(model, optimizer, folder)
        except Exception as err:  # the learner's code: the error goes back as text
            report["error"] = first_line(err)
        dist.barrier()
        state = _full_state(model, optimizer)  # every rank takes part in gathering it
        report["state"] = _as_bytes(state) if rank == 0 else None  # tensors through a pipe would need this process
        conn.send(report)
    except Exception as err:  # the group itself, or reading the model: the error goes back as text
        report["error"] = report["error"] or first_line(err)
        conn.send(report)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _gap(saved: dict, loaded: dict) -> float:
    """The largest difference between two nested dicts of tensors with the same keys; a missing one counts as inf."""
    from lessons.lesson_16 import largest_state_difference

    return largest_state_difference(saved, loaded)


def _saved_keys(folder: Path) -> list[str] | None:
    """The keys a DCP checkpoint in ``folder`` holds, or None when there is none (no ``.metadata``)."""
    if not (folder / ".metadata").is_file():
        return None
    from torch.distributed.checkpoint import FileSystemReader

    return list(FileSystemReader(str(folder)).read_metadata().state_dict_metadata)


def _in_ranks(task: str, answer: Callable, world: int, folder: Path) -> list | str:
    store = str(folder.parent / f"store_{task}")
    return ranks_in_processes(
        _dcp_rank,
        lambda r: (task, answer, r, world, store, str(folder)),
        world,
        timeout=90,
        stuck=f"does every rank call {task} and every collective in it (dcp.{task} is one)?",
        backward=True,
        spawned_timeout=150,
    )


@exercise("16_dcp_reshard", "a DCP checkpoint saved by 2 processes and loaded by 3", answers=2, function=True)
def check_dcp_reshard(save: Callable | None, load: Callable | None) -> str | None:
    """``save(model, optimizer, path)`` on every rank of 2 processes writes the sharded model and its optimizer's state
    to the folder ``path``; ``load(model, optimizer, path)`` on every rank of 3 processes puts both back into a model
    built from other weights, sharded over 3. Both models are three linear layers under fully_shard, with AdamW."""
    import tempfile

    import torch._dynamo  # noqa: F401  before any process group (helpers.distributed.leaving_cleanly says why)

    if not callable(load):
        return f"load should be a function, got {type(load).__name__}"
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary) / "checkpoint"
        saved = _in_ranks("save", save, SAVE_RANKS, folder)
        if isinstance(saved, str):
            return f"save: {saved}"
        errors = [r["error"] for r in saved if r["error"]]
        if errors:
            return f"save raised {_without_source(errors[0])}{COLLECTIVE}"
        keys = _saved_keys(folder)
        if keys is None:
            found = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
            return (
                f"save wrote no DCP checkpoint into path (files: {found or 'none'}; DCP writes .metadata and one "
                "file per rank). torch.save writes only what the calling process holds, one shard of each "
                "parameter; call dcp.save(state, checkpoint_id=path) on every rank"
            )
        if not any("exp_avg" in key for key in keys):
            return (
                "the checkpoint holds no optimizer state (AdamW's exp_avg is not in it): save the model's and the "
                "optimizer's state together, from get_state_dict(model, optimizer), or training resumes without it"
            )
        loaded = _in_ranks("load", load, LOAD_RANKS, folder)
    if isinstance(loaded, str):
        return f"load: {loaded}"
    errors = [r["error"] for r in loaded if r["error"]]
    if errors:
        return f"load, in {LOAD_RANKS} processes, raised {_without_source(errors[0])}{COLLECTIVE}"
    before, after = _from_bytes(saved[0]["state"]), _from_bytes(loaded[0]["state"])
    model_gap, optim_gap = _gap(before["model"], after["model"]), _gap(before["optim"], after["optim"])
    if model_gap > 0:
        return (
            f"the loaded weights differ from the saved ones by up to {model_gap:.3g}: dcp.load fills the tensors of "
            "the state dict you pass it, in place; pass model and optimizer state dicts from get_state_dict, and put "
            "them back with set_state_dict"
        )
    if optim_gap > 0:
        return (
            f"the weights came back, the optimizer's state did not (it differs by up to {optim_gap:.3g}): load it "
            "too, into the dicts get_state_dict(model, optimizer) returns (an optimizer's own state_dict() is keyed "
            "by numbers and empty before its first step), and put both back with set_state_dict(model, optimizer, ...)"
        )
    return None


def _export_rank(export: Callable, rank: int, world: int, store: str, path: str, conn: Any) -> None:
    """One rank of check_full_export, in a process of its own: join a gloo group of ``world``, shard the exercise's
    model, call ``export(model, path)``; rank 0 sends a batch and the sharded model's outputs for it."""
    import os
    import sys
    from datetime import timedelta

    import torch.distributed as dist

    torch.set_num_threads(1)
    sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115 (the process's own, closed at exit)
    os.dup2(sys.stdout.fileno(), 1)
    os.dup2(sys.stdout.fileno(), 2)
    report: dict[str, Any] = {"rank": rank, "error": None, "sample": None}
    try:
        timeout = timedelta(seconds=15)  # a rank that skips a collective: an error, not a hang
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world, timeout=timeout)
        model, _ = _sharded_problem(0)
        torch.manual_seed(3)
        X = torch.randn(4, 8)
        with torch.no_grad():
            outputs = model(X)  # every rank takes part
        try:
            export(model, path)
        except Exception as err:  # the learner's code: the error goes back as text
            report["error"] = first_line(err)
        dist.barrier()
        report["sample"] = _as_bytes({"X": X, "outputs": outputs}) if rank == 0 else None
        conn.send(report)
    except Exception as err:  # the group itself: the error goes back as text
        report["error"] = report["error"] or first_line(err)
        conn.send(report)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


@exercise("16_full_export", "a full copy of a sharded model, loaded into a plain one", function=True)
def check_full_export(export: Callable | None) -> str | None:
    """``export(model, path)``, called on every rank of 2 processes with the exercise's sharded model, writes one file,
    ``path``, that ``torch.load(path, weights_only=True)`` reads into a plain, unsharded model of the same layers, which
    then gives the sharded model's outputs."""
    import tempfile

    import torch._dynamo  # noqa: F401  before any process group (helpers.distributed.leaving_cleanly says why)

    with tempfile.TemporaryDirectory() as temporary:
        path = Path(temporary) / "model.pt"
        store = str(Path(temporary) / "store")
        reports = ranks_in_processes(
            _export_rank,
            lambda r: (export, r, SAVE_RANKS, store, str(path)),
            SAVE_RANKS,
            timeout=90,
            stuck="does every rank call get_model_state_dict? It gathers the shards: a collective",
            spawned_timeout=150,
        )
        if isinstance(reports, str):
            return reports
        errors = [r["error"] for r in reports if r["error"]]
        if errors:
            return (
                f"export raised {_without_source(errors[0])}: get_model_state_dict(model, options=...) gathers every "
                "shard, a collective that every rank calls; only the torch.save is rank 0's"
            )
        if not path.is_file():
            return "export wrote no file at path: rank 0 saves the full state dict with torch.save(state, path)"
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as err:
            return f"torch.load(path, weights_only=True) raised {first_line(err)}: save a dict of plain tensors"
    with torch.random.fork_rng(devices=[]):
        plain = torch.nn.Sequential(
            torch.nn.Linear(8, 6), torch.nn.ReLU(), torch.nn.Linear(6, 6), torch.nn.ReLU(), torch.nn.Linear(6, 3)
        )
    if isinstance(state, dict) and any(hasattr(v, "to_local") for v in state.values()):
        return (
            "the file holds DTensors, each with rank 0's rows only: ask get_model_state_dict for the full state dict, "
            "StateDictOptions(full_state_dict=True, cpu_offload=True)"
        )
    expected = {k: tuple(v.shape) for k, v in plain.state_dict().items()}
    found = (
        {k: tuple(v.shape) for k, v in state.items() if isinstance(v, torch.Tensor)} if isinstance(state, dict) else {}
    )
    cut = [k for k in expected if k in found and found[k] != expected[k]]
    if cut:
        return (
            f"the file's {cut[0]} has shape {found[cut[0]]}, the model's {expected[cut[0]]}: that is rank 0's shard "
            "alone; gather every rank's with get_model_state_dict and StateDictOptions(full_state_dict=True, ...)"
        )
    try:
        plain.load_state_dict(state)
    except Exception as err:
        return f"a plain model's load_state_dict refused the file: {first_line(err)}"
    sample = _from_bytes(reports[0]["sample"])
    with torch.no_grad():
        gap = (plain(sample["X"]) - sample["outputs"]).abs().max().item()
    if gap > 1e-6:
        return f"the plain model's outputs differ from the sharded model's by {gap:.3g}"
    return None
