"""The GPU check: every lesson on a CUDA GPU at the learner's defaults, the lessons with GPU sections again with
``COURSE_DEVICE=cpu`` on the same machine, and the speedrun ladder on Fashion-MNIST to its target and to its stretch
target, 3 seeds each; everything into one folder with a one-page SUMMARY.md (maintainer tooling: run it from the
clone's root). GPUs are lent rarely and briefly, and the whole plan takes longer than one short loan: ``--part`` and
``--lessons`` run a share of it, each share into its own folder, within ``--budget`` seconds.

    python -m tools.gpu_check [--output build/gpu-check] [--dataset NAME] [--budget SECONDS]
    python -m tools.gpu_check --part cuda --lessons 00-07 --output build/gpu-check-a   # a share of the plan
    python -m tools.gpu_check --plan              # print what it would run, on any machine
    python -m tools.gpu_check --download-wheels DIR   # with internet: the packages a bare GPU machine lacks
    python -m tools.course gpu-check ...          # the same command

Without CUDA it refuses at once with one line. Exit status: 0 every step passed; 1 a step failed, timed out or was not
reached within the budget; 2 refused before anything ran; 130 or 143 stopped by SIGINT or SIGTERM.

What runs, and in which mode, is ``plan()``: a pure function of the lessons' names and code, covered by
tests/test_gpu_check.py. A lesson runs at full size unless ``QUICK_ON_CUDA`` names it with the reason; the second
pass on the CPU runs in quick mode, since it checks that the GPU sections step aside, not the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from helpers import arguments, settings
from helpers.text import format_rows
from tools.execute import (
    Result,
    Signals,
    UsageError,
    child_pids,
    fall_back_to_offline_data,
    format_table,
    output_lock,
    run_notebook,
    stop_child_processes,
)

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"

BUDGET = 9 * 60.0
"""Seconds the whole check may take: a step that would start later is reported as not reached."""
LESSON_TIMEOUT = 240.0
"""The most one lesson may take on CUDA (less where less of the budget is left)."""
CPU_TIMEOUT = 120.0
"""The most one lesson may take in the CPU pass (quick mode)."""
SPEEDRUN_TIMEOUT = 240.0
"""The most one speedrun may take."""
SPEEDRUN_DATASET = "FashionMNIST"
SPEEDRUN_RUNS = 3
SPEEDRUN_TARGETS = (0.88, 0.94)
"""Fashion-MNIST's speedrun target and stretch target as lessons.lesson_11 defines them (a test holds the two
together): what --plan shows on a Python without torch, which lessons.lesson_11 needs."""

QUICK_ON_CUDA = {
    "11": "the full ladder is what the two speedrun steps run, 3 seeds each; here the lesson's cells run on CUDA in "
    "quick mode",
    "13": "its training processes run on the CPU with gloo on every machine; quick mode checks the rest in less time",
}
"""Lessons (by number) that run in quick mode on CUDA too, each with the reason: a full run would not fit the budget."""
FULL = "learner defaults"
CPU_PASS = "quick mode: this pass checks that each GPU section steps aside when the lesson runs on the CPU"

GPU_CODE = re.compile(
    r"\b(gpu_section|machine_gpus|cuda_gpu_count|enough_gpus|cuda_or_fake|gpu_or_meta)\(|\btorch\.cuda\b|\bnccl\b"
)
"""Code that marks a lesson as having GPU sections: the helpers' GPU gates, ``torch.cuda``, or nccl."""

PARTS = ("cuda", "cpu", "speedrun")
"""The plan's three passes, in order: the lessons on CUDA, the lessons with GPU sections on the CPU, the speedrun."""

NEEDED = ("nbformat", "papermill", "ipykernel", "psutil")
"""What executes the lessons, each in a Jupyter kernel of this Python, and ends what each lesson started."""


@dataclass(frozen=True)
class Step:
    """One thing the check runs: a lesson (``notebook``) or a speedrun (``command``)."""

    title: str
    device: str
    mode: str
    reason: str
    timeout: float
    env: tuple[tuple[str, str | None], ...] = ()
    """COURSE_* variables for a lesson's kernel: a value, or None for unset (the notebook's own default)."""
    notebook: str = ""
    command: tuple[str, ...] = ()
    folder: str = ""
    """Where the step's files go, inside the output folder."""


def has_gpu_sections(code: str) -> bool:
    """Whether a lesson's code has a GPU section: a GPU gate of the helpers (``devices.gpu_section(...)`` and the
    like), ``torch.cuda``, or nccl."""
    return bool(GPU_CODE.search(code))


