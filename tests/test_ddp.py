"""Lesson 07's ddp_train under torchrun with two gloo (CPU) processes, through its harness (equivalence,
repeated launches, a failing rank), and alone as one process; the printed script holds DDP and nothing of the harness;
the later lessons' scripts join their groups through its setup; its single-process twin helpers.single_train; the
lesson's own code in lessons/lesson_07 (the unused-parameter demonstration, the rank figure)."""

from __future__ import annotations

import argparse
import inspect
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch import nn

from helpers import ddp_check, distributed, single_train
from helpers.checkpoints import load_checkpoint
from helpers.data import DatasetUnavailableError
from helpers.models import build_model
from lessons import lesson_07
from lessons.lesson_07 import ddp_train
from lessons.lesson_07 import harness as ddp_train_harness

QUICK = ["--device", "cpu", "--epochs", "1", "--synthetic-size", "64", "--batch-size", "16"]
"""A launch that does every collective the real run does (DDP's broadcast, all-reduces, barrier) in little time."""
ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_TEST_S = 20.0
"""Long enough for torchrun to start two tiny workers on a busy machine, short enough to keep the test quick."""


def _report(result) -> str:
    return f"exit code {result.returncode}\n--- stdout\n{result.stdout[-3000:]}\n--- stderr\n{result.stderr[-3000:]}"


@pytest.mark.slow
def test_two_processes_equal_one_process_on_the_global_batch(tmp_path: Path) -> None:
    args = ["--device", "cpu", "--epochs", "2", "--synthetic-size", "256", "--batch-size", "16", "--check-equivalence"]
    result = distributed.torchrun(2, [*args, "--out", str(tmp_path)], timeout=180, module=distributed.HARNESS)
    assert result.returncode == 0, _report(result)
    summary = json.loads((tmp_path / ddp_train.SUMMARY_FILE).read_text())
    assert summary["world_size"] == 2 and summary["backend"] == "gloo"
    assert summary["reference_max_abs_diff"] < ddp_check.TOLERANCE
    assert summary["replica_max_abs_diff"] == 0.0
    assert "below 1e-06: True" in result.stdout
    # Rank 0 alone logs: the per-epoch lines appear once, not once per process.
    assert result.stdout.count("epoch 1/2:") == 1
    # The checkpoint holds the unwrapped model's keys, so a plain model loads it strictly.
    state = load_checkpoint(tmp_path / ddp_train.CHECKPOINT_FILE, map_location="cpu")
    assert state["epoch"] == 2 and not any(k.startswith("module.") for k in state["model"])
    build_model("mlp").load_state_dict(state["model"])


@pytest.mark.slow
def test_three_launches_in_a_row_all_succeed(tmp_path: Path) -> None:
    # A launch now and then aborted at shutdown (gloo, SIGABRT) until the harness left its process group cleanly;
    # test_the_process_group_is_gone_before_the_interpreter_shuts_down checks the cause itself, and
    # tools/ddp_stress.py repeats launches by the hundred.
    for attempt in range(3):
        out = str(tmp_path / str(attempt))
        result = distributed.torchrun(2, [*QUICK, "--out", out], timeout=120, module=distributed.HARNESS)
        assert result.returncode == 0, f"launch {attempt + 1} of 3 failed:\n{_report(result)}"
        assert (tmp_path / str(attempt) / ddp_train.CHECKPOINT_FILE).is_file()


@pytest.mark.slow
def test_a_failing_rank_ends_the_job_with_an_error(tmp_path: Path) -> None:
    start = time.perf_counter()
    args = [*QUICK, "--out", str(tmp_path), "--fail-rank", "1", "--timeout", "30"]
    result = distributed.torchrun(2, args, timeout=120, module=distributed.HARNESS)
    assert result.returncode != 0
    assert time.perf_counter() - start < 120
    cause = distributed.root_cause(result.stderr)
    assert cause[:2] == ["rank: 1 (local_rank: 1)", "exitcode: 1"], _report(result)
    assert cause[-1] == "RuntimeError: rank 1 fails on purpose (--fail-rank 1)"
    assert not (tmp_path / ddp_train.SUMMARY_FILE).exists()


