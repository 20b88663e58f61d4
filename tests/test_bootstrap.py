"""The first cell, seen from the learner's side: a fresh virtual environment that has PyTorch but not the course, as
on Colab or Kaggle, executes lessons whose first cell must install the course itself, or stop with a message that says
what went wrong and how to fix it.

Installing PyTorch into a fresh environment would cost minutes and gigabytes, so the new environment borrows this
interpreter's installed packages instead: a ``.pth`` file points it at a folder of links to every package in this
interpreter's site-packages except the course's own (and its ``.pth`` hooks, which would not run from there anyway).
That is the situation on Colab: torch, torchvision, matplotlib, tqdm and Jupyter are there, the course is not.
The cell installs from GitHub; git's ``url.<base>.insteadOf`` (set through ``GIT_CONFIG_*`` variables) sends that
address to a local git copy of this checkout, or nowhere, as on Kaggle with Internet off. pip runs with ``--no-index``
(where setuptools is installed to build with): had it tried to reinstall torch or anything else already there, it
would have had to download it, and failed. Either way the test checks that torch still comes from where it was.

The failure cases (an older course, a learner's own ``helpers.py``, GitHub out of reach) execute only the first cells
of lesson 00 and check what the first cell showed and that no cell below it ran.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import nbformat
import pytest
import torch

import helpers
from tools import course, launch

pytestmark = pytest.mark.slow  # builds virtual environments and executes a lesson in them

ROOT = Path(__file__).resolve().parent.parent
HIDDEN = ("helpers", "exercises", "course_setup", "pytorch_gpu_course_helpers", "__editable__", "__pycache__")
URL = launch.repository_url(ROOT / "pyproject.toml")
DEFAULT_SOURCE = launch.install_source(URL, launch.REF)
KAGGLE_VARIABLES = ("KAGGLE_KERNEL_RUN_TYPE", "KAGGLE_URL_BASE")  # set in every Kaggle session (lesson_00.runtime)


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
    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}  # a new environment's own path
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, cwd=cwd, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def make_env(base: Path, borrowed: Path) -> tuple[Path, Path, Path]:
    """(python, its site-packages, a working folder) of a new environment in ``base`` that borrows ``borrowed``."""
    base.mkdir(parents=True, exist_ok=True)
    venv.create(base / "venv", with_pip=False)  # pip, like torch, comes from the borrowed packages
    python = base / "venv" / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")
    work = base / "work"  # not the checkout: a kernel's working folder is on its sys.path
    work.mkdir()
    site = Path(run_in(python, "import sysconfig; print(sysconfig.get_paths()['purelib'])", work))
    (site / "_borrowed_packages.pth").write_text(f"{borrowed}\n", encoding="utf-8")
    return python, site, work


@pytest.fixture(scope="module")
def borrowed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return borrowed_packages(tmp_path_factory.mktemp("borrowed") / "packages")


@pytest.fixture(scope="module")
def fresh_env(tmp_path_factory: pytest.TempPathFactory, borrowed: Path) -> tuple[Path, Path, Path]:
    """A new environment with torch and without helpers, shared by the tests that must not install into it."""
    return make_env(tmp_path_factory.mktemp("bootstrap"), borrowed)


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A git repository holding what GitHub would (the package and its build files) on a branch ``main``."""
    target = tmp_path_factory.mktemp("source")
    for package in ("helpers", "lessons", "exercises"):  # what pyproject.toml's packages.find includes
        shutil.copytree(ROOT / package, target / package, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("course_setup.py", "pyproject.toml", "README.md", "LICENSE"):
        if (ROOT / name).exists():
            shutil.copy(ROOT / name, target / name)
    git = ["git", "-c", "user.name=course", "-c", "user.email=course@example.invalid", "-C", str(target)]
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "the course"]):
        subprocess.run([*git, *args], check=True, capture_output=True)
    return target


def github_is(monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """git reads the course's GitHub address as ``where`` (a local repository, or a path that is none)."""
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", f"url.{where}.insteadOf")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", URL)


