"""Lesson 16 checker: the reference save and load pass, wrong answers that look right fail with a hint that names
what is wrong, and every 16_ checker is covered."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_state_dict,
)

from exercises.checks import CHECKERS

COVERED = {"16_dcp_reshard", "16_full_export"}
check = CHECKERS["16_dcp_reshard"]


def test_every_lesson_16_checker_is_covered() -> None:
    assert {k for k in CHECKERS if k.startswith("16_")} == COVERED


def save(model, optimizer, path):
    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=path)


def load(model, optimizer, path):
    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optim": optim_state}
    dcp.load(state, checkpoint_id=path)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])


def save_rank0(model, optimizer, path):  # lesson 13's pattern
    os.makedirs(path, exist_ok=True)
    if dist.get_rank() == 0:
        torch.save(model.state_dict(), f"{path}/model.pt")


def load_rank0(model, optimizer, path):
    model.load_state_dict(torch.load(f"{path}/model.pt", weights_only=True))


def save_per_rank(model, optimizer, path):  # every shard saved, but as this world size cut them
    os.makedirs(path, exist_ok=True)
    torch.save({"model": model.state_dict(), "optim": optimizer.state_dict()}, f"{path}/rank{dist.get_rank()}.pt")


def load_per_rank(model, optimizer, path):
    state = torch.load(f"{path}/rank{dist.get_rank()}.pt", weights_only=False)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optim"])


def save_model_only(model, optimizer, path):
    dcp.save({"model": get_model_state_dict(model)}, checkpoint_id=path)


def load_model_only(model, optimizer, path):
    state = {"model": get_model_state_dict(model)}
    dcp.load(state, checkpoint_id=path)
    set_model_state_dict(model, state["model"])


def load_plain_dicts(model, optimizer, path):  # the optimizer's own state_dict: numbered, empty before a step
    state = {"model": model.state_dict(), "optim": optimizer.state_dict()}
    dcp.load(state, checkpoint_id=path)
    optimizer.load_state_dict(state["optim"])


def load_into_copies(model, optimizer, path):  # dcp.load fills the dicts given; these are copies
    model_state, optim_state = get_state_dict(model, optimizer)
    copies = {"model": {k: v.clone() for k, v in model_state.items()}, "optim": optim_state}
    dcp.load(copies, checkpoint_id=path)


def save_on_rank0_only(model, optimizer, path):  # a collective called by one rank
    model_state, optim_state = get_state_dict(model, optimizer)
    if dist.get_rank() == 0:
        dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=path)


def test_reference_passes(capsys: pytest.CaptureFixture[str]) -> None:
    assert check(save, load)
    assert "[pass]" in capsys.readouterr().out


def test_placeholders_wait(capsys: pytest.CaptureFixture[str]) -> None:
    assert not check(None, None)
    assert not check(save, None)
    assert "[waiting]" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("wrong_save", "wrong_load", "hint"),
    [
        (save_rank0, load_rank0, "save wrote no DCP checkpoint into path (files: ['model.pt']"),
        (save_per_rank, load_per_rank, "save wrote no DCP checkpoint into path (files: ['rank0.pt', 'rank1.pt']"),
        (save_model_only, load_model_only, "the checkpoint holds no optimizer state"),
        (save, load_model_only, "the weights came back, the optimizer's state did not"),
        (save, load_plain_dicts, "the weights came back, the optimizer's state did not"),
        (save, load_into_copies, "the loaded weights differ from the saved ones"),
    ],
)
def test_wrong_answers_fail_with_a_hint(
    wrong_save: Callable, wrong_load: Callable, hint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert not check(wrong_save, wrong_load)
    out = capsys.readouterr().out
    assert "[not yet]" in out and hint in out, out


def test_a_save_on_one_rank_fails_as_a_collective(capsys: pytest.CaptureFixture[str]) -> None:
    assert not check(save_on_rank0_only, load)
    out = capsys.readouterr().out
    assert "[not yet]" in out and "dcp.save and dcp.load are collectives" in out, out


def export(model, path):
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if dist.get_rank() == 0:
        torch.save(state, path)


def export_state_dict(model, path):  # lesson 13's pattern: DTensors with rank 0's rows
    if dist.get_rank() == 0:
        torch.save(model.state_dict(), path)


def export_local_shards(model, path):  # plain tensors, but rank 0's rows only
    if dist.get_rank() == 0:
        torch.save({k: v.to_local() for k, v in model.state_dict().items()}, path)


def export_sharded_options(model, path):  # get_model_state_dict without full_state_dict: still DTensors
    state = get_model_state_dict(model)
    if dist.get_rank() == 0:
        torch.save(state, path)


def export_gathered_on_rank0_only(model, path):  # the gathering is a collective
    if dist.get_rank() == 0:
        torch.save(get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)), path)


def export_nothing(model, path):
    get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def test_full_export_reference_passes(capsys: pytest.CaptureFixture[str]) -> None:
    assert CHECKERS["16_full_export"](export)
    assert not CHECKERS["16_full_export"](None)
    out = capsys.readouterr().out
    assert "[pass]" in out and "[waiting]" in out


@pytest.mark.parametrize(
    ("wrong", "hint"),
    [
        (export_state_dict, "the file holds DTensors, each with rank 0's rows only"),
        (export_sharded_options, "the file holds DTensors, each with rank 0's rows only"),
        (export_local_shards, "the file's 0.weight has shape (3, 8), the model's (6, 8): that is rank 0's shard"),
        (export_gathered_on_rank0_only, "a collective that every rank calls"),
        (export_nothing, "export wrote no file at path"),
    ],
)
def test_full_export_wrong_answers_fail_with_a_hint(
    wrong: Callable, hint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert not CHECKERS["16_full_export"](wrong)
    out = capsys.readouterr().out
    assert "[not yet]" in out and hint in out, out
