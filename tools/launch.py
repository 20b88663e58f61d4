"""Keep every lesson launchable on Colab and Kaggle: header badges, GPU runtime metadata, and the bootstrap.

Maintainer tooling: it lives in tools/, outside the helpers package learners install, and runs from the clone's root.

One ref, ``REF`` below, is both what the badges open and what the bootstrap installs the helpers from, so a learner
always gets a notebook and the helpers it was written for: ``main`` on the main branch, ``vX.Y.Z`` on a release tag
(whose ``helpers.__version__`` is ``X.Y.Z``). The bootstrap also passes that version to ``course_setup.check``, which
stops the lesson with one message when the imported ``helpers`` is not the course's package in that version.

``python -m tools.launch check`` lists each notebook part that disagrees with what this module derives from the
repository address in pyproject.toml (``[project.urls] Repository``), ``REF``, ``helpers.__version__`` and the
notebook's path; it exits 1 when there is any. ``python -m tools.launch sync`` rewrites those parts, and
``sync --ref vX.Y.Z`` (or ``--ref main``) first writes that ref into ``REF`` (the release procedure is in
colab/README.md). Only three parts of a notebook are touched:

- the badge line of the header cell (the first line starting with ``[![Open In Colab]`` in the first markdown cell);
- the notebook metadata keys Colab and Kaggle read for the runtime (``accelerator``, ``colab``, ``kaggle``);
- the first code cell, the four-line bootstrap (where it is one). Every other cell and all outputs stay as they are.

It also keeps two generated blocks in README.md and colab/README.md, between ``<!-- launch:NAME -->`` and
``<!-- /launch:NAME -->`` lines: ``map`` (the course map: each lesson with both badges and its local path) and
``bootstrap`` (the bootstrap's text). ``python -m tools.launch map`` prints the course map.
"""

from __future__ import annotations

import argparse
import copy
import os
import re
import sys
from pathlib import Path

import nbformat

from helpers import __version__
from tools.course import find_notebooks

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
PYPROJECT = ROOT / "pyproject.toml"

REF = "main"
"""The git ref the badges open and the bootstrap installs from: "main", or "vX.Y.Z" on a release tag. Set by sync."""

BADGE_START = "[![Open In Colab]"
DOCS = ("README.md", "colab/README.md")
"""Markdown files whose generated blocks ``sync`` keeps in step, where they have the markers."""

# The keys Colab writes when a notebook is saved with a T4 GPU runtime; it reads them to pick the runtime on open.
# The "kaggle" block is what Kaggle writes into notebooks it saves; Kaggle does not document that its import from
# GitHub reads it, so colab/README.md tells learners to check the accelerator and Internet settings themselves.
RUNTIME_METADATA: dict[str, object] = {
    "accelerator": "GPU",
    "colab": {"gpuType": "T4", "provenance": []},
    "kaggle": {"accelerator": "nvidiaTeslaT4", "isGpuEnabled": True, "isInternetEnabled": True},
}

_RELEASE_TAG = re.compile(r"v(\d+\.\d+\.\d+)")
_REF_LINE = re.compile(r'^REF = "([^"]*)"$', re.MULTILINE)
_VERSION_LINE = re.compile(r'^__version__ = "([^"]*)"$', re.MULTILINE)
_REPOSITORY_LINE = re.compile(r'^REPOSITORY = "([^"]*)"$', re.MULTILINE)


def repository_url(pyproject: Path = PYPROJECT) -> str:
    """The repository address from pyproject.toml's ``[project.urls] Repository``, without a trailing slash."""
    text = pyproject.read_text(encoding="utf-8")
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: the one line we need is simple enough to find directly
        match = re.search(r'^Repository\s*=\s*"([^"]+)"', text, re.MULTILINE)
        url = match.group(1) if match else None
    else:
        url = tomllib.loads(text).get("project", {}).get("urls", {}).get("Repository")
    if not url:
        raise SystemExit(f"{pyproject}: no [project.urls] Repository address")
    return url.rstrip("/").removesuffix(".git")


def pyproject_version(pyproject: Path = PYPROJECT) -> str | None:
    """``[project] version`` of pyproject.toml, or None where it has none (a dynamic version)."""
    match = re.search(r'^version\s*=\s*"([^"]+)"', pyproject.read_text(encoding="utf-8"), re.MULTILINE)
    return match.group(1) if match else None


def read_ref(root: Path = ROOT) -> str:
    """``REF`` as written in ``root``'s tools/launch.py (this module's own value where that file is missing)."""
    path = root / "tools" / "launch.py"
    match = _REF_LINE.search(path.read_text(encoding="utf-8")) if path.exists() else None
    return match.group(1) if match else REF


