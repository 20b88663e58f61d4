"""The course's file locks (filelock): a course run's output folder belongs to one run at a time, and data being
downloaded by one process is waited for by the others, never taken for damaged; a killed holder blocks no one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import torchvision

from helpers import data
from tools import execute

ROOT = Path(__file__).resolve().parent.parent

HOLD_OUTPUT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from tools import execute
    with execute.output_lock(Path(sys.argv[1])):
        print("held", flush=True)
        time.sleep(120)
    """
)


def _start(code: str, *args: str) -> subprocess.Popen:
    """A child process running ``code``; it prints one line once it holds its lock."""
    child = subprocess.Popen([sys.executable, "-c", code, *args], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "held"
    return child


@pytest.mark.slow  # a child process
def test_a_second_run_on_an_output_folder_is_refused_until_the_first_ends(tmp_path):
    folder = tmp_path / "out"
    child = _start(HOLD_OUTPUT, str(folder))
    try:
        with pytest.raises(execute.UsageError) as info, execute.output_lock(folder):
            pytest.fail("two runs held one output folder")
        assert str(info.value) == (
            f"Another course run (process {child.pid}) is writing to {folder}. Wait for it to finish, or give this "
            "run a folder of its own with --output."
        )
    finally:
        child.send_signal(signal.SIGKILL)  # no clean-up: the OS alone releases the lock
        child.wait(timeout=30)
    with execute.output_lock(folder):
        assert (folder / execute.LOCK_NAME).read_text().strip() == str(os.getpid())


def test_an_output_folder_that_cannot_be_made_names_the_option(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(execute.UsageError) as info, execute.output_lock(tmp_path / "notes.txt" / "out"):
        pytest.fail("an output folder inside a file was used")
    assert str(info.value).startswith(f"--output {tmp_path / 'notes.txt' / 'out'}: cannot write there (")


SLOW_DOWNLOAD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import torchvision
    from helpers import data

    def idx(name, n=20):  # a complete IDX file: n blank 28x28 images, or n labels
        dims = (n,) if "labels" in name else (n, 28, 28)
        body = bytes(n) if "labels" in name else bytes(n * 28 * 28)
        return b"\\0\\0\\x08" + bytes([len(dims)]) + b"".join(d.to_bytes(4, "big") for d in dims) + body

    def download(self):  # half the files at once, the rest after a while, as a download under way leaves them
        raw = Path(self.raw_folder)
        raw.mkdir(parents=True, exist_ok=True)
        for name in data.RAW_FILES[:2]:
            (raw / name).write_bytes(idx(name))
        print("held", file=sys.__stdout__, flush=True)  # load_dataset keeps a download's own output quiet
        time.sleep(3)
        for name in data.RAW_FILES[2:]:
            (raw / name).write_bytes(idx(name))

    torchvision.datasets.MNIST.download = download
    data.load_dataset("MNIST", root=sys.argv[1], verbose=False)
    """
)


@pytest.mark.slow  # a child process
def test_a_download_under_way_in_another_process_is_waited_for(tmp_path, monkeypatch):
    root = tmp_path / "data"
    child = _start(SLOW_DOWNLOAD, str(root))

    def no_network(self):
        raise RuntimeError("this process must not download: another one is doing it")

    monkeypatch.setattr(torchvision.datasets.MNIST, "download", no_network)
    try:
        assert data.file_problems("MNIST", root)  # half the files are there, half not yet
        train = data.load_dataset("MNIST", root=root, verbose=False)
    finally:
        child.wait(timeout=60)
    assert child.returncode == 0
    assert len(train) == 20 and data.is_present("MNIST", root)


HOLD_DATA = textwrap.dedent(
    """
    import sys, time
    from helpers import data
    with data._preparation_lock("MNIST", sys.argv[1]):
        print("held", flush=True)
        time.sleep(120)
    """
)


@pytest.mark.slow  # a child process
def test_a_killed_preparation_blocks_no_one(tmp_path):
    root = tmp_path / "data"
    child = _start(HOLD_DATA, str(root))
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    entered = threading.Event()

    def prepare() -> None:
        with data._preparation_lock("MNIST", root):
            entered.set()

    threading.Thread(target=prepare, daemon=True).start()
    assert entered.wait(timeout=30), "the lock of a killed process still blocks"
