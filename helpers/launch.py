"""Keep every lesson launchable on Colab and Kaggle: header badges, GPU runtime metadata, and the bootstrap.

``python -m helpers.launch check`` lists each notebook part that disagrees with what this module derives from
the repository address in pyproject.toml (``[project.urls] Repository``) and the notebook's path; it exits 1 when
there is any. ``python -m helpers.launch sync`` rewrites those parts. Only three parts of a notebook are touched:

- the badge line of the header cell (the first line starting with ``[![Open In Colab]`` in the first markdown cell);
- the notebook metadata keys Colab and Kaggle read for the runtime (``accelerator``, ``colab``, ``kaggle``);
- the bootstrap lines at the top of the setup cell (up to the end of the ``if ... find_spec("helpers") is None:``
  block). The imports after them, every other cell and all outputs stay as they are.

It also keeps two generated blocks in README.md and colab/README.md, between ``<!-- launch:NAME -->`` and
``<!-- /launch:NAME -->`` lines: ``map`` (the course map: each lesson with both badges and its local path) and
``bootstrap`` (the bootstrap's text). ``python -m helpers.launch map`` prints the course map.
"""

from __future__ import annotations

import argparse
import copy
import os
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
PYPROJECT = ROOT / "pyproject.toml"

BRANCH = "main"
"""The branch the badges open: learners get the notebooks as they are on it."""

REF = "v0.1.0"
"""The tag or commit the bootstrap installs the helpers from. Change it here and run ``sync``."""

ENV_SOURCE = "COURSE_HELPERS_SOURCE"
"""Names another source for the bootstrap to install (a local checkout, a wheel, another git ref)."""

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

_BOOTSTRAP_IF = re.compile(r"""^if importlib\.util\.find_spec\(["']helpers["']\) is None:""")


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


def github_slug(url: str) -> str:
    """``owner/name`` of a GitHub address; Colab and Kaggle open notebooks only from GitHub."""
    match = re.fullmatch(r"https://github\.com/([\w.-]+/[\w.-]+)", url)
    if not match:
        raise SystemExit(f"not a GitHub repository address: {url!r}")
    return match.group(1)


def badge_line(url: str, notebook: str, branch: str = BRANCH) -> str:
    """The header's "Open in Colab" and "Open in Kaggle" badges for ``notebook`` (a path inside the repository)."""
    slug = github_slug(url)
    colab = f"https://colab.research.google.com/github/{slug}/blob/{branch}/{notebook}"
    kaggle = f"https://kaggle.com/kernels/welcome?src=https://github.com/{slug}/blob/{branch}/{notebook}"
    return (
        f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]({colab}) "
        f"[![Open in Kaggle](https://kaggle.com/static/images/open-in-kaggle.svg)]({kaggle})"
    )


def install_source(url: str, ref: str = REF) -> str:
    """What pip installs the helpers from by default: the repository at the pinned ref."""
    return f"git+{url}@{ref}"


def bootstrap(url: str, ref: str = REF) -> str:
    """The canonical first lines of every setup cell."""
    return (
        "# On Colab or Kaggle this installs the course helpers (torch is already there); elsewhere it does nothing.\n"
        "import importlib.util\n"
        "import os\n"
        "\n"
        'if importlib.util.find_spec("helpers") is None:\n'
        f'    source = os.environ.get("{ENV_SOURCE}", "{install_source(url, ref)}")\n'
        '    %pip install -q "{source}"'
    )


def notebook_path(path: Path, root: Path = ROOT) -> str:
    """The notebook's path inside the repository, as the badges name it."""
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return f"notebooks/{path.name}"


def find_notebooks(folder: Path = NOTEBOOKS) -> list[Path]:
    """Every lesson notebook (``NN_*.ipynb``) in ``folder``, in order."""
    return sorted(p for p in folder.glob("[0-9][0-9]_*.ipynb"))


def _split_bootstrap(source: str) -> tuple[str, str] | None:
    """Split a setup cell's source into (bootstrap lines, the rest); None when it has no bootstrap block."""
    lines = source.split("\n")
    start = next((i for i, line in enumerate(lines) if _BOOTSTRAP_IF.match(line)), None)
    if start is None:
        return None
    end = start + 1
    while end < len(lines) and lines[end][:1] in (" ", "\t"):
        end += 1
    rest = lines[end:]
    while rest and not rest[0].strip():
        rest.pop(0)
    return "\n".join(lines[:end]), "\n".join(rest)


def _with_bootstrap(rest: str, url: str, ref: str) -> str:
    return bootstrap(url, ref) + ("\n\n" + rest if rest else "")


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


