"""The course's training scripts (lessons.lesson_07.ddp_train through lessons.lesson_07.harness, lessons.lesson_13,
lessons.lesson_14) given a bad --out, a checkpoint they cannot resume from, --help, or the temporary file of a save
that was killed: one line naming the fix and no traceback, before any training."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from helpers import distributed
from helpers.checkpoints import remove_leftovers, save_checkpoint
from helpers.models import build_model
from lessons import lesson_13 as elastic_train

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ("lessons.lesson_07.harness", "lessons.lesson_13", "lessons.lesson_14")  # ddp_train through its harness
QUICK = ["--synthetic-size", "64", "--device", "cpu"]


def run_script(module: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -m module args`` as one process (a world of one), from the clone's root."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", module, *args]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    """The script's complaint: exit status 2, one line on stderr, no traceback."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, f"exit {result.returncode}\n{result.stderr[-3000:]}"
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    return lines[0]


@pytest.mark.slow
@pytest.mark.parametrize("module", SCRIPTS)
def test_an_out_that_is_a_file_is_refused_in_one_line(module: str, tmp_path: Path) -> None:
    out = tmp_path / "results"
    out.write_text("notes")
    line = one_line(run_script(module, *QUICK, "--out", str(out)))
    assert line == f"{module}: --out {out} is a file, not a folder. Fix: give a folder's path, or rename that file."
    assert out.read_text() == "notes"


@pytest.mark.slow
def test_an_out_under_a_file_or_unwritable_is_refused_before_training(tmp_path: Path) -> None:
    (tmp_path / "notes").write_text("x")
    under = tmp_path / "notes" / "run"
    line = one_line(run_script("lessons.lesson_14", *QUICK, "--out", str(under)))
    assert line.endswith(
        f"cannot be a folder: {tmp_path / 'notes'} is a file. Fix: give a path outside it, or rename that file."
    )
    unwritable = Path("/sys/course_out") if os.geteuid() == 0 else Path("/proc/course_out")
    if sys.platform != "linux":
        pytest.skip("the unwritable folder is one of Linux's")
    line = one_line(run_script("lessons.lesson_14", *QUICK, "--steps", "2", "--out", str(unwritable)))
    assert f"--out {unwritable} cannot be written to (" in line and "Fix: give a folder you can write to." in line


@pytest.mark.slow
@pytest.mark.parametrize("module", ["lessons.lesson_13", "lessons.lesson_14"])
def test_help_exits_0_and_a_usage_error_exits_2(module: str) -> None:
    shown = run_script(module, "--help")
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert shown.stdout.startswith("usage: python -m " + module) and "TypeError" not in shown.stderr
    wrong = run_script(module, "--steps", "0")
    assert wrong.returncode == 2 and "argument --steps: '0' is not allowed" in wrong.stderr


def _state(model: str = "mlp", processes: int = 1) -> dict:
    """What elastic_train.checkpoint saves, for ``processes`` ranks."""
    net = build_model(model)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=4)
    rng = [{"cpu": torch.get_rng_state()} for _ in range(processes)]
    state = {"model": net.state_dict(), "optimizer": optimizer.state_dict(), "schedule": schedule.state_dict()}
    return {**state, "step": 2, "epoch": 0, "position": 2, "rng": rng}


def test_resume_problem_names_another_script_model_or_world_size() -> None:
    mlp = build_model("mlp")
    assert elastic_train.resume_problem(_state(), mlp, 1) is None
    ddp_style = {"model": mlp.state_dict(), "optimizer": {}, "epoch": 2}  # what lessons.lesson_07.ddp_train saves
    assert "lacks 'schedule', 'step', 'position', 'rng'" in elastic_train.resume_problem(ddp_style, mlp, 1)
    assert "lacks 'model'" in elastic_train.resume_problem(torch.zeros(3), mlp, 1)
    assert "another model's weights" in elastic_train.resume_problem(_state("linear"), mlp, 1)
    wider = {**_state(), "model": {k: torch.zeros(3) for k in mlp.state_dict()}}  # the same names, other shapes
    assert "another model's weights" in elastic_train.resume_problem(wider, mlp, 1)
    said = elastic_train.resume_problem(_state(processes=1), mlp, 2)
    assert "saved by a job of 1 processes and this one has 2" in said


