"""Processes that train together (lesson 07): joining and leaving a process group from a training script, and, from
a notebook, starting torchrun with a plan, a timeout and a clean stop, then reading what the processes wrote."""

from __future__ import annotations

import argparse
import contextlib
import itertools
import multiprocessing.connection
import os
import secrets
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any, NamedTuple, NoReturn

import torch
import torch.distributed as dist

from helpers.checkpoints import folder_problem


def end_process(status: int | None) -> NoReturn:
    """Exit a finished worker with ``status`` at once, after flushing Python's streams, without the interpreter's
    teardown. FSDP2's modules keep the process group alive in reference cycles, so gloo's threads can outlive
    ``destroy_process_group`` into teardown, where now and then one of them aborts the process after the work is done
    (SIGABRT, exit -6, and torchrun then reports the job as failed). Every file the script wrote is closed by then.
    ``None`` is 0: ``@record`` returns None for ``SystemExit(0)``, which is how ``--help`` ends."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if status is None else status)


@contextlib.contextmanager
def leaving_cleanly(timeout: float) -> Iterator[None]:
    """Leave the process group cleanly however the block ends.

    After the block, a barrier: a process that leaves right after its last collective can abort its peer (seen with
    gloo on two CPU processes: SIGABRT, "terminate called without an active exception"). After an error caused by a
    peer that went away, this rank waits up to ``timeout`` seconds for torchrun to stop the job, so that torchrun's
    report names the rank that failed first rather than whichever process happened to exit first. In every case
    ``destroy_process_group``, so no process exits holding the group.

    One more condition lies outside this function: DDP imports torch._dynamo the first time it wraps a model, and
    imported while a process group exists, dynamo keeps references to that group, so ``destroy_process_group`` cannot
    free it; gloo's worker threads then live on into interpreter shutdown, where now and then one of them aborts the
    process (exit -6, "terminate called without an active exception") after training has finished. A script imports
    torch._dynamo before it creates its group, as lessons/lesson_07/harness.py does for lessons/lesson_07/ddp_train.py.
    """
    try:
        yield
        dist.barrier()
    except Exception as exc:
        if lost_a_peer(exc):
            first_line = (str(exc).strip() or type(exc).__name__).splitlines()[0]
            say(f"[rank {dist.get_rank()}] lost a peer ({first_line}); waiting for torchrun to stop the job")
            time.sleep(timeout)
        raise
    finally:
        dist.destroy_process_group()


def stop_with_agent(interval: float = 0.5) -> None:
    """Under torchrun, end this worker within ``interval`` seconds of its agent's exit, saying so on stderr. An agent
    killed with SIGKILL cannot stop its workers (they run in sessions of their own), and a worker left alone would go
    on training and writing files for a job that is over. A daemon thread watches the parent process id, which
    changes when the parent is gone (the worker is handed to init or a subreaper)."""
    if "TORCHELASTIC_RUN_ID" not in os.environ:  # not started by torchrun: no agent to watch
        return
    agent = os.getppid()

    def watch() -> None:
        while os.getppid() == agent:
            time.sleep(interval)
        rank = os.environ.get("RANK", "?")
        say(f"[rank {rank}] its torchrun agent (process {agent}) is gone; this worker stops too", sys.stderr)
        end_process(1)

    threading.Thread(target=watch, name="stop_with_agent", daemon=True).start()


def check_out_folder(out: str, prog: str) -> None:
    """Refuse an ``--out`` that cannot hold the script's files (a file, a path under a file, a folder that cannot be
    written to), before anything starts: every process exits with status 2 and rank 0 alone says why and the fix. The
    folder is created where it can be."""
    problem = folder_problem(out)
    if problem:
        if int(os.environ.get("RANK", 0)) == 0:
            say(f"{prog}: --out {problem}", sys.stderr)
        raise SystemExit(2)


def check_fail_rank(fail_rank: int, prog: str) -> None:
    """Refuse a ``--fail-rank`` this job does not have, before anything starts: every process exits with status 2 and
    rank 0 alone says why (``WORLD_SIZE`` and ``RANK`` as torchrun sets them; a world of one without it)."""
    problem = fail_rank_problem(fail_rank, int(os.environ.get("WORLD_SIZE", 1)))
    if problem:
        if int(os.environ.get("RANK", 0)) == 0:
            say(f"{prog}: {problem}", sys.stderr)
        raise SystemExit(2)


def fail_here(fail_rank: int) -> None:
    """Lesson 07's failure demo (``--fail-rank``): rank ``fail_rank`` raises here (none when it is -1)."""
    if dist.get_rank() == fail_rank:
        raise RuntimeError(f"rank {fail_rank} fails on purpose (--fail-rank {fail_rank})")


