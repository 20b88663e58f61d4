"""The runner's first seconds: started with a Python that lacks what it needs (the system ``python3`` instead of
``.venv/bin/python``), it says so in one line with the fix; stopped by Ctrl-C while torch imports, it says so in one
line and exits 130, without a traceback."""

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


@pytest.mark.parametrize("command", ["run", "list"])
def test_a_python_without_the_course_environment_is_named_with_the_fix(command: str, tmp_path: Path) -> None:
    python = _bare_python(tmp_path / "bare")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    args = ["run", "--quick"] if command == "run" else ["list"]
    done = subprocess.run(
        [str(python), "-m", "tools.course", *args],
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
    assert "from the clone's root with the course's environment: .venv/bin/python -m tools.course" in lines[0]


STOP_WHILE_IMPORTING = """
import runpy, sys

class CtrlC:  # Ctrl-C arriving while torch imports, at the same moment every time
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            raise KeyboardInterrupt

sys.meta_path.insert(0, CtrlC())
sys.argv = ["tools.course", *sys.argv[1:]]
runpy.run_module("tools.course", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("command", [["run", "--quick"], ["list"]])
def test_ctrl_c_while_torch_imports_prints_one_line_and_exits_130(command: list[str]) -> None:
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


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc to see torch loading")
def test_a_real_ctrl_c_while_torch_loads_prints_one_line_and_exits_130(tmp_path: Path) -> None:
    import signal
    import time

    process = start_interruptible([sys.executable, "-m", "tools.course", "run", "--quick", "--output", str(tmp_path)])
    try:
        deadline = time.monotonic() + 60
        maps = Path(f"/proc/{process.pid}/maps")
        while time.monotonic() < deadline and process.poll() is None and "libtorch" not in maps.read_text():
            time.sleep(0.01)  # until torch's libraries are being loaded: the runner is importing it
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
