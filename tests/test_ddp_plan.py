"""Launching lesson 07's ddp_train and its harness (helpers.distributed): the parts a learner meets before training
starts: how many processes with which backend (lesson 07's plan), a --fail-rank that names no rank, rank lines that
never interleave."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import distributed

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("device_type", "gpus", "expected"),
    [
        ("cuda", 2, (2, "nccl", "cuda")),  # one nccl process per GPU once there are two to average
        ("cuda", 8, (8, "nccl", "cuda")),
        ("cuda", 1, (2, "gloo", "cpu")),  # one GPU: a world of one would compare a process with itself (gap 0)
        ("cuda", 0, (2, "gloo", "cpu")),  # nothing visible after all
        ("cpu", 0, (2, "gloo", "cpu")),
        ("cpu", 1, (2, "gloo", "cpu")),  # DEVICE = "cpu" on a machine with one GPU
        ("cpu", 2, (2, "gloo", "cpu")),  # ... or two: the lesson was told to use the CPU
        ("mps", 0, (2, "gloo", "cpu")),  # DDP's GPU backends are CUDA's; other accelerators train on CPU processes
    ],
)
def test_the_plan_follows_the_lessons_device(device_type: str, gpus: int, expected: tuple[int, str, str]) -> None:
    plan = distributed.process_plan(device_type, gpus)
    assert tuple(plan[:3]) == expected
    assert plan.nproc >= 2  # the equivalence check and the failing-rank demo always have a second process


@pytest.mark.parametrize(
    ("device_type", "gpus", "why"),
    [
        ("cuda", 1, "one CUDA GPU is visible: nccl needs a GPU per process"),
        ("cuda", 0, "no CUDA GPU is visible"),
        ("cpu", 0, "no CUDA GPU is visible"),
        ("cpu", 1, "the lesson runs on the CPU, not on this machine's CUDA GPU"),
        ("cpu", 2, "the lesson runs on the CPU, not on this machine's CUDA GPUs"),
        ("mps", 0, "the lesson runs on mps"),
    ],
)
def test_a_plan_on_cpu_processes_says_why(device_type: str, gpus: int, why: str) -> None:
    described = distributed.process_plan(device_type, gpus).describe()
    assert described.startswith("2 CPU processes with gloo (") and why in described, described


def test_the_plan_describes_itself() -> None:
    assert distributed.process_plan("cuda", 2).describe() == "2 processes with nccl, one per visible GPU (2 GPUs)"
    assert distributed.process_plan("cuda", 4).describe() == "4 processes with nccl, one per visible GPU (4 GPUs)"


def test_the_plan_refuses_a_negative_count() -> None:
    with pytest.raises(ValueError, match="cannot be negative"):
        distributed.process_plan("cuda", -1)


@pytest.mark.parametrize(("fail_rank", "world_size"), [(-1, 2), (0, 2), (1, 2), (0, 1), (7, 8)])
def test_a_fail_rank_of_the_job_is_accepted(fail_rank: int, world_size: int) -> None:
    assert distributed.fail_rank_problem(fail_rank, world_size) is None


@pytest.mark.parametrize(
    ("fail_rank", "world_size", "ranks"), [(5, 2, "0 to 1"), (2, 2, "0 to 1"), (1, 1, "0"), (-2, 3, "0 to 2")]
)
def test_a_fail_rank_outside_the_job_is_named_with_the_ranks_there_are(fail_rank: int, world_size: int, ranks: str):
    problem = distributed.fail_rank_problem(fail_rank, world_size)
    assert problem is not None
    assert problem.startswith(f"--fail-rank {fail_rank} names no rank of this job: ")
    assert f"the ranks are {ranks}." in problem and "-1 (the default) for no failing rank" in problem


def test_launch_refuses_a_fail_rank_outside_the_job_before_starting_anything(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_process(*args, **kwargs):
        raise AssertionError("torchrun started a process")

    monkeypatch.setattr(subprocess, "Popen", no_process)
    for args in (["--fail-rank", "5"], ["--epochs", "1", "--fail-rank=2"]):
        with pytest.raises(ValueError, match=r"with 2 processes the ranks are 0 to 1\."):
            distributed.torchrun(2, args, module=distributed.HARNESS)


@pytest.mark.slow
def test_torchrun_with_a_fail_rank_outside_the_job_says_so_once_and_fails(tmp_path: Path) -> None:
    # What a user types: torchrun --standalone --nproc_per_node=2 -m lessons.lesson_07.harness --fail-rank 5
    out = tmp_path / "out"
    command = distributed.torchrun_command(2, ["--fail-rank", "5", "--out", str(out)], distributed.HARNESS)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    run = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    said = "lessons.lesson_07.harness: --fail-rank 5 names no rank of this job: with 2 processes the ranks are 0 to 1."
    assert run.returncode != 0, run.stdout + run.stderr
    assert (run.stdout + run.stderr).count(said) == 1, run.stderr[-3000:]
    assert "exitcode: 2" in distributed.root_cause(run.stderr)  # the workers refused; none of them trained
    assert not out.exists()  # refused before any training or output folder
    assert "[rank " not in run.stdout
    print(f"refused in {time.perf_counter() - start:.1f} s")


@pytest.mark.slow
def test_the_script_alone_refuses_a_negative_fail_rank_with_one_message() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "lessons.lesson_07.harness", "--fail-rank", "-3"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert run.returncode == 2
    assert "argument --fail-rank: '-3' is not allowed: give a process's rank" in run.stderr
    assert "Traceback" not in run.stderr


def test_say_writes_each_line_with_one_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    writes: list[bytes] = []
    real_write = os.write

    def recording_write(fd: int, data: bytes) -> int:
        writes.append(bytes(data))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", recording_write)
    with open(tmp_path / "shared.txt", "w") as stream:
        stream.write("earlier output, ")  # buffered: must go out before the line, not after it
        distributed.say("[rank 1] of 2 on cpu (gloo): 256 of 512 images per epoch, 8 steps", stream)
        distributed.say("[rank 0] lost a peer", stream)
    assert writes == [b"[rank 1] of 2 on cpu (gloo): 256 of 512 images per epoch, 8 steps\n", b"[rank 0] lost a peer\n"]
    assert (tmp_path / "shared.txt").read_text() == (
        "earlier output, [rank 1] of 2 on cpu (gloo): 256 of 512 images per epoch, 8 steps\n[rank 0] lost a peer\n"
    )


def test_say_falls_back_to_write_on_a_stream_without_a_file() -> None:
    import io

    stream = io.StringIO()
    distributed.say("[rank 0] hello", stream)
    assert stream.getvalue() == "[rank 0] hello\n"