def wait_for_exit(processes: Sequence[Any], timeout: float) -> None:
    """Wait until all ``processes`` (multiprocessing) have exited; after ``timeout`` s stop them and raise TimeoutError.
    ``ProcessContext.join`` then checks the ended children in order: of several alike failures, it names the first."""
    deadline = time.monotonic() + timeout
    running = [p for p in processes if p.exitcode is None]
    while running:
        left = deadline - time.monotonic()
        if left <= 0:
            for process in running:
                process.terminate()
            for process in running:
                process.join(5)
            raise TimeoutError(
                f"{len(running)} of {len(processes)} child processes did not finish within {timeout:g} s"
            )
        multiprocessing.connection.wait([p.sentinel for p in running], timeout=left)
        running = [p for p in running if p.exitcode is None]


def fork_keeps_autograd() -> bool:
    """Whether a process forked now can run autograd. Once autograd has run in this process while a GPU was present,
    PyTorch has started its device threads, which a fork does not copy, and a forked child's backward() raises
    "Unable to handle autograd's threading in combination with fork-based multiprocessing". Tried in a forked child:
    one tiny backward, so that any other reason a forked child's autograd fails here is found too."""
    context = multiprocessing.get_context("fork")
    child = context.Process(target=_tiny_backward, daemon=True)
    child.start()
    child.join(timeout=60)
    if child.is_alive():
        child.kill()
        child.join()
    return child.exitcode == 0


def _tiny_backward() -> None:
    torch.ones(1, requires_grad=True).sum().backward()


def start_method(backward: bool) -> str:
    """How to start processes that run a function of this one: "fork" (they get a copy of this process, a notebook's
    functions included) where this system forks and, for processes that call backward, where ``fork_keeps_autograd``;
    else "spawn" (they import what they run). Never fork on macOS: a child forked after Metal or another system
    framework has started can crash, which is why Python spawns there by default since 3.8."""
    forks = "fork" in multiprocessing.get_all_start_methods() and sys.platform != "darwin"
    return "fork" if forks and (not backward or fork_keeps_autograd()) else "spawn"


SCRIPT = "lessons.lesson_07.ddp_train"
HARNESS = "lessons.lesson_07.harness"
"""The same script with the lesson's checks around it: --check-equivalence, --fail-rank."""
STOP_GRACE = 40.0  # seconds torchrun gets to stop its workers after SIGTERM (it gives them 30 s) before it is killed
CPU_PROCESSES = 2  # gloo processes in a plan without GPUs: the fewest that have something to synchronise


def torchrun_command(nproc: int, script_args: Sequence[str] = (), module: str = SCRIPT) -> list[str]:
    """``torchrun --standalone ...`` as ``python -m torch.distributed.run``: this Python, never another on PATH."""
    args = ["--standalone", f"--nproc_per_node={nproc}", "-m", module, *script_args]
    return [sys.executable, "-m", "torch.distributed.run", *args]


def torchrun_line(nproc: int, script_args: Sequence[str] = (), module: str = SCRIPT) -> str:
    """The same launch as one would type it in a terminal: ``torchrun --standalone ...``."""
    return shlex.join(["torchrun", *torchrun_command(nproc, script_args, module)[3:]])


class ProcessPlan(NamedTuple):
    """How many processes a launch starts, the backend that connects them, the script's ``--device``, and why."""

    nproc: int
    backend: str
    device: str
    why: str = ""
    """Why the plan runs on CPU processes rather than the lesson's GPUs ("" for an nccl plan)."""

    def describe(self) -> str:
        if self.backend == "nccl":
            return f"{self.nproc} processes with nccl, one per visible GPU ({self.nproc} GPUs)"
        return f"{self.nproc} CPU processes with gloo" + (f" ({self.why})" if self.why else "")


