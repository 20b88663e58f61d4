"""Several nodes, rehearsed on one machine: torchrun agents that meet at a c10d rendezvous (lessons 12 and 13).

On a cluster every node runs the same torchrun command; only the machine differs. Here each "node" is one more
torchrun agent on this machine, all pointed at one rendezvous endpoint on a free local port::

    torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:29517 --rdzv-id job1 \\
        --local-addr 127.0.0.1 -m lessons.lesson_13          # typed once per node

``rehearse`` starts them together with a timeout, and ends every process it started whatever happens.
"""

from __future__ import annotations

import itertools
import re
import shlex
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence

from helpers.distributed import run_together

SCRIPT = "lessons.lesson_13"
HOST = "127.0.0.1"

JOIN_TIMEOUT = "join_timeout=60"
"""The course's ``--rdzv-conf``: a node waits at most 60 s at a rendezvous for the others, the first time and after a
restart, instead of torchrun's default of 600 s; a job whose other node is gone then ends with RendezvousTimeoutError
within a time written in its command."""

NO_SHARED_STORE = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
"""The agents' setting that lets a group restarted after a crash reconnect over gloo every time. By default the c10d
rendezvous lends its own store to the workers, and the store outlives a restart with the previous attempt's gloo
addresses in it, and the workers keep attempts apart by a restart count that each agent keeps for itself
(pytorch/pytorch#135712): the restarted workers may then try to reach peers that no longer exist ("Gloo
connectFullMesh failed ... Connection refused") or wait for them. On this course's two-CPU machine that happened in
some runs and not others, on torch 2.8 as on 2.14 (pytorch/pytorch#167288 reports the same with nccl). With this
set, rank 0's worker hosts a fresh store on a new port for each attempt, and every run recovered on both."""


def looked_up(lookup: Callable[[], str], timeout: float = 10.0) -> str:
    """What ``lookup()`` (a name lookup such as ``socket.getfqdn``) returns, or why there is nothing: the error it
    raised, or that the resolver gave no answer within ``timeout`` seconds (a lookup that never returns would otherwise
    hold the cell; it is left to finish in a daemon thread)."""
    answer: list[str] = []

    def run() -> None:
        try:
            answer.append(lookup())
        except OSError as err:
            answer.append(f"no answer ({err})")

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    return answer[0] if answer else f"no answer within {timeout:g} s"


