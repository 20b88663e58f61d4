"""The public repository's CI workflow (.github/workflows/ci.yml): what it runs, and actionlint's verdict on it.

The workflow cannot run here; these tests check that it does what the README says it does (the README's set-up and
test command, the site, the weekly newest/lowest torch runs) and that actionlint finds nothing wrong with it.
actionlint comes with requirements-site.txt; ``COURSE_SITE=1`` (set by .ci/run) makes its absence a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github" / "workflows" / "ci.yml"


def workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))


def run_lines(job: dict) -> str:
    return "\n".join(step.get("run", "") for step in job["steps"])


def test_triggers_cover_pushes_pull_requests_and_a_weekly_run():
    triggers = workflow()[True]  # YAML 1.1 reads the key `on` as True
    assert {"push", "pull_request", "schedule"} <= set(triggers)
    assert triggers["schedule"][0]["cron"].split()[4] == "1", "the scheduled run is weekly, on Mondays"


def test_the_test_job_installs_and_tests_as_the_readme_says():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    steps = run_lines(workflow()["jobs"]["test"])
    assert ".venv/bin/pip install -r requirements.txt -c requirements-lock.txt -e ." in steps
    assert ".venv/bin/pip install -r requirements.txt -c requirements-lock.txt -e ." in readme
    assert ".venv/bin/python -m pytest" in steps and ".venv/bin/python -m pytest" in readme
    assert "apt-get install -y -qq dataset-fashion-mnist" in steps


def test_the_weekly_run_covers_the_newest_and_the_lowest_torch():
    job = workflow()["jobs"]["test"]
    steps = run_lines(job)
    matrix = job["strategy"]["matrix"]["torch"]
    assert "'schedule'" in matrix and '"newest", "lowest"' in matrix
    assert "--upgrade -r requirements.txt" in steps
    assert "-c requirements-floor.txt" in steps


def test_the_site_is_built_and_published_from_main_only():
    jobs = workflow()["jobs"]
    assert ".venv/bin/python tools/site.py" in run_lines(jobs["site"])
    assert jobs["publish"]["if"] == "github.event_name == 'push' && github.ref == 'refs/heads/main'"
    assert any(step.get("uses", "").startswith("actions/deploy-pages@") for step in jobs["publish"]["steps"])


def actionlint() -> str:
    found = shutil.which("actionlint") or shutil.which("actionlint", path=str(Path(sys.executable).parent))
    if found is None:
        if os.environ.get("COURSE_SITE") == "1":
            pytest.fail("actionlint is missing: pip install -r requirements-site.txt -c requirements-lock.txt")
        pytest.skip("actionlint is not installed (requirements-site.txt); .ci/run installs it and sets COURSE_SITE=1")
    return found


def test_actionlint_accepts_the_workflow():
    result = subprocess.run([actionlint(), str(WORKFLOW)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_rejects_a_broken_workflow(tmp_path: Path):
    broken = workflow()
    broken["jobs"]["test"]["runs-on"] = "${{ matrix.no_such_key }}"
    broken["jobs"]["site"]["needs"] = "no-such-job"
    target = tmp_path / ".github" / "workflows" / "ci.yml"
    target.parent.mkdir(parents=True)
    target.write_text(yaml.safe_dump({"name": "CI", "on": "push", "jobs": broken["jobs"]}), encoding="utf-8")
    result = subprocess.run([actionlint(), str(target)], capture_output=True, text=True)
    assert result.returncode != 0
    assert "no-such-job" in result.stdout and "no_such_key" in result.stdout
