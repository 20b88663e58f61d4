"""lessons.lesson_06: the "module." prefix DataParallel adds to state-dict keys, the split of a batch over GPUs, the
lesson's figure of step times, and the standard error of child processes, and waiting for children so that a failure
report names the same one every time (lesson 07)."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time
from collections import OrderedDict
from pathlib import Path

import pytest
import torch
from torch import nn

from helpers.distributed import wait_for_exit
from helpers.models import MLP
from lessons.lesson_06 import plot_step_times, replica_split, strip_module_prefix
from lessons.lesson_07 import child_stderr

ROOT = Path(__file__).resolve().parent.parent


def test_step_times_figure_draws_one_labelled_bar_per_setup_in_milliseconds_first_on_top() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ax = plot_step_times({"1 GPU": 0.004, "DataParallel, 2 GPUs": 0.0025}, title="CNN training step")
    try:
        widths = [bar.get_width() for bar in ax.patches]
        assert widths == pytest.approx([4.0, 2.5])
        assert [t.get_text() for t in ax.texts] == ["4.0 ms", "2.5 ms"]
        assert [t.get_text() for t in ax.get_yticklabels()] == ["1 GPU", "DataParallel, 2 GPUs"]
        assert ax.yaxis_inverted() and ax.get_title() == "CNN training step"
        assert ax.get_xlim()[1] == pytest.approx(5.0)  # room for the labels beyond the longest bar
    finally:
        plt.close(ax.figure)


def test_strips_only_a_leading_prefix() -> None:
    state = OrderedDict(
        [("module.fc.weight", 1), ("module.encoder.module.bias", 2), ("head.module.weight", 3), ("modulex.w", 4)]
    )
    assert list(strip_module_prefix(state)) == ["fc.weight", "encoder.module.bias", "head.module.weight", "modulex.w"]


def test_leaves_an_unprefixed_state_dict_alone_and_keeps_values() -> None:
    state = MLP().state_dict()
    stripped = strip_module_prefix(state)
    assert list(stripped) == list(state)
    assert all(stripped[k] is state[k] for k in state)  # the same tensors, not copies


def test_does_not_modify_its_argument() -> None:
    state = OrderedDict([("module.w", torch.zeros(1))])
    strip_module_prefix(state)
    assert list(state) == ["module.w"]


def test_refuses_to_merge_keys() -> None:
    with pytest.raises(ValueError, match="merge"):
        strip_module_prefix({"module.w": 1, "w": 2})


def test_data_parallel_without_gpus_just_calls_the_module() -> None:
    if torch.cuda.is_available():
        pytest.skip("this checks the behaviour on a machine without CUDA")
    torch.manual_seed(0)
    model = MLP()
    wrapped = nn.DataParallel(model)
    assert wrapped.module is model and wrapped.device_ids == []
    X = torch.randn(8, 1, 28, 28)
    assert torch.equal(wrapped(X), model(X))


def test_round_trip_from_data_parallel_into_a_plain_model() -> None:
    torch.manual_seed(0)
    wrapped = nn.DataParallel(MLP())
    state = wrapped.state_dict()
    assert all(k.startswith("module.") for k in state)
    plain = MLP()
    with pytest.raises(RuntimeError, match="Missing key"):
        plain.load_state_dict(state)
    plain.load_state_dict(strip_module_prefix(state))  # strict: every key must match
    for (name, p), q in zip(plain.named_parameters(), wrapped.module.parameters(), strict=True):
        assert torch.equal(p, q.cpu()), name


def _lesson06_data_parallel(gpu_ids: list[int]):
    """Lesson 06's ``data_parallel``, defined from its cell with the lesson's ``gpu_ids``."""
    import nbformat

    nb = nbformat.read(ROOT / "notebooks" / "06_data_parallel.ipynb", as_version=4)
    source = next(c.source for c in nb.cells if c.get("id") == "c10")
    namespace = {"nn": nn, "torch": torch, "gpu_ids": gpu_ids}
    exec(source.split("\n\n\ntorch.manual_seed")[0], namespace)  # the function only, not the cell's calls
    return namespace["data_parallel"]


@pytest.mark.parametrize(
    ("device", "expected"),
    [("cpu", []), ("meta", []), ("cuda:0", [0, 1, 2]), ("cuda:2", [2, 0, 1]), ("cuda:1", [1, 0, 2])],
)
def test_lesson06_lists_every_cuda_gpu_its_own_first_and_none_off_cuda(monkeypatch, device, expected) -> None:
    """Lesson 06's ``gpu_ids`` cell on a faked machine with three CUDA GPUs; the lesson's device always carries its
    index (``lesson.start`` names it: cuda:0, not cuda)."""
    import nbformat

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)
    nb = nbformat.read(ROOT / "notebooks" / "06_data_parallel.ipynb", as_version=4)
    namespace = {"torch": torch, "device": torch.device(device)}
    exec(next(c.source for c in nb.cells if c.get("id") == "c06"), namespace)
    assert namespace["gpu_ids"] == expected


def test_lesson06_keeps_dataparallel_off_the_gpus_when_the_lesson_runs_on_the_cpu(monkeypatch) -> None:
    taken = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a machine with CUDA GPUs
    monkeypatch.setattr(nn.DataParallel, "__init__", lambda self, *a, **k: taken.append(a))  # would take them
    model = MLP()
    wrapper = _lesson06_data_parallel([])(model)  # the lesson runs on the CPU: its gpu_ids are []
    assert taken == [] and isinstance(wrapper, nn.DataParallel) and wrapper.module is model
    assert wrapper.device_ids == [] and next(model.parameters()).device.type == "cpu"
    X = torch.randn(3, 1, 28, 28)
    assert torch.equal(wrapper(X), model(X))  # every call goes straight to the model
    assert all(key.startswith("module.") for key in wrapper.state_dict())


def test_lesson06_wraps_with_the_lessons_gpus(monkeypatch) -> None:
    taken = []
    monkeypatch.setattr(nn.DataParallel, "__init__", lambda self, *a, **k: taken.append(k) or nn.Module.__init__(self))
    _lesson06_data_parallel([0, 1])(MLP())
    assert taken == [{"device_ids": [0, 1], "output_device": 0}]


@pytest.mark.parametrize(
    ("batch", "gpus", "expected"),
    [(8, 2, [4, 4]), (10, 4, [3, 3, 3, 1]), (5, 4, [2, 2, 1]), (3, 8, [1, 1, 1]), (7, 1, [7])],
)
def test_replica_split(batch: int, gpus: int, expected: list[int]) -> None:
    assert replica_split(batch, gpus) == expected


def test_replica_split_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        replica_split(0, 2)


def test_child_stderr_collects_what_a_child_process_writes_to_descriptor_2(capfd) -> None:
    with child_stderr() as lines:
        subprocess.run([sys.executable, "-c", "import sys; print('from the child', file=sys.stderr)"], check=True)
        assert lines == []  # filled when the block ends
    assert lines == ["from the child"]
    print("after the block", file=sys.stderr)
    assert "from the child" not in capfd.readouterr().err


def test_child_stderr_restores_descriptor_2_when_the_block_raises(capfd) -> None:
    with pytest.raises(RuntimeError), child_stderr() as lines:
        os.write(2, b"first\nsecond\n")
        raise RuntimeError("the block failed")
    assert lines == ["first", "second"]
    os.write(2, b"back on the real stderr\n")
    assert "back on the real stderr" in capfd.readouterr().err


def test_wait_for_exit_returns_once_every_child_has_ended() -> None:
    context = multiprocessing.get_context("fork")
    children = [context.Process(target=time.sleep, args=(seconds,)) for seconds in (0.3, 0.0)]
    for child in children:
        child.start()
    wait_for_exit(children, timeout=30)
    assert [child.exitcode for child in children] == [0, 0]


def test_wait_for_exit_stops_children_that_overrun_and_says_so() -> None:
    context = multiprocessing.get_context("fork")
    children = [context.Process(target=time.sleep, args=(seconds,)) for seconds in (0.0, 60.0)]
    for child in children:
        child.start()
    start = time.monotonic()
    with pytest.raises(TimeoutError, match="1 of 2 child processes did not finish within 0.5 s"):
        wait_for_exit(children, timeout=0.5)
    assert time.monotonic() - start < 10
    assert not children[1].is_alive()  # terminated, not left behind


NOTEBOOK_WORKER = """
import torch.multiprocessing as mp
from helpers import distributed

def worker(rank):  # lives in __main__ of `python -c`, which a spawned child cannot import: every child fails alike
    print("hello from rank", rank)

context = mp.start_processes(worker, nprocs=2, join=False, start_method="spawn")
distributed.wait_for_exit(context.processes, timeout=60)
try:
    context.join()
except mp.ProcessExitedException as error:
    print(error)
"""


@pytest.mark.slow
def test_after_waiting_the_spawn_failure_names_process_0_every_time() -> None:
    # Lesson 07's mp.spawn demo: without waiting, the report named process 0 or 1, whichever exit was seen first.
    reports = [
        subprocess.run(
            [sys.executable, "-c", NOTEBOOK_WORKER], capture_output=True, text=True, timeout=120, cwd=ROOT
        ).stdout.strip()
        for _ in range(2)
    ]
    assert reports == ["process 0 terminated with exit code 1"] * 2
