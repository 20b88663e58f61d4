"""helpers.data under faults, from the user's side: concurrent first runs, damaged files, unusable data folders."""

from __future__ import annotations

import gzip
import os
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torchvision

from helpers import data, settings
from helpers.data import DamagedDataError, DataDirError, DatasetUnavailableError, load_dataset

ROOT = Path(__file__).resolve().parent.parent
SIZES = {"train": 300, "t10k": 50}


def idx_bytes(name: str, n: int) -> bytes:
    """A complete IDX file like the one ``name`` holds: n blank 28x28 images, or n labels 0-9."""
    dims = (n,) if "labels" in name else (n, 28, 28)
    body = bytes(i % 10 for i in range(n)) if "labels" in name else bytes(n * 28 * 28)
    return b"\0\0\x08" + bytes([len(dims)]) + struct.pack(f">{len(dims)}I", *dims) + body


def fake_source(folder: Path, scale: int = 1) -> Path:
    """Debian's four .gz files in miniature: complete IDX files that torchvision reads."""
    folder.mkdir()
    for name in data.RAW_FILES:
        with gzip.open(folder / f"{name}.gz", "wb", compresslevel=1) as f:
            f.write(idx_bytes(name, SIZES[name.split("-")[0]] * scale))
    return folder


@pytest.fixture
def source(tmp_path, monkeypatch):
    """The offline source load_dataset uses, replaced by a small fake one; downloads fail as without internet."""
    folder = fake_source(tmp_path / "debian")
    monkeypatch.setattr(data, "DEBIAN_FASHION_MNIST", folder)

    def no_network(self):
        raise RuntimeError("Error downloading: no network")

    monkeypatch.setattr(torchvision.datasets.MNIST, "download", no_network)
    monkeypatch.delenv(settings.DATA_DIR, raising=False)
    return folder


def _raw(root: Path) -> Path:
    return root / "FashionMNIST" / "raw"


def _complete(root: Path) -> bool:
    return all(data.idx_problem(_raw(root) / f) is None for f in data.RAW_FILES)


def _stray(root: Path) -> list[str]:
    """Temporary files left anywhere under ``root``."""
    return sorted(p.name for p in root.rglob("*") if p.name.endswith((".partial", ".tmp")))


# 1. Two processes preparing the data for the first time at once

CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from helpers import data
    root, source, ready, go = sys.argv[1:]
    Path(ready).touch()
    while not Path(go).exists():  # both start unpacking at the same moment
        time.sleep(0.001)
    print(data.prepare_offline("FashionMNIST", root, source=Path(source)))
    """
)


@pytest.mark.slow
def test_two_processes_prepare_the_data_at_once(tmp_path):
    source = fake_source(tmp_path / "debian", scale=100)  # 24 MB unpacked: the two unpackings overlap
    root, go = tmp_path / "data", tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(root), str(source), str(tmp_path / f"ready{i}"), str(go)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"ready{i}").exists() for i in range(2)) and time.monotonic() < deadline:
        time.sleep(0.01)  # both have imported torch and wait for the word
    go.touch()
    results = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, results, strict=True):
        assert p.returncode == 0, err
        assert out.strip() == "True"
    assert _complete(root)
    for f in data.RAW_FILES:
        with gzip.open(source / f"{f}.gz", "rb") as g:
            assert (_raw(root) / f).read_bytes() == g.read()
    assert _stray(root) == []


def test_a_waiting_process_finds_the_files_and_writes_nothing(tmp_path, monkeypatch):
    source = fake_source(tmp_path / "debian")
    root = tmp_path / "data"
    assert data.prepare_offline("FashionMNIST", root, source=source)
    before = {f: (_raw(root) / f).stat().st_mtime_ns for f in data.RAW_FILES}
    monkeypatch.setattr(data, "_unpack", lambda *a: pytest.fail("unpacked complete files again"))
    assert data.prepare_offline("FashionMNIST", root, source=source)
    assert before == {f: (_raw(root) / f).stat().st_mtime_ns for f in data.RAW_FILES}


def test_complete_data_is_read_without_writing_anything(tmp_path, source):
    root = tmp_path / "data"
    load_dataset("FashionMNIST", root=root, verbose=False)
    (root / "FashionMNIST" / ".prepare.lock").unlink()
    load_dataset("FashionMNIST", root=root, verbose=False)
    assert not (root / "FashionMNIST" / ".prepare.lock").exists()  # so a read-only data folder works


# 3. Zero-byte and truncated data files


@pytest.mark.parametrize("damage", ["zero-byte", "truncated", "garbage"])
def test_a_damaged_file_is_unpacked_again_from_the_offline_source(tmp_path, source, damage):
    root = tmp_path / "data"
    load_dataset("FashionMNIST", train=False, root=root, verbose=False)
    victim = _raw(root) / "t10k-images-idx3-ubyte"
    good = victim.read_bytes()
    victim.write_bytes({"zero-byte": b"", "truncated": good[:1000], "garbage": b"<html>404</html>" * 4}[damage])
    assert not data.is_present("FashionMNIST", root)
    test = load_dataset("FashionMNIST", train=False, root=root, verbose=False)
    assert len(test) == SIZES["t10k"]
    assert victim.read_bytes() == good
    assert _stray(root) == []


@pytest.mark.parametrize("damage", ["zero-byte", "truncated"])
def test_a_damaged_file_without_a_source_names_the_file_and_the_fix(tmp_path, source, damage):
    root = tmp_path / "data"
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for f in data.RAW_FILES:
        (raw / f).write_bytes(idx_bytes(f, 20))
    victim = raw / "train-labels-idx1-ubyte"
    victim.write_bytes(b"" if damage == "zero-byte" else idx_bytes(victim.name, 20)[:15])
    with pytest.raises(DamagedDataError) as info:
        load_dataset("MNIST", root=root, verbose=False)
    message = str(info.value)
    assert str(victim) in message
    assert ("empty (0 bytes)" if damage == "zero-byte" else "cut short (15 bytes; its header says 28)") in message
    assert "delete the file(s) listed and run again" in message
    assert str(raw / "train-images-idx3-ubyte") not in message  # only the bad one is named
    assert isinstance(info.value, DatasetUnavailableError)


def test_idx_problem_reads_the_size_from_the_header(tmp_path):
    path = tmp_path / "f"
    complete = idx_bytes("train-images-idx3-ubyte", 2)
    for content, expected in [
        (complete, None),
        (complete[:-1], "cut short (1,583 bytes; its header says 1,584)"),
        (complete + b"\0", "too long (1,585 bytes; its header says 1,584)"),
        (complete[:10], "cut short (10 bytes)"),
        (b"", "empty (0 bytes)"),
        (b"PK\3\4 not idx at all", "not an IDX data file (19 bytes, wrong header)"),
    ]:
        path.write_bytes(content)
        assert data.idx_problem(path) == expected
    assert data.idx_problem(tmp_path / "absent") == "missing"


# 7. A data folder that cannot be used


def test_data_dir_that_is_a_file(tmp_path, source, monkeypatch):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("not a folder")
    monkeypatch.setenv(settings.DATA_DIR, str(a_file))
    for name in ("FashionMNIST", "MNIST"):
        with pytest.raises(DataDirError) as info:
            load_dataset(name, verbose=False)
        message = str(info.value)
        assert f"set by COURSE_DATA_DIR='{a_file}'" in message
        assert f"{a_file} is a file, not a folder" in message
        assert "Fix: point COURSE_DATA_DIR at a folder" in message
    assert a_file.read_text() == "not a folder"


def test_data_dir_under_a_file(tmp_path, source, monkeypatch):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("x")
    monkeypatch.setenv(settings.DATA_DIR, str(a_file / "data"))
    with pytest.raises(DataDirError, match=r"notes.txt is a file, not a folder\. Fix: point COURSE_DATA_DIR"):
        load_dataset("FashionMNIST", verbose=False)


def test_a_data_dir_that_is_a_file_is_a_problem_named_and_holds_no_dataset(tmp_path, monkeypatch):
    """What the course runner asks before it starts: the fix for the folder, and no NotADirectoryError on the way."""
    a_file = tmp_path / "notes.txt"
    a_file.write_text("x")
    for blocked in (a_file, a_file / "data"):
        monkeypatch.setenv(settings.DATA_DIR, str(blocked))
        assert data.is_present("MNIST") is False and data.is_present("FashionMNIST") is False
        assert set(data.file_problems("MNIST").values()) == {"missing"}
        assert data.data_dir_problem() == (
            f"Cannot use the data folder {blocked} (set by COURSE_DATA_DIR={str(blocked)!r}): {a_file} is a file, not "
            "a folder. Fix: point COURSE_DATA_DIR at a folder you can write to (it is created if missing), or unset "
            "it; the data is unpacked or downloaded there once."
        )
    monkeypatch.setenv(settings.DATA_DIR, str(tmp_path / "new" / "data"))
    assert data.data_dir_problem() is None  # a folder still to be made is fine


def test_root_argument_that_is_a_file_names_the_argument(tmp_path, source):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("x")
    with pytest.raises(DataDirError, match=r"given as root=.*Fix: pass another folder as root"):
        load_dataset("FashionMNIST", root=a_file, verbose=False)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes into read-only folders anyway")
def test_read_only_data_dir(tmp_path, source, monkeypatch):
    folder = tmp_path / "readonly"
    folder.mkdir()
    folder.chmod(0o555)
    monkeypatch.setenv(settings.DATA_DIR, str(folder))
    try:
        with pytest.raises(DataDirError) as info:
            load_dataset("FashionMNIST", verbose=False)
    finally:
        folder.chmod(0o755)
    assert "set by COURSE_DATA_DIR=" in str(info.value)
    assert "no permission to write in" in str(info.value)


def test_data_dir_without_write_permission_simulated(tmp_path, source, monkeypatch):
    """Stand-in for a read-only folder where the tests run as root: mkdir fails as the kernel would make it fail."""
    real_mkdir = Path.mkdir

    def mkdir(self, *args, **kwargs):
        if self.is_relative_to(tmp_path / "locked"):
            raise PermissionError(13, "Permission denied", str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", mkdir)
    monkeypatch.setenv(settings.DATA_DIR, str(tmp_path / "locked"))
    with pytest.raises(DataDirError) as info:
        load_dataset("FashionMNIST", verbose=False)
    message = str(info.value)
    assert f"Cannot use the data folder {tmp_path / 'locked'} (set by COURSE_DATA_DIR=" in message
    assert "no permission to write in" in message
    assert "Fix: point COURSE_DATA_DIR at a folder you can write to" in message


# More bad inputs


def test_tilde_in_data_dir_means_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv(settings.DATA_DIR, "~/datasets")
    monkeypatch.chdir(tmp_path)
    assert data.data_dir() == tmp_path / "home" / "datasets"
    assert data.data_dir("~/elsewhere") == tmp_path / "home" / "elsewhere"


def test_dataset_names_with_spaces_and_non_names():
    assert data.canonical_name("Fashion MNIST") == "FashionMNIST"
    assert data.canonical_name(" mnist ") == "MNIST"
    with pytest.raises(ValueError, match="must be given by name, got None. Choose one of: MNIST, FashionMNIST"):
        load_dataset(None)
    with pytest.raises(ValueError, match="Unknown dataset ''. Choose one of"):
        load_dataset("")


@pytest.mark.parametrize("damage", ["truncated", "not gzip"])
def test_a_damaged_offline_source_says_reinstall(tmp_path, source, damage):
    gz = source / "t10k-labels-idx1-ubyte.gz"
    whole = gz.read_bytes()
    gz.write_bytes(whole[: len(whole) // 2] if damage == "truncated" else b"plain text")
    root = tmp_path / "data"
    with pytest.raises(DatasetUnavailableError) as info:
        load_dataset("FashionMNIST", train=False, root=root, verbose=False)
    assert f"{gz} is damaged" in str(info.value)
    assert "apt-get install --reinstall dataset-fashion-mnist" in str(info.value)
    assert not (_raw(root) / "t10k-labels-idx1-ubyte").exists()
    assert _stray(root) == []


def test_leftovers_of_a_killed_preparation_are_removed(tmp_path, source):
    raw = _raw(tmp_path / "data")
    raw.mkdir(parents=True)
    killed = [raw / ".train-images-idx3-ubyte.4242.abcd1234.partial", raw / "train-images-idx3-ubyte.partial"]
    for leftover in killed:
        leftover.write_bytes(b"\0\0\x08\x03 half")
    load_dataset("FashionMNIST", root=tmp_path / "data", verbose=False)
    assert _stray(tmp_path / "data") == []
    assert _complete(tmp_path / "data")


def test_a_download_that_ends_early_names_the_file(tmp_path, source, monkeypatch):
    def cut_short(self):
        raw = Path(self.raw_folder)
        raw.mkdir(parents=True, exist_ok=True)
        for f in data.RAW_FILES:
            (raw / f).write_bytes(idx_bytes(f, 20)[:-7] if f.startswith("t10k-images") else idx_bytes(f, 20))

    monkeypatch.setattr(torchvision.datasets.MNIST, "download", cut_short)
    with pytest.raises(DamagedDataError, match=r"t10k-images-idx3-ubyte: cut short \(15,689 bytes"):
        load_dataset("MNIST", root=tmp_path / "data", verbose=False)