def course_copied_into(site: Path, version: str = helpers.__version__) -> Path:
    """The course's modules copied into ``site`` as an install would put them, in ``version``; its __init__.py."""
    shutil.copytree(ROOT / "helpers", site / "helpers", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "course_setup.py", site / "course_setup.py")
    init = site / "helpers" / "__init__.py"
    init.write_text(init.read_text().replace(f'"{helpers.__version__}"', f'"{version}"'), encoding="utf-8")
    return init


@pytest.fixture
def learner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Sets up a kernel for a given environment, as a learner's would be: no course variables, no Kaggle, no pip
    configuration of this machine. Returns ``use(python)``, which registers the kernel and returns its name."""
    for name in (
        "PYTHONPATH",
        "COLAB_RELEASE_TAG",
        *KAGGLE_VARIABLES,
        *[n for n in os.environ if n.startswith("GIT_")],
    ):
        monkeypatch.delenv(name, raising=False)
    for name in [n for n in os.environ if n.startswith("PIP_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    monkeypatch.setenv("PIP_NO_INPUT", "1")
    monkeypatch.setenv("GIT_TERMINAL_PROMPT", "0")
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))

    def use(python: Path) -> str:
        kernels = tmp_path / "jupyter" / "kernels" / "fresh-venv"
        kernels.mkdir(parents=True, exist_ok=True)
        spec = {
            "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "fresh venv",
            "language": "python",
        }
        (kernels / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")
        return "fresh-venv"

    return use


def offline_builds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Build with the borrowed setuptools, so nothing is downloaded."""
    if importlib.util.find_spec("setuptools"):
        monkeypatch.setenv("PIP_NO_INDEX", "1")  # had pip tried to reinstall torch or anything else, it would fail
        monkeypatch.setenv("PIP_NO_BUILD_ISOLATION", "0")  # (sic) "0" turns build isolation off


def first_cells(folder: Path) -> Path:
    """Lesson 00 up to its third code cell (setup, parameters, ``lesson.start``), as a notebook in ``folder``, with
    the bootstrap ``tools.launch`` writes now (the same as the committed one once ``python -m tools.launch sync`` ran:
    ``tests/test_launch.py`` checks that)."""
    lesson = course.find_notebooks(ROOT / "notebooks", "00")[0]
    nb = nbformat.read(lesson, as_version=4)
    assert launch.fix(nb, launch.notebook_path(lesson, ROOT), URL) == []
    third = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"][2]
    nb.cells = nb.cells[: third + 1]
    path = folder / lesson.name
    nbformat.write(nb, path)
    return path


def execute(notebook: Path, kernel: str, cwd: Path) -> nbformat.NotebookNode:
    """Run ``notebook`` with papermill, which stops at the first error as Colab's Run all does; the executed copy."""
    import papermill

    output = notebook.with_name(f"executed_{notebook.name}")
    with contextlib.suppress(papermill.PapermillExecutionError):
        papermill.execute_notebook(
            str(notebook),
            str(output),
            kernel_name=kernel,
            cwd=str(cwd),
            progress_bar=False,
            log_output=False,
            execution_timeout=300,
        )
    return nbformat.read(output, as_version=4)


def stopped_at_setup(nb: nbformat.NotebookNode, ename: str = "SetupError") -> tuple[str, str]:
    """(what the first cell printed, its error's message); fails unless that cell stopped the run with an ``ename``
    error (a ``SetupError`` shown without a traceback)."""
    code = [c for c in nb.cells if c.cell_type == "code"]
    errors = [o for o in code[0].outputs if o.output_type == "error"]
    assert errors, f"the first cell did not stop the lesson; outputs: {code[0].outputs}"
    assert errors[0].ename == ename, f"{errors[0].ename}: {errors[0].evalue}"
    shown = "\n".join(errors[0].traceback)
    if ename == "SetupError":
        assert shown == f"SetupError: {errors[0].evalue}", f"shown with more than the message:\n{shown}"
    assert [c.execution_count for c in code[1:]] == [None] * (len(code) - 1), "a cell below the first one ran"
    printed = "".join(o.get("text", "") for o in code[0].outputs if o.output_type == "stream")
    return printed, errors[0].evalue


