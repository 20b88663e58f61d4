"""Helpers for models wrapped in ``nn.DataParallel`` or ``DistributedDataParallel`` (lesson 06), and for processes
started from a notebook: torchrun and its plan, timeouts, stopping, and what the children wrote (lesson 07)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import multiprocessing.connection
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from typing import IO, Any, NamedTuple, TypeVar

import torch

PREFIX = "module."
"""What a wrapper adds in front of every key of the wrapped model's state dict (the wrapper's attribute name)."""

V = TypeVar("V")


def strip_module_prefix(state_dict: Mapping[str, V]) -> OrderedDict[str, V]:
    """A copy of ``state_dict`` with one leading "module." removed from each key that has it; other keys unchanged."""
    # Only the leading prefix: a layer may itself be called "module" further down (e.g. "encoder.module.weight").
    stripped: OrderedDict[str, V] = OrderedDict((key.removeprefix(PREFIX), value) for key, value in state_dict.items())
    if len(stripped) != len(state_dict):
        raise ValueError('Stripping "module." would merge two keys; this state dict mixes wrapped and unwrapped keys.')
    metadata = getattr(state_dict, "_metadata", None)
    if metadata is not None:
        # load_state_dict reads per-module versions from _metadata, keyed by module path, so strip those too.
        # The wrapper's own path "module" becomes the root "".
        paths = (("" if k == PREFIX[:-1] else k.removeprefix(PREFIX), v) for k, v in metadata.items())
        stripped._metadata = OrderedDict(paths)  # type: ignore[attr-defined]
    return stripped


def replica_split(batch_size: int, num_gpus: int) -> list[int]:
    """Batch sizes DataParallel hands each GPU: its scatter uses ``tensor.chunk(num_gpus)``, which may make fewer."""
    if batch_size < 1 or num_gpus < 1:
        raise ValueError(f"Need batch_size >= 1 and num_gpus >= 1, got {batch_size} and {num_gpus}.")
    return [len(chunk) for chunk in torch.arange(batch_size).chunk(num_gpus)]


@contextlib.contextmanager
def child_stderr() -> Iterator[list[str]]:
    """Collect what processes started inside the block write to standard error, as a list of lines, filled on exit.

    Children inherit descriptor 2, so their tracebacks bypass ``sys.stderr`` (some Jupyter front ends never show
    them). torch.multiprocessing's warning that it terminates the other children is held back: it names process ids.
    """
    lines: list[str] = []
    spawn_log = logging.getLogger("torch.multiprocessing.spawn")
    level = spawn_log.level
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 2)
        spawn_log.setLevel(logging.ERROR)
        try:
            yield lines
        finally:
            spawn_log.setLevel(level)
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            lines.extend(sink.read().decode(errors="replace").splitlines())


def wait_for_exit(processes: Sequence[Any], timeout: float) -> None:
    """Wait until every one of ``processes`` (multiprocessing) has exited; after ``timeout`` s, stop them, TimeoutError.

    ``ProcessContext.join`` called after this finds every child ended and checks them in order: when several fail alike
    it names the lowest-numbered one every time, not whichever the operating system reported first.
    """
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


SCRIPT = "helpers.ddp_train"
STOP_GRACE = 40.0
"""Seconds torchrun gets to stop its workers after SIGTERM (it gives them 30 s) before it is killed."""
CPU_PROCESSES = 2
"""How many gloo processes a plan without GPUs starts: the fewest that have something to synchronise."""


def _torchrun_args(nproc: int, script_args: Sequence[str], module: str) -> list[str]:
    """What follows ``torchrun`` on the command line (--standalone: a rendezvous on this machine, on a free port)."""
    return ["--standalone", f"--nproc_per_node={nproc}", "-m", module, *script_args]


def torchrun_command(nproc: int, script_args: Sequence[str] = (), module: str = SCRIPT) -> list[str]:
    """``torchrun --standalone --nproc_per_node=N -m helpers.ddp_train ...`` run by this Python (same environment)."""
    # python -m torch.distributed.run is what the torchrun command runs; no PATH lookup can pick another Python.
    return [sys.executable, "-m", "torch.distributed.run", *_torchrun_args(nproc, script_args, module)]


def torchrun_line(nproc: int, script_args: Sequence[str] = (), module: str = SCRIPT) -> str:
    """The same launch as one would type it in a terminal: ``torchrun --standalone ...``."""
    return shlex.join(["torchrun", *_torchrun_args(nproc, script_args, module)])


class ProcessPlan(NamedTuple):
    """How many processes a launch starts, the backend that connects them, and the script's ``--device``."""

    nproc: int
    backend: str
    device: str

    def describe(self) -> str:
        """One line a learner reads: what will run, and why."""
        if self.backend == "nccl":
            s = "s" if self.nproc > 1 else ""
            return f"{self.nproc} process{'es' if s else ''} with nccl, one per visible GPU ({self.nproc} GPU{s})"
        return f"{self.nproc} CPU processes with gloo"