TEARDOWN_PROBE = """
import os, sys
from lessons.lesson_07 import harness as ddp_train_harness

code = ddp_train_harness.main(sys.argv[2:])
threads = sorted(open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task"))
with open(os.path.join(sys.argv[1], f"rank{os.environ['RANK']}.txt"), "w") as f:
    f.write("\\n".join(threads))
sys.exit(code)
"""


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="lists threads through /proc (Linux)")
def test_the_process_group_is_gone_before_the_interpreter_shuts_down(tmp_path: Path, monkeypatch) -> None:
    # The cause of an abort at exit now and then (exit -6 after training had finished): gloo's worker threads were
    # still running when Python shut down, because the process group outlived destroy_process_group.
    (tmp_path / "teardown_probe.py").write_text(TEARDOWN_PROBE)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    args = [str(tmp_path), *QUICK, "--out", str(tmp_path / "out")]
    result = distributed.torchrun(2, args, timeout=120, module="teardown_probe")
    assert result.returncode == 0, _report(result)
    for rank in (0, 1):
        threads = (tmp_path / f"rank{rank}.txt").read_text().split()
        assert not [t for t in threads if "gloo" in t], f"rank {rank} still runs {threads} after main() returned"


SLEEPER = """
import os, sys, time
open(os.path.join(sys.argv[1], f"{os.getpid()}.pid"), "w").close()  # "I have started"
time.sleep(300)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
def test_a_timed_out_launch_leaves_no_worker_running(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "sleeper.py").write_text(SLEEPER)  # a worker that never finishes
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    start = time.perf_counter()
    with pytest.raises(subprocess.TimeoutExpired):
        distributed.torchrun(2, [str(tmp_path)], timeout=TIMEOUT_TEST_S, module="sleeper")
    assert time.perf_counter() - start < TIMEOUT_TEST_S + distributed.STOP_GRACE
    pids = [int(path.stem) for path in tmp_path.glob("*.pid")]
    assert len(pids) == 2, "both workers should have started before the timeout"
    deadline = time.monotonic() + 5
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [pid for pid in pids if _alive(pid)]
    for pid in left:
        os.kill(pid, 9)  # do not leave them behind even when the test fails
    assert not left, f"workers still running after the timeout: {left}"


@pytest.mark.filterwarnings("ignore:Unable to enable fault handler")  # @record under pytest's captured stderr
def test_without_torchrun_the_script_is_rank_0_of_a_world_of_one(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.delenv("RANK", raising=False)  # python -m lessons.lesson_07.harness, as nanoGPT's train.py runs alone
    assert ddp_train_harness.main([*QUICK, "--check-equivalence", "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / ddp_train.SUMMARY_FILE).read_text())
    assert summary["world_size"] == 1 and summary["backend"] == "gloo" and summary["replica_max_abs_diff"] == 0.0
    assert summary["reference_max_abs_diff"] < ddp_check.TOLERANCE  # a world of one: its own global batch
    assert "[rank 0] of 1 on cpu (gloo)" in capsys.readouterr().out
    assert not torch.distributed.is_initialized()  # torn down


@pytest.mark.filterwarnings("ignore:Unable to enable fault handler")
def test_the_printed_script_alone_trains_and_leaves_its_group(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.delenv("RANK", raising=False)  # python -m lessons.lesson_07.ddp_train, without the harness
    assert ddp_train.main([*QUICK, "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / ddp_train.SUMMARY_FILE).read_text())
    assert summary["world_size"] == 1 and summary["backend"] == "gloo" and 0 <= summary["test_accuracy"] <= 1
    assert "replica_max_abs_diff" not in summary  # the harness's entry
    out = capsys.readouterr().out
    assert "[rank 0] of 1 on cpu (gloo)" in out and "epoch 1/1: mean training loss" in out
    assert not torch.distributed.is_initialized()


HARNESS_NAMES = (
    *("ddp_check", "Reference", "replica_gap", "check_equivalence", "fail_rank", "fail_here", "say("),
    *("world_of_one", "leaving_cleanly", "check_out_folder", " distributed.", "helpers.distributed", "torch._dynamo"),
)
"""What the course's checks and workarounds are called: none of it belongs in the file lesson 07 prints."""
DDP_ESSENTIALS = (
    *('os.environ.get("LOCAL_RANK"', "dist.init_process_group(", "DistributedSampler(", "sampler.set_epoch(epoch)"),
    *("DDP(model, device_ids=", "dist.all_reduce(", "if rank == 0:", "save_checkpoint(", "model.module.state_dict()"),
    *("dist.barrier()", "dist.destroy_process_group()", "@record"),
)


