"""The course runner: execute the lesson notebooks with papermill and summarise them (maintainer tooling: it lives in
tools/, outside the helpers package learners install, and runs from the clone's root).

python -m tools.course run [--quick] [--device D] [--dataset NAME] [--only PATTERN] [--write-back] [--timeout S]
python -m tools.course list
python -m tools.course gpu-check [--output DIR] [--dataset NAME]   (tools/gpu_check.py)

Every argument is checked before a notebook starts (a bad one: one message, exit status 2). Ctrl-C or SIGTERM, and a
notebook that runs past --timeout, end the notebook's kernel together with every process it started (torchrun and
its workers included); the table is still printed. Exit status: 0 all passed, 1 a notebook failed or timed out,
2 bad arguments, 130 stopped by Ctrl-C (SIGINT), 143 stopped by SIGTERM.
"""

from __future__ import annotations

import argparse
import fnmatch
import importlib.util
import os
import re
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import nbformat

FIX_PYTHON = (
    "run it from the clone's root with the course's environment: .venv/bin/python -m tools.course ... (the set-up is "
    "in README.md)"
)
"""How to start the runner where it was started with a Python that lacks what it needs."""

try:  # neither torch nor nbformat (seconds each): every argument is checked in a fraction of a second
    import helpers
    from helpers import arguments, settings
    from helpers.data import canonical_name, data_dir_problem
    from tools.execute import (
        ROOT,
        Result,
        Signals,
        UsageError,
        fall_back_to_offline_data,
        format_table,
        notebook_problem,
        output_lock,
        run_notebook,
        shown_path,
    )
    from tools.execute import first_error as first_error  # the runner's reading of an executed notebook, for the tests
    from tools.execute import records as records
except ModuleNotFoundError as exc:
    if __name__ != "__main__":
        raise
    print(f"python -m tools.course: this Python ({sys.executable}) has no {exc.name}; {FIX_PYTHON}.", file=sys.stderr)
    sys.exit(2)
except KeyboardInterrupt:
    if __name__ != "__main__":
        raise
    print("Stopped by SIGINT before any notebook started.", file=sys.stderr)
    sys.exit(128 + signal.SIGINT)

NOTEBOOKS = ROOT / "notebooks"

CHECK_ENV = {settings.QUICK: "1", settings.DATASET: "FashionMNIST"}
"""The settings committed outputs are produced with, and that nbval and CI check them with."""


def find_notebooks(folder: Path = NOTEBOOKS, only: str | None = None) -> list[Path]:
    """Lesson notebooks (``NN_name.ipynb``) in order; ``only`` keeps names matching any comma-separated pattern.

    A pattern is a name's start or a glob (``05``, ``05_mnist``, ``0[1-4]``); a single digit is a lesson number, so
    ``5`` means ``05``.
    """
    paths = sorted(folder.glob("[0-9][0-9]_*.ipynb"))
    if only:
        patterns = [p.strip() for p in only.split(",") if p.strip()]
        patterns = [f"0{p}" if len(p) == 1 and p.isdigit() else p for p in patterns]
        paths = [
            p
            for p in paths
            if any(fnmatch.fnmatch(p.name, pat) or fnmatch.fnmatch(p.name, pat + "*") for pat in patterns)
        ]
    return paths


SITE_PACKAGES = re.compile(r"(?:/[^\s/'\":]+)+/site-packages/")


def scrub_paths(text: str) -> str:
    """Replace this machine's paths in an output (tracebacks, warnings) with ones that hold anywhere."""
    text = SITE_PACKAGES.sub("site-packages/", text)
    stdlib = sysconfig.get_paths()["stdlib"]  # .../lib/python3.11/contextlib.py -> python3.11/contextlib.py
    text = text.replace(f"{stdlib}{os.sep}", f"{Path(stdlib).name}{os.sep}")
    text = text.replace(f"{ROOT}{os.sep}", "")
    return text.replace(str(Path.home()), "~")