def process_plan(device_type: str, gpu_count: int) -> ProcessPlan:
    """One process per visible GPU with nccl when the lesson's device is a CUDA GPU; else two CPU processes, gloo.

    A machine with one GPU runs one nccl process: DDP over a world of one, with the same ``set_device`` and nccl
    set-up as on eight GPUs. Other accelerators (MPS, XPU) and the CPU get gloo on CPU processes.
    """
    if gpu_count < 0:
        raise ValueError(f"gpu_count cannot be negative, got {gpu_count}.")
    if device_type == "cuda" and gpu_count >= 1:
        return ProcessPlan(gpu_count, "nccl", "cuda")
    return ProcessPlan(CPU_PROCESSES, "gloo", "cpu")


def failure_demo_plan(plan: ProcessPlan) -> ProcessPlan:
    """The plan for a failing-rank demo: ``plan`` when it has a second process to be left waiting, else two on CPUs."""
    return plan if plan.nproc >= 2 else ProcessPlan(CPU_PROCESSES, "gloo", "cpu")


def fail_rank_problem(fail_rank: int, world_size: int) -> str | None:
    """Why ``--fail-rank`` cannot work with ``world_size`` processes, with the fix; None when it can."""
    if fail_rank == -1 or 0 <= fail_rank < world_size:
        return None
    ranks = "0" if world_size == 1 else f"0 to {world_size - 1}"
    return (
        f"--fail-rank {fail_rank} names no rank of this job: with {world_size} process"
        f"{'es' if world_size != 1 else ''} the ranks are {ranks}. Pick one of them, or -1 (the default) for no "
        "failing rank."
    )


def _fail_rank_in(script_args: Sequence[str]) -> int | None:
    """The value of ``--fail-rank`` in ``script_args``, if it is there and an integer (else the script complains)."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--fail-rank")
    found = p.parse_known_args(script_args)[0].fail_rank
    return int(found) if found is not None and found.lstrip("-").isdigit() else None


def _stop(process: subprocess.Popen) -> None:
    """End torchrun so that it takes its workers with it: SIGTERM first, SIGKILL only if it does not exit."""
    # SIGKILL (what subprocess.run sends on a timeout) cannot be caught: torchrun would die at once and leave its
    # workers, which run in sessions of their own, alive. On SIGTERM it stops them (SIGTERM, then SIGKILL after its
    # own 30 s) and exits.
    process.terminate()
    try:
        process.wait(timeout=STOP_GRACE)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def torchrun(
    nproc: int, script_args: Sequence[str] = (), timeout: float = 120.0, module: str = SCRIPT
) -> subprocess.CompletedProcess[str]:
    """Run ``module`` (the lesson 07 script by default) under torchrun from a notebook and capture its output.

    After ``timeout`` seconds (or on Ctrl-C / a kernel interrupt) torchrun is asked to stop its workers and exit;
    a timeout then raises subprocess.TimeoutExpired carrying the output so far. No worker is left running.
    A ``--fail-rank`` that names no rank of ``nproc`` processes raises ValueError before anything starts.
    """
    fail_rank = _fail_rank_in(script_args)
    if module == SCRIPT and fail_rank is not None:  # refuse what the script would refuse, before anything starts
        problem = fail_rank_problem(fail_rank, nproc)
        if problem:
            raise ValueError(problem)
    command = torchrun_command(nproc, script_args, module)
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}  # minus torchrun's warning
    # Files rather than pipes: reading a pipe waits until every process holding it has exited.
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(command, stdout=out, stderr=err, text=True, env=env)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop(process)
            out.seek(0), err.seek(0)
            raise subprocess.TimeoutExpired(command, timeout, output=out.read(), stderr=err.read()) from None
        except BaseException:  # KeyboardInterrupt: the notebook's stop button
            _stop(process)
            raise
        out.seek(0), err.seek(0)
        return subprocess.CompletedProcess(command, process.returncode, out.read(), err.read())


def root_cause(stderr: str) -> list[str]:
    """From torchrun's failure report: the failed rank, its exit code and its last error line (no paths or times)."""
    lines = stderr.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("Root Cause")]
    if not starts:
        return []
    block = []
    for line in lines[starts[-1] + 1 :]:
        if line.startswith("="):
            break
        block.append(line.strip())
    found = []
    for text in block:
        key, _, value = text.partition(":")
        if key.strip() in ("rank", "exitcode"):
            found.append(f"{key.strip()}: {value.split('(pid')[0].strip()}")
    found += [text for text in block if text][-1:]  # with @record in the worker, the traceback ends with the error
    return found


def say(line: str, stream: IO[str] | None = None) -> None:
    """Print one line with a single write, so that lines of processes sharing a terminal or file never interleave.

    ``print`` writes the text and the newline separately when the stream is unbuffered (``python -u``,
    ``PYTHONUNBUFFERED=1``), and another rank's line can land between the two.
    """
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


PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "Broken pipe")
"""How gloo words a collective whose peer process has exited (torch 2.8 says it at once; 2.14 may just wait)."""


def lost_a_peer(exc: BaseException) -> bool:
    """Whether a collective failed because another rank's process went away, not because of this rank."""
    return any(text in str(exc) for text in PEER_GONE)
