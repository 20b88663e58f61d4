"""Shared set-up for tests/ and for the nbval run over notebooks/: the checked environment, and executed lessons.

``pytest_configure`` sets the environment the committed notebook outputs were produced with (the course runner's
--write-back settings, ``course.CHECK_ENV``) for the whole session, and ``pytest_unconfigure`` puts back what was
there before. nbval's kernels and any runner started by a test inherit it, so they check the same thing.

Every lesson is executed once per test run: the tests that read an executed lesson (the ``executed_notebook``
fixture) read the outputs nbval's own run produced, and run after it. Only where nbval did not run that whole
notebook in this session (``pytest tests/test_lesson05.py`` alone) does the fixture execute it with the course runner.

Every lesson is also run a second time, top to bottom, in the same kernel (nbval items named ``Cell N again``): a
learner re-runs cells and whole lessons, so a cell that deletes a name it needs, leaves a global mode switched on or
finds its own earlier files in the way fails here. The second pass compares no outputs (timings differ, and a rerun
may rightly say "already there"); it fails on any error. ``-m "not again"`` leaves it out.

``pytest -m "not slow"`` is the maintainer's fast loop: it leaves out every nbval cell (marked here) and every test
marked ``@pytest.mark.slow`` in its own file: those that start processes (torchrun, mp.spawn, the runner, a Python that
imports torch), execute notebooks or take over about a second (``--durations``). Plain ``pytest`` (the README's test
command, and CI) still runs everything.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent
EXECUTED = "executed_notebook"
"""The fixture that hands a test an executed lesson; the tests that request it run after the nbval cells."""
READER = re.compile(r"tests/test_lesson(\d\d)\w*\.py::.*|tests/\w+\.py::\w+\[(\d\d)\]")
"""The node id of a test that reads an executed lesson names the lesson: in its file's name (tests/test_lesson05.py)
or as its parameter (tests/test_notebooks.py::test_executes_in_quick_mode[05])."""


def lesson_read_by(nodeid: str) -> str | None:
    """The number of the lesson the test ``nodeid`` reads, as ``READER`` finds it; None for any other test."""
    match = READER.fullmatch(nodeid)
    return (match[1] or match[2]) if match else None


_saved_env: dict[str, str | None] = {}
_nbval_outputs: dict[Path, dict[int, list | None]] = {}
"""Per notebook nbval executed in this session: each code cell's number (0, 1, ...) and its fresh outputs, or None
for a cell whose item started but never reached the kernel (a dead kernel)."""


def _set_env(name: str, value: str, *, override: bool = True) -> None:
    if name not in _saved_env:
        _saved_env[name] = os.environ.get(name)
    if override or name not in os.environ:
        os.environ[name] = value


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Set the checked environment before any test module, kernel or child process starts."""
    # Idle OpenMP threads sleep instead of spinning: with several processes on a 2-core machine (kernels, DDP ranks),
    # spinning threads slowed training steps more than tenfold in measurements. OpenMP reads it when torch loads, so
    # this comes before the import below, the first of torch in this process.
    _set_env("OMP_WAIT_POLICY", "PASSIVE", override=False)
    from tools import course

    for name, value in course.CHECK_ENV.items():
        _set_env(name, value)
    if config is not None and config.pluginmanager.hasplugin("nbval"):
        _collect_twice()


def _collect_twice() -> None:
    """Make nbval collect every code cell of a notebook twice: once compared with its committed outputs, then again,
    in the same kernel, only for errors (``again`` set on the item, marked ``again``)."""
    from collections import defaultdict

    from nbval.plugin import IPyNbCell, IPyNbFile

    collect = IPyNbFile.collect
    if getattr(collect, "twice", False):
        return

    def collect_twice(self):
        first = list(collect(self))
        yield from first
        for item in first:
            options = defaultdict(bool, item.options)
            options["check"] = False
            again = IPyNbCell.from_parent(
                self, name=f"{item.name} again", cell_num=item.cell_num, cell=item.cell, options=options
            )
            again.again = True
            again.add_marker(pytest.mark.again)
            yield again

    collect_twice.twice = True
    IPyNbFile.collect = collect_twice


