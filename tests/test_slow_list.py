"""The fast loop (``pytest -m "not slow"``) leaves out what is slow, and its list (``SLOW`` in conftest.py) stays true.

A test that starts processes (subprocess, multiprocessing, torchrun through ``parallel.torchrun``, the course runner,
``devices.child_output``), builds virtual environments or executes notebooks must be in ``SLOW``, found by reading
the tests' code: the names a test uses, and the names used by the module's functions and fixtures it calls or
requests, however deep. Every entry of ``SLOW`` must still name a test, so a renamed test cannot drop out of it.
What is slow for another reason (plain computation over a second) is listed by measuring; no reading finds it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
TEST_FILES = sorted((ROOT / "tests").rglob("test_*.py"))

LAUNCHES = re.compile(
    r"(subprocess|multiprocessing|mp|venv|course_cli)\..+"
    r"|(.+\.)?(Popen|child_output|run_notebook)|parallel\.torchrun|executed_notebook|pytest\.mark\.notebooks"
)
"""Dotted names whose use means a child process, a virtual environment or an executed notebook."""

QUICK_CHILDREN = {
    "tests/test_ddp_plan.py::test_launch_refuses_a_fail_rank_outside_the_job_before_starting_anything": "no process",
    "tests/test_devices.py::test_child_output_rejects_bad_input_and_says_why": "python -c without torch",
    "tests/test_devices.py::test_child_output_reports_a_failing_child_by_its_last_line": "python -c without torch",
    "tests/test_devices.py::test_child_output_sets_and_removes_variables": "python -c without torch",
    "tests/test_launch.py::test_a_release_tag_at_head_is_the_ref": "one git command",
    "tests/test_launch.py::test_bootstrap_does_nothing_where_helpers_is_installed": "one python -c",
    "tests/test_parallel.py::test_child_stderr_collects_what_a_child_process_writes_to_descriptor_2": "python -c",
    "tests/test_parallel.py::test_wait_for_exit_returns_once_every_child_has_ended": "sleepers of 0.1 s",
    "tests/test_parallel.py::test_wait_for_exit_stops_children_that_overrun_and_says_so": "a 0.5 s limit",
    "tests/test_requirements.py::test_ruff_is_clean_on_code_and_notebooks": "ruff: a fraction of a second",
    "tests/test_workflow.py::test_actionlint_accepts_the_workflow": "actionlint, only with COURSE_SITE=1",
    "tests/test_workflow.py::test_actionlint_rejects_a_broken_workflow": "actionlint, only with COURSE_SITE=1",
}
"""Tests that start a child process measured to end within about half a second: they stay in the fast loop."""


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _names(node: ast.AST) -> set[str]:
    """Every name and dotted attribute ``node`` uses, and the arguments it declares (a test's fixtures)."""
    found = {d for n in ast.walk(node) if (d := _dotted(n))}
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        found |= {a.arg for a in node.args.args + node.args.kwonlyargs}
    return found


def launching_tests(source: str) -> tuple[bool, set[str]]:
    """(whether the module as a whole is marked as executing notebooks, the module's tests that launch something)."""
    tree = ast.parse(source)
    functions = {
        n.name: _names(n) for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }
    marks = [n for n in tree.body if isinstance(n, ast.Assign) and any(_dotted(t) == "pytestmark" for t in n.targets)]
    whole = any(LAUNCHES.fullmatch(name) for mark in marks for name in _names(mark))
    memo: dict[str, bool] = {}

    def launches(name: str, seen: frozenset[str] = frozenset()) -> bool:
        if name not in memo:
            used = functions[name]
            called = {u.split(".")[0] for u in used} & functions.keys() - seen - {name}
            memo[name] = any(LAUNCHES.fullmatch(u) for u in used) or any(launches(c, seen | {name}) for c in called)
        return memo[name]

    return whole, {name for name in functions if name.startswith("test_") and launches(name)}


@pytest.fixture(scope="module")
def root_conftest(request: pytest.FixtureRequest) -> ModuleType:
    """The repository's conftest.py as pytest loaded it (SLOW and is_slow)."""
    for plugin in request.config.pluginmanager.get_plugins():
        if Path(getattr(plugin, "__file__", "") or "") == ROOT / "conftest.py":
            return plugin
    pytest.fail("the root conftest.py is not loaded")


def test_every_test_that_launches_something_is_slow(root_conftest: ModuleType) -> None:
    missing = []
    for path in TEST_FILES:
        rel = path.relative_to(ROOT).as_posix()
        whole, tests = launching_tests(path.read_text(encoding="utf-8"))
        if whole and not root_conftest.is_slow(f"{rel}::(any test)"):
            missing.append(f"{rel} (its pytestmark)")
        for name in sorted(tests):
            if not root_conftest.is_slow(f"{rel}::{name}") and f"{rel}::{name}" not in QUICK_CHILDREN:
                missing.append(f"{rel}::{name}")
    assert missing == [], "add these to SLOW in conftest.py:\n" + "\n".join(missing)


def test_every_slow_entry_names_a_test(root_conftest: ModuleType) -> None:
    stale = []
    for entry in (*root_conftest.SLOW, *QUICK_CHILDREN):
        path, _, name = entry.partition("::")
        target = ROOT / path
        if not target.exists():
            stale.append(entry)
        elif name:
            defined = {n.name for n in ast.parse(target.read_text(encoding="utf-8")).body if hasattr(n, "name")}
            if name not in defined:
                stale.append(entry)
    assert stale == [], "SLOW (conftest.py) or QUICK_CHILDREN names tests that do not exist (renamed?):\n" + "\n".join(
        stale
    )


def test_nbval_cells_and_listed_tests_are_slow_and_the_rest_is_not(root_conftest: ModuleType) -> None:
    is_slow = root_conftest.is_slow
    assert is_slow("notebooks/05_mnist_on_gpu.ipynb::Cell 3")
    assert is_slow("tests/browser/test_site.py::test_every_page_loads_cleanly")
    assert is_slow("tests/test_bootstrap.py::test_an_older_helpers_stops_the_lesson")
    assert is_slow("tests/test_ddp.py::test_ten_launches_in_a_row_all_succeed")
    assert is_slow("tests/test_notebooks.py::test_executes_in_quick_mode[05]")
    assert not is_slow("tests/test_notebooks.py::test_lint[05]")
    assert not is_slow("tests/test_ddp.py::test_ten_launches_in_a_row_all_succeed_again")
    assert not is_slow("tests/test_slow_list.py::test_every_slow_entry_names_a_test")


HELPER_MODULE = '''
import subprocess
import pytest
from helpers import parallel

def _run(*args):
    return subprocess.run(args)

def _twice(*args):
    return [_run(*args), _run(*args)]

@pytest.fixture
def env(tmp_path):
    return _twice("python", "-m", "venv", str(tmp_path))

def test_through_a_helper_of_a_helper():
    _twice("true")

def test_through_a_fixture(env):
    assert env

def test_torchrun():
    parallel.torchrun(2, [])

@pytest.mark.notebooks
def test_marked(tmp_path):
    pass

def test_plain(tmp_path):
    assert "subprocess.run" and str(tmp_path)

def test_recursive():
    test_recursive()
'''


def test_the_reading_finds_launches_through_helpers_and_fixtures() -> None:
    whole, tests = launching_tests(HELPER_MODULE)
    assert not whole
    assert tests == {"test_through_a_helper_of_a_helper", "test_through_a_fixture", "test_torchrun", "test_marked"}
    whole, tests = launching_tests("import pytest\npytestmark = pytest.mark.notebooks\ndef test_a():\n    pass\n")
    assert whole and tests == set()