def clean_for_commit(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Drop the per-run metadata papermill adds and local paths in outputs, so commits show only real changes."""
    nb.metadata.pop("papermill", None)
    for cell in nb.cells:
        cell.metadata.pop("papermill", None)
        cell.metadata.pop("execution", None)
        if cell.metadata.get("tags") == []:
            del cell.metadata["tags"]
        for out in cell.get("outputs", []):
            if "traceback" in out:
                out["traceback"] = [scrub_paths(line) for line in out["traceback"]]
            if "text" in out:
                out["text"] = scrub_paths(out["text"])
    return nb


def _device_problem(device: str) -> str | None:
    """Why ``device`` cannot be used here, or None. "auto" and "cpu" always can; any other name is parsed and checked
    by helpers.devices in a child process, so this one neither loads torch nor holds a GPU context."""
    if device.strip().lower() in ("auto", "cpu"):
        return None
    check = (
        "import sys\n"
        "from helpers import devices\n"
        "try:\n"
        "    devices.validate(sys.argv[1])\n"
        "except (devices.DeviceUnavailableError, ValueError, TypeError) as exc:\n"
        "    print(exc)\n"
        "    sys.exit(3)\n"
    )
    done = subprocess.run([sys.executable, "-c", check, device], capture_output=True, text=True, cwd=ROOT, check=False)
    if done.returncode == 0:
        return None
    return done.stdout.strip() or done.stderr.strip().splitlines()[-1]


def _helpers_elsewhere() -> Path | None:
    """The helpers package the lessons' kernels import (the same Python as this runner's), if it is not this clone's."""
    found = Path(helpers.__file__).resolve().parent
    return None if found == (ROOT / "helpers").resolve() else found


def _course_setup_missing() -> bool:
    """Whether a kernel of this Python, started in the notebooks folder, would not find ``course_setup`` (the lessons'
    first cell would then try to install the course from GitHub): an install of the course made before it existed."""
    saved = sys.path[:]
    sys.path[:] = [p for p in sys.path if p not in ("", ".") and Path(p).resolve() != ROOT.resolve()]
    try:
        return importlib.util.find_spec("course_setup") is None
    finally:
        sys.path[:] = saved


def _quick_problem() -> str | None:
    """Why $COURSE_QUICK is not a yes/no value (the words a lesson stops with), or None."""
    try:
        settings.quick()
    except ValueError as exc:
        return str(exc)
    return None


