"""python -m tools.bench as a user types it: a bad argument ends in one `error:` line naming the fix, status 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tools import bench

ROOT = Path(__file__).resolve().parent.parent


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tools.bench", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow  # a child process imports torch
def test_negative_subset_is_refused_before_anything_runs():
    done = run_cli("--subset", "-5", "--device", "cpu", "--dataset", "FashionMNIST")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert done.stderr.splitlines()[-1] == (
        "python -m tools.bench: error: argument --subset: '-5' is not allowed: give a whole number of at least 1"
    )


def test_a_file_given_as_data_dir_is_refused(tmp_path, capsys):
    file = tmp_path / "notes.txt"
    file.write_text("not a folder")
    with pytest.raises(SystemExit) as exit_:
        bench.main(["--data-dir", str(file), "--device", "cpu", "--dataset", "FashionMNIST"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.splitlines()[-1] == (
        f"python -m tools.bench: error: argument --data-dir: {file} is a file, not a folder; give the folder that "
        "holds (or will hold) the data sets, e.g. ./data"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--subset", "0"], "argument --subset: '0' is not allowed: give a whole number of at least 1"),
        (["--subset", "ten"], "argument --subset: 'ten' is not allowed: give a whole number of at least 1"),
        (["--dataset", "cifar"], "argument --dataset: Unknown dataset 'cifar'. Choose one of: MNIST, FashionMNIST."),
        (["--batch-size", "0"], "argument --batch-size: '0' is not allowed: give a whole number of at least 1"),
        (["--workers", "-1"], "argument --workers: '-1' is not allowed: give a whole number of at least 0"),
    ],
)
def test_bad_values_name_the_allowed_ones(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        bench.main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: python -m tools.bench")
    assert err.splitlines()[-1] == f"python -m tools.bench: error: {message}"


def test_good_values_pass_the_checks(tmp_path):
    args = bench._parse_args(["--subset", "640", "--data-dir", str(tmp_path / "new"), "--dataset", "fashion-mnist"])
    assert (args.subset, args.data_dir, args.dataset) == (640, str(tmp_path / "new"), "FashionMNIST")
