"""Lesson 15: hangs staged in two gloo processes, and the ways to find them.

``python -m lessons.lesson_15 --rank R --world W --port P --scene NAME`` is one rank of a staged hang; ``stage``
starts every rank of one, bounded by a deadline, and ends every process it started. The scenes:

- ``skip``: the culprit rank does other work instead of the collective the others wait in;
- ``shape``, ``op``, ``order``: both ranks call collectives, but not the same ones;
- ``barrier``: rank 0 waits in ``monitored_barrier`` while the culprit does other work;
- ``leave``: the culprit leaves after training while rank 0 still calls one more collective; ``--clean`` gives
  both ranks the same collectives, a final barrier and ``destroy_process_group``;
- ``crash``: the culprit raises (for torchrun's ``@record``).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import faulthandler
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from helpers import distributed
from helpers.distributed import say
from helpers.nodes import free_port

SCENES = ("skip", "shape", "op", "order", "barrier", "leave", "crash")
COLLECTIVES = ("all_reduce", "broadcast", "all_gather", "barrier")
READY = "ready"  # the word each rank prints, with its process id, just before the scene starts


def other_work(seconds: float) -> None:
    """What the culprit does instead of the collective: anything long, here a sleep."""
    time.sleep(seconds)


def collective(name: str) -> None:
    """Call the collective ``name`` on a small tensor, as every rank of a training step would."""
    x = torch.ones(4)
    if name == "all_reduce":
        dist.all_reduce(x)
    elif name == "broadcast":
        dist.broadcast(x, src=0)
    elif name == "all_gather":
        dist.all_gather([torch.empty(4) for _ in range(dist.get_world_size())], x)
    else:
        dist.barrier()


def play(scene: str, rank: int, culprit: int, name: str, timeout: float, clean: bool = False) -> None:
    """This rank's part of ``scene``; the culprit is the rank that does something else."""
    if scene == "skip":
        if rank == culprit:
            other_work(timeout + 1)  # past the others' timeout; then it goes on, past the collective it skipped
        else:
            collective(name)
    elif scene == "shape":  # the same collective on tensors of another size
        dist.all_reduce(torch.ones(5 if rank == culprit else 4))
    elif scene == "op":  # another collective
        collective("broadcast" if rank == culprit else "all_reduce")
    elif scene == "order":  # the same two collectives in another order
        for each in ("broadcast", "all_reduce") if rank == culprit else ("all_reduce", "broadcast"):
            collective(each)
    elif scene == "barrier":
        if rank == culprit:
            other_work(timeout + 1)
        else:
            dist.monitored_barrier(timeout=datetime.timedelta(seconds=timeout), wait_all_ranks=True)
    elif scene == "leave":
        dist.all_reduce(torch.ones(4))  # the last training step, on every rank
        if rank != culprit or clean:  # clean: every rank calls the same collectives
            dist.all_reduce(torch.ones(1))  # one more, for rank 0's log
    elif scene == "crash" and rank == culprit:
        raise ValueError(f"rank {rank} fails on purpose (--scene crash)")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m lessons.lesson_15", description="One rank of a staged hang.")
    parser.add_argument("--scene", choices=SCENES, required=True)
    parser.add_argument("--rank", type=int, default=int(os.environ.get("RANK", 0)))
    parser.add_argument("--world", type=int, default=int(os.environ.get("WORLD_SIZE", 2)))
    parser.add_argument("--port", type=int, default=0, help="rank 0's port; 0: the group of torchrun's variables")
    parser.add_argument("--culprit", type=int, default=1)
    parser.add_argument("--collective", choices=COLLECTIVES, default="all_reduce")
    parser.add_argument("--timeout", type=float, default=3.0, help="the group's timeout, seconds")
    parser.add_argument("--clean", action="store_true", help="leave with a final barrier and destroy_process_group")
    parser.add_argument("--bare", action="store_true", help="run without @record, to see torchrun's report then")
    parser.add_argument("--record-to", default="", help="write this rank's flight recorder to PREFIX<rank>")
    return parser.parse_args(argv)