def one_line(text: str) -> str:
    return " ".join(text.split())


def test_fresh_env_has_torch_and_jupyter_but_not_the_course(fresh_env) -> None:
    python, _, work = fresh_env
    code = "import importlib.util as u, torch, ipykernel; print(torch.__version__, u.find_spec('course_setup'))"
    out = run_in(python, code, work)
    assert out == f"{torch.__version__} None"


@pytest.mark.notebooks
def test_lesson_bootstraps_itself_in_a_fresh_env(borrowed, source, learner, tmp_path: Path, monkeypatch) -> None:
    python, site, work = make_env(tmp_path / "env", borrowed)  # its own: this test installs the course
    github_is(monkeypatch, source.as_uri())
    offline_builds(monkeypatch)
    kernel = learner(python)

    lesson = lesson_to_run()
    output = tmp_path / lesson.name
    # A correct lesson runs to the end under papermill, which stops at the first error like Colab's Run all.
    import papermill

    papermill.execute_notebook(
        str(lesson),
        str(output),
        kernel_name=kernel,
        cwd=str(work),
        progress_bar=False,
        log_output=False,
        execution_timeout=600,
    )
    nb = nbformat.read(output, as_version=4)

    assert course.first_error(nb) is None
    assert all(c.execution_count for c in nb.cells if c.cell_type == "code"), "a cell did not run"
    assert any(r.get("quick") for r in course.records(nb)), "the lesson did not run in quick mode"
    setup = next(c for c in nb.cells if c.cell_type == "code")
    assert launch.INSTALL_FAILED not in "".join(o.get("text", "") for o in setup.outputs)
    code = "import course_setup as c, helpers as h, torch as t; print(c.__file__); print(h.__file__); print(t.__file__)"
    setup_file, helpers_file, torch_file = run_in(python, code, work).splitlines()
    assert Path(setup_file).is_relative_to(site) and Path(helpers_file).is_relative_to(site), "not installed there"
    assert not Path(torch_file).resolve().is_relative_to(site.resolve()), "torch was reinstalled"
    assert not any(site.glob("torch*")), "the first cell installed a second torch"
    installed = run_in(
        python,
        "import importlib.metadata as m; print(m.distribution('pytorch-gpu-course-helpers').read_text('direct_url.json'))",  # noqa: E501
        work,
    )
    assert json.loads(installed)["url"] == URL, "pip did not install from the address the cell names"


def test_an_older_course_stops_the_lesson(borrowed, learner, tmp_path: Path, monkeypatch) -> None:
    python, site, work = make_env(tmp_path / "env", borrowed)  # its own: it gets an old copy of the course
    init = course_copied_into(site, "0.0.1")
    github_is(monkeypatch, "file:///nonexistent/github/")  # had the cell tried to install, pip would fail
    assert run_in(python, "import helpers; print(helpers.__version__)", work) == "0.0.1"

    printed, message = stopped_at_setup(execute(first_cells(tmp_path), learner(python), work))
    message = one_line(message)
    assert printed == ""  # nothing installed
    assert f"needs the course helpers {helpers.__version__}" in message
    assert f"found {init} (version 0.0.1)" in message
    assert f'%pip install --no-deps --force-reinstall "{DEFAULT_SOURCE}"' in message
    assert "restart the runtime" in message


def test_a_helpers_py_in_the_working_folder_stops_the_lesson(borrowed, learner, tmp_path: Path) -> None:
    python, site, _ = make_env(tmp_path / "env", borrowed)
    course_copied_into(site)
    work = tmp_path / "work"
    work.mkdir()
    (work / "helpers.py").write_text('"""A learner\'s own helpers."""\n\n\ndef add(a, b):\n    return a + b\n')

    _, message = stopped_at_setup(execute(first_cells(tmp_path), learner(python), work))
    message = one_line(message)
    assert f"needs the course helpers {helpers.__version__}" in message
    assert f"found {work / 'helpers.py'} (not the course's package)" in message
    assert "rename your own helpers.py" in message and "restart the runtime" in message


