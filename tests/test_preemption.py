"""A run stopped by the cluster (lessons.lesson_13): on SIGTERM or SIGUSR1 every rank stops after the same step,
rank 0 writes the checkpoint, every worker exits with STOPPED, and the same command started again ends with the
weights, the optimizer, the schedule and the random states of a run that was never stopped."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import secrets
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.utils.data import DistributedSampler, TensorDataset

from helpers import distributed
from helpers.checkpoints import load_checkpoint
from lessons import lesson_13 as elastic_train

STEPS = 300  # long enough that a signal sent after a few steps lands mid-run, a few seconds on two CPU processes
ARGS = ["--device", "cpu", "--steps", str(STEPS), "--every", "50", "--timeout", "30", "--synthetic-size", "256"]


# The agreement rule, in two processes of a gloo group: rank 1 alone gets SIGUSR1, in the middle of step 3.


def agree(rank: int, store_file: str, signalled_rank: int, results) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store_file}", rank=rank, world_size=2)
    try:
        stopped_after = None
        with elastic_train.stop_signals_caught():
            for step in range(1, 11):
                if rank == signalled_rank and step == 3:
                    os.kill(os.getpid(), signal.SIGUSR1)  # the handler only notes it; the step goes on
                if elastic_train.all_agree_to_stop(elastic_train.stop_requested, torch.device("cpu")):
                    stopped_after = step
                    break
        results.put((rank, stopped_after, elastic_train.stop_requested))
    finally:
        dist.destroy_process_group()


def agreement(tmp_path: Path, signalled_rank: int) -> dict[int, tuple[int | None, bool]]:
    context = multiprocessing.get_context("fork")  # no autograd in the children
    results = context.Queue()
    args = (str(tmp_path / "store"), signalled_rank, results)
    processes = [context.Process(target=agree, args=(rank, *args), daemon=True) for rank in range(2)]
    for process in processes:
        process.start()
    try:
        found = [results.get(timeout=60) for _ in processes]
        distributed.wait_for_exit(processes, 30)
    finally:
        for process in processes:
            process.kill()
            process.join()
    return {rank: (step, requested) for rank, step, requested in found}


@pytest.mark.slow
def test_a_signal_to_one_rank_stops_both_after_the_same_step(tmp_path: Path) -> None:
    found = agreement(tmp_path, signalled_rank=1)
    assert found == {0: (3, False), 1: (3, True)}  # rank 0 was not signalled, and stops with rank 1


@pytest.mark.slow
def test_without_a_signal_no_rank_stops(tmp_path: Path) -> None:
    assert agreement(tmp_path, signalled_rank=-1) == {0: (None, False), 1: (None, False)}


def signalled_then(ending: str) -> None:
    """In a child process: SIGTERM inside ``stop_signals_caught``, then the block ends as ``ending`` says."""
    with contextlib.suppress(elastic_train.Stopped), elastic_train.stop_signals_caught():
        os.kill(os.getpid(), signal.SIGTERM)
        assert elastic_train.stop_requested  # noted, and the process goes on
        if ending == "failed step":
            raise RuntimeError("a collective whose peer is gone")
        if ending == "stopped":
            raise elastic_train.Stopped
    if ending == "after the block":
        os.kill(os.getpid(), signal.SIGTERM)  # the default again: the process ends here
        time.sleep(5)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("ending", "exitcode"), [("stopped", 0), ("failed step", -signal.SIGTERM), ("after the block", -signal.SIGTERM)]
)
def test_sigterm_ends_the_process_at_once_outside_the_training_loop(ending: str, exitcode: int) -> None:
    """torchrun stops the workers left after a crash with SIGTERM; one that had caught it would keep the restart
    waiting for torchrun's SIGKILL, 30 s later."""
    child = multiprocessing.get_context("fork").Process(target=signalled_then, args=(ending,))
    child.start()
    child.join(30)
    if child.is_alive():
        child.kill()
        child.join()
    assert child.exitcode == exitcode


def test_a_pass_over_the_batches_leaves_the_random_state_alone() -> None:
    """A resumed run restores its random state and then starts its pass over the epoch again; the pass must not draw
    from the global generator, or the resumed run's random state would be one draw ahead of a run never stopped."""
    data = TensorDataset(torch.arange(16.0))
    sampler = DistributedSampler(data, num_replicas=2, rank=0, shuffle=True, seed=0)
    before = torch.get_rng_state()
    next(iter(elastic_train.batches(data, sampler, 4)))
    assert torch.equal(torch.get_rng_state(), before)


# Real jobs: two workers under one torchrun agent, stopped by a real signal and started again.


@contextlib.contextmanager
def started(out: Path, mark: str) -> Iterator[subprocess.Popen[str]]:
    """torchrun with two workers of elastic_train writing to ``out``; at the end every process it started is gone."""
    command = distributed.torchrun_command(2, [*ARGS, "--out", str(out)], module=elastic_train.__name__)
    env = {**os.environ, "OMP_NUM_THREADS": "1", distributed.LAUNCH_MARK: mark}
    agent = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    try:
        yield agent
    finally:
        deadline = time.monotonic() + 10
        while (left := distributed.marked_processes(mark)) and time.monotonic() < deadline:
            for pid in left:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)
        agent.kill()
        agent.communicate()


