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
import contextlib
import fnmatch
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

FIX_PYTHON = (
    "run it from the clone's root with the course's environment: .venv/bin/python -m tools.course ... (the set-up is "
    "in README.md)"
)
"""How to start the runner where it was started with a Python that lacks what it needs."""

try:  # torch comes with helpers: the first seconds of a run
    import nbformat

    import helpers
    from helpers import devices
    from helpers.data import ENV_DATASET, canonical_name
    from helpers.devices import ENV_DEVICE
    from helpers.lesson import ENV_QUICK, RECORD_MIME, ParameterError, env_flag, format_rows
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

if TYPE_CHECKING:
    import psutil

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"

CHECK_ENV = {ENV_QUICK: "1", ENV_DATASET: "FashionMNIST"}
"""The settings committed outputs are produced with, and that nbval and CI check them with."""

LOCK_NAME = ".course-run.lock"
"""A run holds this file in its output folder locked, so a second run cannot mix its evidence with the first's."""
STOP_GRACE = 5.0
"""Seconds the processes of a stopped notebook get to exit after SIGTERM before SIGKILL."""


class UsageError(Exception):
    """The runner was given something it cannot use; the message says what and how to fix it (exit status 2)."""


@dataclass
class Result:
    """One notebook's run: status, time and what it recorded."""

    name: str
    status: str = "not run"
    seconds: float = 0.0
    device: str = "-"
    headline: str = "-"
    error: str = ""
    records: list[dict] = field(default_factory=list)


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


def records(nb: nbformat.NotebookNode) -> list[dict]:
    """The records a notebook emitted through helpers.lesson, in order."""
    found = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if RECORD_MIME in data:
                found.append(dict(data[RECORD_MIME]))
    return found


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


def first_error(nb: nbformat.NotebookNode) -> str | None:
    """Where and what the first error output is; None if there is none.

    Lessons show the errors they teach through ``helpers.lesson.expect_error``, so no cell of a correct run has one.
    """
    # papermill inserts marker cells above a failed cell; numbering skips them, so "cell N" is the lesson's own.
    cells = [c for c in nb.cells if "papermill-error-cell-tag" not in c.metadata.get("tags", [])]
    for index, cell in enumerate(cells):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                count = cell.get("execution_count")
                where = f"cell {index}" + (f" (In [{count}])" if count else "")
                return f"{where} raised {out.ename}: {out.evalue}"
    return None


@contextlib.contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """Send this process's stderr file descriptor, and so the kernel's it starts, to a log file."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "wb") as log:
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


def _gone(process: psutil.Process) -> bool:
    """Whether a process has exited (a zombie waiting for its parent to collect it counts as exited)."""
    import psutil

    try:
        return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def _wait_gone(processes: list[psutil.Process], seconds: float) -> list[psutil.Process]:
    """Wait up to ``seconds`` for the processes to exit; the ones still running."""
    deadline = time.monotonic() + seconds
    alive = [p for p in processes if not _gone(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [p for p in alive if not _gone(p)]
    return alive


def child_pids() -> set[int]:
    """The process ids of this process's children now."""
    import psutil

    return {p.pid for p in psutil.Process().children()}


def stop_child_processes(keep: Collection[int] = (), grace: float = STOP_GRACE) -> int:
    """End the processes this process started (but those in ``keep``) and all they started in turn; how many.

    The kernel runs in a session of its own, and torchrun's workers in sessions of theirs, so neither a terminal's
    Ctrl-C nor a signal to one process group reaches them all: the whole tree is listed while it is still whole,
    then each process gets SIGTERM (torchrun stops its workers on it) and, after ``grace`` seconds, SIGKILL.
    """
    import psutil

    def tree() -> list[psutil.Process]:
        found = []
        for child in psutil.Process().children():
            if child.pid not in keep:
                found.append(child)
                with contextlib.suppress(psutil.Error):
                    found += child.children(recursive=True)
        return found

    first = tree()
    for process in first:
        with contextlib.suppress(psutil.Error):
            process.terminate()
    alive = _wait_gone(first, grace)
    late = [p for p in tree() if p not in first]  # started while the others were stopping
    for process in alive + late:
        with contextlib.suppress(psutil.Error):
            process.kill()
    _wait_gone(alive + late, grace)
    return len(first) + len(late)