def speedrun_targets() -> tuple[float, ...]:
    """Fashion-MNIST's speedrun target and its stretch target, as lessons.lesson_11 defines them (``SPEEDRUN_TARGETS``
    on a Python without torch)."""
    try:
        from lessons.lesson_11 import DATASETS
    except ModuleNotFoundError as exc:
        if exc.name not in ("torch", "torchvision"):
            raise
        return SPEEDRUN_TARGETS

    plan = DATASETS[SPEEDRUN_DATASET]
    return (plan.target,) + ((plan.stretch,) if plan.stretch else ())


def plan(
    lessons: Sequence[tuple[str, str]],
    output: Path,
    dataset: str | None = None,
    python: str = "python",
    targets: Sequence[float] = (0.88, 0.94),
) -> list[Step]:
    """Every step of the check, in order, for ``lessons`` (each a notebook's file name and its code cells' text).

    First every lesson on CUDA ("auto" resolves to it), at full size unless ``QUICK_ON_CUDA`` names it; then the
    lessons with GPU sections again with COURSE_DEVICE=cpu in quick mode; then the speedrun to each of ``targets``.
    ``dataset`` is passed to the lessons as COURSE_DATASET (None: each notebook's own default).
    """
    steps = []
    for name, _ in lessons:
        quick = name[:2] in QUICK_ON_CUDA
        env = ((settings.QUICK, "1" if quick else None), (settings.DEVICE, None), (settings.DATASET, dataset))
        steps.append(
            Step(
                name,
                "cuda",
                "quick" if quick else "full",
                QUICK_ON_CUDA.get(name[:2], FULL),
                LESSON_TIMEOUT,
                env,
                notebook=name,
                folder="cuda",
            )
        )
    for name, code in lessons:
        if has_gpu_sections(code):
            env = ((settings.QUICK, "1"), (settings.DEVICE, "cpu"), (settings.DATASET, dataset))
            steps.append(Step(name, "cpu", "quick", CPU_PASS, CPU_TIMEOUT, env, notebook=name, folder="cpu"))
    for target in targets:
        label = f"speedrun-{round(target * 100)}"
        command = (
            python,
            "-m",
            "lessons.lesson_11",
            "--dataset",
            SPEEDRUN_DATASET,
            "--runs",
            str(SPEEDRUN_RUNS),
            "--target",
            f"{target:g}",
            "--device",
            "cuda",
            "--json",
            str(output / f"{label}.json"),
            "--no-progress",
        )
        reason = f"{SPEEDRUN_DATASET} to {target:.0%}, {SPEEDRUN_RUNS} seeds per rung"
        steps.append(Step(label, "cuda", "full", reason, SPEEDRUN_TIMEOUT, command=command))
    return steps


def part_of(step: Step) -> str:
    """Which of ``PARTS`` a step belongs to."""
    return step.device if step.notebook else "speedrun"


def share(steps: Sequence[Step], parts: Sequence[str] = PARTS, lessons: set[str] | None = None) -> list[Step]:
    """The steps of ``parts`` only, and of the lessons numbered in ``lessons`` only (None: every lesson)."""
    return [
        s for s in steps if part_of(s) in parts and (lessons is None or not s.notebook or s.notebook[:2] in lessons)
    ]


def lesson_numbers(text: str) -> set[str]:
    """``--lessons``: two-digit lesson numbers and ranges, separated by commas ("00-07", "05,12-14")."""
    numbers: set[str] = set()
    for piece in text.split(","):
        first, dash, last = piece.strip().partition("-")
        last = last if dash else first
        if not (first.isdigit() and last.isdigit() and int(first) <= int(last)):
            raise ValueError(f"{piece.strip()!r} is not a lesson number or range: give e.g. 05, 00-07 or 05,12-14")
        numbers |= {f"{n:02d}" for n in range(int(first), int(last) + 1)}
    return numbers


