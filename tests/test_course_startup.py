"""The runner's first seconds: started with a Python that lacks what it needs (the system ``python3`` instead of
``.venv/bin/python``), it says so in one line with the fix; stopped by Ctrl-C while it loads or checks its arguments
(the device check runs a child Python that loads torch), it says so in one line and exits 130, without a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from children import start_interruptible

pytestmark = pytest.mark.slow  # the runner started by a bare Python, or stopped while torch imports

ROOT = Path(__file__).resolve().parent.parent


def _bare_python(where: Path) -> Path:
    """A Python with the standard library alone, as the system ``python3`` of a fresh machine is."""
    venv.create(where, with_pip=False)
    return where / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")


def test_a_python_without_the_course_environment_is_named_with_the_fix(tmp_path: Path) -> None:
    python = _bare_python(tmp_path / "bare")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(
        [str(python), "-m", "tools.course", "run", "--quick"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"python -m tools.course: this Python ({python}) has no ")
    assert lines[0].startswith(f"python -m tools.course: this Python ({python}) has no nbformat, which runs")
    assert "from the clone's root with the course's environment: .venv/bin/python -m tools.course" in lines[0]


def test_list_needs_nothing_beyond_the_standard_library(tmp_path: Path) -> None:
    python = _bare_python(tmp_path / "bare")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(
        [str(python), "-m", "tools.course", "list"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


STOP_WHILE_IMPORTING = """
import runpy, sys

class CtrlC:  # Ctrl-C arriving while the runner loads its modules, at the same moment every time
    def find_spec(self, name, path=None, target=None):
        if name == "helpers":
            raise KeyboardInterrupt

sys.meta_path.insert(0, CtrlC())
sys.argv = ["tools.course", *sys.argv[1:]]
runpy.run_module("tools.course", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("command", [["run", "--quick"], ["list"]])
def test_ctrl_c_while_the_runner_loads_prints_one_line_and_exits_130(command: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-c", STOP_WHILE_IMPORTING, *command],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert done.returncode == 130, done.stderr
    assert done.stderr == "Stopped by SIGINT before any notebook started.\n"


def test_a_real_ctrl_c_during_the_device_check_prints_one_line_and_exits_130(tmp_path: Path) -> None:
    """The device check is the one that loads torch (in a child Python), so it is where a Ctrl-C lands in practice."""
    import signal
    import time

    import psutil

    process = start_interruptible(
        [sys.executable, "-m", "tools.course", "run", "--quick", "--device", "cpu:0", "--output", str(tmp_path)]
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and process.poll() is None and not psutil.Process(process.pid).children():
            time.sleep(0.01)  # until the child that checks the device has started
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:  # a runner that missed the signal goes on to run the lessons: stop it as a user would, then for good
        if process.poll() is None:
            process.terminate()
            try:
                process.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()
    assert process.returncode == 130, err
    assert "Traceback" not in err and err.strip().splitlines() == ["Stopped by SIGINT before any notebook started."]
    assert not any(tmp_path.iterdir()), "nothing may start"