def test_the_printed_script_is_ddp_and_nothing_of_the_harness() -> None:
    source = inspect.getsource(ddp_train)  # what lesson 07 prints
    assert [name for name in HARNESS_NAMES if name in source] == []
    assert [line for line in DDP_ESSENTIALS if line not in source] == []
    assert len(source.splitlines()) <= 125  # pytorch/examples' multigpu_torchrun.py teaches the same in 111


@pytest.mark.filterwarnings("ignore:Unable to enable fault handler")
def test_the_harness_hooks_leave_with_its_run(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(RuntimeError, match=r"rank 0 fails on purpose \(--fail-rank 0\)"):
        ddp_train_harness.main([*QUICK, "--fail-rank", "0", "--out", str(tmp_path)])
    assert not torch.distributed.is_initialized()
    model = nn.Linear(4, 2)  # a forward pass and a step after the run: no hook of it is left to fire
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.ones(1, 4)).sum().backward()
    optimizer.step()
    assert not (tmp_path / ddp_train.SUMMARY_FILE).exists()


def test_the_single_process_twin_trains_the_same_model(tmp_path: Path, capsys) -> None:
    assert single_train.main([*QUICK, "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / single_train.SUMMARY_FILE).read_text())
    assert summary["world_size"] == 1 and len(summary["losses"]) == 1 and 0 <= summary["test_accuracy"] <= 1
    state = load_checkpoint(tmp_path / single_train.CHECKPOINT_FILE, map_location="cpu")
    build_model("mlp").load_state_dict(state["model"])
    assert "epoch 1/1: mean training loss" in capsys.readouterr().out


def test_global_batches_are_the_union_of_the_rank_batches() -> None:
    data = single_train.synthetic_data(10, 0, 0)
    batches = list(ddp_check.global_batches(data, world_size=2, batch_size=2, seed=3, epoch=1))
    assert [len(y) for _, y in batches] == [4, 4, 2]
    shares = []
    for rank in range(2):
        sampler = torch.utils.data.DistributedSampler(data, num_replicas=2, rank=rank, shuffle=True, seed=3)
        sampler.set_epoch(1)
        shares.append(list(sampler))
    first = [*shares[0][:2], *shares[1][:2]]
    assert torch.equal(batches[0][0], data.tensors[0][first])


def test_root_cause_without_a_report() -> None:
    assert distributed.root_cause("all good") == []


@pytest.mark.slow
def test_load_data_reads_images_as_normalised_tensors() -> None:
    try:
        train, test = single_train.load_data(ddp_train.parse_args(["--dataset", "FashionMNIST", "--limit", "100"]))
    except DatasetUnavailableError as exc:
        pytest.skip(f"Fashion-MNIST is not on this machine: {exc}")
    X, y = train.tensors
    assert X.shape == (100, 1, 28, 28) and X.dtype == torch.float32 and len(test) == 20
    assert abs(X.mean().item()) < 0.5 and y.dtype == torch.int64  # normalised, not raw 0..255 pixels


def test_the_terminal_line_is_the_command_that_runs() -> None:
    line = distributed.torchrun_line(2, ["--epochs", "1"])
    assert line == "torchrun --standalone --nproc_per_node=2 -m lessons.lesson_07.ddp_train --epochs 1"
    assert distributed.torchrun_command(2, ["--epochs", "1"])[-6:] == line.split()[1:]


def test_a_lost_peer_is_told_apart_from_a_rank_of_its_own_failing() -> None:
    gone = RuntimeError("[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:544] Connection closed by peer [::1]:1")
    assert distributed.lost_a_peer(gone)
    assert not distributed.lost_a_peer(RuntimeError("rank 1 fails on purpose (--fail-rank 1)"))


UNUSED_PARAMETERS = """
import json, sys
from helpers import distributed
from lessons import lesson_07

distributed.fork_keeps_autograd = lambda: sys.argv[1] == "fork"
started, real = [], lesson_07.mp.get_context
lesson_07.mp.get_context = lambda method: started.append(method) or real(method)
failed = [str(err) for err in lesson_07.on_two_ranks()]
fixed = lesson_07.on_two_ranks(static_graph=True) + lesson_07.on_two_ranks(find_unused_parameters=True)
print(json.dumps({"started": started, "failed": failed, "fixed": [str(err) for err in fixed]}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("fork", [True, False], ids=["forked", "spawned"])
def test_unused_parameters_fail_on_two_ranks_and_the_options_fix_them(fork: bool) -> None:
    """Lesson 07's demonstration, forked as on a CPU, and spawned as where forked autograd fails (after a backward
    with a GPU present): both ranks raise DDP's unfinished-reduction error, and each option lets them finish. It runs in
    a fresh interpreter, as a notebook's kernel would: a test worker that ran a fake-CUDA backward for another test
    has autograd threads that a forked child cannot use."""
    method = "fork" if fork else "spawn"
    out = subprocess.run([sys.executable, "-c", UNUSED_PARAMETERS, method], capture_output=True, text=True,
                         timeout=300, cwd=ROOT)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    said = json.loads(out.stdout.splitlines()[-1])
    assert said["started"] == [method] * 3
    assert len(said["failed"]) == 2
    assert "Expected to have finished reduction in the prior iteration" in said["failed"][0]
    assert said["fixed"] == []


def test_the_probe_says_a_fork_cannot_run_autograd_when_its_child_fails(monkeypatch):
    """The probe's verdict is its forked child's: the child's own backward depends on what this process ran before
    (a fake-CUDA backward in another test makes it fail), so the child's work is replaced here."""

    def backward_works() -> None:
        pass

    def backward_fails() -> None:
        raise RuntimeError("Unable to handle autograd's threading in combination with fork-based multiprocessing.")

    monkeypatch.setattr(distributed, "_tiny_backward", backward_works)  # a forked child inherits the patch
    assert distributed.fork_keeps_autograd()
    monkeypatch.setattr(distributed, "_tiny_backward", backward_fails)
    assert not distributed.fork_keeps_autograd()


@pytest.mark.slow  # a child process imports torch
def test_the_probe_predicts_a_forked_training_step_before_and_after_autograd_with_a_gpu_device_registered():
    """Fake CUDA tensors register a CUDA device as a GPU does; on torch 2.14 a backward afterwards starts autograd's
    device threads, which no forked child has (on 2.8 the stand-in registers none, and forks keep working). Either
    way the probe must say what a forked training step then meets."""
    code = (
        "import multiprocessing, torch\n"
        "from helpers.distributed import fork_keeps_autograd\n"
        "from helpers import placement\n"
        "def step():\n"
        "    model = torch.nn.Linear(4, 2)\n"
        "    torch.nn.functional.cross_entropy(model(torch.randn(8, 4)), torch.zeros(8, dtype=torch.long)).backward()\n"
        "def forked_step_works():\n"
        "    child = multiprocessing.get_context('fork').Process(target=step)\n"
        "    child.start()\n"
        "    child.join(60)\n"
        "    return child.exitcode == 0\n"
        "print(fork_keeps_autograd(), forked_step_works())\n"
        "with placement.cuda_or_fake('cpu') as gpu:\n"
        "    torch.ones(1, device=gpu)\n"
        "torch.ones(1, requires_grad=True).sum().backward()\n"
        "print(fork_keeps_autograd(), forked_step_works())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    lines = out.stdout.split("\n")
    assert lines[0] == "True True", out.stderr
    assert lines[1] in ("True True", "False False"), out.stderr


def test_the_rank_figure_colours_each_sample_by_its_rank() -> None:
    import matplotlib.pyplot as plt

    ax = lesson_07.plot_rank_assignment([[0, 1, 1], [1, 0, 0]], title="two epochs")
    try:
        assert ax.images[0].get_array().tolist() == [[0, 1, 1], [1, 0, 0]]
        assert [text.get_text() for text in ax.get_legend().get_texts()] == ["rank 0", "rank 1"]
        assert [label.get_text() for label in ax.get_yticklabels()] == ["epoch 0", "epoch 1"]
    finally:
        plt.close(ax.figure)


@pytest.mark.filterwarnings("ignore:Unable to enable fault handler")
def test_the_later_scripts_join_through_the_printed_scripts_setup(monkeypatch) -> None:
    # One copy of joining a group: train_in_group, through which lessons 13 and 14 join, runs lesson 07's setup.
    from lessons import lesson_07

    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    calls, seen = [], []
    real = ddp_train.setup
    monkeypatch.setattr(
        ddp_train, "setup", lambda choice, timeout: calls.append((choice, timeout)) or real(choice, timeout)
    )

    def train(args, data, device):
        seen.append((data, device, torch.distributed.get_world_size(), torch.distributed.get_backend()))

    args = argparse.Namespace(device="cpu", timeout=7.0)
    try:
        assert lesson_07.train_in_group(args, train, "the data") == 0
        assert calls == [("cpu", 7.0)]
        assert seen == [("the data", torch.device("cpu"), 1, "gloo")]
    finally:
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
