"""Ctrl-C in the two long command-line runs, ``python -m lessons.lesson_11`` and ``tools/ddp_stress.py``: as with the
course runner, one line, exit status 130, no traceback, and every process the command started has ended. The signal
goes to the command's whole process group, as a terminal's Ctrl-C does."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.slow  # each starts a command that loads torch and runs for a while

ROOT = Path(__file__).resolve().parent.parent


def descendants(process: psutil.Process) -> list[psutil.Process]:
    """Every process ``process`` has started, as far as they can be read now: a child that ends while psutil walks the
    tree makes the walk fail, and the next poll reads it again."""
    try:
        return process.children(recursive=True)
    except psutil.Error:
        return []


def _interrupt(command: list[str], ready: Callable[[subprocess.Popen, psutil.Process], bool]) -> tuple[int, str, list]:
    """Start ``command`` in a session of its own, wait until ``ready``, send SIGINT to its process group; its exit
    status, its stderr, and the processes it had started that are still running afterwards."""
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    me = psutil.Process(process.pid)
    started: set[psutil.Process] = set()
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None and not ready(process, me):
            started |= set(descendants(me))
            time.sleep(0.05)
        started |= set(descendants(me))
        assert process.poll() is None, "the command ended before it could be interrupted"
        os.killpg(process.pid, signal.SIGINT)
        _, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
    _, alive = psutil.wait_procs(list(started), timeout=10)
    left = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    for p in left:
        p.kill()
    return process.returncode, err, left


def test_ctrl_c_ends_the_speedrun_with_one_line() -> None:
    def training(process: subprocess.Popen, me: psutil.Process) -> bool:
        return bool(process.stdout.readline())  # the loader's share is printed: the ladder starts

    code, err, left = _interrupt(
        [sys.executable, "-m", "lessons.lesson_11", "--quick", "--runs", "2", "--device", "cpu", "--no-progress"],
        training,
    )
    assert code == 130, err
    assert err == "Stopped by SIGINT before the ladder finished; nothing was written.\n"
    assert left == []


def command_of(process: psutil.Process) -> list[str]:
    """A process's command line; empty for one that has ended or is a zombie by the time it is asked."""
    try:
        return process.cmdline()
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return []


def test_ctrl_c_ends_the_ddp_stress_run_and_its_launch_with_one_line() -> None:
    def launching(process: subprocess.Popen, me: psutil.Process) -> bool:
        workers = [p for p in descendants(me) if "lessons.lesson_07" in " ".join(command_of(p))]
        return len(workers) >= 2  # torchrun's two workers have started

    code, err, left = _interrupt([sys.executable, "tools/ddp_stress.py", "--launches", "3", "--busy", "1"], launching)
    assert code == 130, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Stopped by SIGINT after 0 of 3 launches"), err
    assert left == []
