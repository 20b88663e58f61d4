"""Lesson 13's launch report: what it prints for a group that failed to restart, which the committed run may not show
(whether the restart with the default settings fails depends on timing)."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

from helpers import distributed, nodes
from helpers.checkpoints import load_checkpoint
from lessons import lesson_13 as elastic_train

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "13_surviving_a_crash.ipynb"

# torchrun's failure report as torch 2.8 wrote it when a restarted worker could not reach its peer (paths shortened)
ROOT_CAUSE = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
lessons.lesson_13 FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-26_08:36:55
  host      : localhost
  rank      : 1 (local_rank: 0)
  exitcode  : 1 (pid: 22438)
  error_file: /tmp/torchelastic_x/attempt_1/0/error.json
  traceback : Traceback (most recent call last):
  RuntimeError: Gloo connectFullMesh failed with [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:152] timed \
out connecting: SO_ERROR: Connection refused, remote=[127.0.0.1]:46980$1

============================================================
"""


@pytest.fixture(scope="module")
def report() -> Callable:
    """The lesson's ``report``, from its code cell (the cell's launch left out)."""
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    source = next("".join(c["source"]) for c in nb["cells"] if "def report(" in "".join(c["source"]))
    namespace = {"re": re, "subprocess": subprocess, "distributed": distributed, "nodes": nodes, "folder": Path()}
    exec(source.split('print("finished:"')[0], namespace)
    return namespace["report"]


def test_a_hung_agent_and_torchruns_root_cause_are_named(report, capsys: pytest.CaptureFixture[str]) -> None:
    said = "[node 0, local rank 0] rank 0 of 2 on cpu, group's store at localhost:4000\n"
    hung = subprocess.TimeoutExpired(["torchrun"], 90, output=said, stderr="")
    failed = subprocess.CompletedProcess(["torchrun"], 1, "[rank 1] dies at step 12 (SIGKILL)\n", ROOT_CAUSE)
    assert report([hung, failed]) is False
    out = capsys.readouterr().out
    assert "the group's store, attempt by attempt: localhost:4000" in out
    assert "agent 0: still running after 90 s, stopped" in out
    ended = "agent 1: exit code 1, ChildFailedError: its workers failed again, the last with no restart left; it ended"
    assert ended + " the job\n    torchrun's report: rank: 1 (local_rank: 0)" in out
    assert "torchrun's report: RuntimeError: Gloo connectFullMesh failed with timed out connecting" in out
    refused = (
        "in the workers' errors: Gloo connectFullMesh failed with timed out connecting: SO_ERROR: Connection refused"
    )
    assert refused in out
    assert "/pytorch/third_party" not in out  # the source paths are left out


def test_a_group_that_finished(report, capsys: pytest.CaptureFixture[str]) -> None:
    done = [subprocess.CompletedProcess(["torchrun"], 0, "[rank 0] finished 24 steps in attempt 1\n", "")] * 2
    assert report(done) is True
    out = capsys.readouterr().out
    assert "[rank 0] finished 24 steps" in out and "agent 1: exit code 0" in out


class StandInGpu:
    """torch.cuda's random-state functions for one GPU that is not there: each GPU's generator is a byte tensor, and
    every call is recorded."""

    def __init__(self) -> None:
        self.states: dict[int, torch.Tensor] = {}
        self.calls: list[tuple[str, int]] = []

    def get_rng_state(self, device) -> torch.Tensor:
        index = torch.device(device).index
        self.calls.append(("get", index))
        return self.states.setdefault(index, torch.full((8,), index, dtype=torch.uint8)).clone()

    def set_rng_state(self, state: torch.Tensor, device) -> None:
        index = torch.device(device).index
        assert state.device.type == "cpu", "the generator takes a CPU byte tensor"
        self.calls.append(("set", index))
        self.states[index] = state.clone()


@pytest.fixture
def group() -> Iterator[None]:
    """A process group of one in this process, for elastic_train.checkpoint's collectives."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _training() -> tuple[torch.nn.Module, torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return model, optimizer, torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=10)


@pytest.mark.usefixtures("group")
def test_a_resumed_rank_draws_the_numbers_it_would_have_drawn_on_the_cpu(tmp_path: Path) -> None:
    torch.manual_seed(5)
    model, optimizer, schedule = _training()
    elastic_train.checkpoint(tmp_path, SimpleNamespace(module=model), optimizer, schedule, 8, 2, 3, torch.device("cpu"))
    expected = torch.rand(4)  # what the run that never stopped draws next
    torch.rand(100)  # the generator moves on, as in a crashed run
    state = load_checkpoint(tmp_path / elastic_train.CHECKPOINT, map_location="cpu")
    assert set(state["rng"][0]) == {"cpu"}
    assert elastic_train.resume(state, *_training(), 0, torch.device("cpu")) == (8, 2, 3)
    assert torch.equal(torch.rand(4), expected)


@pytest.mark.usefixtures("group")
def test_a_rank_on_a_gpu_saves_and_restores_its_gpus_generator(tmp_path: Path, monkeypatch) -> None:
    gpu = StandInGpu()
    monkeypatch.setattr(torch.cuda, "get_rng_state", gpu.get_rng_state)
    monkeypatch.setattr(torch.cuda, "set_rng_state", gpu.set_rng_state)
    device = torch.device("cuda", 1)
    saved = gpu.get_rng_state(device)
    gpu.calls.clear()
    model, optimizer, schedule = _training()
    elastic_train.checkpoint(tmp_path, SimpleNamespace(module=model), optimizer, schedule, 8, 2, 3, device)
    assert gpu.calls == [("get", 1)]  # the rank's own GPU, not GPU 0
    state = load_checkpoint(tmp_path / elastic_train.CHECKPOINT, map_location="cpu")
    assert torch.equal(state["rng"][0]["cuda"], saved)
    gpu.states[1] = torch.zeros(8, dtype=torch.uint8)  # the GPU's generator moved on before the crash
    assert elastic_train.resume(state, *_training(), 0, device) == (8, 2, 3)
    assert gpu.calls == [("get", 1), ("set", 1)]
    assert torch.equal(gpu.states[1], saved)