@pytest.mark.parametrize("where", ["Colab", "Kaggle"])
def test_a_failed_install_says_why_and_stops_the_lesson(where, fresh_env, learner, tmp_path, monkeypatch) -> None:
    python, _, work = fresh_env
    if where == "Kaggle":
        monkeypatch.setenv("KAGGLE_KERNEL_RUN_TYPE", "Interactive")
    github_is(monkeypatch, "file:///nonexistent/github/")  # as with Internet off: git cannot reach GitHub

    printed, message = stopped_at_setup(execute(first_cells(tmp_path), learner(python), work), "ModuleNotFoundError")
    assert "fatal: '/nonexistent/github/" in printed  # git's own words, through pip: what failed
    assert printed.rstrip().endswith(launch.INSTALL_FAILED)  # then the cell's line, which names Kaggle's switch
    assert "Settings > Internet" in launch.INSTALL_FAILED
    assert message == "No module named 'course_setup'"
    assert run_in(python, "import importlib.util as u; print(u.find_spec('course_setup'))", work) == "None"


def older_torch(borrowed: Path, target: Path, version: str) -> Path:
    """``borrowed`` again, but its torch's metadata says ``version``: a platform whose PyTorch predates the course."""
    target.mkdir()
    for entry in borrowed.iterdir():
        if entry.name.startswith("torch-") and entry.name.endswith(".dist-info"):
            copy = target / f"torch-{version}.dist-info"
            shutil.copytree(entry.resolve(), copy)
            metadata = (copy / "METADATA").read_text(encoding="utf-8")
            (copy / "METADATA").write_text(
                metadata.replace(f"Version: {entry.name[6:-10]}", f"Version: {version}", 1), encoding="utf-8"
            )
        else:
            (target / entry.name).symlink_to(entry.resolve())
    return target


def test_an_older_torch_is_kept_and_stops_the_lesson_with_one_line(
    borrowed, source, learner, tmp_path: Path, monkeypatch
) -> None:
    """The first cell installs the course without its dependencies: pip never replaces the platform's torch (here it
    would have had to download one and failed; on Colab it downloads gigabytes), and check() says what to do."""
    python, site, work = make_env(tmp_path / "env", older_torch(borrowed, tmp_path / "old", "2.7.0"))
    github_is(monkeypatch, source.as_uri())
    offline_builds(monkeypatch)
    assert run_in(python, "import importlib.metadata as m; print(m.version('torch'))", work) == "2.7.0"

    printed, message = stopped_at_setup(execute(first_cells(tmp_path), learner(python), work))
    assert launch.INSTALL_FAILED not in printed, printed  # the course itself installed
    assert "\n" not in message
    assert message.startswith("this Python has torch 2.7.0; the course needs torch 2.8 and torchvision 0.23 or newer")
    assert '%pip install -U "torch>=2.8" "torchvision>=0.23"' in message and "restart the runtime" in message
    assert run_in(python, "import importlib.metadata as m; print(m.version('torch'))", work) == "2.7.0"
    assert not any(site.glob("torch*")), "the first cell installed a second torch"
    assert any(site.glob("pytorch_gpu_course_helpers*")), "the course was not installed"


def test_kaggle_is_recognised_by_the_variables_the_report_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    from lessons import lesson_00

    for name in ("COLAB_RELEASE_TAG", *KAGGLE_VARIABLES):
        monkeypatch.delenv(name, raising=False)
    for name in KAGGLE_VARIABLES:
        monkeypatch.setenv(name, "1")
        assert lesson_00.runtime() == "Kaggle", name
        monkeypatch.delenv(name)