def shown_path(path: Path) -> str:
    """``path`` as a command typed in the clone's root names it (``notebooks/05_....ipynb``), else as given."""
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


def _not_a_notebook(path: Path) -> str | None:
    """Why ``path`` cannot be executed as a notebook (not JSON, cut short, unreadable); None when it can."""
    try:
        json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        return f"the file cannot be read ({exc})"
    except json.JSONDecodeError as exc:
        return (
            "the file is not a valid notebook: its JSON breaks off or is damaged at "
            f"line {exc.lineno}, column {exc.colno} ({exc.msg}). Restore it (git checkout -- {shown_path(path)} in "
            "a clone, or download it again)."
        )
    return None


def run_notebook(
    path: Path,
    output_dir: Path,
    timeout: float | None = None,
    stop_requested: Callable[[], int | None] = lambda: None,
) -> Result:
    """Execute one notebook in a fresh kernel; the executed copy goes to ``output_dir``, the kernel's log beside it.

    ``timeout`` bounds the whole notebook in seconds; ``stop_requested`` returns a signal number when the run must
    stop. Either way the kernel and every process it started are ended, and the result says why.
    """
    import papermill

    result = Result(path.name)
    output = output_dir / path.name
    output.unlink(missing_ok=True)
    broken = _not_a_notebook(path)
    if broken:
        result.status, result.error = "FAILED", broken
        return result
    start = time.perf_counter()
    papermill_error: list[str] = []
    others = child_pids()  # processes not this notebook's, e.g. a kernel that a test session keeps

    def execute() -> None:
        try:
            papermill.execute_notebook(
                str(path),
                str(output),
                cwd=str(path.parent),
                kernel_name="python3",
                progress_bar=False,
                log_output=False,
            )
        except Exception as exc:  # papermill raises on the first cell that fails; the executed copy says which
            papermill_error.append(f"{type(exc).__name__}: {getattr(exc, 'evalue', exc)}")

    stopped_by = None
    with _stderr_to(output.with_suffix(".log")):
        # papermill runs in a thread so that this one stays free to notice a signal or the time limit.
        worker = threading.Thread(target=execute, name=f"papermill {path.name}", daemon=True)
        worker.start()
        while True:
            worker.join(0.1)
            if not worker.is_alive():
                break
            signum = stop_requested()
            if signum:
                stopped_by = f"stopped by {signal.Signals(signum).name}"
            elif timeout and time.perf_counter() - start > timeout:
                stopped_by = f"timed out after {timeout:g} s"
            if stopped_by:
                ended = stop_child_processes(keep=others)
                worker.join(30)  # papermill notices the dead kernel within a second or two
                stopped_by += f"; its kernel and the processes it started were ended ({ended} in all)"
                break
    result.seconds = time.perf_counter() - start
    if stopped_by:
        result.status = "interrupted" if stopped_by.startswith("stopped") else stopped_by.split(";")[0]
        result.error = stopped_by
        return result
    error = papermill_error[0] if papermill_error else None
    if not output.exists():
        result.status, result.error = "FAILED", error or "no executed notebook was written"
        return result
    nb = nbformat.read(output, as_version=4)
    unexpected = first_error(nb)
    unexecuted = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.get("execution_count") is None]
    if unexpected:
        result.status, result.error = "FAILED", unexpected
    elif unexecuted:
        result.status = "FAILED"
        result.error = f"cell {unexecuted[0]} never ran" + (f" ({error})" if error else "")
    else:
        result.status = "passed"
    result.records = records(nb)
    for rec in result.records:
        result.device = rec.get("device", result.device)
        result.headline = rec.get("headline", result.headline)
    return result