def check_arguments(args: argparse.Namespace) -> list[Path]:
    """The notebooks to run, once every argument and COURSE_* variable is known to be usable; else UsageError.

    Only the device check loads torch, in a child process and last: every other refusal comes at once."""
    # what runs the notebooks, each in a kernel of this Python, and ends what each started
    for module in ("nbformat", "torch", "papermill", "ipykernel", "psutil"):
        if importlib.util.find_spec(module) is None:
            raise UsageError(
                f"python -m tools.course: this Python ({sys.executable}) has no {module}, which runs the notebooks; "
                f"{FIX_PYTHON}."
            )
    if _course_setup_missing():
        raise UsageError(
            f"this Python ({sys.executable}) has an install of the course that predates course_setup, which every "
            f"lesson's first cell imports. Run `.venv/bin/pip install --no-deps -e .` in {ROOT} (the README's set-up "
            "command does it), then run again."
        )
    folder = Path(args.notebooks)
    if not folder.is_dir():
        what = "is a file, not a folder" if folder.exists() else "does not exist"
        raise UsageError(
            f"The notebooks folder {folder} {what}. Run from the course's clone, or pass --notebooks with the folder "
            "that holds the lessons (00_check_your_setup.ipynb and the rest)."
        )
    every = find_notebooks(folder)
    if not every:
        raise UsageError(f"{folder} holds no lesson notebooks (files named NN_name.ipynb); check --notebooks.")
    paths = find_notebooks(folder, args.only)
    if not paths:
        names = ", ".join(p.name.split("_")[0] for p in every)
        raise UsageError(
            f"--only {args.only!r} matches no notebook in {folder}. Give a lesson number or the start of a name "
            f"({names}), several separated by commas, or a pattern such as '0[1-4]'."
        )
    for path in paths:  # a damaged lesson is found before the first one starts, not when its turn comes
        broken = notebook_problem(path)
        if broken:
            raise UsageError(f"{shown_path(path)}: {broken}")
    if args.dataset:  # a known name: its argparse type checked it
        if args.write_back and args.dataset != CHECK_ENV[settings.DATASET]:
            raise UsageError(
                f"--write-back always runs with the settings the tests check ({_check_settings()}), so --dataset "
                f"{args.dataset} cannot be written back. Drop --dataset, or leave out --write-back to try "
                f"{args.dataset}."
            )
    elif not args.write_back:
        try:
            settings.dataset()
        except ValueError as exc:
            raise UsageError(f"{exc} (Or pass --dataset.)") from None
    if args.write_back and (elsewhere := _helpers_elsewhere()):
        raise UsageError(
            f"--write-back commits outputs made by the helpers of this clone ({ROOT / 'helpers'}), but `import "
            f"helpers` finds {elsewhere} (a virtual environment shared with another clone?). Run "
            f"`.venv/bin/pip install --no-deps -e .` in {ROOT}, then run again."
        )
    if not (args.quick or args.write_back) and (problem := _quick_problem()):
        raise UsageError(f"{problem} (Or pass --quick.)")
    problem = data_dir_problem()
    if problem:
        raise UsageError(problem)
    if args.device:
        problem = _device_problem(args.device)
        if problem:
            raise UsageError(f"--device {args.device} cannot be used here:\n{problem}")
    elif (value := settings.device()) is not None:
        problem = _device_problem(value)
        if problem:
            name = settings.DEVICE
            raise UsageError(
                f'{name}={value!r} is set in the environment, so every notebook\'s "auto" would mean it, and '
                f"that device cannot be used here:\n{problem}\nUnset {name} (or set it to auto or cpu), or pass "
                "--device."
            )
    return paths


def run(args: argparse.Namespace) -> int:
    """Check the arguments, run the notebooks one by one, print the table; the exit status (see the module doc)."""
    with Signals() as signals:
        try:
            paths = check_arguments(args)
            if not signals.received:
                output_dir = Path(args.output)
                with output_lock(output_dir):
                    _settings(args)
                    if not signals.received:
                        return _run(args, paths, output_dir, signals)
        except UsageError as exc:
            if not signals.received:
                print(exc, file=sys.stderr)
                return 2
        print(f"Stopped by {signal.Signals(signals.received).name} before any notebook started.", file=sys.stderr)
        return 128 + signals.received


def _settings(args: argparse.Namespace) -> None:
    """Set the COURSE_* variables every lesson's kernel inherits; choose Fashion-MNIST where MNIST cannot be had."""
    if args.quick:
        os.environ[settings.QUICK] = "1"
    if args.device:
        os.environ[settings.DEVICE] = args.device
    if args.dataset:
        os.environ[settings.DATASET] = args.dataset
    if args.write_back:
        os.environ.update(CHECK_ENV)  # committed outputs must be reproducible by nbval on a CI machine
    if settings.DATASET not in os.environ:
        fall_back_to_offline_data()


