"""The GPU check (tools/gpu_check.py): its plan is a pure function of the lessons, declared and tested here; without
CUDA it refuses at once with one line and exit status 2; with a GPU (faked here, with lessons that need none) it writes
every executed notebook, the runner's tables and SUMMARY.md into one folder and exits non-zero on any failure."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from lessons import lesson_11 as speedrun
from tools import course, gpu_check

ROOT = Path(__file__).resolve().parent.parent
OUT = Path("/out")
FAKE = [
    ("00_setup.ipynb", "print('hello')"),
    ("01_tensors.ipynb", "if devices.gpu_section(device, 'a copy on the GPU'):\n    x = x.cuda()"),
    ("02_errors.ipynb", "torch.cuda.synchronize()"),
    ("03_module.ipynb", "other = placement.gpu_or_meta(device)"),
    ("05_mnist.ipynb", "train(model, loader)"),
    ("07_ddp.ipynb", "backend = 'nccl' if devices.cuda_gpu_count() else 'gloo'"),
    ("11_speedrun.ipynb", "lesson_11.climb(data, device, target, seeds, quick)"),
]


def test_every_lesson_runs_on_cuda_first_at_learner_defaults_unless_declared_quick() -> None:
    steps = gpu_check.plan(FAKE, OUT, dataset="FashionMNIST")
    cuda = [s for s in steps if s.notebook and s.device == "cuda"]
    assert [s.notebook for s in cuda] == [name for name, _ in FAKE]
    assert steps[: len(FAKE)] == cuda
    for step in cuda:
        env = dict(step.env)
        assert env["COURSE_DEVICE"] is None, "auto, as a learner's notebook has it"
        assert env["COURSE_DATASET"] == "FashionMNIST"
        if step.notebook.startswith("11"):
            assert (step.mode, env["COURSE_QUICK"]) == ("quick", "1")
            assert step.reason == gpu_check.QUICK_ON_CUDA["11"]
        else:
            assert (step.mode, env["COURSE_QUICK"], step.reason) == ("full", None, gpu_check.FULL)
        assert step.folder == "cuda"


def test_lessons_with_gpu_sections_run_again_on_the_cpu_in_quick_mode() -> None:
    steps = gpu_check.plan(FAKE, OUT)
    cpu = [s for s in steps if s.device == "cpu"]
    assert [s.notebook for s in cpu] == ["01_tensors.ipynb", "02_errors.ipynb", "03_module.ipynb", "07_ddp.ipynb"]
    for step in cpu:
        assert dict(step.env) == {"COURSE_QUICK": "1", "COURSE_DEVICE": "cpu", "COURSE_DATASET": None}
        assert (step.mode, step.folder, step.reason) == ("quick", "cpu", gpu_check.CPU_PASS)


def test_the_speedrun_ladder_runs_last_to_the_target_and_the_stretch_target() -> None:
    steps = gpu_check.plan(FAKE, OUT, python="python3", targets=gpu_check.speedrun_targets())
    runs = [s for s in steps if s.command]
    assert steps[-2:] == runs
    assert gpu_check.speedrun_targets() == (0.88, 0.94)  # Fashion-MNIST's target and stretch in lessons.lesson_11
    for step, target, label in zip(runs, ("0.88", "0.94"), ("speedrun-88", "speedrun-94"), strict=True):
        assert step.title == label
        assert step.command == (
            "python3",
            "-m",
            "lessons.lesson_11",
            "--dataset",
            "FashionMNIST",
            "--runs",
            "3",
            "--target",
            target,
            "--device",
            "cuda",
            "--json",
            str(OUT / f"{label}.json"),
            "--no-progress",
        )


def test_the_speedrun_commands_parse_with_the_speedruns_own_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed = []
    original = argparse.ArgumentParser.parse_args

    def parse_only(self, args=None, namespace=None):
        parsed.append(original(self, args, namespace))
        raise SystemExit(0)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_only)
    for step in [s for s in gpu_check.plan(FAKE, OUT) if s.command]:
        with pytest.raises(SystemExit):
            speedrun.main(list(step.command[3:]))
    assert [(p.dataset, p.runs, p.target, p.device) for p in parsed] == [
        ("FashionMNIST", 3, 0.88, "cuda"),
        ("FashionMNIST", 3, 0.94, "cuda"),
    ]


def test_the_plan_of_the_real_lessons_fits_its_declarations() -> None:
    lessons = gpu_check.read_lessons(gpu_check.NOTEBOOKS)
    steps = gpu_check.plan(lessons, OUT)
    assert {s.notebook for s in steps if s.device == "cuda" and s.notebook} == {name for name, _ in lessons}
    assert set(gpu_check.QUICK_ON_CUDA) <= {name[:2] for name, _ in lessons}, "a quick-mode entry names no lesson"
    again = {s.notebook[:2] for s in steps if s.device == "cpu"}
    assert {"01", "06", "08"} <= again  # the lessons whose GPU sections the issue found crashing with DEVICE = "cpu"
    assert "05" not in gpu_check.QUICK_ON_CUDA


def test_without_cuda_it_refuses_at_once_with_one_line(monkeypatch, capsys, tmp_path: Path) -> None:
    probe = {"available": False, "torch": "2.14.1+cpu", "cuda": None}
    monkeypatch.setattr(gpu_check, "cuda_probe", lambda: probe)
    started = []
    monkeypatch.setattr(gpu_check, "_run_lesson", lambda *a: started.append(a))
    assert gpu_check.main(["--output", str(tmp_path / "out")]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        "The GPU check needs a CUDA GPU, and here PyTorch 2.14.1+cpu is a CPU-only build: run it on a machine with an "
        "NVIDIA GPU.\n"
    )
    assert not (tmp_path / "out").exists() and started == []
    assert gpu_check.refusal({"available": False, "torch": "2.14.1", "cuda": "13.0"}).endswith(
        "PyTorch 2.14.1 (CUDA 13.0) sees no CUDA GPU: run it on a machine with an NVIDIA GPU."
    )


@pytest.mark.slow  # children import torch
def test_this_machine_without_cuda_is_refused_by_the_command(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    for command in (["-m", "tools.gpu_check"], ["-m", "tools.course", "gpu-check"]):
        done = subprocess.run(
            [sys.executable, *command, "--output", str(tmp_path / "out")],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
            check=False,
        )
        assert done.returncode == 2, done.stderr
        assert done.stdout == "" and done.stderr.count("\n") == 1
        assert done.stderr.startswith("The GPU check needs a CUDA GPU, and here PyTorch ")
        assert not (tmp_path / "out").exists()


def test_the_plan_is_printed_on_any_machine(capsys) -> None:
    assert gpu_check.main(["--plan"]) == 0
    out = capsys.readouterr().out
    assert "11_speedrun.ipynb" in out and "speedrun-94" in out and gpu_check.QUICK_ON_CUDA["11"] in out


def test_a_missing_runner_package_is_named_with_the_fix(monkeypatch, capsys, tmp_path: Path) -> None:
    import importlib.util

    monkeypatch.setattr(gpu_check, "cuda_probe", lambda: {"available": True, "torch": "2.11.0", "cuda": "13.0"})
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "papermill" else real(name, *a))
    assert gpu_check.main(["--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has no papermill" in err and "--download-wheels" in err


def test_an_unknown_dataset_in_the_environment_is_refused_before_any_step(monkeypatch, capsys, tmp_path) -> None:
    monkeypatch.setattr(gpu_check, "cuda_probe", lambda: {"available": True, "torch": "2.11.0", "cuda": "13.0"})
    monkeypatch.setenv("COURSE_DATASET", "cifar")
    assert gpu_check.main(["--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err == (
        "COURSE_DATASET='cifar' is set in the environment: Unknown dataset 'cifar'. Choose one of: MNIST, "
        "FashionMNIST. Set it to one of those, or unset it. (Or pass --dataset.)\n"
    )
    assert not (tmp_path / "out").exists()


def test_the_wheels_are_for_the_gpu_machines_python_at_the_locks_pins() -> None:
    command = gpu_check.wheel_download_command(Path("/w"))
    assert command[1:4] == ["-m", "pip", "download"] and "--only-binary=:all:" in command
    assert command[command.index("--python-version") + 1] == "3.12"
    assert command[command.index("-c") + 1] == str(ROOT / "requirements-lock.txt")
    assert command[-len(gpu_check.NEEDED) :] == list(gpu_check.NEEDED)


def _lessons(folder: Path, *codes: str) -> Path:
    folder.mkdir()
    for index, code in enumerate(codes):
        nbformat.write(new_notebook(cells=[new_code_cell(code)]), folder / f"0{index}_lesson.ipynb")
    return folder


@pytest.mark.slow  # executes notebooks
def test_with_a_gpu_everything_lands_in_one_folder_and_a_failure_exits_1(monkeypatch, capsys, tmp_path) -> None:
    """A faked GPU, two lessons that need none (the second fails, and has a 'GPU section'), no speedrun."""
    monkeypatch.setattr(
        gpu_check,
        "cuda_probe",
        lambda: {
            "available": True,
            "torch": "2.11.0",
            "cuda": "13.0",
            "name": "Fake GPU",
            "capability": "9.0",
            "count": 1,
        },
    )
    monkeypatch.setattr(gpu_check, "speedrun_targets", lambda: ())
    monkeypatch.setenv("PYTHONPATH", "")
    folder = _lessons(tmp_path / "nbs", "print('fine')", "import torch\nassert not torch.cuda.is_available() and 0")
    output = tmp_path / "out"
    status = gpu_check.main(["--output", str(output), "--notebooks", str(folder), "--dataset", "FashionMNIST"])
    out = capsys.readouterr().out
    assert status == 1, out
    assert {p.relative_to(output).as_posix() for p in output.rglob("*") if p.is_file()} >= {
        "SUMMARY.md",
        "table-cuda.txt",
        "table-cpu.txt",
        "cuda/00_lesson.ipynb",
        "cuda/01_lesson.ipynb",
        "cpu/01_lesson.ipynb",
    }
    summary = (output / "SUMMARY.md").read_text()
    assert "- device: Fake GPU (compute capability 9.0" in summary and "torch 2.11.0, CUDA 13.0" in summary
    assert "00_lesson.ipynb  passed  full" in summary and "01_lesson.ipynb  FAILED  full" in summary
    assert "01_lesson.ipynb  FAILED  quick" in summary  # the CPU pass
    assert "## What did not pass" in summary and "AssertionError" in summary
    assert "00_lesson.ipynb" in (output / "table-cuda.txt").read_text()
    assert course.Result  # the tables are the runner's own


def test_a_step_past_the_budget_is_not_run_and_fails_the_check(monkeypatch, capsys, tmp_path) -> None:
    monkeypatch.setattr(gpu_check, "cuda_probe", lambda: {"available": True, "torch": "2.11.0", "cuda": "13.0"})
    monkeypatch.setattr(gpu_check, "speedrun_targets", lambda: ())
    ran = []

    def fake_lesson(step, folder, output, timeout, stop):
        ran.append((step.notebook, timeout))
        import time

        time.sleep(0.3)
        return course.Result(step.title, "passed", 0.3)

    monkeypatch.setattr(gpu_check, "_run_lesson", fake_lesson)
    folder = _lessons(tmp_path / "nbs", "print(1)", "print(2)")
    status = gpu_check.main(
        ["--output", str(tmp_path / "out"), "--notebooks", str(folder), "--dataset", "FashionMNIST", "--budget", "10.2"]
    )
    assert status == 1
    assert ran == [("00_lesson.ipynb", pytest.approx(10.2, abs=0.2))]
    summary = (tmp_path / "out" / "SUMMARY.md").read_text()
    assert "- 01_lesson.ipynb (cuda): not run: the budget was spent before it" in summary
    assert "## Speedrun\n\nNone in this plan.\n" in summary


WRITE_RECORD = "import json, sys; json.dump({'summary': 'rung 3 fastest'}, open(sys.argv[2], 'w')); print('ladder')"


@pytest.mark.slow  # three child processes
def test_a_speedrun_step_gives_its_records_summary_or_its_last_line(tmp_path: Path) -> None:
    def step(code: str) -> gpu_check.Step:
        command = (sys.executable, "-c", code, "--json", str(tmp_path / "speedrun-88.json"))
        return gpu_check.Step("speedrun-88", "cuda", "full", "why", 30, command=command)

    passed = gpu_check._run_speedrun(step(WRITE_RECORD), tmp_path, 30, lambda: None)
    assert (passed.status, passed.headline) == ("passed", "rung 3 fastest")
    assert passed.files == ["speedrun-88.log", "speedrun-88.json"]
    assert (tmp_path / "speedrun-88.log").read_text() == "ladder\n"
    failed = gpu_check._run_speedrun(step("raise SystemExit('no data here')"), tmp_path, 30, lambda: None)
    assert (failed.status, failed.error) == ("FAILED", "exit status 1: no data here")
    slow = gpu_check._run_speedrun(step("import time; time.sleep(30)"), tmp_path, 0.5, lambda: None)
    assert slow.status == "timed out after 0.5 s" and slow.seconds < 10


def test_a_share_of_the_plan_keeps_its_parts_and_lessons_in_plan_order() -> None:
    steps = gpu_check.plan(FAKE, OUT)
    cuda_early = gpu_check.share(steps, ("cuda",), gpu_check.lesson_numbers("00-03"))
    assert [(s.notebook, s.device) for s in cuda_early] == [(n, "cuda") for n, _ in FAKE[:4]]
    cpu_later = gpu_check.share(steps, ("cpu",), gpu_check.lesson_numbers("05,07-11"))
    assert [(s.notebook, s.device) for s in cpu_later] == [("07_ddp.ipynb", "cpu")]  # 05 and 11 have no GPU section
    assert [s.title for s in gpu_check.share(steps, ("speedrun",), {"00"})] == ["speedrun-88", "speedrun-94"]
    assert gpu_check.share(steps) == steps
    assert {gpu_check.part_of(s) for s in steps} == set(gpu_check.PARTS)


def test_lesson_numbers_take_numbers_and_ranges_and_name_the_fix() -> None:
    assert gpu_check.lesson_numbers("05") == {"05"}
    assert gpu_check.lesson_numbers("00-02, 12-13") == {"00", "01", "02", "12", "13"}
    for wrong in ("", "5-", "a", "07-03", "1-2-3"):
        with pytest.raises(ValueError, match="give e.g. 05, 00-07 or 05,12-14"):
            gpu_check.lesson_numbers(wrong)


def test_the_plan_of_a_share_is_printed_and_a_lesson_that_is_not_there_refused(capsys) -> None:
    assert gpu_check.main(["--plan", "--part", "cuda", "--lessons", "12-14"]) == 0
    out = capsys.readouterr().out
    assert "12_" in out and "14_" in out and "00_" not in out and "speedrun" not in out and " cpu " not in out
    assert gpu_check.main(["--plan", "--lessons", "18-19"]) == 2
    assert "no lesson numbered 18, 19" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        gpu_check.main(["--plan", "--lessons", "x"])
    assert "give e.g. 05, 00-07" in capsys.readouterr().err


@pytest.mark.slow  # a child Python imports the helpers
def test_the_command_loads_without_the_notebook_packages(tmp_path: Path) -> None:
    """On a bare GPU machine nbformat and papermill are missing: --plan still works, so does the refusal naming them."""
    blocker = tmp_path / "sitecustomize.py"
    blocker.write_text(
        "import sys\n"
        "class Missing:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('nbformat', 'papermill', 'ipykernel', 'nbclient'):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}')\n"
        "sys.meta_path.insert(0, Missing())\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{ROOT}"}
    done = subprocess.run(
        [sys.executable, "-m", "tools.gpu_check", "--plan", "--part", "speedrun"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "speedrun-88" in done.stdout


HIDE_TORCH = (
    "import sys\n"
    "class Missing:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name.split('.')[0] in ('torch', 'torchvision', 'nbformat', 'papermill', 'ipykernel', 'nbclient'):\n"
    "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
    "sys.meta_path.insert(0, Missing())\n"
)


@pytest.mark.slow  # child Pythons
def test_a_python_without_torch_prints_the_plan_and_is_refused_for_what_it_lacks(tmp_path: Path) -> None:
    """python3 -m tools.gpu_check on a machine whose python3 has no torch: --plan works; the check names torch."""
    (tmp_path / "sitecustomize.py").write_text(HIDE_TORCH)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{ROOT}"}

    def command(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "tools.gpu_check", *args], capture_output=True, text=True, cwd=ROOT, env=env
        )

    planned = command("--plan")
    assert planned.returncode == 0, planned.stderr
    assert "00_check_your_setup.ipynb" in planned.stdout and "speedrun-88" in planned.stdout
    assert "speedrun-94" in planned.stdout
    refused = command("--output", str(tmp_path / "out"))
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
    assert refused.stderr.startswith(f"The GPU check runs the lessons with PyTorch, and this Python ({sys.executable})")
    assert "No module named 'torch'" in refused.stderr and "NVIDIA GPU" not in refused.stderr
    assert not (tmp_path / "out").exists()


def test_the_plans_targets_without_torch_are_the_speedruns() -> None:
    plan = speedrun.DATASETS[gpu_check.SPEEDRUN_DATASET]
    assert (plan.target, plan.stretch) == gpu_check.SPEEDRUN_TARGETS


@pytest.mark.parametrize("error", ["ModuleNotFoundError: No module named 'torch'", "OSError: libcudart.so.13"])
def test_a_torch_that_cannot_be_imported_is_the_reason_given(error: str) -> None:
    line = gpu_check.refusal({"available": False, "torch": None, "cuda": None, "error": error})
    assert f"cannot import it ({error})" in line and "machine with an NVIDIA GPU" not in line
