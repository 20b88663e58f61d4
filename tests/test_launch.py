"""The launch parts of every lesson (badges, GPU runtime metadata, bootstrap) agree with pyproject.toml, name one
ref for the notebook and its helpers, and carry the helpers' version; the ref fits the release scheme (``main``, or the
tag ``vX.Y.Z`` of ``helpers.__version__``); ``python -m tools.launch check`` notices when any of this drifts, and
``sync --ref`` moves all of it to a release tag and back."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from IPython.core.inputtransformer2 import TransformerManager

import helpers
from tools import launch

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = launch.find_notebooks(ROOT / "notebooks")
URL = launch.repository_url(ROOT / "pyproject.toml")


def _copy_repo(tmp_path: Path, url: str = URL) -> tuple[Path, Path]:
    """A minimal repository in tmp_path: pyproject.toml naming ``url``, the files holding the ref and the version, and
    lesson 00. Returns (root, notebook)."""
    (tmp_path / "notebooks").mkdir()
    for name in ("tools/launch.py", "helpers/__init__.py", "course_setup.py"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8").replace(URL, url)
    (tmp_path / "pyproject.toml").write_text(pyproject, encoding="utf-8")
    notebook = tmp_path / "notebooks" / NOTEBOOKS[0].name
    shutil.copy(NOTEBOOKS[0], notebook)
    launch.main(["sync", "--pyproject", str(tmp_path / "pyproject.toml")])  # the copy starts out in agreement
    return tmp_path, notebook


def _check(root: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    status = launch.main(["check", "--pyproject", str(root / "pyproject.toml")])
    return status, capsys.readouterr().out


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name[:2] for p in NOTEBOOKS])
def test_lesson_agrees_with_pyproject(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    assert launch.problems(nb, launch.notebook_path(path, ROOT), URL) == [], "run: python -m tools.launch sync"


def test_badges_name_the_configured_repository_and_the_notebook_path() -> None:
    line = launch.badge_line("https://github.com/someone/course", "notebooks/03_x.ipynb", "v1.2.3")
    blob = "github.com/someone/course/blob/v1.2.3/notebooks/03_x.ipynb"
    assert f"(https://colab.research.google.com/github/{blob.removeprefix('github.com/')})" in line
    assert f"(https://kaggle.com/kernels/welcome?src=https://{blob})" in line


def test_check_passes_on_a_synced_copy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root, _ = _copy_repo(tmp_path)
    capsys.readouterr()
    assert _check(root, capsys)[0] == 0


def test_check_fails_when_the_configured_address_changes(tmp_path: Path, capsys) -> None:
    root, notebook = _copy_repo(tmp_path)
    moved = (root / "pyproject.toml").read_text(encoding="utf-8").replace(URL, "https://github.com/elsewhere/fork")
    (root / "pyproject.toml").write_text(moved, encoding="utf-8")
    capsys.readouterr()
    status, out = _check(root, capsys)
    assert status == 1
    assert "badge line" in out and "bootstrap" in out  # both carry the address
    launch.main(["sync", "--pyproject", str(root / "pyproject.toml")])
    assert "elsewhere/fork" in nbformat.read(notebook, as_version=4).cells[0].source
    assert 'REPOSITORY = "https://github.com/elsewhere/fork"' in (root / "course_setup.py").read_text()
    capsys.readouterr()
    assert _check(root, capsys)[0] == 0


def test_check_fails_when_the_notebook_is_renamed(tmp_path: Path, capsys) -> None:
    root, notebook = _copy_repo(tmp_path)
    renamed = notebook.rename(notebook.with_name("00_renamed.ipynb"))
    capsys.readouterr()
    status, out = _check(root, capsys)
    assert status == 1 and "00_renamed.ipynb: badge line" in out
    assert launch.main(["sync", str(renamed), "--pyproject", str(root / "pyproject.toml")]) == 0  # just this one
    assert f"blob/{launch.REF}/notebooks/00_renamed.ipynb" in nbformat.read(renamed, as_version=4).cells[0].source


def test_check_fails_on_a_hand_edited_badge(tmp_path: Path, capsys) -> None:
    root, notebook = _copy_repo(tmp_path)
    nb = nbformat.read(notebook, as_version=4)
    nb.cells[0].source = nb.cells[0].source.replace(f"/blob/{launch.REF}/", "/blob/dev/", 1)
    nbformat.write(nb, notebook)
    capsys.readouterr()
    status, out = _check(root, capsys)
    assert status == 1 and "badge line" in out


def test_check_fails_on_missing_metadata_and_an_old_bootstrap(tmp_path: Path, capsys) -> None:
    root, notebook = _copy_repo(tmp_path)
    nb = nbformat.read(notebook, as_version=4)
    del nb.metadata["accelerator"]
    nb.metadata["colab"]["gpuType"] = "A100"
    setup = next(c for c in nb.cells if c.cell_type == "code")
    setup.source = setup.source.replace(f'check("{helpers.__version__}"', 'check("0.0.9"')
    nbformat.write(nb, notebook)
    capsys.readouterr()
    status, out = _check(root, capsys)
    assert status == 1
    assert "'accelerator'" in out and "'colab'" in out and "bootstrap" in out


def test_sync_touches_only_badges_metadata_and_bootstrap(tmp_path: Path) -> None:
    root, notebook = _copy_repo(tmp_path)
    before = nbformat.read(notebook, as_version=4)
    nb = nbformat.read(notebook, as_version=4)
    nb.metadata["colab"]["toc_visible"] = True  # a key Colab adds itself survives a sync
    setup = next(c for c in nb.cells if c.cell_type == "code")
    setup.source = setup.source.replace(f'check("{helpers.__version__}"', 'check("0.0.9"')
    nbformat.write(nb, notebook)
    launch.main(["sync", "--pyproject", str(root / "pyproject.toml")])
    after = nbformat.read(notebook, as_version=4)
    assert after.metadata["colab"]["toc_visible"] is True
    assert [c.get("outputs") for c in after.cells] == [c.get("outputs") for c in before.cells]
    assert [c.source for c in after.cells] == [c.source for c in before.cells]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name[:2] for p in NOTEBOOKS])
def test_the_first_code_cell_is_the_four_line_bootstrap(path: Path) -> None:
    setup = next(c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code")
    assert setup.source == launch.bootstrap(URL)
    assert len(setup.source.splitlines()) <= 4


def test_bootstrap_installs_the_ref_and_checks_the_version() -> None:
    text = launch.bootstrap(URL)
    python = TransformerManager().transform_cell(text)  # the `!` line as IPython runs it
    compile(python, "<bootstrap>", "exec")
    assert f'pip install -q --no-deps "git+{URL}@{launch.REF}" || echo "{launch.INSTALL_FAILED}"' in python
    assert "{sys.executable} -m pip" in python  # the kernel's own Python, not whichever pip is on PATH
    assert f'check("{helpers.__version__}", "{launch.REF}")' in text
    assert 'find_spec("course_setup") is None' in text  # installs only where the course is missing
    assert "--upgrade" not in text and "-U " not in text  # never replaces the torch the platform ships
    lines = text.splitlines()
    assert max(len(line) for i, line in enumerate(lines) if i != 2) <= 120  # the install line carries its message


@pytest.mark.slow
def test_bootstrap_does_nothing_where_the_course_is_installed(tmp_path: Path, monkeypatch) -> None:
    # GitHub out of reach: had the cell tried to install, pip would have failed loudly.
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "url.file:///nonexistent/github/.insteadOf")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "https://github.com/")
    done = subprocess.run(
        [sys.executable, "-m", "IPython", "--quick", "--no-banner", "-c", launch.bootstrap(URL) + "\nprint('ok')"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("ok") and "pip" not in done.stdout + done.stderr
    assert "Could not install" not in done.stdout


@pytest.mark.parametrize("name", launch.DOCS)
def test_generated_blocks_in_the_docs_are_current(name: str) -> None:
    doc = ROOT / name
    if not doc.exists():
        pytest.skip(f"no {name}")
    blocks = launch.doc_blocks(URL, NOTEBOOKS, ROOT, doc)
    assert launch.sync_doc(doc, blocks, write=False) == [], "run: python -m tools.launch sync"


def test_colab_readme_shows_the_bootstrap_and_every_lesson() -> None:
    text = (ROOT / "colab" / "README.md").read_text(encoding="utf-8")
    assert f"```ipython3\n{launch.bootstrap(URL)}\n```" in text  # IPython's lexer: the install line is a shell escape
    assert all(launch.badge_line(URL, launch.notebook_path(p, ROOT)).split(") [")[0] in text for p in NOTEBOOKS)


def test_sync_keeps_the_course_map_in_step(tmp_path: Path, capsys) -> None:
    root, notebook = _copy_repo(tmp_path)
    doc = root / "README.md"
    doc.write_text("# Course\n\n<!-- launch:map -->\nold\n<!-- /launch:map -->\n\nMore text.\n", encoding="utf-8")
    capsys.readouterr()
    status, out = _check(root, capsys)
    assert status == 1 and "README.md: generated block 'map'" in out
    launch.main(["sync", "--pyproject", str(root / "pyproject.toml")])
    text = doc.read_text(encoding="utf-8")
    assert "old" not in text and text.endswith("More text.\n")
    assert f"[`notebooks/{notebook.name}`](notebooks/{notebook.name})" in text
    capsys.readouterr()
    assert _check(root, capsys)[0] == 0


def _refs(nb: nbformat.NotebookNode) -> tuple[set[str], set[str]]:
    """The refs the badges open and the refs the bootstrap installs from."""
    badges = set(re.findall(r"/blob/([^/]+)/notebooks/", nb.cells[0].source))
    setup = next(c for c in nb.cells if c.cell_type == "code")
    installs = set(re.findall(rf"git\+{re.escape(URL)}@([^\"']+)", setup.source))
    return badges, installs


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name[:2] for p in NOTEBOOKS])
def test_badges_and_bootstrap_name_one_ref(path: Path) -> None:
    badges, installs = _refs(nbformat.read(path, as_version=4))
    assert badges == installs == {launch.REF}, f"badges open {badges}, the bootstrap installs {installs}"


def test_the_ref_fits_the_release_scheme() -> None:
    # On main: REF is "main". In a release, REF is the tag vX.Y.Z and helpers.__version__ is "X.Y.Z".
    assert launch.REF in ("main", f"v{helpers.__version__}"), (launch.REF, helpers.__version__)
    packaged = launch.pyproject_version(ROOT / "pyproject.toml")
    assert launch.release_problems(launch.REF, helpers.__version__, packaged) == []
    assert launch.read_ref(ROOT) == launch.REF and launch.read_version(ROOT) == helpers.__version__


def test_a_release_tag_at_head_is_the_ref() -> None:
    done = subprocess.run(["git", "tag", "--points-at", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        pytest.skip("not a git checkout")
    tags = [t for t in done.stdout.split() if re.fullmatch(r"v\d+\.\d+\.\d+", t)]
    if not tags:
        pytest.skip("HEAD carries no release tag")
    assert launch.REF in tags, f"HEAD is tagged {tags}, but the notebooks name {launch.REF}: sync --ref before tagging"


@pytest.mark.parametrize(
    ("ref", "version", "packaged", "wanted"),
    [
        ("main", "0.1.0", "0.1.0", ""),
        ("v0.2.0", "0.2.0", "0.2.0", ""),
        ("v0.2.0", "0.2.0", None, ""),
        ("v0.2.0", "0.1.0", "0.1.0", "set it to '0.2.0'"),
        ("dev", "0.1.0", "0.1.0", "neither 'main' nor a release tag"),
        ("0.1.0", "0.1.0", "0.1.0", "neither 'main' nor a release tag"),
        ("main", "0.2.0", "0.1.0", "pyproject.toml's version '0.1.0'"),
    ],
)
def test_release_problems(ref: str, version: str, packaged: str | None, wanted: str) -> None:
    found = launch.release_problems(ref, version, packaged)
    assert (wanted in " ".join(found)) if wanted else found == []
    assert bool(found) == bool(wanted)


def _bump(root: Path, version: str) -> None:
    for path in (root / "helpers" / "__init__.py", root / "pyproject.toml"):
        text = path.read_text(encoding="utf-8")
        path.write_text(text.replace(f'"{helpers.__version__}"', f'"{version}"', 1), encoding="utf-8")


def test_sync_to_a_release_tag_and_back(tmp_path: Path, capsys) -> None:
    root, notebook = _copy_repo(tmp_path)
    doc = root / "README.md"
    doc.write_text("<!-- launch:map -->\nold\n<!-- /launch:map -->\n", encoding="utf-8")
    major, minor, _ = helpers.__version__.split(".")
    new = f"{major}.{int(minor) + 1}.0"  # a release after the current version
    _bump(root, new)
    args = ["--pyproject", str(root / "pyproject.toml")]
    capsys.readouterr()
    assert launch.main(["check", *args]) == 1 and "differs from the canonical text" in capsys.readouterr().out

    assert launch.main(["sync", "--ref", f"v{new}", *args]) == 0
    assert launch.read_ref(root) == f"v{new}"
    nb = nbformat.read(notebook, as_version=4)
    assert _refs(nb) == ({f"v{new}"}, {f"v{new}"})
    assert f'check("{new}", ' in next(c for c in nb.cells if c.cell_type == "code").source
    assert f"/blob/v{new}/notebooks/" in doc.read_text() and "/blob/main/" not in doc.read_text()
    capsys.readouterr()
    assert launch.main(["check", *args]) == 0, capsys.readouterr().out

    assert launch.main(["sync", "--ref", "main", *args]) == 0  # back on main after tagging: the version stays
    assert launch.read_ref(root) == "main"
    nb = nbformat.read(notebook, as_version=4)
    assert _refs(nb) == ({"main"}, {"main"})
    assert f'check("{new}", ' in next(c for c in nb.cells if c.cell_type == "code").source
    capsys.readouterr()
    assert launch.main(["check", *args]) == 0, capsys.readouterr().out


def test_sync_refuses_a_tag_that_is_not_the_version(tmp_path: Path, capsys) -> None:
    root, notebook = _copy_repo(tmp_path)
    files = (notebook, root / "tools" / "launch.py")
    before = [f.read_text(encoding="utf-8") for f in files]
    capsys.readouterr()
    assert launch.main(["sync", "--ref", "v9.9.9", "--pyproject", str(root / "pyproject.toml")]) == 2
    assert "set it to '9.9.9'" in capsys.readouterr().err
    assert [f.read_text(encoding="utf-8") for f in files] == before


def test_check_fails_when_ref_and_version_disagree(tmp_path: Path, capsys) -> None:
    root, _ = _copy_repo(tmp_path)
    launch.write_ref(root, "v9.9.9")  # a tag written by hand, the version left as it was
    capsys.readouterr()
    status, out = _check(root, capsys)
    assert status == 1 and "release: ref v9.9.9 is a release tag" in out and "badge line" in out