def free_port(host: str = HOST) -> int:
    """A port nothing listens on now (the system picks it), for a rendezvous endpoint on this machine."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def agent_command(
    nnodes: int | str,
    nproc: int,
    endpoint: str,
    run_id: str,
    script_args: Sequence[str] = (),
    *,
    module: str = SCRIPT,
    max_restarts: int = 0,
    rdzv_conf: str = JOIN_TIMEOUT,
    local_addr: str = "",
) -> list[str]:
    """One node's torchrun command, as ``python -m torch.distributed.run`` (this Python, never another on PATH).
    ``nnodes`` may be a range such as "1:2" (an elastic job); ``rdzv_conf`` passes settings such as
    "join_timeout=20" (seconds a node waits for the others; torchrun's default is 600, the course's ``JOIN_TIMEOUT``
    60; "" for torchrun's defaults); ``local_addr`` is the address
    the other nodes reach this one at (by default torchrun looks up this machine's name)."""
    args = [f"--nnodes={nnodes}", f"--nproc-per-node={nproc}", "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}"]
    args += [f"--rdzv-id={run_id}", f"--max-restarts={max_restarts}"]
    args += [f"--rdzv-conf={rdzv_conf}"] if rdzv_conf else []
    args += [f"--local-addr={local_addr}"] if local_addr else []
    return [sys.executable, "-m", "torch.distributed.run", *args, "-m", module, *script_args]


def agent_line(command: Sequence[str]) -> str:
    """The command as one types it in a terminal: ``torchrun ...``, after the ``NAME=value`` settings of an ``env``
    prefix (``on_gpus``) where there is one."""
    command = list(command)
    settings = []
    if command and command[0] == "env":
        settings = list(itertools.takewhile(lambda word: "=" in word, command[1:]))
        command = command[1 + len(settings) :]
    return shlex.join([*settings, "torchrun", *command[3:]])


def on_gpus(command: Sequence[str], gpus: Sequence[int]) -> list[str]:
    """``command`` seeing only these GPUs (``CUDA_VISIBLE_DEVICES``): on one machine, each agent rehearsing a node
    gets GPUs of its own, as each node of a cluster has its own."""
    return ["env", f"CUDA_VISIBLE_DEVICES={','.join(str(g) for g in gpus)}", *command]


ERROR_LINE = re.compile(r"^(?:[\w.]+\.)?(\w*(?:Error|Exception|Timeout))(?::|$)")


WORKER_FAILED = re.compile(r"failed \(exitcode: -?\d+\) local_rank")  # torchrun's line for each failed worker


def outcome(result: subprocess.CompletedProcess[str] | subprocess.TimeoutExpired) -> str:
    """One agent's result in a line: its exit code, the name of the last error it reported and why the agent ended,
    read from its command and its log; or that it was still waiting at the deadline (and was stopped)."""
    if isinstance(result, subprocess.TimeoutExpired):
        return f"still running after {result.timeout:g} s, then stopped"
    stderr = result.stderr or ""
    names = [m.group(1) for m in map(ERROR_LINE.match, stderr.splitlines()) if m]
    if not names or result.returncode == 0:
        return f"exit code {result.returncode}"
    why = why_it_ended(names[-1], result.args if isinstance(result.args, list) else [], stderr)
    return f"exit code {result.returncode}, {names[-1]}" + (f": {why}" if why else "")


def _option(command: Sequence[str], name: str) -> str | None:
    """The value of ``--name=value`` or ``--name value`` in a torchrun command; None where it is not given."""
    for word, after in itertools.zip_longest(command, command[1:]):
        if word == name:
            return after
        if word.startswith(name + "="):
            return word.split("=", 1)[1]
    return None


def why_it_ended(error: str, command: Sequence[str], stderr: str) -> str:
    """Why an agent that ended with ``error`` ended, in words a learner can act on ("" for an error not known here)."""
    if error == "ChildFailedError":
        failures = len(WORKER_FAILED.findall(stderr))
        restarts = _option(command, "--max-restarts")
        tries = f"{failures} time{'s' if failures != 1 else ''}" if failures else "again"
        if restarts is None:
            return f"its workers failed {tries}, the last with no restart left; it ended the job"
        return (
            f"its workers failed {tries}, the last with no restart left (--max-restarts {restarts}); it ended the job"
        )
    if error == "RendezvousClosedError":
        return "another node ended the job and closed the rendezvous (out of restarts, or stopped), so none can rejoin"
    if error == "RendezvousTimeoutError":
        conf = dict(part.split("=", 1) for part in (_option(command, "--rdzv-conf") or "").split(",") if "=" in part)
        limit = f"{conf['join_timeout']} s, its --rdzv-conf" if "join_timeout" in conf else "600 s, torchrun's default"
        return f"the other nodes did not all join within join_timeout ({limit})"
    if error == "RendezvousConnectionError":
        return "it lost the rendezvous' store: the node hosting it at the endpoint is gone, or another program answers"

    return ""


def rehearse(
    nnodes: int,
    nproc: int,
    script_args: Sequence[str] = (),
    *,
    timeout: float = 120.0,
    module: str = SCRIPT,
    max_restarts: int = 0,
    run_id: str = "course",
    env: dict[str, str] | None = None,
    endpoint: str = "",
    rdzv_conf: str = JOIN_TIMEOUT,
    gpus_per_node: int = 0,
    local_addr: str = HOST,
) -> list[subprocess.CompletedProcess[str] | subprocess.TimeoutExpired]:
    """``nnodes`` agents of ``nproc`` workers each on this machine, meeting at ``endpoint`` (by default a free local
    port); each agent's result (a TimeoutExpired with its output so far for one still running after ``timeout``
    seconds, then stopped). With ``gpus_per_node``, agent i sees GPUs i * gpus_per_node onwards and no others. Each
    agent gives the others ``local_addr`` (by default the loopback address) rather than this machine's full host name,
    which on many machines, a Mac's ``NAME.local`` among them, does not resolve."""
    endpoint = endpoint or f"{HOST}:{free_port()}"
    command = agent_command(
        nnodes,
        nproc,
        endpoint,
        run_id,
        script_args,
        module=module,
        max_restarts=max_restarts,
        rdzv_conf=rdzv_conf,
        local_addr=local_addr,
    )
    commands = [command] * nnodes
    if gpus_per_node:
        commands = [on_gpus(command, range(i * gpus_per_node, (i + 1) * gpus_per_node)) for i in range(nnodes)]
    return run_together(commands, timeout, env)
