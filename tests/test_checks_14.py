"""Lesson 14 checkers: reference solutions pass, wrong answers do not, and every 14_ checker is covered."""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from exercises.checks import CHECKERS

COVERED = {"14_fully_shard", "14_meta_build", "14_rank_bytes"}


def test_every_lesson_14_checker_is_covered() -> None:
    assert {k for k in CHECKERS if k.startswith("14_")} == COVERED


def test_rank_bytes() -> None:
    check = CHECKERS["14_rank_bytes"]
    p, n = 1_000_000_000, 8
    assert check(16 * p, 2 * p, p, n)
    assert check(16 * p, 16 * p / n, p, n)  # a float from a division is the same number
    assert not check(None, None, p, n)  # the untouched cell
    assert not check(4 * p, 4 * p // n, p, n)  # the parameters alone
    assert not check(8 * p, p, p, n)  # no optimizer state
    assert not check(12 * p, 12 * p // n, p, n)  # one Adam tensor, not two
    assert not check(16 * p, 16 * p, p, n)  # FSDP as if it replicated
    assert not check(16 * p, 4 * p // n + 12 * p, p, n)  # only the parameters sharded
    assert not check(2 * p, 2 * p, p, n)  # FSDP's figure for DDP's
    assert not check(20 * p, 20 * p // n, p, n)  # DDP's buckets counted apart from the gradients they are
    assert not check(16 * p, 2 * p + 1, p, n)
    assert not check(True, 2 * p, p, n)


def _mesh(device) -> object:
    return init_device_mesh(device.type, (dist.get_world_size(),))


def _layers(model: nn.Module) -> list[nn.Module]:
    return [m for m in model if isinstance(m, nn.Linear)]


def reference(model, device):
    mesh = _mesh(device)
    for layer in _layers(model):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def untouched(model, device):  # the cell as given
    mesh = None
    linears = []
    for layer in linears:
        fully_shard(layer, mesh=mesh)
    return model


def no_mesh(model, device):  # the layers filled in, the mesh left at None
    for layer in _layers(model):
        fully_shard(layer, mesh=None)
    fully_shard(model, mesh=None)
    return model


def default_mesh(model, device):
    for layer in _layers(model):
        fully_shard(layer)
    fully_shard(model)
    return model


def root_first(model, device):
    mesh = _mesh(device)
    fully_shard(model, mesh=mesh)
    for layer in _layers(model):
        fully_shard(layer, mesh=mesh)
    return model


def root_only(model, device):
    fully_shard(model, mesh=_mesh(device))
    return model


def layers_only(model, device):
    mesh = _mesh(device)
    for layer in _layers(model):
        fully_shard(layer, mesh=mesh)
    return model


def mesh_of_one(model, device):
    mesh = init_device_mesh(device.type, (1,))
    for layer in _layers(model):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def cpu_mesh_of_two(model, device):  # the mesh written for the lesson's machine: two CPU processes
    mesh = init_device_mesh("cpu", (2,))
    for layer in _layers(model):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def cpu_mesh(model, device):  # the world size asked for, the device type typed in
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for layer in _layers(model):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def two_processes(model, device):  # the device type asked for, the world size typed in
    mesh = init_device_mesh(device.type, (2,))
    for layer in _layers(model):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def layers_without_mesh(model, device):  # the root on the mesh, the layers on fully_shard's default one
    for layer in _layers(model):
        fully_shard(layer)
    fully_shard(model, mesh=_mesh(device))
    return model


def returns_nothing(model, device):
    reference(model, device)


def raises(model, device):
    raise ValueError("not written yet")


def written_otherwise(model, device):  # other names and calls for the same sharding
    import torch.distributed.device_mesh as device_mesh
    from torch.distributed import get_world_size

    mesh = device_mesh.init_device_mesh(device_type=device.type, mesh_shape=(get_world_size(),), mesh_dim_names=("dp",))
    for module in model.modules():
        if type(module) is nn.Linear:
            fully_shard(module, mesh=mesh, reshard_after_forward=True)
    return fully_shard(model, mesh=mesh)


def test_fully_shard_reference_passes(capsys: pytest.CaptureFixture[str]) -> None:
    assert CHECKERS["14_fully_shard"](reference)
    assert CHECKERS["14_fully_shard"](written_otherwise)
    assert capsys.readouterr().out.count("[pass]") == 2


@pytest.mark.parametrize(
    ("wrong", "hint"),
    [
        (cpu_mesh_of_two, "3 processes given torch.device('meta')"),
        (cpu_mesh, "the parameters sit on a ['cpu'] mesh, and the device given was 'meta'"),
        (two_processes, "3 processes given torch.device('meta')"),
        (layers_without_mesh, "pass mesh=mesh to every fully_shard call"),
        (default_mesh, "pass mesh=mesh to every fully_shard call"),
    ],
)
def test_fully_shard_needs_the_world_size_and_the_device_type_it_is_given(
    wrong: Callable, hint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each of these passes on two CPU processes; the run on three processes given meta tells them apart."""
    assert not CHECKERS["14_fully_shard"](wrong)
    out = capsys.readouterr().out
    assert "[not yet]" in out and hint in out, out


@pytest.mark.parametrize(
    "wrong",
    [
        untouched,
        no_mesh,
        default_mesh,
        root_first,
        root_only,
        layers_only,
        mesh_of_one,
        returns_nothing,
        raises,
        cpu_mesh,
    ],
)
def test_fully_shard_wrong_answers_fail(wrong: Callable) -> None:
    assert not CHECKERS["14_fully_shard"](wrong)


def test_ranks_are_spawned_on_macos_and_forked_on_linux(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checks' ranks (exercises.core.ranks_in_processes) start as distributed.start_method says."""
    from helpers import distributed

    monkeypatch.setattr(distributed, "fork_keeps_autograd", lambda: True)
    monkeypatch.setattr(sys, "platform", "darwin")
    assert distributed.start_method(backward=False) == "spawn"
    assert distributed.start_method(backward=True) == "spawn"
    monkeypatch.setattr(sys, "platform", "linux")
    assert distributed.start_method(backward=False) == "fork"
    assert distributed.start_method(backward=True) == "fork"
    monkeypatch.setattr(distributed, "fork_keeps_autograd", lambda: False)
    assert distributed.start_method(backward=True) == "spawn"


def test_fully_shard_waits_for_a_function() -> None:
    assert not CHECKERS["14_fully_shard"](None)


def _meta_shard(model: nn.Module, device) -> None:
    mesh = _mesh(device)
    for layer in _layers(model):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)


def _init(model: nn.Module) -> None:
    for layer in _layers(model):
        layer.reset_parameters()


def meta_reference(make_model, device):
    import torch

    with torch.device("meta"):
        model = make_model()
    _meta_shard(model, device)
    model.to_empty(device=device)
    torch.manual_seed(dist.get_rank())  # each rank its own values
    _init(model)
    return model


def meta_untouched(make_model, device):  # the cell as given
    model = None  # replace: make_model() on the meta device
    ...  # shard each nn.Linear, then the model, as in exercise 1
    ...  # memory for this process's shards on device, then initial values of its own
    return model


def built_on_cpu(make_model, device):
    import torch

    model = make_model()
    _meta_shard(model, device)
    torch.manual_seed(dist.get_rank())
    _init(model)
    return model


def left_on_meta(make_model, device):
    import torch

    with torch.device("meta"):
        model = make_model()
    _meta_shard(model, device)
    return model


def never_initialised(make_model, device):
    import torch

    with torch.device("meta"):
        model = make_model()
    _meta_shard(model, device)
    model.to_empty(device=device)
    return model


def one_seed(make_model, device):  # right but for the seed: every rank draws the same shard
    import torch

    with torch.device("meta"):
        model = make_model()
    _meta_shard(model, device)
    model.to_empty(device=device)
    torch.manual_seed(0)
    _init(model)
    return model


def not_sharded(make_model, device):
    import torch

    with torch.device("meta"):
        model = make_model()
    model.to_empty(device=device)
    torch.manual_seed(dist.get_rank())
    _init(model)
    return model


def test_meta_build_reference_passes(capsys: pytest.CaptureFixture[str]) -> None:
    assert CHECKERS["14_meta_build"](meta_reference)
    assert "[pass]" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("wrong", "hint"),
    [
        (meta_untouched, "build returned NoneType"),
        (built_on_cpu, "make_model() ran on ['cpu']"),
        (left_on_meta, "model.to_empty(device=device)"),
        (never_initialised, "call reset_parameters() on each nn.Linear"),
        (one_seed, "both ranks drew the same values"),
        (not_sharded, "shard on the meta device as in exercise 1"),
    ],
)
def test_meta_build_wrong_answers_fail_with_a_hint(
    wrong: Callable, hint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert not CHECKERS["14_meta_build"](wrong)
    out = capsys.readouterr().out
    assert "[not yet]" in out and hint in out, out


def test_meta_build_waits_for_a_function(capsys: pytest.CaptureFixture[str]) -> None:
    assert not CHECKERS["14_meta_build"](None)
    assert "[waiting]" in capsys.readouterr().out