def wait_for_step(out: Path, agent: subprocess.Popen[str], step: int, timeout: float = 120) -> None:
    """Wait until rank 0 has logged ``step`` (the run is then mid-training)."""
    deadline = time.monotonic() + timeout
    log = out / elastic_train.LOSSES
    while time.monotonic() < deadline and agent.poll() is None:
        if log.exists() and len(log.read_text().splitlines()) >= step:
            return
        time.sleep(0.02)
    raise AssertionError(f"the job never logged step {step} (exit {agent.poll()})")


def worker(mark: str, rank: int) -> int:
    """The process id of the worker of ``rank`` among those carrying ``mark`` (torchrun sets RANK in each)."""
    for pid in distributed.marked_processes(mark):
        with contextlib.suppress(OSError):
            if f"RANK={rank}".encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                return pid
    raise AssertionError(f"no worker of rank {rank} is running")


def stopped_step(said: str) -> int:
    """The step both ranks say they stopped after; they must agree."""
    steps = {int(line.split("after step ")[1].split(";")[0]) for line in said.splitlines() if "stopped by" in line}
    assert len(steps) == 1 and said.count("stopped by a signal after step") == 2, said
    return steps.pop()


def resumed_to_the_end(out: Path, stopped_at: int, reference: Path) -> None:
    """Start the same command again: it resumes at the stopped step and ends as the run that was never stopped."""
    done = distributed.torchrun(2, [*ARGS, "--out", str(out)], timeout=180, module=elastic_train.__name__)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"resumed at step {stopped_at} " in done.stdout
    logged = (out / elastic_train.LOSSES).read_text().splitlines()
    steps = [json.loads(line)["step"] for line in logged]
    assert steps == list(range(1, STEPS + 1))  # each step once: the checkpoint is of the step the ranks stopped at
    final, expected = torch.load(out / elastic_train.FINAL), torch.load(reference / elastic_train.FINAL)
    assert final.keys() == expected.keys()
    assert all(torch.equal(final[k], expected[k]) for k in final), "the resumed run ended with other weights"
    # The checkpoint of the last step holds the optimizer, the schedule and every rank's random state: as unstopped.
    last, unstopped = (load_checkpoint(o / elastic_train.CHECKPOINT, map_location="cpu") for o in (out, reference))
    assert last["schedule"] == unstopped["schedule"]
    for mine, theirs in zip(last["rng"], unstopped["rng"], strict=True):
        assert torch.equal(mine["cpu"], theirs["cpu"]), "the random state differs from the run never stopped"
    moments = [
        (s["momentum_buffer"], u["momentum_buffer"])
        for s, u in zip(*(c["optimizer"]["state"].values() for c in (last, unstopped)), strict=True)
    ]
    assert all(torch.equal(a, b) for a, b in moments)


@pytest.fixture(scope="module")
def never_stopped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("never_stopped")
    done = distributed.torchrun(2, [*ARGS, "--out", str(out)], timeout=180, module=elastic_train.__name__)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.mark.slow
def test_sigterm_to_torchrun_stops_the_job_with_a_checkpoint_and_the_same_command_resumes(never_stopped, tmp_path):
    mark = f"preemption-{secrets.token_hex(4)}"
    with started(tmp_path, mark) as agent:
        wait_for_step(tmp_path, agent, 5)
        agent.send_signal(signal.SIGTERM)  # as SLURM stops a job step: torchrun passes it on to its workers
        said, errors = agent.communicate(timeout=60)
    assert agent.returncode != 0  # torchrun's own status when a signal stops it
    assert "Received 15 death signal" in errors
    stopped_at = stopped_step(said)
    assert 5 <= stopped_at < STEPS
    assert load_checkpoint(tmp_path / elastic_train.CHECKPOINT, map_location="cpu")["step"] == stopped_at
    assert not (tmp_path / elastic_train.FINAL).exists()
    resumed_to_the_end(tmp_path, stopped_at, never_stopped)


@pytest.mark.slow
def test_sigusr1_to_one_worker_stops_every_worker_with_status_stopped(never_stopped, tmp_path) -> None:
    mark = f"preemption-{secrets.token_hex(4)}"
    with started(tmp_path, mark) as agent:
        wait_for_step(tmp_path, agent, 5)
        os.kill(worker(mark, 1), signal.SIGUSR1)  # rank 1 alone: rank 0 stops because rank 1 does
        said, errors = agent.communicate(timeout=60)
    stopped_at = stopped_step(said)
    # With no restart allowed, torchrun reports the workers' own exit status: STOPPED, not a crash's.
    assert agent.returncode != 0
    assert f"exitcode: {elastic_train.STOPPED}" in distributed.root_cause(errors), errors[-3000:]
    assert load_checkpoint(tmp_path / elastic_train.CHECKPOINT, map_location="cpu")["step"] == stopped_at
    resumed_to_the_end(tmp_path, stopped_at, never_stopped)