def pytest_unconfigure(config: pytest.Config) -> None:
    """Put the environment back as it was before ``pytest_configure``."""
    for name, value in _saved_env.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    _saved_env.clear()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every nbval cell ``slow``, and move the tests that read an executed lesson after the nbval cells."""
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.slow)
    readers = [item for item in items if EXECUTED in getattr(item, "fixturenames", ())]
    unmarked = [item.nodeid for item in readers if item.get_closest_marker("slow") is None]
    if unmarked:
        raise pytest.UsageError(f"these tests execute a lesson but are not marked slow: {', '.join(unmarked)}")
    unnamed = [item.nodeid for item in readers if lesson_read_by(item.nodeid) is None]
    if unnamed:
        raise pytest.UsageError(
            "these tests read an executed lesson but name none (tests/test_lessonNN*.py, or a parameter [NN]): "
            + ", ".join(unnamed)
        )
    items[:] = [item for item in items if EXECUTED not in getattr(item, "fixturenames", ())] + readers


def scope_of(nodeid: str) -> str:
    """The share of the run one pytest-xdist worker takes whole: a lesson's cells together with the tests that read it
    (``lesson_read_by``), so nbval executes the lesson once, in order, before them; else the test's file, so a
    module's fixtures are made once."""
    path = nodeid.split("::", 1)[0]
    if path.startswith("notebooks/") and path.endswith(".ipynb"):
        return f"lesson {path.removeprefix('notebooks/')[:2]}"
    lesson = lesson_read_by(nodeid)
    return f"lesson {lesson}" if lesson else path


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """With ``-n N``, share the run out by ``scope_of``: nbval's cells must run in order in one kernel, and the
    ``executed_notebook`` readers must run after them in the same worker."""
    from xdist.scheduler import LoadScopeScheduling

    class LessonScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    return LessonScheduling(config, log)


def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> None:
    """Keep the outputs of each nbval cell's fresh run, for the ``executed_notebook`` fixture."""
    if call.when != "call" or item.path.suffix != ".ipynb" or not hasattr(item, "cell_num"):
        return
    if getattr(item, "again", False):
        return  # the second pass: the readers read the first
    outputs = getattr(item, "test_outputs", None)  # nbval's outputs of this run, an error output included
    _nbval_outputs.setdefault(item.path, {})[item.cell_num] = None if outputs is None else list(outputs)


def _nbval_run(path: Path):
    """``path`` as nbval executed it in this session (its fresh outputs in every code cell), or None if nbval did
    not execute every code cell of it."""
    import nbformat

    ran = _nbval_outputs.get(path, {})
    nb = nbformat.read(path, as_version=4)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    if set(ran) != set(range(len(code))):
        return None
    for number, cell in enumerate(code):
        outputs = ran[number]
        cell.outputs = [] if outputs is None else copy.deepcopy(outputs)
        cell.execution_count = None if outputs is None else number + 1
    return nb


@pytest.fixture(scope="session")
def executed_notebook() -> Callable[[str], object]:
    """``executed_notebook("05")``: notebooks/05_*.ipynb executed in this session, or a failure.

    nbval's run when nbval executed the whole notebook before the test (the README's test command); otherwise the
    course runner executes it once for the session. Either way with the checked environment, in quick mode.
    """
    import nbformat

    from tools import course

    cache: dict[Path, object] = {}
    output_dir = ROOT / "build" / "test-executed"

    def get(prefix: str):
        paths = course.find_notebooks(ROOT / "notebooks", prefix)
        if len(paths) != 1:
            pytest.fail(f"Expected one notebook starting with {prefix!r}, found {[p.name for p in paths]}")
        path = paths[0]
        if path not in cache:
            nb = _nbval_run(path)
            if nb is not None:
                unrun = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.execution_count is None]
                error = course.first_error(nb) or (f"cell {unrun[0]} never ran" if unrun else None)
                cache[path] = (error, nb, "nbval's run")
            else:
                output_dir.mkdir(parents=True, exist_ok=True)
                result = course.run_notebook(path, output_dir, timeout=600)
                nb = nbformat.read(output_dir / path.name, as_version=4) if result.status == "passed" else None
                cache[path] = (None if nb else result.error, nb, "the course runner's run")
        error, nb, source = cache[path]
        if error:
            pytest.fail(f"{path.name} failed in {source}: {error}", pytrace=False)
        return nb

    return get
