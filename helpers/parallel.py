"""Helpers for models wrapped in ``nn.DataParallel`` or ``DistributedDataParallel`` (lesson 06), and for processes
started from a notebook: torchrun and its plan, timeouts, stopping, and what the children wrote (lesson 07)."""

from __future__ import annotations

import argparse
import contextlib
import itertools
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

PREFIX = "module."  # what a wrapper adds in front of every key of the wrapped model's state dict

V = TypeVar("V")


def strip_module_prefix(state_dict: Mapping[str, V]) -> OrderedDict[str, V]:
    """A copy of ``state_dict`` with a leading "module." removed from each key (not a later one: ``enc.module.w``)."""
    stripped: OrderedDict[str, V] = OrderedDict((key.removeprefix(PREFIX), value) for key, value in state_dict.items())
    if len(stripped) != len(state_dict):
        raise ValueError('Stripping "module." would merge two keys; this state dict mixes wrapped and unwrapped keys.')
    metadata = getattr(state_dict, "_metadata", None)
    if metadata is not None:
        # load_state_dict reads per-module versions from _metadata, keyed by module path; "module" becomes the root "".
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
    """Collect the lines child processes started in the block write to descriptor 2 (not ``sys.stderr``), on exit."""
    lines: list[str] = []
    spawn_log = logging.getLogger("torch.multiprocessing.spawn")
    level = spawn_log.level
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 2)
        spawn_log.setLevel(logging.ERROR)  # its warning that it terminates the other children names process ids
        try:
            yield lines
        finally:
            spawn_log.setLevel(level)
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            lines.extend(sink.read().decode(errors="replace").splitlines())


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


SCRIPT = "helpers.ddp_train"
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
    A timeout raises subprocess.TimeoutExpired with the output so far; a bad ``--fail-rank`` raises ValueError first."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--fail-rank")
    fail_rank = parser.parse_known_args(script_args)[0].fail_rank
    if module == SCRIPT and fail_rank is not None and fail_rank.lstrip("-").isdigit():  # else the script complains
        problem = fail_rank_problem(int(fail_rank), nproc)
        if problem:
            raise ValueError(problem)
    command = torchrun_command(nproc, script_args, module)
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}  # minus torchrun's warning
    # Files rather than pipes: reading a pipe waits until every process holding it has exited.
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(command, stdout=out, stderr=err, text=True, env=env)
        try:
            process.wait(timeout=timeout)
        except BaseException as exc:  # the timeout, or KeyboardInterrupt: the notebook's stop button
            # SIGTERM: torchrun then stops its workers (in sessions of their own) and exits; SIGKILL would orphan them.
            process.terminate()
            try:
                process.wait(timeout=STOP_GRACE)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            if not isinstance(exc, subprocess.TimeoutExpired):
                raise
            out.seek(0), err.seek(0)
            raise subprocess.TimeoutExpired(command, timeout, output=out.read(), stderr=err.read()) from None
        out.seek(0), err.seek(0)
        return subprocess.CompletedProcess(command, process.returncode, out.read(), err.read())


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
