"""The bootstrap works where the course package is missing, as on Colab or Kaggle: a fresh virtual environment that
has PyTorch but not ``helpers`` executes a lesson, and the lesson's first cell installs the helpers itself.

Installing PyTorch into a fresh environment would cost minutes and gigabytes, so the new environment borrows this
interpreter's installed packages instead: a ``.pth`` file points it at a folder of links to every package in this
interpreter's site-packages except the course package (and its ``.pth`` hooks, which would not run from there anyway).
That is the situation on Colab: torch, torchvision, matplotlib, tqdm and Jupyter are there, ``helpers`` is not.
``COURSE_HELPERS_SOURCE`` points the bootstrap at a copy of this checkout, and pip runs with ``--no-index`` (where
setuptools is installed to build with): had it tried to reinstall torch or anything else already there, it would have
had to download it, and failed. Either way the test checks that torch still comes from where it was.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import nbformat
import pytest
import torch

from helpers import course, launch

ROOT = Path(__file__).resolve().parent.parent
HIDDEN = ("helpers", "pytorch_gpu_course_helpers", "__editable__", "__pycache__")


def lesson_to_run() -> Path:
    """Lesson 01 once it exists (the first lesson that trains on a GPU), else lesson 00."""
    for prefix in ("01", "00"):
        found = course.find_notebooks(ROOT / "notebooks", prefix)
        if found:
            return found[0]
    raise FileNotFoundError("no lesson 00 or 01 in notebooks/")


def parent_site_packages() -> list[Path]:
    """Where this interpreter's packages live (not hard-coded: wherever torch and the stdlib scheme say)."""
    paths = [Path(torch.__file__).resolve().parent.parent]
    paths += [Path(sysconfig.get_paths()[key]) for key in ("purelib", "platlib")]
    return list(dict.fromkeys(p for p in paths if p.is_dir()))


def borrowed_packages(target: Path) -> Path:
    """A folder of links to every installed package except the course's own."""
    target.mkdir()
    for site in parent_site_packages():
        for entry in site.iterdir():
            hidden = entry.name.startswith(HIDDEN) or entry.suffix == ".pth"
            if not hidden and not (target / entry.name).exists():
                (target / entry.name).symlink_to(entry)
    return target


def run_in(python: Path, code: str, cwd: Path) -> str:
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, cwd=cwd, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture(scope="module")
def fresh_env(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(python, its site-packages, a working folder) of a new environment with torch and without helpers."""
    base = tmp_path_factory.mktemp("bootstrap")
    venv.create(base / "venv", with_pip=False)  # pip, like torch, comes from the borrowed packages
    python = base / "venv" / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")
    work = base / "work"  # not the checkout: a kernel's working folder is on its sys.path
    work.mkdir()
    site = Path(run_in(python, "import sysconfig; print(sysconfig.get_paths()['purelib'])", work))
    (site / "_borrowed_packages.pth").write_text(f"{borrowed_packages(base / 'borrowed')}\n", encoding="utf-8")
    return python, site, work


def test_fresh_env_has_torch_and_jupyter_but_not_helpers(fresh_env) -> None:
    python, _, work = fresh_env
    code = "import importlib.util as u, torch, ipykernel; print(torch.__version__, u.find_spec('helpers'))"
    out = run_in(python, code, work)
    assert out == f"{torch.__version__} None"


@pytest.mark.notebooks
def test_lesson_bootstraps_itself_in_a_fresh_env(fresh_env, tmp_path: Path, monkeypatch) -> None:
    import papermill

    python, site, work = fresh_env
    # The source: what git would check out (the package and its build files), copied so no build touches the checkout.
    source = tmp_path / "source"
    shutil.copytree(ROOT / "helpers", source / "helpers", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (ROOT / name).exists():
            shutil.copy(ROOT / name, source / name)
    kernels = tmp_path / "jupyter" / "kernels" / "fresh-venv"
    kernels.mkdir(parents=True)
    spec = {"argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "fresh venv", "language": "python"}
    (kernels / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv(launch.ENV_SOURCE, str(source))
    if importlib.util.find_spec("setuptools"):  # build with the borrowed setuptools, so nothing is downloaded
        monkeypatch.setenv("PIP_NO_INDEX", "1")  # had pip tried to reinstall torch or anything else, it would fail
        monkeypatch.setenv("PIP_NO_BUILD_ISOLATION", "0")  # (sic) "0" turns build isolation off
    monkeypatch.setenv("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    monkeypatch.delenv("PYTHONPATH", raising=False)

    lesson = lesson_to_run()
    output = tmp_path / lesson.name
    # A correct lesson runs to the end under papermill, which stops at the first error like Colab's Run all.
    papermill.execute_notebook(str(lesson), str(output), kernel_name="fresh-venv", cwd=str(work),
                               progress_bar=False, log_output=False, execution_timeout=600)
    nb = nbformat.read(output, as_version=4)

    assert course.first_error(nb) is None
    assert all(c.execution_count for c in nb.cells if c.cell_type == "code"), "a cell did not run"
    assert any(r.get("quick") for r in course.records(nb)), "the lesson did not run in quick mode"
    installed = run_in(python, "import helpers, torch; print(helpers.__file__); print(torch.__file__)", work)
    helpers_file, torch_file = installed.splitlines()
    assert Path(helpers_file).is_relative_to(site), "helpers was not installed into the fresh environment"
    assert not Path(torch_file).resolve().is_relative_to(site.resolve()), "torch was reinstalled"
    assert not any(site.glob("torch*")), "the bootstrap installed a second torch"