def format_table(results: list[Result]) -> str:
    """The summary table the runner prints."""
    head = ("notebook", "status", "seconds", "device", "headline figure")
    rows = [(r.name, r.status, f"{r.seconds:.1f}", r.device, r.headline) for r in results]
    return format_rows([head, *rows], right=[2])


def _downloadable(name: str, timeout: float = 5.0) -> bool:
    """Whether the first download mirror of ``name`` answers within ``timeout`` seconds."""
    import urllib.request

    from helpers import data

    cls = data.DATASETS[canonical_name(name)]["cls"]
    url = cls.mirrors[0] + cls.resources[0][0]
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout):
            return True
    except Exception:  # no network, DNS failure, HTTP error: all mean "not from here"
        return False


def _fall_back_to_offline_data() -> None:
    """Without MNIST (not on disk, not downloadable) but with Debian's Fashion-MNIST, run on that, and say so."""
    from helpers import data

    if data.is_present("MNIST") or _downloadable("MNIST"):
        return
    if data.is_present("FashionMNIST") or data.DEBIAN_FASHION_MNIST.is_dir():
        os.environ[ENV_DATASET] = "FashionMNIST"
        print(
            "MNIST is neither on disk nor downloadable here; the lessons use Fashion-MNIST (Debian's "
            "dataset-fashion-mnist) instead. Pass --dataset MNIST to insist on MNIST.",
            file=sys.stderr,
        )


