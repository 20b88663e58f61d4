"""Lesson 06 checkers: reference solutions pass, wrong answers do not, and every 06_ checker is covered."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from exercises.checks import CHECKERS
from helpers.models import MLP
from lessons import lesson_06 as parallel

COVERED = {"06_replica_split", "06_unprefixed_state_dict", "06_unwrap", "06_load_wrapped_checkpoint"}


def test_every_lesson_06_checker_is_covered() -> None:
    assert {k for k in CHECKERS if k.startswith("06_")} == COVERED


def test_replica_split() -> None:
    check = CHECKERS["06_replica_split"]
    assert check([2, 2, 2], 6, 4)
    assert check([8, 8, 8, 6], 30, 4)
    assert not check([2, 2, 1, 1], 6, 4)  # an even-looking split, but not what tensor.chunk does
    assert not check([2, 2, 2, 0], 6, 4)  # a GPU with nothing to do gets no replica at all
    assert not check([3, 3], 7, 2)  # rows lost
    assert not check("six", 6, 4)
    assert not check(None, 6, 4)  # waiting, not passed


def test_unprefixed_state_dict() -> None:
    check = CHECKERS["06_unprefixed_state_dict"]
    torch.manual_seed(0)
    wrapped = nn.DataParallel(MLP())
    state = wrapped.state_dict()
    assert check({k.removeprefix("module."): v for k, v in state.items()}, wrapped)
    assert not check(state, wrapped)  # prefix still there
    assert not check({k.replace("module.", "net."): v for k, v in state.items()}, wrapped)
    assert not check({k.removeprefix("module."): torch.zeros_like(v) for k, v in state.items()}, wrapped)
    assert not check(list(state), wrapped)
    assert not check(None, wrapped)


def test_unwrap() -> None:
    check = CHECKERS["06_unwrap"]

    def unwrap(m: nn.Module) -> nn.Module:
        return m.module if isinstance(m, (nn.DataParallel, nn.parallel.DistributedDataParallel)) else m

    assert check(unwrap)
    assert not torch.distributed.is_initialized()  # the checker's one-process group is gone
    tasks = Path("/proc/self/task")
    if tasks.is_dir():  # Linux: and gloo's threads with it, so none can abort the kernel at exit
        assert not [t for t in tasks.iterdir() if "gloo" in (t / "comm").read_text()]
    assert not check(lambda m: m)  # returns the wrapper
    assert not check(lambda m: m.module)  # a plain model has no .module
    assert not check(lambda m: getattr(m, "module", m))  # a child called "module" is not a wrapper
    assert not check(lambda m: m.module if isinstance(m, nn.DataParallel) else m)  # forgets DDP
    assert not check(None)


def test_load_wrapped_checkpoint() -> None:
    check = CHECKERS["06_load_wrapped_checkpoint"]
    device = torch.device("cpu")

    def load_plain(path: Path, device: torch.device) -> nn.Module:
        model = MLP().to(device)
        model.load_state_dict(parallel.strip_module_prefix(torch.load(path, map_location=device, weights_only=True)))
        return model

    def not_stripped(path: Path, device: torch.device) -> nn.Module:
        model = MLP().to(device)
        model.load_state_dict(torch.load(path, map_location=device, weights_only=True))
        return model

    def not_strict(path: Path, device: torch.device) -> nn.Module:
        model = MLP().to(device)
        model.load_state_dict(torch.load(path, map_location=device, weights_only=True), strict=False)
        return model

    assert check(load_plain, device)
    assert not check(not_stripped, device)  # the strict load raises
    assert not check(not_strict, device)  # loads nothing: random weights
    assert not check(lambda path, device: nn.DataParallel(load_plain(path, device)), device)  # still wrapped
    assert not check(None, device)


def _reference(path: Path, device: torch.device) -> nn.Module:
    model = MLP().to(device)
    model.load_state_dict(parallel.strip_module_prefix(torch.load(path, map_location=device, weights_only=True)))
    return model


class OnOneGpu(nn.DataParallel):
    """DataParallel as one visible GPU makes it: the module moved to that GPU (meta stands in for cuda:0 here)."""

    def __init__(self, module: nn.Module, *args, **kwargs) -> None:
        nn.Module.__init__(self)
        self.module, self.device_ids = module.to("meta"), []


def test_load_plain_checker_keeps_its_checkpoint_on_the_cpu_when_dataparallel_would_move_it(monkeypatch) -> None:
    monkeypatch.setattr(nn, "DataParallel", OnOneGpu)
    monkeypatch.setattr(torch.nn.parallel, "DataParallel", OnOneGpu)
    assert CHECKERS["06_load_wrapped_checkpoint"](_reference, torch.device("cpu"))


def test_load_plain_checker_gives_a_verdict_for_weights_it_cannot_read_back(capsys) -> None:
    meta = torch.device("meta")  # a device whose tensors hold no values, like a GPU's seen from a test without one
    assert not CHECKERS["06_load_wrapped_checkpoint"](_reference, meta)
    assert "could not be read back to the CPU" in capsys.readouterr().out


def test_unwrap_keeps_ddps_model_off_the_gpu_that_dataparallel_takes(monkeypatch, capsys) -> None:
    # With one GPU visible, DataParallel moves the model it wraps there; the meta device plays that GPU here.
    original = nn.DataParallel.__init__
    moved = []

    def moving(self, module, *args, **kwargs):
        original(self, module, *args, **kwargs)
        moved.append(module.to("meta"))

    monkeypatch.setattr(nn.DataParallel, "__init__", moving)
    wrappers = (nn.DataParallel, nn.parallel.DistributedDataParallel)
    assert CHECKERS["06_unwrap"](lambda m: m.module if isinstance(m, wrappers) else m)
    assert len(moved) == 1