def _run(args: argparse.Namespace, paths: list[Path], output_dir: Path, signals: Signals) -> int:
    import nbformat
    from tqdm.auto import tqdm

    results = []
    bar = tqdm(paths, desc="notebooks", unit="nb", file=sys.stderr, disable=args.no_progress)
    for path in bar:
        if signals.received:
            break
        bar.set_postfix_str(path.name)
        result = run_notebook(path, output_dir, args.timeout, lambda: signals.received)
        results.append(result)
        if result.status == "interrupted":
            break
        if result.status != "passed":
            tqdm.write(f"FAILED {path.name}: {result.error.splitlines()[0]}", file=sys.stderr)
        elif args.write_back:
            executed = clean_for_commit(nbformat.read(output_dir / path.name, as_version=4))
            nbformat.write(executed, path)
    bar.close()
    results += [Result(p.name) for p in paths[len(results) :]]  # status "not run"
    sys.stderr.flush()
    print(format_table(results), flush=True)
    failed = [r for r in results if r.status not in ("passed", "not run")]
    for r in failed:
        print(f"\n{r.name} {'was' if r.status == 'interrupted' else 'failed:'} {r.error}", file=sys.stderr)
        executed = output_dir / r.name
        if executed.exists():
            log = executed.with_suffix(".log")
            print(f"Executed copy: {executed}; kernel log: {log}", file=sys.stderr)
    if signals.received:
        name = signal.Signals(signals.received).name
        left = [r.name for r in results if r.status == "not run"]
        print(
            f"\nThe run was stopped by {name}" + (f"; not run: {', '.join(left)}" if left else "") + ".",
            file=sys.stderr,
        )
        return 128 + signals.received
    return 1 if failed else 0


def _check_settings() -> str:
    return ", ".join(f"{k}={v}" for k, v in CHECK_ENV.items())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.course", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run", help="execute notebooks in order, each in a fresh kernel, and print a table")
    p_run.add_argument("--quick", action="store_true", help=f"small parameters, as CI uses (sets {settings.QUICK}=1)")
    p_run.add_argument(
        "--device", help=f'device for "auto" in every notebook, e.g. cpu or cuda:0 (sets {settings.DEVICE})'
    )
    p_run.add_argument(
        "--dataset",
        type=arguments.argtype(canonical_name),
        help=f"MNIST or FashionMNIST instead of each notebook's default (sets {settings.DATASET})",
    )
    p_run.add_argument(
        "--only", metavar="PATTERN", help="run notebooks whose name starts with PATTERN, e.g. 05 or '0[1-4]'"
    )
    p_run.add_argument("--output", default="build/executed", help="folder for executed copies (default build/executed)")
    p_run.add_argument(
        "--write-back",
        action="store_true",
        help=f"copy each passing executed notebook back into notebooks/ (uses the settings the tests check: "
        f"{_check_settings()})",
    )
    p_run.add_argument(
        "--timeout",
        type=arguments.seconds,
        default=None,
        metavar="SECONDS",
        help="seconds one notebook may run; past it, the notebook is stopped and marked 'timed out' (default: none)",
    )
    p_run.add_argument("--notebooks", default=str(NOTEBOOKS), help="folder holding the lesson notebooks")
    p_run.add_argument("--no-progress", action="store_true", help="no progress bar")
    sub.add_parser("bench", help="the data-pipeline benchmark (python -m tools.bench --help)", add_help=False)
    gpu_help = "every lesson and the speedrun on a CUDA GPU (python -m tools.gpu_check --help)"
    sub.add_parser("gpu-check", help=gpu_help, add_help=False)
    p_list = sub.add_parser("list", help="list the lesson notebooks")
    p_list.add_argument("--notebooks", default=str(NOTEBOOKS))
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bench"]:
        from tools import bench

        return bench.main(argv[1:])
    if argv[:1] == ["gpu-check"]:
        from tools import gpu_check

        return gpu_check.main(argv[1:])
    args = parser.parse_args(argv)
    if args.command == "list":
        folder = Path(args.notebooks)
        if not folder.is_dir():
            print(
                f"The notebooks folder {folder} does not exist; pass --notebooks with the lessons' folder.",
                file=sys.stderr,
            )
            return 2
        for path in find_notebooks(folder):
            print(path.name)
        return 0
    return run(args)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # before the runner's own handler is in place
        print("Stopped by SIGINT before any notebook started.", file=sys.stderr)
        sys.exit(128 + signal.SIGINT)
