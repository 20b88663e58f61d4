"""tools.execute.stop_child_processes: ends what a notebook started, however deep and in whatever session, and
nothing else."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

from tools import execute

pytestmark = pytest.mark.slow  # process trees with grace periods

SLEEP = [sys.executable, "-c", "import time; time.sleep(600)"]
PARENT = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True)\n"
    "print(child.pid, flush=True)\n"
    "time.sleep(600)\n"
)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_the_tree_is_ended_and_the_kept_process_is_not():
    kept = subprocess.Popen(SLEEP)
    try:
        keep = execute.child_pids()
        assert kept.pid in keep
        parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
        grandchild = int(parent.stdout.readline())
        # a process that ignores SIGTERM, as a stuck worker might: it must get SIGKILL after the grace period
        stubborn = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                "print('ready', flush=True); time.sleep(600)",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert stubborn.stdout.readline().strip() == "ready"
        began = time.monotonic()
        assert execute.stop_child_processes(keep=keep, grace=1.0) == 3
        assert time.monotonic() - began < 10
        parent.wait(timeout=10)
        stubborn.wait(timeout=10)
        assert parent.returncode == -15 and stubborn.returncode == -9
        assert not _alive(grandchild)
        assert kept.poll() is None, "a process the caller kept must go on running"
    finally:
        kept.kill()
        kept.wait()