def problems(nb: nbformat.NotebookNode, rel_path: str, url: str, ref: str = REF) -> list[str]:
    """Every way ``nb`` disagrees with the badge line, runtime metadata and bootstrap derived for it."""
    found = []
    header = _header_cell(nb)
    badges = [line for line in (header.source if header else "").split("\n") if line.startswith(BADGE_START)]
    if not badges:
        found.append("header cell has no badge line")
    elif badges[0] != badge_line(url, rel_path):
        found.append(f"badge line is {badges[0]!r}, expected {badge_line(url, rel_path)!r}")
    found += _metadata_problems(nb.metadata)
    setup = _setup_cell(nb)
    parts = _split_bootstrap(setup.source) if setup else None
    if parts is None:
        found.append("first code cell has no bootstrap block (if importlib.util.find_spec(\"helpers\") is None:)")
    elif setup.source != _with_bootstrap(parts[1], url, ref):
        found.append("bootstrap lines of the setup cell differ from the canonical text")
    return found


def fix(nb: nbformat.NotebookNode, rel_path: str, url: str, ref: str = REF) -> list[str]:
    """Rewrite the badge line, runtime metadata and bootstrap of ``nb`` in place; return what could not be fixed."""
    unfixable = []
    header = _header_cell(nb)
    lines = header.source.split("\n") if header else []
    index = next((i for i, line in enumerate(lines) if line.startswith(BADGE_START)), None)
    if index is None:
        unfixable.append("header cell has no badge line to rewrite")
    else:
        lines[index] = badge_line(url, rel_path)
        header.source = "\n".join(lines)
    for key, wanted in RUNTIME_METADATA.items():
        if isinstance(wanted, dict) and isinstance(nb.metadata.get(key), dict):
            nb.metadata[key].update(copy.deepcopy(wanted))  # keep keys Colab or Kaggle added themselves
        else:
            nb.metadata[key] = copy.deepcopy(wanted)
    setup = _setup_cell(nb)
    parts = _split_bootstrap(setup.source) if setup else None
    if parts is None:
        unfixable.append("first code cell has no bootstrap block to rewrite")
    else:
        setup.source = _with_bootstrap(parts[1], url, ref)
    return unfixable


def lesson_title(nb: nbformat.NotebookNode) -> str:
    """The lesson's title from its header line ``# NN · Title``."""
    header = _header_cell(nb)
    first = header.source.split("\n", 1)[0] if header else ""
    return first.lstrip("#").strip() or "(untitled)"


def course_map(url: str, notebooks: list[Path], root: Path = ROOT, doc_dir: Path | None = None) -> str:
    """A markdown table: each lesson, its Colab and Kaggle badges, and its path for local JupyterLab."""
    rows = ["| Lesson | Colab | Kaggle | Local JupyterLab |", "|---|---|---|---|"]
    for path in notebooks:
        rel = notebook_path(path, root)
        colab, kaggle = badge_line(url, rel).split(") [")
        local = Path(os.path.relpath(root / rel, doc_dir or root)).as_posix()
        title = lesson_title(nbformat.read(path, as_version=4))
        rows.append(f"| {title} | {colab}) | [{kaggle} | [`{rel}`]({local}) |")
    return "\n".join(rows)


def doc_blocks(url: str, notebooks: list[Path], root: Path, doc: Path) -> dict[str, str]:
    """The generated blocks a markdown file ``doc`` may hold, by marker name."""
    return {
        "map": course_map(url, notebooks, root, doc.parent),
        "bootstrap": f"```python\n{bootstrap(url)}\n```",
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
    """``check``: report disagreements (exit 1 if any); ``sync``: rewrite them."""
    parser = argparse.ArgumentParser(prog="python -m helpers.launch", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["check", "sync", "map"])
    parser.add_argument("notebooks", nargs="*", type=Path, help="notebooks to handle (default: every lesson)")
    parser.add_argument("--pyproject", type=Path, default=PYPROJECT, help="where the repository address is")
    parser.add_argument("--root", type=Path, help="repository root the notebook paths are relative to")
    args = parser.parse_intermixed_args(argv)
    root = args.root or args.pyproject.resolve().parent
    url = repository_url(args.pyproject)
    paths = args.notebooks or find_notebooks(root / "notebooks")
    if args.command == "map":
        print(course_map(url, paths, root))
        return 0
    status = 0
    for path in paths:
        rel = notebook_path(path, root)
        nb = nbformat.read(path, as_version=4)
        found = problems(nb, rel, url)
        if args.command == "check":
            for problem in found:
                print(f"{rel}: {problem}")
            status |= bool(found)
            continue
        before = nbformat.writes(nb)
        unfixable = fix(nb, rel, url)
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
        stale = sync_doc(doc, doc_blocks(url, lessons, root, doc), write=args.command == "sync")
        for block in stale:
            print(f"{name}: generated block {block!r} {'updated' if args.command == 'sync' else 'is out of date'}")
        status |= bool(stale) and args.command == "check"
    if args.command == "check" and status == 0:
        print(f"{len(paths)} notebook(s) agree with {url} at {REF}")
    return status


if __name__ == "__main__":
    sys.exit(main())