def read_version(root: Path = ROOT) -> str:
    """``__version__`` as written in ``root``'s helpers/__init__.py (the imported one where that file is missing)."""
    path = root / "helpers" / "__init__.py"
    match = _VERSION_LINE.search(path.read_text(encoding="utf-8")) if path.exists() else None
    return match.group(1) if match else __version__


def write_ref(root: Path, ref: str) -> bool:
    """Write ``ref`` into ``REF`` of ``root``'s tools/launch.py; False where there is no such file."""
    path = root / "tools" / "launch.py"
    if not path.exists():
        return False
    text = path.read_text(encoding="utf-8")
    if not _REF_LINE.search(text):
        raise SystemExit(f'{path}: no line REF = "..." to rewrite')
    path.write_text(_REF_LINE.sub(f'REF = "{ref}"', text, count=1), encoding="utf-8")
    return True


def sync_repository(root: Path, url: str, write: bool) -> str | None:
    """Compare (with ``write``, rewrite) ``REPOSITORY`` in ``root``'s course_setup.py, which names the address its
    fix for an older copy reinstalls from; the address it had where that differs from ``url``, else None."""
    path = root / "course_setup.py"
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    match = _REPOSITORY_LINE.search(text)
    if not match or match.group(1) == url:
        return None
    if write:
        path.write_text(_REPOSITORY_LINE.sub(f'REPOSITORY = "{url}"', text, count=1), encoding="utf-8")
    return match.group(1)


def release_problems(ref: str, version: str, packaged: str | None = None) -> list[str]:
    """Ways ``ref`` disagrees with the release scheme: ``main``, or ``vX.Y.Z`` where the helpers' version is X.Y.Z.

    ``packaged`` is pyproject.toml's version, which must equal ``version`` wherever it is written down.
    """
    found = []
    tag = _RELEASE_TAG.fullmatch(ref)
    if ref != "main" and not tag:
        found.append(f"ref {ref!r} is neither 'main' nor a release tag vX.Y.Z")
    elif tag and tag.group(1) != version:
        found.append(f"ref {ref} is a release tag, but helpers.__version__ is {version!r}: set it to {tag.group(1)!r}")
    if packaged is not None and packaged != version:
        found.append(f"pyproject.toml's version {packaged!r} differs from helpers.__version__ {version!r}")
    return found


def github_slug(url: str) -> str:
    """``owner/name`` of a GitHub address; Colab and Kaggle open notebooks only from GitHub."""
    match = re.fullmatch(r"https://github\.com/([\w.-]+/[\w.-]+)", url)
    if not match:
        raise SystemExit(f"not a GitHub repository address: {url!r}")
    return match.group(1)


def badge_line(url: str, notebook: str, ref: str = REF) -> str:
    """The header's "Open in Colab" and "Open in Kaggle" badges for ``notebook`` (a path inside the repository)."""
    slug = github_slug(url)
    colab = f"https://colab.research.google.com/github/{slug}/blob/{ref}/{notebook}"
    kaggle = f"https://kaggle.com/kernels/welcome?src=https://github.com/{slug}/blob/{ref}/{notebook}"
    return (
        f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]({colab}) "
        f"[![Open in Kaggle](https://kaggle.com/static/images/open-in-kaggle.svg)]({kaggle})"
    )


def install_source(url: str, ref: str = REF) -> str:
    """What pip installs the helpers from by default: the repository at the ref the badges open."""
    return f"git+{url}@{ref}"


INSTALL_FAILED = "Could not install the course helpers (pip says why above). On Kaggle, switch on Settings > Internet."
"""What the first cell prints after pip's own error when the install fails."""


def bootstrap(url: str, ref: str = REF, version: str = __version__) -> str:
    """Every lesson's first code cell: install the course where ``course_setup`` is missing, then check ``helpers``.

    Four lines a learner reads at a glance. pip installs the course alone (``--no-deps``), so it never replaces the
    platform's PyTorch; ``course_setup.check`` then stops with one line where PyTorch is missing or below the course's
    floor, names a stale or foreign ``helpers`` with its fix (``SetupError``, shown without a traceback), and installs
    the course's other needs where they are missing. pip prints its own error when an install fails, and the cell adds
    ``INSTALL_FAILED`` under it; the import on the last line then stops Run all.
    """
    return (
        "import importlib.util, sys  # installs the course helpers where missing (Colab, Kaggle); the PyTorch there "
        "stays\n"
        'if importlib.util.find_spec("course_setup") is None:\n'
        f'    !{{sys.executable}} -m pip install -q --no-deps "{install_source(url, ref)}" || echo "{INSTALL_FAILED}"\n'
        f'from course_setup import check; check("{version}", "{ref}")  # stops with the fix: old PyTorch, stale or '
        "foreign `helpers`"
    )


