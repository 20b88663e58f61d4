"""tools.course run, stopped from outside: SIGTERM, Ctrl-C (SIGINT) and --timeout end the notebook's kernel and
every process it started, print the table with the lesson marked, and exit non-zero; a second run on the same
--output folder refuses while the first holds it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import course_cli
import nbformat
import psutil
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from tools import course, execute

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.notebooks, pytest.mark.slow]  # each test starts the runner and a kernel: about ten seconds

SPAWN = """\
import os, pathlib, subprocess, sys, time
sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
pids = pathlib.Path(sys.argv[1])
pids.with_suffix(".tmp").write_text(f"{os.getpid()} {sleeper.pid}")
pids.with_suffix(".tmp").replace(pids)
time.sleep(600)
"""
"""What the lesson under test starts: a process in a session of its own (as torchrun's workers are) with a child."""


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture
def lessons(tmp_path: Path) -> Path:
    """A folder with a lesson that starts long-lived processes and then runs for ten minutes, and a lesson after it."""
    folder = tmp_path / "nbs"
    folder.mkdir()
    (tmp_path / "spawn.py").write_text(SPAWN)
    meta = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
    starts = (
        "import subprocess, sys\n"
        f"subprocess.Popen([sys.executable, {str(tmp_path / 'spawn.py')!r}, {str(tmp_path / 'pids')!r}], "
        "start_new_session=True)"
    )
    nbformat.write(
        new_notebook(metadata=meta, cells=[new_code_cell(starts), new_code_cell("import time\ntime.sleep(600)")]),
        folder / "00_long.ipynb",
    )
    nbformat.write(new_notebook(metadata=meta, cells=[new_code_cell("print('next')")]), folder / "01_next.ipynb")
    return folder


def _start(folder: Path, output: Path, *extra: str) -> subprocess.Popen:
    return course_cli.start(course_cli.run_lessons_command(folder, output, *extra))


def _wait_for_pids(runner: subprocess.Popen, pids: Path) -> list[int]:
    deadline = time.monotonic() + 240
    while not pids.exists():
        if runner.poll() is not None:
            pytest.fail(f"the runner ended early ({runner.returncode}): {runner.communicate()}")
        assert time.monotonic() < deadline, "the lesson never started its processes"
        time.sleep(0.2)
    return [int(p) for p in pids.read_text().split()]


def _table(stdout: str) -> dict[str, str]:
    rows = stdout.splitlines()
    assert rows[0].split()[:3] == ["notebook", "status", "seconds"], stdout
    return {line.split("  ")[0].strip(): line for line in rows[2:]}


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_stops_the_lesson_and_everything_it_started(lessons, tmp_path, signum, status):
    runner = _start(lessons, tmp_path / "out")
    started = _wait_for_pids(runner, tmp_path / "pids")
    tree = [p.pid for p in psutil.Process(runner.pid).children(recursive=True)]  # the kernel and what it started
    assert set(started) <= set(tree)
    os.kill(runner.pid, signum)
    out, err = runner.communicate(timeout=120)
    assert runner.returncode == status, err
    table = _table(out)
    assert table["00_long.ipynb"].split()[1] == "interrupted"
    assert table["01_next.ipynb"].split()[1:3] == ["not", "run"]
    name = signal.Signals(signum).name
    assert f"00_long.ipynb was stopped by {name}; its kernel and the processes it started were ended" in err
    assert f"The run was stopped by {name}; not run: 01_next.ipynb." in err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert not [pid for pid in tree if _alive(pid)], "a process the lesson started is still running"


def test_a_lesson_past_the_timeout_is_reported_as_timed_out_and_stopped(lessons, tmp_path):
    runner = _start(lessons, tmp_path / "out", "--timeout", "12")
    started = _wait_for_pids(runner, tmp_path / "pids")
    out, err = runner.communicate(timeout=240)
    assert runner.returncode == 1, err
    table = _table(out)
    assert "timed out after 12 s" in table["00_long.ipynb"]
    assert table["01_next.ipynb"].split()[1] == "passed"  # the run goes on with the next lesson
    assert "00_long.ipynb failed: timed out after 12 s; its kernel and the processes it started were ended" in err
    assert "KeyboardInterrupt" not in out + err and "Traceback" not in err
    assert not [pid for pid in started if _alive(pid)]


def test_a_second_run_on_the_same_output_refuses_and_leaves_the_first_alone(lessons, tmp_path, capsys):
    output = tmp_path / "out"
    first = _start(lessons, output)
    try:
        _wait_for_pids(first, tmp_path / "pids")
        before = sorted(p.name for p in output.iterdir())
        code = course.main(
            ["run", "--notebooks", str(lessons), "--output", str(output), "--no-progress", "--dataset", "FashionMNIST"]
        )
        err = capsys.readouterr().err
        assert code == 2
        assert f"Another course run (process {first.pid}) is writing to {output}." in err
        assert "--output" in err and "Traceback" not in err
        assert sorted(p.name for p in output.iterdir()) == before
        assert first.poll() is None, "the first run must carry on"
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=120)
    assert first.returncode == 143
    # once the first run has ended, the folder is free again: the lock ends with the process that held it
    with course.output_lock(output):
        assert (output / execute.LOCK_NAME).read_text().strip() == str(os.getpid())
