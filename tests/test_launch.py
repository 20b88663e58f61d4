"""The launch parts of every lesson (badges, GPU runtime metadata, bootstrap) agree with pyproject.toml, and
``python -m helpers.launch check`` notices when they do not."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from IPython.core.inputtransformer2 import TransformerManager

from helpers import launch

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = launch.find_notebooks(ROOT / "notebooks")
URL = launch.repository_url(ROOT / "pyproject.toml")


def _copy_repo(tmp_path: Path, url: str = URL) -> tuple[Path, Path]:
    """A minimal repository in tmp_path: pyproject.toml naming ``url`` and lesson 00. Returns (root, notebook)."""
    (tmp_path / "notebooks").mkdir()
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
    assert launch.problems(nb, launch.notebook_path(path, ROOT), URL) == [], "run: python -m helpers.launch sync"


def test_badges_name_the_configured_repository_and_the_notebook_path() -> None:
    line = launch.badge_line("https://github.com/someone/course", "notebooks/03_x.ipynb")
    blob = "github.com/someone/course/blob/main/notebooks/03_x.ipynb"
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
    capsys.readouterr()
    assert _check(root, capsys)[0] == 0


def test_check_fails_when_the_notebook_is_renamed(tmp_path: Path, capsys) -> None:
    root, notebook = _copy_repo(tmp_path)
    renamed = notebook.rename(notebook.with_name("00_renamed.ipynb"))
    capsys.readouterr()
    status, out = _check(root, capsys)
    assert status == 1 and "00_renamed.ipynb: badge line" in out
    assert launch.main(["sync", str(renamed), "--pyproject", str(root / "pyproject.toml")]) == 0  # just this one
    assert "blob/main/notebooks/00_renamed.ipynb" in nbformat.read(renamed, as_version=4).cells[0].source


def test_check_fails_on_a_hand_edited_badge(tmp_path: Path, capsys) -> None:
    root, notebook = _copy_repo(tmp_path)
    nb = nbformat.read(notebook, as_version=4)
    nb.cells[0].source = nb.cells[0].source.replace("/blob/main/", "/blob/dev/", 1)
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
    setup.source = setup.source.replace(launch.REF, "main")
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
    setup.source = setup.source.replace(launch.REF, "main")
    nbformat.write(nb, notebook)
    launch.main(["sync", "--pyproject", str(root / "pyproject.toml")])
    after = nbformat.read(notebook, as_version=4)
    assert after.metadata["colab"]["toc_visible"] is True
    assert [c.get("outputs") for c in after.cells] == [c.get("outputs") for c in before.cells]
    assert [c.source for c in after.cells] == [c.source for c in before.cells]


def test_setup_cells_keep_their_imports_after_the_bootstrap() -> None:
    for path in NOTEBOOKS:
        setup = next(c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code")
        head, _, rest = setup.source.partition(launch.bootstrap(URL) + "\n\n")
        assert head == "" and "from helpers import" in rest, path.name


def test_bootstrap_is_valid_ipython_and_pins_a_ref() -> None:
    text = launch.bootstrap(URL)
    python = TransformerManager().transform_cell(text)
    compile(python, "<bootstrap>", "exec")  # compiles: the %pip line became a run_line_magic call
    assert "run_line_magic('pip'" in python
    assert f"git+{URL}@{launch.REF}" in text and launch.ENV_SOURCE in text
    assert "--upgrade" not in text and "-U " not in text  # never replaces the torch the platform ships
    assert max(len(line) for line in text.splitlines()) <= 120  # ruff's line length for notebooks


def test_bootstrap_does_nothing_where_helpers_is_installed(tmp_path: Path) -> None:
    # A source that cannot be installed: if the bootstrap tried to install, pip would fail loudly.
    env = {**_clean_env(), launch.ENV_SOURCE: str(tmp_path / "no-such-checkout")}
    done = subprocess.run(
        [sys.executable, "-m", "IPython", "--quick", "--no-banner", "-c", launch.bootstrap(URL) + "\nprint('ok')"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("ok") and "pip" not in done.stdout + done.stderr


@pytest.mark.parametrize("name", launch.DOCS)
def test_generated_blocks_in_the_docs_are_current(name: str) -> None:
    doc = ROOT / name
    if not doc.exists():
        pytest.skip(f"no {name}")
    blocks = launch.doc_blocks(URL, NOTEBOOKS, ROOT, doc)
    assert launch.sync_doc(doc, blocks, write=False) == [], "run: python -m helpers.launch sync"


def test_colab_readme_shows_the_bootstrap_and_every_lesson() -> None:
    text = (ROOT / "colab" / "README.md").read_text(encoding="utf-8")
    assert launch.bootstrap(URL) in text
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


def _clean_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != launch.ENV_SOURCE}