def notebook_path(path: Path, root: Path = ROOT) -> str:
    """The notebook's path inside the repository, as the badges name it."""
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return f"notebooks/{path.name}"


def _is_bootstrap(source: str) -> bool:
    """Whether a first code cell is a bootstrap of this form (which ``fix`` may rewrite whole)."""
    return "course_setup" in source and len(source.splitlines()) <= 4


def _header_cell(nb: nbformat.NotebookNode) -> nbformat.NotebookNode | None:
    return next((c for c in nb.cells if c.cell_type == "markdown"), None)


def _setup_cell(nb: nbformat.NotebookNode) -> nbformat.NotebookNode | None:
    return next((c for c in nb.cells if c.cell_type == "code"), None)


def _metadata_problems(metadata: dict) -> list[str]:
    problems = []
    for key, wanted in RUNTIME_METADATA.items():
        have = metadata.get(key)
        if isinstance(wanted, dict):
            have = have if isinstance(have, dict) else {}
            wrong = {k: v for k, v in wanted.items() if have.get(k) != v}
            if wrong:
                problems.append(f"metadata {key!r} lacks {wrong}")
        elif have != wanted:
            problems.append(f"metadata {key!r} is {have!r}, not {wanted!r}")
    return problems


def problems(
    nb: nbformat.NotebookNode, rel_path: str, url: str, ref: str = REF, version: str = __version__
) -> list[str]:
    """Every way ``nb`` disagrees with the badge line, runtime metadata and bootstrap derived for it."""
    found = []
    header = _header_cell(nb)
    badges = [line for line in (header.source if header else "").split("\n") if line.startswith(BADGE_START)]
    if not badges:
        found.append("header cell has no badge line")
    elif badges[0] != badge_line(url, rel_path, ref):
        found.append(f"badge line is {badges[0]!r}, expected {badge_line(url, rel_path, ref)!r}")
    found += _metadata_problems(nb.metadata)
    setup = _setup_cell(nb)
    if setup is None or not _is_bootstrap(setup.source):
        found.append("first code cell is not the bootstrap (four lines ending with course_setup's check)")
    elif setup.source != bootstrap(url, ref, version):
        found.append(f"the bootstrap (first code cell) differs from the canonical text for {ref}, version {version}")
    return found


def fix(nb: nbformat.NotebookNode, rel_path: str, url: str, ref: str = REF, version: str = __version__) -> list[str]:
    """Rewrite the badge line, runtime metadata and bootstrap of ``nb`` in place; return what could not be fixed."""
    unfixable = []
    header = _header_cell(nb)
    lines = header.source.split("\n") if header else []
    index = next((i for i, line in enumerate(lines) if line.startswith(BADGE_START)), None)
    if index is None:
        unfixable.append("header cell has no badge line to rewrite")
    else:
        lines[index] = badge_line(url, rel_path, ref)
        header.source = "\n".join(lines)
    for key, wanted in RUNTIME_METADATA.items():
        if isinstance(wanted, dict) and isinstance(nb.metadata.get(key), dict):
            nb.metadata[key].update(copy.deepcopy(wanted))  # keep keys Colab or Kaggle added themselves
        else:
            nb.metadata[key] = copy.deepcopy(wanted)
    setup = _setup_cell(nb)
    if setup is None or not _is_bootstrap(setup.source):
        unfixable.append("first code cell is not a bootstrap to rewrite: put the four lines of colab/README.md there")
    else:
        setup.source = bootstrap(url, ref, version)
    return unfixable


def lesson_title(nb: nbformat.NotebookNode) -> str:
    """The lesson's title from its header line ``# NN · Title``."""
    header = _header_cell(nb)
    first = header.source.split("\n", 1)[0] if header else ""
    return first.lstrip("#").strip() or "(untitled)"


def course_map(url: str, notebooks: list[Path], root: Path = ROOT, doc_dir: Path | None = None, ref: str = REF) -> str:
    """A markdown table: each lesson, its Colab and Kaggle badges, and its path for local JupyterLab."""
    rows = ["| Lesson | Colab | Kaggle | Local JupyterLab |", "|---|---|---|---|"]
    for path in notebooks:
        rel = notebook_path(path, root)
        colab, kaggle = badge_line(url, rel, ref).split(") [")
        local = Path(os.path.relpath(root / rel, doc_dir or root)).as_posix()
        title = lesson_title(nbformat.read(path, as_version=4))
        rows.append(f"| {title} | {colab}) | [{kaggle} | [`{rel}`]({local}) |")
    return "\n".join(rows)


