"""Executing a lesson notebook in a fresh kernel that can be stopped, with every process it started, and what each
run of lessons needs besides: its result, the table, a lock on its output folder, and Ctrl-C noted instead of obeyed.
Shared by the course runner (tools/course.py) and the GPU check (tools/gpu_check.py).

Imports nothing outside the standard library at first: the GPU check refuses with one line on a machine that lacks
torch or the Jupyter packages, and needs this module to do so.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from helpers.text import format_rows

if TYPE_CHECKING:
    import nbformat
    import psutil

ROOT = Path(__file__).resolve().parent.parent

LOCK_NAME = ".course-run.lock"
"""A run holds this file in its output folder locked, so a second run cannot mix its evidence with the first's."""
STOP_GRACE = 5.0
"""Seconds the processes of a stopped notebook get to exit after SIGTERM before SIGKILL."""


class UsageError(Exception):
    """The runner was given something it cannot use; the message says what and how to fix it (exit status 2)."""


@dataclass
class Result:
    """One notebook's run (or one step of the GPU check): status, time, what it recorded and the files it left."""

    name: str
    status: str = "not run"
    seconds: float = 0.0
    device: str = "-"
    headline: str = "-"
    error: str = ""
    records: list[dict] = field(default_factory=list)
    files: list[str] = field(default_factory=list)


def records(nb: nbformat.NotebookNode) -> list[dict]:
    """The records a notebook emitted through helpers.lesson, in order."""
    from helpers.lesson import RECORD_MIME

    found = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if RECORD_MIME in data:
                found.append(dict(data[RECORD_MIME]))
    return found


def first_error(nb: nbformat.NotebookNode) -> str | None:
    """Where and what the first error output is; None if there is none.

    Lessons show the errors they teach through ``helpers.errors.expect_error``, so no cell of a correct run has one.
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


def notebook_problem(path: Path) -> str | None:
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
    import nbformat
    import papermill

    result = Result(path.name)
    output = output_dir / path.name
    output.unlink(missing_ok=True)
    broken = notebook_problem(path)
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


def fall_back_to_offline_data() -> None:
    """Without MNIST (not on disk, not downloadable) but with Debian's Fashion-MNIST, run on that, and say so."""
    from helpers import data, settings

    if data.is_present("MNIST") or data.downloadable("MNIST"):
        return
    if data.is_present("FashionMNIST") or data.DEBIAN_FASHION_MNIST.is_dir():
        os.environ[settings.DATASET] = "FashionMNIST"
        print(
            "MNIST is neither on disk nor downloadable here; the lessons use Fashion-MNIST (Debian's "
            "dataset-fashion-mnist) instead. Pass --dataset MNIST to insist on MNIST.",
            file=sys.stderr,
        )


@contextlib.contextmanager
def output_lock(folder: Path) -> Iterator[None]:
    """Hold ``folder``'s lock for this run, its process id written in the lock file; UsageError when another run
    holds it. The OS releases the lock when the process ends, however it ends."""
    from filelock import FileLock, Timeout  # a dependency of torch itself

    path = folder / LOCK_NAME
    lock = FileLock(path, timeout=0)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        lock.acquire()
    except Timeout:
        try:
            holder = path.read_text(encoding="utf-8").strip() or "unknown"
        except OSError:  # Windows: the holder's lock keeps others from reading the file
            holder = "unknown"
        raise UsageError(
            f"Another course run (process {holder}) is writing to {folder}. Wait for it to finish, or give this "
            "run a folder of its own with --output."
        ) from None
    except OSError as exc:
        raise UsageError(
            f"--output {folder}: cannot write there ({exc.strerror or exc}). Pass --output with a folder you can "
            "write to (default build/executed)."
        ) from None
    try:
        with contextlib.suppress(OSError):  # Windows: the locked file cannot be written through a second handle
            path.write_text(f"{os.getpid()}\n", encoding="utf-8")
        yield
    finally:
        lock.release()


class Signals:
    """While active, SIGINT (Ctrl-C) and SIGTERM are noted instead of ending the runner, so it can clean up."""

    NAMES = ("SIGINT", "SIGTERM")

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> Signals:
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