def _device_problem(device: str) -> str | None:
    """Why ``device`` cannot be used here, or None. A child process checks, so this one never holds a GPU context."""
    if device.strip().lower() == "auto":
        return None
    try:
        kind = devices._parse_device_request(device).type
    except ValueError as exc:
        return str(exc)
    if kind == "cpu":
        return None
    check = (
        "import sys\n"
        "from helpers import devices\n"
        "try:\n"
        "    devices.validate(sys.argv[1])\n"
        "except (devices.DeviceUnavailableError, ValueError) as exc:\n"
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


def check_arguments(args: argparse.Namespace) -> list[Path]:
    """The notebooks to run, once every argument and COURSE_* variable is known to be usable; else UsageError."""
    for module in ("papermill", "ipykernel"):  # what runs the notebooks, each in a kernel of this Python
        if importlib.util.find_spec(module) is None:
            raise UsageError(f"this Python ({sys.executable}) has no {module}, which runs the notebooks; {FIX_PYTHON}.")
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
        broken = _not_a_notebook(path)
        if broken:
            raise UsageError(f"{shown_path(path)}: {broken}")
    if args.dataset:
        try:
            canonical_name(args.dataset)
        except ValueError as exc:
            raise UsageError(f"--dataset {args.dataset}: {exc}") from None
        if args.write_back and canonical_name(args.dataset) != CHECK_ENV[ENV_DATASET]:
            raise UsageError(
                f"--write-back always runs with the settings the tests check ({_check_settings()}), so --dataset "
                f"{args.dataset} cannot be written back. Drop --dataset, or leave out --write-back to try "
                f"{args.dataset}."
            )
    elif os.environ.get(ENV_DATASET, "").strip() and not args.write_back:
        try:
            canonical_name(os.environ[ENV_DATASET].strip())
        except ValueError as exc:
            raise UsageError(
                f"{ENV_DATASET}={os.environ[ENV_DATASET]!r} is set in the environment: {exc} "
                f"Set it to one of those, unset it, or pass --dataset."
            ) from None
    if args.write_back and (elsewhere := _helpers_elsewhere()):
        raise UsageError(
            f"--write-back commits outputs made by the helpers of this clone ({ROOT / 'helpers'}), but `import "
            f"helpers` finds {elsewhere} (a virtual environment shared with another clone?). Run "
            f"`.venv/bin/pip install --no-deps -e .` in {ROOT}, then run again."
        )
    if not (args.quick or args.write_back):
        try:
            env_flag(ENV_QUICK)
        except ParameterError as exc:
            raise UsageError(f"{exc} (Or pass --quick.)") from None
    if args.device:
        problem = _device_problem(args.device)
        if problem:
            raise UsageError(f"--device {args.device} cannot be used here:\n{problem}")
    elif os.environ.get(ENV_DEVICE, "").strip().lower() not in ("", "auto"):
        value = os.environ[ENV_DEVICE]
        problem = _device_problem(value.strip())
        if problem:
            raise UsageError(
                f'{ENV_DEVICE}={value!r} is set in the environment, so every notebook\'s "auto" would mean it, and '
                f"that device cannot be used here:\n{problem}\nUnset {ENV_DEVICE} (or set it to auto or cpu), or pass "
                "--device."
            )
    return paths


@contextlib.contextmanager
def output_lock(folder: Path) -> Iterator[None]:
    """Hold ``folder``'s lock for this run; UsageError when another run holds it. The lock ends with the process."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle = open(folder / LOCK_NAME, "a+", encoding="utf-8")  # noqa: SIM115 (held for the whole run)
    except OSError as exc:
        raise UsageError(
            f"--output {folder}: cannot write there ({exc.strerror or exc}). Pass --output with a folder you can "
            "write to (default build/executed)."
        ) from None
    with handle:
        if not _try_lock(handle):
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            raise UsageError(
                f"Another course run (process {holder}) is writing to {folder}. Wait for it to finish, or give this "
                "run a folder of its own with --output."
            )
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        yield


def _try_lock(handle: IO[str]) -> bool:
    """Take an exclusive lock on an open file without waiting; False if another process holds it."""
    try:
        import fcntl
    except ImportError:  # Windows
        import msvcrt

        try:
            msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


class _Signals:
    """While active, SIGINT (Ctrl-C) and SIGTERM are noted instead of ending the runner, so it can clean up."""

    NAMES = ("SIGINT", "SIGTERM")

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> _Signals:
        if threading.current_thread() is threading.main_thread():
            for name in self.NAMES:
                number = getattr(signal, name)
                self._previous[number] = signal.signal(number, self._note)
        return self

    def _note(self, signum: int, frame: object) -> None:
        self.received = self.received or signum

    def __exit__(self, *exc: object) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)


def run(args: argparse.Namespace) -> int:
    """Check the arguments, run the notebooks one by one, print the table; the exit status (see the module doc)."""
    with _Signals() as signals:
        try:
            paths = check_arguments(args)
            if not signals.received:
                output_dir = Path(args.output)
                with output_lock(output_dir):
                    return _run(args, paths, output_dir, signals)
        except UsageError as exc:
            if not signals.received:
                print(exc, file=sys.stderr)
                return 2
        print(f"Stopped by {signal.Signals(signals.received).name} before any notebook started.", file=sys.stderr)
        return 128 + signals.received


def _run(args: argparse.Namespace, paths: list[Path], output_dir: Path, signals: _Signals) -> int:
    if args.quick:
        os.environ[ENV_QUICK] = "1"
    if args.device:
        os.environ[ENV_DEVICE] = args.device
    if args.dataset:
        os.environ[ENV_DATASET] = args.dataset
    if args.write_back:
        os.environ.update(CHECK_ENV)  # committed outputs must be reproducible by nbval on a CI machine
    if ENV_DATASET not in os.environ:
        _fall_back_to_offline_data()

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


def _seconds(text: str) -> float:
    """An argparse type: a number of seconds greater than 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text} is not allowed: give a number of seconds greater than 0, e.g. 900")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.course", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run", help="execute notebooks in order, each in a fresh kernel, and print a table")
    p_run.add_argument("--quick", action="store_true", help=f"small parameters, as CI uses (sets {ENV_QUICK}=1)")
    p_run.add_argument("--device", help=f'device for "auto" in every notebook, e.g. cpu or cuda:0 (sets {ENV_DEVICE})')
    p_run.add_argument(
        "--dataset", help=f"MNIST or FashionMNIST instead of each notebook's default (sets {ENV_DATASET})"
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
        type=_seconds,
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
