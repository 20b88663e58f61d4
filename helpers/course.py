"""The course runner: execute the lesson notebooks with papermill and summarise them.

python -m helpers.course run [--quick] [--device D] [--dataset NAME] [--only PATTERN] [--write-back]
python -m helpers.course list
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import os
import re
import sys
import sysconfig
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from helpers.data import ENV_DATASET, canonical_name
from helpers.devices import ENV_DEVICE
from helpers.lesson import ENV_QUICK, RECORD_MIME

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"

CHECK_ENV = {ENV_QUICK: "1", ENV_DATASET: "FashionMNIST"}
"""The settings committed outputs are produced with, and that nbval and CI check them with."""


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
    """Lesson notebooks (``NN_name.ipynb``) in order; ``only`` keeps names matching any comma-separated pattern."""
    paths = sorted(folder.glob("[0-9][0-9]_*.ipynb"))
    if only:
        patterns = [p.strip() for p in only.split(",") if p.strip()]
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


def run_notebook(path: Path, output_dir: Path, timeout: int | None = None) -> Result:
    """Execute one notebook in a fresh kernel; the executed copy goes to ``output_dir``, the kernel's log beside it."""
    import papermill

    result = Result(path.name)
    output = output_dir / path.name
    output.unlink(missing_ok=True)
    start = time.perf_counter()
    papermill_error = None
    try:
        with _stderr_to(output.with_suffix(".log")):
            papermill.execute_notebook(
                str(path),
                str(output),
                cwd=str(path.parent),
                kernel_name="python3",
                progress_bar=False,
                log_output=False,
                execution_timeout=timeout,
            )
    except Exception as exc:  # papermill raises on the first cell that fails; the executed copy says which
        papermill_error = f"{type(exc).__name__}: {getattr(exc, 'evalue', exc)}"
    result.seconds = time.perf_counter() - start
    if not output.exists():
        result.status, result.error = "FAILED", papermill_error or "no executed notebook was written"
        return result
    nb = nbformat.read(output, as_version=4)
    unexpected = first_error(nb)
    unexecuted = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.get("execution_count") is None]
    if unexpected:
        result.status, result.error = "FAILED", unexpected
    elif unexecuted:
        result.status = "FAILED"
        result.error = f"cell {unexecuted[0]} never ran" + (f" ({papermill_error})" if papermill_error else "")
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
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows, strict=True)]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    out = [line.format(*head), line.format(*("-" * w for w in widths))]
    out += [line.format(*row) for row in rows]
    return "\n".join(out)


def _fall_back_to_offline_data() -> None:
    """Without MNIST (not on disk, not downloadable) but with Debian's Fashion-MNIST, run on that, and say so."""
    from helpers import data

    if data.is_present("MNIST") or data.downloadable("MNIST"):
        return
    if data.is_present("FashionMNIST") or data.DEBIAN_FASHION_MNIST.is_dir():
        os.environ[ENV_DATASET] = "FashionMNIST"
        print(
            "MNIST is neither on disk nor downloadable here; the lessons use Fashion-MNIST (Debian's "
            "dataset-fashion-mnist) instead. Pass --dataset MNIST to insist on MNIST.",
            file=sys.stderr,
        )


def run(args: argparse.Namespace) -> int:
    if args.write_back and args.dataset and canonical_name(args.dataset) != CHECK_ENV[ENV_DATASET]:
        print(
            f"--write-back always runs with the settings the tests check ({_check_settings()}), so --dataset "
            f"{args.dataset} cannot be written back. Drop --dataset, or leave out --write-back to try {args.dataset}.",
            file=sys.stderr,
        )
        return 2
    folder = Path(args.notebooks)
    paths = find_notebooks(folder, args.only)
    if not paths:
        print(f"No notebook in {folder} matches {args.only!r}.", file=sys.stderr)
        return 1
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
    output_dir = Path(args.output)
    output_dir.mkdir(parents=True, exist_ok=True)

    from tqdm.auto import tqdm

    results = []
    bar = tqdm(paths, desc="notebooks", unit="nb", file=sys.stderr, disable=args.no_progress)
    for path in bar:
        bar.set_postfix_str(path.name)
        result = run_notebook(path, output_dir, args.timeout)
        results.append(result)
        if result.status != "passed":
            tqdm.write(f"FAILED {path.name}: {result.error.splitlines()[0]}", file=sys.stderr)
        elif args.write_back:
            executed = clean_for_commit(nbformat.read(output_dir / path.name, as_version=4))
            nbformat.write(executed, path)
    bar.close()
    sys.stderr.flush()
    print(format_table(results), flush=True)
    failed = [r for r in results if r.status != "passed"]
    for r in failed:
        log = (output_dir / r.name).with_suffix(".log")
        print(f"\n{r.name} failed: {r.error}\nExecuted copy: {output_dir / r.name}; kernel log: {log}", file=sys.stderr)
    return 1 if failed else 0


def _check_settings() -> str:
    return ", ".join(f"{k}={v}" for k, v in CHECK_ENV.items())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m helpers.course", description=__doc__.splitlines()[0])
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
    p_run.add_argument("--timeout", type=int, default=None, help="seconds a single cell may run")
    p_run.add_argument("--notebooks", default=str(NOTEBOOKS), help="folder holding the lesson notebooks")
    p_run.add_argument("--no-progress", action="store_true", help="no progress bar")
    sub.add_parser("bench", help="the data-pipeline benchmark (python -m helpers.bench --help)", add_help=False)
    p_list = sub.add_parser("list", help="list the lesson notebooks")
    p_list.add_argument("--notebooks", default=str(NOTEBOOKS))
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bench"]:
        from helpers import bench

        return bench.main(argv[1:])
    args = parser.parse_args(argv)
    if args.command == "list":
        for path in find_notebooks(Path(args.notebooks)):
            print(path.name)
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