def read_lessons(folder: Path) -> list[tuple[str, str]]:
    """Each lesson notebook in ``folder`` (``NN_name.ipynb``, in order) with the text of its code cells."""
    lessons = []
    for path in sorted(folder.glob("[0-9][0-9]_*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
        code = "\n".join("".join(c.get("source", "")) for c in cells if c.get("cell_type") == "code")
        lessons.append((path.name, code))
    return lessons


def format_plan(steps: Sequence[Step]) -> str:
    rows = [("step", "device", "mode", "limit (s)", "why")]
    rows += [(s.title, s.device, s.mode, f"{s.timeout:g}", s.reason) for s in steps]
    return format_rows(rows, right=[3])


PROBE = """
import json, torch
info = {"torch": torch.__version__, "cuda": torch.version.cuda, "available": torch.cuda.is_available()}
if info["available"]:
    props = torch.cuda.get_device_properties(0)
    info.update(count=torch.cuda.device_count(), name=props.name, capability=f"{props.major}.{props.minor}",
                memory_gib=round(props.total_memory / 2**30, 1), cudnn=torch.backends.cudnn.version())
print(json.dumps(info))
"""


def cuda_probe() -> dict:
    """What PyTorch sees, asked in a child process, so this one never holds a GPU context while the lessons run."""
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=ROOT, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return {"available": False, "torch": None, "cuda": None, "error": last}
    return json.loads(done.stdout.strip().splitlines()[-1])


def refusal(probe: dict) -> str | None:
    """The one line the check refuses with where there is no CUDA GPU; None where there is one."""
    if probe.get("available"):
        return None
    if probe.get("torch") is None:
        return (
            f"The GPU check runs the lessons with PyTorch, and this Python ({sys.executable}) cannot import it "
            f"({probe.get('error')}): start it with a Python that has PyTorch, the GPU machine's own python3 "
            "(python3 -m tools.gpu_check from the clone's root) or the course's .venv/bin/python."
        )
    if probe.get("cuda") is None:
        why = f"PyTorch {probe['torch']} is a CPU-only build"
    else:
        why = f"PyTorch {probe['torch']} (CUDA {probe['cuda']}) sees no CUDA GPU"
    return f"The GPU check needs a CUDA GPU, and here {why}: run it on a machine with an NVIDIA GPU."


def wheel_download_command(folder: Path, python_version: str = "3.12") -> list[str]:
    """pip's command that fetches, for a bare GPU machine's Python, what runs the lessons there (at the lock's pins)."""
    platforms = ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64", "any"]
    return [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--only-binary=:all:",
        "--python-version",
        python_version,
        "--implementation",
        "cp",
        *[x for p in platforms for x in ("--platform", p)],
        "-d",
        str(folder),
        "-c",
        str(ROOT / "requirements-lock.txt"),
        *NEEDED,
    ]


@contextlib.contextmanager
def _environment(values: Sequence[tuple[str, str | None]]) -> Iterator[None]:
    """Set (or, for None, unset) environment variables for the duration."""
    saved = {name: os.environ.get(name) for name, _ in values}
    try:
        for name, value in values:
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _run_speedrun(step: Step, output: Path, timeout: float, stop: Callable[[], int | None]) -> Result:
    result = Result(step.title)
    log = output / f"{step.title}.log"
    record = Path(step.command[step.command.index("--json") + 1])
    record.unlink(missing_ok=True)
    others = child_pids()
    start = time.perf_counter()
    with open(log, "w", encoding="utf-8") as out:
        process = subprocess.Popen(step.command, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        stopped = ""
        while process.poll() is None:
            time.sleep(0.2)
            signum = stop()
            if signum:
                stopped = f"stopped by {signal.Signals(signum).name}"
            elif time.perf_counter() - start > timeout:
                stopped = f"timed out after {timeout:g} s"
            if stopped:
                stop_child_processes(keep=others)
                process.wait()
                break
    result.seconds = time.perf_counter() - start
    result.device = "cuda"
    result.files = [log.name] + ([record.name] if record.exists() else [])
    if stopped:
        result.status = "interrupted" if stopped.startswith("stopped") else stopped
        result.error = stopped
    elif process.returncode != 0 or not record.exists():
        lines = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()
        result.status = "FAILED"
        result.error = f"exit status {process.returncode}: {lines[-1] if lines else 'no output'}"
    else:
        result.status = "passed"
        result.headline = str(json.loads(record.read_text(encoding="utf-8")).get("summary", "-"))
    return result


def _run_lesson(step: Step, folder: Path, output: Path, timeout: float, stop: Callable[[], int | None]) -> Result:
    target = output / step.folder
    target.mkdir(parents=True, exist_ok=True)
    with _environment(step.env):
        result = run_notebook(folder / step.notebook, target, timeout, stop)
    result.name = step.title
    result.files = [
        f"{step.folder}/{p.name}"
        for p in (target / step.notebook, (target / step.notebook).with_suffix(".log"))
        if p.exists()
    ]
    return result


def summary(
    probe: dict, outcomes: Sequence[tuple[Step, Result]], dataset: str | None, budget: float, wall: float
) -> str:
    """SUMMARY.md: the machine, then every step's status, mode, seconds and headline, then what went wrong."""
    failed = [(step, r) for step, r in outcomes if r.status != "passed"]
    lines = [
        "# GPU check",
        "",
        f"- date: {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}",
        f"- device: {probe.get('name', '-')} (compute capability {probe.get('capability', '-')}, "
        f"{probe.get('memory_gib', '-')} GiB), {probe.get('count', 0)} visible",
        f"- torch {probe.get('torch')}, CUDA {probe.get('cuda')}, cuDNN {probe.get('cudnn', '-')}, Python "
        f"{sys.version.split()[0]}",
        f"- lessons' dataset: {dataset or 'each notebook default'}; speedrun: {SPEEDRUN_DATASET}, "
        f"{SPEEDRUN_RUNS} seeds per rung",
        f"- {wall:.0f} s in all, budget {budget:.0f} s; "
        + ("every step passed" if not failed else f"{len(failed)} of {len(outcomes)} steps did not pass"),
        "",
    ]
    sections = [
        ('Lessons on CUDA (DEVICE = "auto")', lambda step: step.notebook and step.device == "cuda"),
        (f"Lessons again with {settings.DEVICE}=cpu", lambda step: step.notebook and step.device == "cpu"),
        ("Speedrun", lambda step: not step.notebook),
    ]
    for title, chosen in sections:
        rows = [("step", "status", "mode", "seconds", "device", "headline", "why this mode")]
        rows += [
            (step.title, r.status, step.mode, f"{r.seconds:.1f}", r.device, r.headline, step.reason)
            for step, r in outcomes
            if chosen(step)
        ]
        table = ["```", format_rows(rows, right=[3]), "```"] if len(rows) > 1 else ["None in this plan."]
        lines += [f"## {title}", "", *table, ""]
    if failed:
        lines += ["## What did not pass", ""]
        lines += [
            f"- {step.title} ({step.device}): {r.status}" + (f": {r.error}" if r.error else "") for step, r in failed
        ]
        lines.append("")
    return "\n".join(lines)


def _refuse(message: str) -> int:
    print(message, file=sys.stderr)
    return 2


def check(args: argparse.Namespace) -> int:
    """Refuse without CUDA, or run every step of the plan within the budget; the exit status (see the module doc)."""
    folder = Path(args.notebooks)
    if not folder.is_dir():
        return _refuse(f"The notebooks folder {folder} does not exist: run from the clone's root, or pass --notebooks.")
    lessons = read_lessons(folder)
    unknown = sorted((args.lessons or set()) - {name[:2] for name, _ in lessons})
    if unknown:
        return _refuse(
            f"--lessons names no lesson numbered {', '.join(unknown)} in {folder}: give numbers of lessons there."
        )
    parts = PARTS if args.part == "all" else (args.part,)
    if args.plan:
        steps = plan(lessons, Path(args.output), args.dataset, "python", speedrun_targets())
        print(format_plan(share(steps, parts, args.lessons)))
        return 0
    probe = cuda_probe()
    line = refusal(probe)
    if line:
        return _refuse(line)
    missing = [name for name in NEEDED if importlib.util.find_spec(name) is None]
    if missing:
        return _refuse(
            f"The GPU check runs the lessons in Jupyter kernels, and this Python ({sys.executable}) has no "
            f"{', '.join(missing)}: use the course's .venv, or install the wheels that `python -m tools.gpu_check "
            "--download-wheels DIR` fetches where there is internet (README, For maintainers)."
        )
    from helpers import data

    problem = data.data_dir_problem()
    if problem:
        return _refuse(problem)
    dataset = args.dataset
    if dataset is None:
        try:
            dataset = settings.dataset()
        except ValueError as exc:
            return _refuse(f"{exc} (Or pass --dataset.)")
    if dataset is None:
        fall_back_to_offline_data()  # MNIST out of reach but Fashion-MNIST here: the runner's own choice
        dataset = settings.dataset()
    for name in dict.fromkeys([dataset or "MNIST", SPEEDRUN_DATASET]):
        offline = name == "FashionMNIST" and data.DEBIAN_FASHION_MNIST.is_dir()
        if not (data.is_present(name) or offline or data.downloadable(name)):
            return _refuse(
                f"{name} is not in the data folder ({data.data_dir()}) and cannot be downloaded here: unpack it into "
                f"a folder and point {settings.DATA_DIR} at it"
                + (", or pass --dataset FashionMNIST." if name == "MNIST" else ".")
            )
    output = Path(args.output)
    steps = share(plan(lessons, output.resolve(), dataset, sys.executable, speedrun_targets()), parts, args.lessons)
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    start = time.perf_counter()
    outcomes = []
    with Signals() as signals:
        try:
            with output_lock(output):
                print(format_plan(steps), flush=True)
                for step in steps:
                    left = args.budget - (time.perf_counter() - start)
                    if signals.received or left < 10:
                        why = "" if signals.received else "the budget was spent before it"
                        outcomes.append((step, Result(step.title, error=why)))
                        continue
                    timeout = min(step.timeout, left)
                    if step.notebook:
                        result = _run_lesson(step, folder, output, timeout, lambda: signals.received)
                    else:
                        result = _run_speedrun(step, output, timeout, lambda: signals.received)
                    outcomes.append((step, result))
                    print(
                        f"{step.title} ({step.device}, {step.mode}): {result.status}, {result.seconds:.1f} s",
                        flush=True,
                    )
                wall = time.perf_counter() - start
                for device in ("cuda", "cpu"):
                    results = [r for step, r in outcomes if step.notebook and step.device == device]
                    (output / f"table-{device}.txt").write_text(format_table(results) + "\n", encoding="utf-8")
                passed = [step.notebook for step, r in outcomes if step.device == "cuda" and r.status == "passed"]
                if passed:  # per-cell seconds for the lessons' computed Time lines (tools/lesson_time.py)
                    from tools.lesson_time import record_from  # nbformat: after the check that it is installed

                    note = (
                        f"papermill's per-cell seconds of lessons run top to bottom on CUDA at the learner's defaults "
                        f"(quick mode where marked), dataset {dataset or 'each notebook default'}, torch "
                        f"{probe.get('torch')}, CUDA {probe.get('cuda')}, Python {sys.version.split()[0]}"
                    )
                    record = record_from(output / "cuda", f"one {probe.get('name')}", True, note, only=passed)
                    (output / "lessons-record.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
                text = summary(probe, outcomes, dataset, args.budget, wall)
                (output / "SUMMARY.md").write_text(text, encoding="utf-8")
        except UsageError as exc:
            return _refuse(str(exc))
    print(text)
    print(
        f"Written to {output}: SUMMARY.md, table-cuda.txt, table-cpu.txt, lessons-record.json, cuda/, cpu/, "
        "speedrun-*.json and logs."
    )
    if signals.received:
        return 128 + signals.received
    return 0 if all(r.status == "passed" for _, r in outcomes) else 1


def _dataset(text: str) -> str:
    """A dataset's canonical name (helpers.data loads no torch)."""
    from helpers.data import canonical_name

    return canonical_name(text)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.gpu_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", default="build/gpu-check", help="folder for everything (default build/gpu-check)")
    parser.add_argument(
        "--dataset",
        type=arguments.argtype(_dataset),
        help=f"MNIST or FashionMNIST for the lessons (sets {settings.DATASET}; default: each notebook's "
        "own, or Fashion-MNIST where MNIST cannot be had, as the runner does)",
    )
    parser.add_argument(
        "--budget",
        type=arguments.seconds,
        default=BUDGET,
        help=f"seconds for the whole check (default {BUDGET:g}); a step past it is not run",
    )
    parser.add_argument(
        "--part",
        choices=("all", *PARTS),
        default="all",
        help="run one pass of the plan: the lessons on CUDA, the lessons again on the CPU, or the speedrun "
        "(default all)",
    )
    parser.add_argument(
        "--lessons",
        type=arguments.argtype(lesson_numbers),
        help="run only these lessons in the lesson passes: numbers and ranges such as 00-07 or 05,12-14",
    )
    parser.add_argument("--notebooks", default=str(NOTEBOOKS), help="folder holding the lesson notebooks")
    parser.add_argument("--plan", action="store_true", help="print the steps, their modes and why, and stop")
    parser.add_argument(
        "--download-wheels",
        metavar="DIR",
        type=Path,
        help="download, for Python 3.12 on x86-64 Linux, what runs the lessons (nbformat, papermill, "
        "ipykernel, psutil and their needs) into DIR, and stop",
    )
    args = parser.parse_args(argv)
    if args.download_wheels:
        return subprocess.run(wheel_download_command(args.download_wheels), check=False).returncode
    return check(args)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("Stopped by SIGINT before any step started.", file=sys.stderr)
        sys.exit(128 + signal.SIGINT)