def run_rank(argv: Sequence[str] | None = None) -> int:
    """One rank: join the group, say it is ready, play the scene; report how it ended, and leave."""
    args = parse_args(argv)
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1 PID` prints every thread's stack
    init = f"tcp://127.0.0.1:{args.port}" if args.port else "env://"
    timeout = datetime.timedelta(seconds=args.timeout)
    dist.init_process_group("gloo", init_method=init, rank=args.rank, world_size=args.world, timeout=timeout)
    rank = dist.get_rank()
    dist.all_reduce(torch.ones(1))  # every rank has joined
    say(f"[rank {rank}] {READY}, process {os.getpid()}")
    start = time.monotonic()
    try:
        play(args.scene, rank, args.culprit, args.collective, args.timeout, args.clean)
        say(f"[rank {rank}] done after {time.monotonic() - start:.1f} s")
    except ValueError:  # the crash scene: leave the group first, so that gloo's threads do not outlive it
        dist.destroy_process_group()
        raise
    except RuntimeError as exc:
        first = (str(exc).strip() or type(exc).__name__).splitlines()[0]
        say(f"[rank {rank}] {type(exc).__name__} after {time.monotonic() - start:.1f} s: {first}")
        if args.record_to:
            write_flight_record(args.record_to, rank)
        with contextlib.suppress(RuntimeError):
            dist.destroy_process_group()
        return 1
    if args.record_to:
        write_flight_record(args.record_to, rank)
    if args.scene == "leave" and not args.clean:
        return 0  # no barrier, no destroy_process_group: the process just ends
    with contextlib.suppress(RuntimeError):
        dist.barrier()  # nobody leaves while another rank still needs it
    dist.destroy_process_group()
    return 0


def write_flight_record(prefix: str, rank: int) -> None:
    """This rank's flight recorder, pickled as a dump on timeout would be, to ``prefix<rank>``. The call is
    private (``torch._C``): with gloo no dump is written on a timeout, so the rank writes its own."""
    Path(f"{prefix}{rank}").write_bytes(torch._C._distributed_c10d._dump_fr_trace(True, True))


@record  # under torchrun, a worker's traceback goes to TORCHELASTIC_ERROR_FILE and into torchrun's report
def main(argv: Sequence[str] | None = None) -> int:
    return run_rank(argv)


# ---- From the notebook: start every rank of a scene, with a deadline, and end them all. ----


class Staged(NamedTuple):
    """What the ranks of one staged scene said and how each ended; ``seconds`` from start to the last exit."""

    said: list[str]  # each rank's stdout and stderr, in that order
    exits: list[int | None]  # None: still running at the deadline, then killed
    seconds: float


def rank_command(rank: int, world: int, port: int, scene: str, extra: Sequence[str] = ()) -> list[str]:
    return [sys.executable, "-m", __name__, "--rank", str(rank), "--world", str(world), "--port", str(port),
            "--scene", scene, *extra]  # fmt: skip


def stage(
    scene: str,
    extra: Sequence[str] = (),
    world: int = 2,
    deadline: float = 30.0,
    env: dict[str, str] | None = None,
    while_hanging: Callable[[list[int]], None] | None = None,
    end_after: bool = False,
) -> Staged:
    """Start ``world`` ranks of ``scene`` and wait, ``deadline`` seconds at most, until every one has exited.
    ``while_hanging(pids)`` runs once every rank has said it is ready; with ``end_after`` the ranks are then killed
    rather than left to their timeouts. Each rank runs in a session of its own; at the
    end any rank still running is killed with its session, so no process outlives the call."""
    port, started = free_port(), time.monotonic()
    environment = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    with contextlib.ExitStack() as files:
        logs = [files.enter_context(tempfile.TemporaryFile("w+")) for _ in range(world)]
        ranks: list[subprocess.Popen] = []
        try:
            for rank, log in enumerate(logs):
                command = rank_command(rank, world, port, scene, extra)
                ranks.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, text=True,
                                              env=environment, start_new_session=True))  # fmt: skip
            end = started + deadline
            if while_hanging is not None:
                while time.monotonic() < end and not all(_said(log, READY) for log in logs):
                    if any(p.poll() is not None for p in ranks):
                        break
                    time.sleep(0.05)
                time.sleep(0.5)  # the waiting ranks are inside the collective by now
                while_hanging([p.pid for p in ranks])
                if end_after:
                    end = time.monotonic()
            for p in ranks:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(timeout=max(end - time.monotonic(), 0.01))
            seconds = time.monotonic() - started
            exits = [p.poll() for p in ranks]
        finally:
            for p in ranks:
                if p.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
        said = []
        for log in logs:
            log.seek(0)
            said.append(log.read())
    return Staged(said, exits, seconds)


def _said(log, word: str) -> bool:
    log.seek(0)
    return word in log.read()


def send_to_each(signum: int) -> Callable[[list[int]], None]:
    """A ``while_hanging`` that sends ``signum`` to every rank, as `kill -USR1 PID` would from a terminal."""

    def send(pids: list[int]) -> None:
        for pid in pids:
            os.kill(pid, signum)
        time.sleep(0.3)  # faulthandler writes from the signal handler at once

    return send


def stacks(said: str) -> list[str]:
    """The frames of faulthandler's dump in a rank's output, innermost first, as ``function (file)``."""
    frames = []
    for line in said.splitlines():
        line = line.strip()
        if line.startswith('File "') and " in " in line:
            path, _, function = line.rpartition(" in ")
            file = Path(path.split('"')[1]).name
            frames.append(f"{function} ({file})")
    return frames


def stopped_mid_run(command: Sequence[str], log: Path, after_step: int, timeout: float = 120.0) -> Staged:
    """Start ``command`` (torchrun), and once ``log`` holds ``after_step`` lines send torchrun SIGTERM, as SLURM does
    when it preempts a job. torchrun passes it on to its workers. Every process the launch started is marked and, if
    still running at the end, killed."""
    mark = secrets.token_hex(6)
    env = {**os.environ, "OMP_NUM_THREADS": "1", distributed.LAUNCH_MARK: mark}
    started = time.monotonic()
    with tempfile.TemporaryFile("w+") as out:
        agent = subprocess.Popen(list(command), stdout=out, stderr=subprocess.STDOUT, text=True, env=env,
                                 start_new_session=True)  # fmt: skip
        try:
            while time.monotonic() - started < timeout and agent.poll() is None:
                if log.exists() and len(log.read_text().splitlines()) >= after_step:
                    agent.send_signal(signal.SIGTERM)
                    break
                time.sleep(0.02)
            with contextlib.suppress(subprocess.TimeoutExpired):
                agent.wait(timeout=max(timeout - (time.monotonic() - started), 0.01))
        finally:
            for pid in [agent.pid] * (agent.poll() is None) + distributed.marked_processes(mark):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            agent.wait()
        out.seek(0)
        return Staged([out.read()], [agent.returncode], time.monotonic() - started)


GLOO_SOURCE = re.compile(r"\[(?:enforce fail at )?/\S+\.(?:cc|cpp|h):\d+\] ")
NOISE = re.compile(r"^\[Gloo\] |^\[rank\d+\]:\[[EWI]\d+|^\[rank \d+\] " + READY)


def tidy(staged: Staged) -> list[str]:
    """Each rank's own lines, without gloo's source paths (they differ between builds) or its log lines."""
    lines = []
    for said in staged.said:
        for line in said.splitlines():
            if line.startswith("[rank ") and not NOISE.search(line):
                lines.append(GLOO_SOURCE.sub("", line))
    return lines


FINGERPRINT = re.compile(r"Rank (\d+) is running collective: CollectiveFingerPrint\(SequenceNumber=(\d+), "
                         r"OpType=(\w+), TensorShape=\[([^\]]*)\]")  # fmt: skip


def fingerprints(line: str) -> str:
    """TORCH_DISTRIBUTED_DEBUG=DETAIL's mismatch message, with each rank's call in one short phrase."""
    calls = [f"rank {r} runs {op} #{seq} on shape [{shape}]" for r, seq, op, shape in FINGERPRINT.findall(line)]
    return "; ".join(calls)


NCCL_PROBE = """
import os, torch, torch.distributed as dist
dist.init_process_group("nccl", init_method="tcp://127.0.0.1:" + os.environ["PROBE_PORT"], rank=0, world_size=1)
x = torch.ones(1, device="cuda:0")
dist.all_reduce(x)
torch.cuda.synchronize()
dist.destroy_process_group()
"""


def nccl_first_lines(count: int = 8, timeout: float = 60.0) -> list[str]:
    """The first ``count`` lines NCCL_DEBUG=INFO prints for a one-process nccl group on GPU 0."""
    env = {**os.environ, "NCCL_DEBUG": "INFO", "PROBE_PORT": str(free_port())}
    done = subprocess.run([sys.executable, "-c", NCCL_PROBE], capture_output=True, text=True, env=env, timeout=timeout)
    return [line for line in (done.stdout + done.stderr).splitlines() if "NCCL INFO" in line][:count]


if __name__ == "__main__":
    arguments = sys.argv[1:]
    sys.exit(run_rank(arguments) if "--bare" in arguments else main(arguments))
