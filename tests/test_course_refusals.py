"""The runner's refusals come before torch loads: each is one message and exit status 2 in a fraction of a second,
however long PyTorch takes to import on a loaded machine. A child Python runs the runner and reports which of the
heavy modules it had loaded when it refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools import course

ROOT = Path(__file__).resolve().parent.parent

REFUSE_AND_REPORT = """
import contextlib, io, json, sys
from tools import course
err = io.StringIO()
with contextlib.redirect_stderr(err):
    try:
        code = course.main(sys.argv[1:])
    except SystemExit as exc:  # argparse's own refusals
        code = exc.code
loaded = sorted(m for m in ("torch", "torchvision", "nbformat", "papermill") if m in sys.modules)
print(json.dumps({"code": code, "err": err.getvalue(), "loaded": loaded}))
"""


def _refuse(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> dict:
    base = {k: v for k, v in os.environ.items() if not k.startswith("COURSE_")}
    done = subprocess.run(
        [sys.executable, "-c", REFUSE_AND_REPORT, "run", "--output", str(tmp_path / "out"), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**base, **(env or {})},
        timeout=120,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


CASES = {
    "no such lesson": (["--only", "42"], {}, "--only '42' matches no notebook"),
    "no notebooks folder": (["--notebooks", "nowhere"], {}, "The notebooks folder nowhere does not exist."),
    "a bad timeout": (["--timeout", "soon"], {}, "argument --timeout"),
    "an unknown dataset": (["--dataset", "CIFAR"], {}, "Unknown dataset 'CIFAR'"),
    "an unknown dataset in the environment": ([], {"COURSE_DATASET": "cifar"}, "COURSE_DATASET='cifar' is set"),
    "a misspelt quick flag": ([], {"COURSE_QUICK": "ja"}, "COURSE_QUICK='ja' is set in the environment"),
    "write-back with another dataset": (["--write-back", "--dataset", "MNIST"], {}, "cannot be written back"),
}


@pytest.mark.slow  # a child Python per refusal
@pytest.mark.parametrize("case", list(CASES))
def test_a_refusal_comes_before_torch_and_nbformat_load(case: str, tmp_path: Path) -> None:
    args, env, words = CASES[case]
    report = _refuse(tmp_path, *args, env=env)
    assert report["code"] == 2, report
    assert words in report["err"], report
    assert "Traceback" not in report["err"]
    assert report["loaded"] == [], f"loaded before refusing: {report['loaded']}"
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # a child Python
def test_a_data_folder_that_is_a_file_is_refused_with_the_fix(tmp_path: Path) -> None:
    blocker = tmp_path / "data-file"
    blocker.write_text("not a folder")
    report = _refuse(tmp_path, "--quick", "--only", "05", env={"COURSE_DATA_DIR": str(blocker)})
    assert report["code"] == 2, report
    assert report["err"] == (
        f"Cannot use the data folder {blocker} (set by COURSE_DATA_DIR={str(blocker)!r}): {blocker} is a file, not a "
        "folder. Fix: point COURSE_DATA_DIR at a folder you can write to (it is created if missing), or unset it; the "
        "data is unpacked or downloaded there once.\n"
    )
    assert report["loaded"] == []


@pytest.mark.slow  # a child Python, which imports torch for the device check alone
def test_a_misspelt_device_is_checked_last_and_torch_stays_out_of_the_runner(tmp_path: Path) -> None:
    report = _refuse(tmp_path, "--device", "gpu", "--only", "00")
    assert report["code"] == 2
    assert report["err"].startswith("--device gpu cannot be used here:\nUnknown device 'gpu'.")
    assert report["loaded"] == []  # the child process that checked the device loaded torch, not the runner


def test_the_runners_quick_check_agrees_with_the_lessons(monkeypatch: pytest.MonkeyPatch) -> None:
    from helpers import lesson

    for value in ("1", "yes", " Off ", "", "ja", "2", "maybe"):
        monkeypatch.setenv("COURSE_QUICK", value)
        try:
            lesson.start("cpu")
            expected = None
        except lesson.ParameterError as exc:
            expected = str(exc)
        assert course._quick_problem() == expected, value