@pytest.mark.slow
def test_another_models_or_another_scripts_checkpoint_is_refused_in_one_line(tmp_path: Path) -> None:
    save_checkpoint(_state("linear"), tmp_path / elastic_train.CHECKPOINT)
    line = one_line(run_script("lessons.lesson_13", *QUICK, "--steps", "4", "--out", str(tmp_path)))
    path = tmp_path / elastic_train.CHECKPOINT
    assert line.startswith(f"lessons.lesson_13: cannot resume from {path}: it holds another model's weights")
    assert line.endswith(f"Fix: give another --out to start at step 0, or delete {path}.")
    assert not (tmp_path / elastic_train.LOSSES).exists()  # no step was trained
    save_checkpoint({"model": build_model("mlp").state_dict(), "epoch": 2}, path)  # lessons.lesson_07.ddp_train's keys
    line = one_line(run_script("lessons.lesson_13", *QUICK, "--steps", "4", "--out", str(tmp_path)))
    assert "it lacks 'optimizer', 'schedule', 'step', 'position', 'rng': it was not saved by lessons.lesson_13" in line


@pytest.mark.slow
def test_a_one_process_checkpoint_resumed_by_two_is_refused_by_every_rank(tmp_path: Path) -> None:
    save_checkpoint(_state(processes=1), tmp_path / elastic_train.CHECKPOINT)
    start = time.monotonic()
    args = [*QUICK, "--steps", "4", "--timeout", "90", "--out", str(tmp_path)]
    done = distributed.torchrun(2, args, timeout=150, module="lessons.lesson_13")
    assert done.returncode != 0
    assert "saved by a job of 1 processes and this one has 2" in done.stderr, done.stderr[-3000:]
    assert "IndexError" not in done.stderr and done.stderr.count("cannot resume from") == 1  # rank 0 alone says it
    assert time.monotonic() - start < 90, "a rank waited for its collective timeout"
    assert not (tmp_path / elastic_train.LOSSES).exists()


KILLED_IN_SAVE = textwrap.dedent(
    """
    import sys, time
    import torch
    from helpers.checkpoints import save_checkpoint

    class Stall:  # pickled in the middle of the save: the file is half written when it runs
        def __reduce__(self):
            print("writing", flush=True)
            time.sleep(120)
            return (int, (0,))

    save_checkpoint({"w": torch.zeros(1000), "stall": Stall()}, sys.argv[1])
    """
)


def _kill_in_save(path: Path) -> None:
    """A process killed with SIGKILL in the middle of save_checkpoint(..., path)."""
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_IN_SAVE, str(path)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout.readline().strip() == "writing"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)


def test_remove_leftovers_deletes_only_the_saves_own_temporaries(tmp_path: Path) -> None:
    path = tmp_path / "resume.pt"
    keep = [".resume.pt.notes.tmp", ".resume.pt.0123abcd.tmp.bak", "resume.pt.0123abcd.tmp", ".final.pt.0123abcd.tmp"]
    for name in [*keep, ".resume.pt.0123abcd.tmp", ".resume.pt.ffffffff.tmp"]:
        (tmp_path / name).write_text("x")
    (tmp_path / ".resume.pt.aaaaaaaa.tmp").mkdir()  # not a file: not ours
    removed = remove_leftovers(path)
    assert sorted(p.name for p in removed) == [".resume.pt.0123abcd.tmp", ".resume.pt.ffffffff.tmp"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*keep, ".resume.pt.aaaaaaaa.tmp"])
    assert remove_leftovers(tmp_path / "missing" / "resume.pt") == []


@pytest.mark.slow
def test_the_next_start_removes_the_temporary_file_of_a_killed_save(tmp_path: Path) -> None:
    _kill_in_save(tmp_path / elastic_train.CHECKPOINT)
    [leftover] = [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    (tmp_path / "mine.tmp").write_text("a file of the learner's")
    done = run_script("lessons.lesson_13", *QUICK, "--steps", "2", "--every", "1", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"[rank 0] removed {leftover}, left by a save of resume.pt that was killed mid-write" in done.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["mine.tmp", "final.pt", "losses.jsonl", "resume.pt"])