def process_plan(device_type: str, gpu_count: int) -> ProcessPlan:
    """One nccl process per visible GPU when the lesson runs on CUDA and at least two GPUs are visible; else two CPU
    processes with gloo, so that there is always a second process to average with (nccl needs a GPU per process)."""
    if gpu_count < 0:
        raise ValueError(f"gpu_count cannot be negative, got {gpu_count}.")
    if device_type == "cuda" and gpu_count >= 2:  # a second GPU: a second process to average with
        return ProcessPlan(gpu_count, "nccl", "cuda")
    if device_type == "cuda" and gpu_count == 1:
        why = "one CUDA GPU is visible: nccl needs a GPU per process, and one process has no gradients to average"
    elif gpu_count == 0 and device_type in ("cpu", "cuda"):
        why = "no CUDA GPU is visible"
    elif device_type == "cpu":
        why = f"the lesson runs on the CPU, not on this machine's CUDA GPU{'s' if gpu_count > 1 else ''}"
    else:
        why = f"DDP's GPU backend, nccl, is for CUDA GPUs, and the lesson runs on {device_type}"
    return ProcessPlan(CPU_PROCESSES, "gloo", "cpu", why)


def fail_rank_problem(fail_rank: int, world_size: int) -> str | None:
    """Why ``--fail-rank`` cannot work with ``world_size`` processes, with the fix; None when it can."""
    if fail_rank == -1 or 0 <= fail_rank < world_size:
        return None
    ranks, es = ("0", "") if world_size == 1 else (f"0 to {world_size - 1}", "es")
    return (
        f"--fail-rank {fail_rank} names no rank of this job: with {world_size} process{es} the ranks are {ranks}. "
        "Pick one of them, or -1 (the default) for no failing rank."
    )