def doc_blocks(
    url: str, notebooks: list[Path], root: Path, doc: Path, ref: str = REF, version: str = __version__
) -> dict[str, str]:
    """The generated blocks a markdown file ``doc`` may hold, by marker name."""
    return {
        "map": course_map(url, notebooks, root, doc.parent, ref),
        "bootstrap": f"```ipython3\n{bootstrap(url, ref, version)}\n```",
    }


def _marked(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- launch:{name} -->\n)(.*?)(\n<!-- /launch:{name} -->)", re.DOTALL)


def sync_doc(doc: Path, blocks: dict[str, str], write: bool) -> list[str]:
    """Compare (and with ``write``, rewrite) the generated blocks of ``doc``; return the names that differed."""
    text = doc.read_text(encoding="utf-8")
    stale = []
    for name, wanted in blocks.items():
        match = _marked(name).search(text)
        if match and match.group(2) != wanted:
            stale.append(name)
            text = text[: match.start(2)] + wanted + text[match.end(2) :]
    if stale and write:
        doc.write_text(text, encoding="utf-8")
    return stale


def main(argv: list[str] | None = None) -> int:
    """``check``: report disagreements (exit 1 if any); ``sync``: rewrite them (``--ref``: for that ref first)."""
    parser = argparse.ArgumentParser(prog="python -m tools.launch", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["check", "sync", "map"])
    parser.add_argument("notebooks", nargs="*", type=Path, help="notebooks to handle (default: every lesson)")
    parser.add_argument("--pyproject", type=Path, default=PYPROJECT, help="where the repository address is")
    parser.add_argument("--root", type=Path, help="repository root the notebook paths are relative to")
    parser.add_argument(
        "--ref", help="with sync: write this ref into REF first, 'main' or the release tag v<helpers.__version__>"
    )
    args = parser.parse_args(argv)
    root = args.root or args.pyproject.resolve().parent
    url = repository_url(args.pyproject)
    version = read_version(root)
    if args.ref and args.command != "sync":
        parser.error("--ref goes with sync")
    if args.ref:
        wrong = release_problems(args.ref, version, pyproject_version(args.pyproject))
        if wrong:
            for problem in wrong:
                print(f"cannot sync to {args.ref}: {problem}", file=sys.stderr)
            return 2
        if read_ref(root) != args.ref and write_ref(root, args.ref):
            print(f"tools/launch.py: REF = {args.ref!r}")
    ref = args.ref or read_ref(root)
    paths = args.notebooks or find_notebooks(root / "notebooks")
    if args.command == "map":
        print(course_map(url, paths, root, ref=ref))
        return 0
    status = 0
    for problem in release_problems(ref, version, pyproject_version(args.pyproject)):
        print(f"release: {problem}")
        status = 1
    stale = sync_repository(root, url, write=args.command == "sync")
    if stale:
        print(f"course_setup.py: REPOSITORY {stale!r} {'updated' if args.command == 'sync' else 'differs from ' + url}")
        status |= args.command == "check"
    for path in paths:
        rel = notebook_path(path, root)
        nb = nbformat.read(path, as_version=4)
        found = problems(nb, rel, url, ref, version)
        if args.command == "check":
            for problem in found:
                print(f"{rel}: {problem}")
            status |= bool(found)
            continue
        before = nbformat.writes(nb)
        unfixable = fix(nb, rel, url, ref, version)
        if nbformat.writes(nb) != before:
            nbformat.write(nb, path)
            print(f"{rel}: updated ({len(found)} part{'s' * (len(found) > 1)})")
        for problem in unfixable:
            print(f"{rel}: {problem}")
        status |= bool(unfixable)
    lessons = find_notebooks(root / "notebooks")
    for name in DOCS:
        doc = root / name
        if not doc.exists():
            continue
        stale = sync_doc(doc, doc_blocks(url, lessons, root, doc, ref, version), write=args.command == "sync")
        for block in stale:
            print(f"{name}: generated block {block!r} {'updated' if args.command == 'sync' else 'is out of date'}")
        status |= bool(stale) and args.command == "check"
    if args.command == "check" and status == 0:
        print(f"{len(paths)} notebook(s) agree with {url} at {ref}, helpers {version}")
    return status


if __name__ == "__main__":
    sys.exit(main())
