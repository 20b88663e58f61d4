"""Lessons 12-13's two-agent set-up under faults: an agent killed or stopped, a launcher's stray processes, restarts
that run out. Each fault is made for real, bounded by short timeouts, and every process a test starts is ended."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import distributed, nodes
from lessons import lesson_13 as elastic_train

ROOT = Path(__file__).resolve().parent.parent
LONG_RUN = ["--device", "cpu", "--steps", "100000", "--every", "100000", "--synthetic-size", "64", "--timeout", "10"]


def alive(pid: int) -> bool:
    """Whether ``pid`` is a running process (not a zombie waiting to be reaped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (read from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
    return found


def wait_until(condition, timeout: float, step: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(step)
    return condition()


@contextlib.contextmanager
def agents(commands: list[list[str]], env: dict[str, str], pause: float = 3.0) -> Iterator[list[subprocess.Popen]]:
    """Start each agent in a session of its own, ``pause`` seconds apart (the first hosts the store); at the end kill
    every process of those sessions and every worker the agents started, whether or not its agent is still there."""
    started: list[subprocess.Popen] = []
    workers: set[int] = set()
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **env}
    try:
        for command in commands:
            started.append(
                subprocess.Popen(command, cwd=ROOT, env=full_env, start_new_session=True, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            )  # fmt: skip
            time.sleep(pause)
        yield started
    finally:
        for agent in started:
            workers.update(children(agent.pid))
            with contextlib.suppress(ProcessLookupError):
                os.killpg(agent.pid, signal.SIGKILL)
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for agent in started:
            agent.wait(30)
            agent.stdout.close()


pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads processes from /proc")


def test_agent_commands_bound_the_wait_at_the_rendezvous() -> None:
    command = nodes.agent_command(2, 1, "127.0.0.1:29500", "job", ["--steps", "4"])
    assert f"--rdzv-conf={nodes.JOIN_TIMEOUT}" in command and nodes.JOIN_TIMEOUT == "join_timeout=60"
    assert not any(word.startswith("--rdzv-conf") for word in nodes.agent_command(2, 1, "h:1", "j", rdzv_conf=""))


def _result(command: list[str], code: int, stderr: str) -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess(command, code, "", stderr)


def test_outcome_says_why_each_node_ended() -> None:
    command = nodes.agent_command(2, 1, "h:1", "j", max_restarts=3, rdzv_conf="join_timeout=15")
    failed = "".join(
        f"E1128 api.py:1002] failed (exitcode: 2) local_rank: 0 (pid: {n}) of binary: python\n" for n in range(4)
    )
    failed += "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
    assert nodes.outcome(_result(command, 1, failed)) == (
        "exit code 1, ChildFailedError: its workers failed 4 times, the last with no restart left (--max-restarts 3); "
        "it ended the job"
    )
    closed = "torch.distributed.elastic.rendezvous.api.RendezvousClosedError\n"
    assert nodes.outcome(_result(command, 1, closed)).endswith(
        "RendezvousClosedError: another node ended the job and closed the rendezvous (out of restarts, or stopped), so "
        "none can rejoin"
    )
    waited = "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError\n"
    assert nodes.outcome(_result(command, 1, waited)).endswith("within join_timeout (15 s, its --rdzv-conf)")


@pytest.mark.slow
def test_run_together_ends_a_process_whose_parent_is_gone() -> None:
    """A parent that starts a child in a session of its own (as torchrun starts its workers) and is then stopped: the
    child must not outlive the launch."""
    script = textwrap.dedent(
        """
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
        print(child.pid, flush=True)
        if sys.argv[1] == "wait":
            time.sleep(300)
        """
    )
    for how in ("wait", "exit"):  # stopped at the deadline; or ended at once, leaving its child behind
        [result] = distributed.run_together([[sys.executable, "-c", script, how]], timeout=5)
        pid = int(result.stdout.split()[0])
        try:
            assert not alive(pid), f"the child of a launched process ({how}) is still running"
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_a_worker_stops_when_its_agent_is_killed(tmp_path: Path) -> None:
    """SIGKILL to the agent that hosts the store: its worker stops at once instead of training on alone."""
    endpoint = f"{nodes.HOST}:{nodes.free_port()}"
    command = nodes.agent_command(2, 1, endpoint, "lost", [*LONG_RUN, "--out", str(tmp_path)], max_restarts=3,
                                  rdzv_conf="join_timeout=20", local_addr=nodes.HOST)  # fmt: skip
    with agents([command, command], nodes.NO_SHARED_STORE) as (host, other):
        assert wait_until(lambda: (tmp_path / elastic_train.LOSSES).exists(), 90), "training never started"
        [worker] = children(host.pid)
        host.kill()
        host.wait(10)
        assert wait_until(lambda: not alive(worker), 5), "the worker trained on after its agent was killed"
        other.wait(60)  # its worker loses its peer within --timeout; the store is gone, so it cannot start again
        said = other.stdout.read()
        assert other.returncode != 0 and "Rendezvous" in said, said[-3000:]


@pytest.mark.slow
def test_a_node_whose_peer_agent_stopped_ends_within_its_join_timeout(tmp_path: Path) -> None:
    """SIGTERM to the other node's agent: this node's worker fails within --timeout, its agent starts a new round of
    the rendezvous, and gives up after join_timeout, saying so."""
    endpoint = f"{nodes.HOST}:{nodes.free_port()}"
    command = nodes.agent_command(2, 1, endpoint, "peer", [*LONG_RUN, "--out", str(tmp_path)], max_restarts=3,
                                  rdzv_conf="join_timeout=15", local_addr=nodes.HOST)  # fmt: skip
    with agents([command, command], nodes.NO_SHARED_STORE) as (host, other):
        assert wait_until(lambda: (tmp_path / elastic_train.LOSSES).exists(), 90), "training never started"
        other.terminate()
        other.wait(45)
        start = time.monotonic()
        host.wait(10 + 15 + 35)  # --timeout, join_timeout, and the slack of a busy machine
        print(f"agent 0 ended {time.monotonic() - start:.0f} s after agent 1")
        said = host.stdout.read()
        result = subprocess.CompletedProcess(command, host.returncode, "", said)
        assert nodes.outcome(result) == (
            "exit code 1, RendezvousTimeoutError: the other nodes did not all join within join_timeout (15 s, its "
            "--rdzv-conf)"
        ), said[-3000:]
