"""Shared fixtures for tests/ and for the nbval run over notebooks/, and the ``slow`` marker of the fast test loop.

Importing this sets the environment the committed notebook outputs were produced with (the course runner's
--write-back settings), so nbval's kernels and the papermill runs check the same thing.

``pytest -m "not slow"`` is the maintainer's fast loop: it leaves out every nbval cell and everything listed in
``SLOW``; plain ``pytest`` (the README's test command, and CI) still runs everything.
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

SLOW = (
    # Whole modules (a path ending in .py, or a folder ending in /).
    "tests/browser/",  # every lesson in JupyterLab and the website, in chromium
    "tests/test_bootstrap.py",  # builds fresh virtual environments and executes lessons in them
    "tests/test_course_stop.py",  # starts the runner and a kernel, then stops them from outside
    "tests/test_course_processes.py",  # process trees with grace periods
    "tests/test_course_startup.py",  # the runner started by a bare Python, or stopped while torch imports
    "tests/test_ci_run.py::test_ci_reads_the_readmes_two_commands_from_the_readme",  # a child python
    "tests/test_gpu_check.py::test_this_machine_without_cuda_is_refused_by_the_command",  # children import torch
    "tests/test_gpu_check.py::test_with_a_gpu_everything_lands_in_one_folder_and_a_failure_exits_1",  # notebooks
    "tests/test_gpu_check.py::test_a_speedrun_step_gives_its_records_summary_or_its_last_line",  # three children
    "tests/test_lesson05.py",  # executes lesson 05
    # Single tests (path::name; every parametrisation of it). Child processes (torchrun, DDP, mp.spawn, the runner,
    # python -c that imports torch), executed notebooks, or over about a second measured (--durations, two cores).
    "tests/test_bench.py::test_quick_run_prints_the_table",
    "tests/test_bench_cli.py::test_negative_subset_is_refused_before_anything_runs",
    "tests/test_checkpoints_faults.py::test_ctrl_c_during_a_real_save",
    "tests/test_course.py::test_runner_reports_failures_and_runs_the_rest",
    "tests/test_course.py::test_unavailable_device_is_refused_before_any_lesson_starts",
    "tests/test_course.py::test_write_back_refuses_a_dataset_other_than_the_checked_one",
    "tests/test_course.py::test_bad_pattern_is_an_error",
    "tests/test_course_arguments.py::test_an_unavailable_device_is_refused_before_starting",
    "tests/test_data_faults.py::test_two_processes_prepare_the_data_at_once",
    "tests/test_ddp.py::test_two_processes_equal_one_process_on_the_global_batch",
    "tests/test_ddp.py::test_ten_launches_in_a_row_all_succeed",
    "tests/test_ddp.py::test_a_failing_rank_ends_the_job_with_an_error",
    "tests/test_ddp.py::test_the_process_group_is_gone_before_the_interpreter_shuts_down",
    "tests/test_ddp.py::test_a_timed_out_launch_leaves_no_worker_running",
    "tests/test_ddp_plan.py::test_torchrun_with_a_fail_rank_outside_the_job_says_so_once_and_fails",
    "tests/test_ddp_plan.py::test_the_script_alone_refuses_a_negative_fail_rank_with_one_message",
    "tests/test_devices.py::test_report_command_runs",
    "tests/test_devices.py::test_child_output_hides_every_gpu_with_an_empty_value",
    "tests/test_expect_error.py::test_the_line_shown_is_the_blocks_own_line_when_the_error_comes_from_deeper_code",
    "tests/test_lesson02_errors.py::test_the_error_is_raised_for_real_and_shown",
    "tests/test_lesson02_errors.py::test_no_cell_of_a_fresh_run_has_an_error_output",
    "tests/test_lesson02_errors.py::test_what_no_stand_in_models_is_raised_on_a_gpu_and_skipped_without_one",
    "tests/test_lesson02_errors.py::test_each_error_says_whether_it_was_real_or_a_stand_in",
    "tests/test_lesson_parameters.py::test_in_a_notebook_run_the_error_is_one_line_and_the_runner_names_it",
    "tests/test_memory.py::test_default_clear_runs_on_cpu",
    "tests/test_notebooks.py::test_executes_in_quick_mode",
    "tests/test_parallel.py::test_after_waiting_the_spawn_failure_names_process_0_every_time",
    "tests/test_speedrun_cli.py::test_unknown_dataset",
    "tests/test_speedrun_cli.py::test_unavailable_device",
    "tests/test_speedrun_cli.py::test_runs_must_be_at_least_one",
    "tests/test_speedrun_cli.py::test_bad_target_from_the_command_line",
    "tests/test_speedrun_cli.py::test_unknown_device",
    "tests/test_visible_devices.py::test_lesson01_children_report_what_they_measured",
)
"""The tests marked ``slow`` besides every nbval cell; tests/test_slow_list.py fails when a test that starts processes
or executes notebooks is missing here, or when an entry names no test."""


def is_slow(nodeid: str) -> bool:
    """Whether a test (by its node id, relative to the repository root) is in ``SLOW`` or is an nbval notebook cell."""
    path, _, name = nodeid.partition("::")
    if path.endswith(".ipynb"):
        return True
    for entry in SLOW:
        if entry.endswith((".py", "/")):
            if path == entry or (entry.endswith("/") and path.startswith(entry)):
                return True
        elif nodeid == entry or nodeid.startswith((f"{entry}[", f"{entry}::")):
            return True
    return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``slow`` what ``SLOW`` lists and every nbval cell, so ``-m "not slow"`` runs the unit tests alone."""
    for item in items:
        if is_slow(item.nodeid):
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
