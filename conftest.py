"""Shared fixtures for tests/ and for the nbval run over notebooks/, and the ``slow`` marker of the fast test loop.

Importing this sets the environment the committed notebook outputs were produced with (the course runner's
--write-back settings), so nbval's kernels and the papermill runs check the same thing.

``pytest -m "not slow"`` is the maintainer's fast loop: it leaves out every nbval cell (marked here) and every test
marked ``@pytest.mark.slow`` in its own file: those that start processes (torchrun, mp.spawn, the runner, a Python that
imports torch), execute notebooks or take over about a second (``--durations``). Plain ``pytest`` (the README's test
command, and CI) still runs everything.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

# Idle OpenMP threads sleep instead of spinning: with several processes on a 2-core machine (kernels, DDP ranks),
# spinning threads slowed training steps more than tenfold in measurements. Set before torch is first imported.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import nbformat  # noqa: E402
import pytest  # noqa: E402

from tools import course  # noqa: E402

ROOT = Path(__file__).resolve().parent
os.environ.update(course.CHECK_ENV)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every nbval cell ``slow``; every other slow test carries ``@pytest.mark.slow`` in its own file."""
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def executed_notebook() -> Callable[[str], nbformat.NotebookNode]:
    """``executed_notebook("05")``: notebooks/05_*.ipynb run once per session by the course runner, or a failure."""
    cache: dict[Path, course.Result] = {}
    output_dir = ROOT / "build" / "test-executed"
    output_dir.mkdir(parents=True, exist_ok=True)

    def get(prefix: str) -> nbformat.NotebookNode:
        paths = course.find_notebooks(ROOT / "notebooks", prefix)
        if len(paths) != 1:
            pytest.fail(f"Expected one notebook starting with {prefix!r}, found {[p.name for p in paths]}")
        path = paths[0]
        if path not in cache:
            cache[path] = course.run_notebook(path, output_dir, timeout=600)
        result = cache[path]
        if result.status != "passed":
            pytest.fail(f"{path.name} failed: {result.error}", pytrace=False)
        return nbformat.read(output_dir / path.name, as_version=4)

    return get