def torchrun(
    nproc: int, script_args: Sequence[str] = (), timeout: float = 120.0, module: str = SCRIPT
) -> subprocess.CompletedProcess[str]:
    """Run ``module`` (the lesson 07 script by default) under torchrun and capture its output; no worker outlives it.
    A timeout raises subprocess.TimeoutExpired with the output so far; for ``HARNESS``, a bad ``--fail-rank`` raises
    ValueError first."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--fail-rank")
    fail_rank = parser.parse_known_args(script_args)[0].fail_rank
    if module == HARNESS and fail_rank is not None and fail_rank.lstrip("-").isdigit():  # else the script complains
        problem = fail_rank_problem(int(fail_rank), nproc)
        if problem:
            raise ValueError(problem)
    [done] = run_together([torchrun_command(nproc, script_args, module)], timeout)
    if isinstance(done, subprocess.TimeoutExpired):
        raise done
    return done


def run_together(
    commands: Sequence[Sequence[str]], timeout: float, env: dict[str, str] | None = None
) -> list[subprocess.CompletedProcess[str] | subprocess.TimeoutExpired]:
    """Start every command at once (torchrun agents, say) and wait for all of them, ``timeout`` seconds at most in
    all. Returns each one's CompletedProcess, or for one still running at the deadline a TimeoutExpired holding its
    output so far (it is then stopped). Whatever happens, nothing started here is left running.

    A torchrun agent stops its workers (in sessions of their own) when it gets SIGTERM, and gives them 30 s; SIGKILL
    would orphan them, so SIGTERM comes first and SIGKILL only after ``STOP_GRACE`` seconds. Each command starts in a
    session of its own, whose process group gets the SIGKILL, and every process it started carries a mark in its
    environment, by which any still running at the end is found and killed: a worker whose agent died, say.
    """
    mark = f"{os.getpid()}-{secrets.token_hex(6)}"
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), **(env or {}), LAUNCH_MARK: mark}
    deadline = time.monotonic() + timeout
    with contextlib.ExitStack() as files:
        # Files rather than pipes: reading a pipe waits until every process holding it has exited.
        outputs = [
            (files.enter_context(tempfile.TemporaryFile("w+")), files.enter_context(tempfile.TemporaryFile("w+")))
            for _ in commands
        ]
        processes: list[subprocess.Popen[str]] = []
        late: set[int] = set()
        try:
            for command, (out, err) in zip(commands, outputs, strict=True):
                processes.append(
                    subprocess.Popen(list(command), stdout=out, stderr=err, text=True, env=env, start_new_session=True)
                )
            for index, process in enumerate(processes):
                try:
                    process.wait(timeout=max(deadline - time.monotonic(), 0.01))
                except subprocess.TimeoutExpired:
                    late.add(index)
        finally:  # the deadline, an error, or KeyboardInterrupt (the notebook's stop button)
            _stop(processes)
            _end_marked(mark)
        results: list[subprocess.CompletedProcess[str] | subprocess.TimeoutExpired] = []
        for index, (command, process, (out, err)) in enumerate(zip(commands, processes, outputs, strict=True)):
            out.seek(0), err.seek(0)
            stdout, stderr = out.read(), err.read()
            if index in late:
                results.append(subprocess.TimeoutExpired(list(command), timeout, output=stdout, stderr=stderr))
            else:
                results.append(subprocess.CompletedProcess(list(command), process.returncode, stdout, stderr))
        return results


def _stop(processes: Sequence[subprocess.Popen[str]]) -> None:
    """SIGTERM to every process still running, then SIGKILL to the process group of any still there after
    ``STOP_GRACE`` seconds (each was started as the leader of a session of its own)."""
    running = [p for p in processes if p.poll() is None]
    for process in running:
        process.terminate()
    grace_end = time.monotonic() + STOP_GRACE
    for process in running:
        try:
            process.wait(timeout=max(grace_end - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


LAUNCH_MARK = "COURSE_LAUNCH"
"""The environment variable ``run_together`` sets, to a value of its own, in every command it starts; children inherit
it, so the processes of one launch can be found, including workers whose agent is gone."""


def marked_processes(mark: str) -> list[int]:
    """The running processes whose environment holds ``LAUNCH_MARK=mark`` (read from /proc; none where there is no
    /proc, as on macOS, where the workers' own ``stop_with_agent`` ends them)."""
    wanted = f"{LAUNCH_MARK}={mark}".encode()
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            settings = (entry / "environ").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile, or another user's
            continue
        if wanted in settings and int(entry.name) != os.getpid():
            found.append(int(entry.name))
    return found


def _end_marked(mark: str, wait: float = 10.0) -> None:
    """SIGKILL every process that still carries this launch's mark, and wait up to ``wait`` seconds until none is
    left (an orphan is not this process's child, so init reaps it)."""
    deadline = time.monotonic() + wait
    while (left := marked_processes(mark)) and time.monotonic() < deadline:
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


def root_cause(stderr: str) -> list[str]:
    """From torchrun's failure report: the failed rank, its exit code and its last error line (no paths or times)."""
    lines = stderr.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("Root Cause")]
    if not starts:
        return []
    after = lines[starts[-1] + 1 :]
    block = [line.strip() for line in itertools.takewhile(lambda line: not line.startswith("="), after)]
    fields = [(key.strip(), value) for key, _, value in (text.partition(":") for text in block)]
    found = [f"{key}: {value.split('(pid')[0].strip()}" for key, value in fields if key in ("rank", "exitcode")]
    found += [text for text in block if text][-1:]  # with @record in the worker, the traceback ends with the error
    return found


def say(line: str, stream: IO[str] | None = None) -> None:
    """Print one line in one write (unbuffered, ``print`` writes the newline apart): ranks' lines never interleave."""
    stream = sys.stdout if stream is None else stream
    stream.flush()  # whatever this process printed before goes out first
    data = (line + "\n").encode(getattr(stream, "encoding", None) or "utf-8", errors="replace")
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file (a notebook's or a test's captured stream)
        stream.write(line + "\n")
        stream.flush()
        return
    while data:  # a regular file or a pipe takes a short line in one write; loop only if it did not
        data = data[os.write(fd, data) :]


# How gloo words a collective whose peer process has exited (torch 2.8 says it at once; 2.14 may just wait).
PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "Broken pipe")


def lost_a_peer(exc: BaseException) -> bool:
    """Whether a collective failed because another rank's process went away, not because of this rank."""
    return any(text in str(exc) for text in PEER_GONE)
