"""The data folder's lock (filelock): data being downloaded by one process is waited for by the others, never taken
for damaged; a killed holder blocks no one."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import torchvision

from helpers import data

ROOT = Path(__file__).resolve().parent.parent


def _start(code: str, *args: str) -> subprocess.Popen:
    """A child process running ``code``; it prints one line once it holds its lock."""
    child = subprocess.Popen([sys.executable, "-c", code, *args], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "held"
    return child


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
