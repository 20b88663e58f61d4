"""Build the course website from the committed notebooks, offline: ``python tools/site.py`` writes build/site/.

Nothing is executed: the pages show the outputs committed with each lesson. The README becomes the landing page,
the Colab and Kaggle guide a page of its own, and every lesson in notebooks/ a page in the sidebar, in order. Each
lesson page opens with a line saying which device and mode produced its outputs (read from the lesson's settings
line). The widget manager that draws the progress bars, and require.js which loads it, come from the npm registry at
pinned versions, checked against their published sha512 and kept in a cache, so later builds need no network.

    python tools/site.py              # build/site/index.html
    python tools/site.py --out DIR    # another folder
"""

from __future__ import annotations

import argparse
import base64
import copy
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from helpers import lesson  # noqa: E402  (the clone's helpers, with or without `pip install -e .`)
from tools import course, launch  # noqa: E402  (maintainer tooling, never installed)

LESSON_DIR = "lessons"
GUIDE = "colab"


@dataclass(frozen=True)
class NpmPackage:
    """One package from the npm registry, pinned by version and by the sha512 the registry publishes for it."""

    name: str
    version: str
    sha512: str
    files: tuple[str, ...]  # files inside the package's tarball to copy into _static/widgets (a trailing / a folder)

    @property
    def url(self) -> str:
        return f"https://registry.npmjs.org/{self.name}/-/{self.name.split('/')[-1]}-{self.version}.tgz"


WIDGET_PACKAGES = (
    NpmPackage(
        "@jupyter-widgets/html-manager",
        "1.0.15",
        "5thBIV6ymNgmPVOHvzx+gGy8ZSKmSazhtGw4/c4xJDVzRhG9PTeQsRjF3FUTopvFi//SABeNz1yp47bCrJ3CQA==",
        ("package/dist/embed-amd.js", "package/dist/embed.js.LICENSE.txt", "package/dist/"),
    ),
    NpmPackage(
        "requirejs",
        "2.3.8",
        "7/cTSLOdYkNBNJcDMWf+luFvMriVm7eYxp4BcFCsAX0wF421Vyce5SXP17c+Jd5otXKGNehIonFlyQXSowL6Mw==",
        ("package/require.js",),
    ),
)


FONTS = (".woff", ".woff2", ".ttf", ".eot", ".svg")  # the icon fonts the widget styles load, relative to the bundle


class SiteError(RuntimeError):
    """The site cannot be built; the message names the fix."""


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "pytorch-gpu-course" / "npm"


def fetch(package: NpmPackage, cache: Path) -> bytes:
    """The package's tarball: from the cache, else from the registry; refused unless its sha512 matches the pin."""
    cached = cache / f"{package.name.replace('/', '__')}-{package.version}.tgz"
    if cached.exists():
        data = cached.read_bytes()
    else:
        try:
            with urllib.request.urlopen(package.url, timeout=60) as reply:
                data = reply.read()
        except (urllib.error.URLError, TimeoutError) as err:
            raise SiteError(
                f"could not download {package.name}@{package.version} from the npm registry ({err}). Connect once and "
                f"build again (the file is then cached in {cache}), or put {package.url} there as {cached.name}."
            ) from None
    digest = base64.b64encode(hashlib.sha512(data).digest()).decode()
    if digest != package.sha512:
        cached.unlink(missing_ok=True)
        raise SiteError(f"{package.name}@{package.version}: sha512 {digest} is not the pinned {package.sha512}")
    if not cached.exists():
        cache.mkdir(parents=True, exist_ok=True)
        partial = cached.with_suffix(f".{os.getpid()}.partial")
        partial.write_bytes(data)
        partial.replace(cached)
    return data


def unpack_widgets(target: Path, cache: Path) -> None:
    """The widget manager's bundle (with its licence and icon fonts) and require.js, into ``target``."""
    target.mkdir(parents=True, exist_ok=True)
    for package in WIDGET_PACKAGES:
        with tarfile.open(fileobj=io.BytesIO(fetch(package, cache)), mode="r:gz") as tar:
            for member in tar.getmembers():
                name = member.name
                font = name.startswith(tuple(f for f in package.files if f.endswith("/"))) and name.endswith(FONTS)
                if not member.isfile() or not (name in package.files or font):
                    continue
                source = tar.extractfile(member)
                assert source is not None
                (target / Path(member.name).name).write_bytes(source.read())


def lesson_page(path: Path) -> str:
    return f"{LESSON_DIR}/{path.stem}"


def rewrite_links(markdown: str, base: str, lessons: dict[str, str]) -> str:
    """Point a document's relative links at the site's pages: lessons and the guide to their pages, any other file of
    the repository to its page on GitHub. ``base`` is the document's folder in the repository ('' or 'colab')."""

    def replace(match: re.Match) -> str:
        text, target = match.group(1), match.group(2)
        if re.match(r"[a-z]+:|#", target):
            return match.group(0)
        path, _, anchor = target.partition("#")
        resolved = os.path.normpath(os.path.join(base, path)).replace(os.sep, "/")
        if resolved in lessons:
            new = f"{lessons[resolved]}.ipynb"
        elif resolved == "colab/README.md":
            new = f"{GUIDE}.md"
        elif resolved == "README.md":
            new = "index.md"
        else:
            new = f"{launch.repository_url()}/blob/{launch.REF}/{resolved}"
        return f"[{text}]({new}{'#' + anchor if anchor else ''})"

    return re.sub(r"(?<!!)\[([^\]]*)\]\(([^)\s]+)\)", replace, markdown)


def produced_by(nb: nbformat.NotebookNode) -> str | None:
    """Which device and mode produced the notebook's outputs, from the record its settings line carries."""
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            record = out.get("data", {}).get(lesson.RECORD_MIME)
            if record and "device" in record:
                mode = "quick mode" if record.get("quick") else "a full run"
                return f"The outputs on this page come from a run on device `{record['device']}`, in {mode}."
    return None


def stage_notebook(path: Path) -> nbformat.NotebookNode:
    """A lesson as the site shows it: the runner's data outputs dropped, the set-up cell folded, the origin line."""
    nb = copy.deepcopy(nbformat.read(path, as_version=4))
    origin = produced_by(nb)
    for index, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            out.get("data", {}).pop(lesson.RECORD_MIME, None)
        if cell.cell_type == "code" and index == next(i for i, c in enumerate(nb.cells) if c.cell_type == "code"):
            tags = cell.metadata.setdefault("tags", [])
            if "hide-input" not in tags:
                tags.append("hide-input")  # the bootstrap cell: what it does is said in the README
    if origin:
        title = next(i for i, c in enumerate(nb.cells) if c.cell_type == "markdown")
        nb.cells.insert(title + 1, nbformat.v4.new_markdown_cell(f"*{origin}*"))
    for cell in nb.cells:
        cell.pop("id", None)
    nb.nbformat_minor = 4  # no cell ids: the staged copy is only read by Sphinx
    return nb


def stage(source: Path) -> None:
    """Write the Sphinx project into ``source``: conf.py, the landing page, the guide and the lessons."""
    if source.exists():
        shutil.rmtree(source)
    (source / LESSON_DIR).mkdir(parents=True)
    conf = (ROOT / "docs" / "conf.py").read_text(encoding="utf-8")
    conf += f'\nhtml_theme_options["repository_url"] = "{launch.repository_url()}"\n'
    (source / "conf.py").write_text(conf, encoding="utf-8")
    shutil.copytree(ROOT / "docs" / "_static", source / "_static")
    notebooks = course.find_notebooks(ROOT / "notebooks")
    lessons = {f"notebooks/{p.name}": lesson_page(p) for p in notebooks}
    landing = rewrite_links((ROOT / "README.md").read_text(encoding="utf-8"), "", lessons)
    toctrees = [
        "```{toctree}\n:hidden:\n:caption: Lessons\n\n" + "\n".join(lesson_page(p) for p in notebooks) + "\n```",
        f"```{{toctree}}\n:hidden:\n:caption: Guides\n\n{GUIDE}\n```",
    ]
    (source / "index.md").write_text(landing.rstrip() + "\n\n" + "\n\n".join(toctrees) + "\n", encoding="utf-8")
    guide = (ROOT / "colab" / "README.md").read_text(encoding="utf-8")
    (source / f"{GUIDE}.md").write_text(rewrite_links(guide, "colab", lessons), encoding="utf-8")
    for path in notebooks:
        nbformat.write(stage_notebook(path), source / LESSON_DIR / path.name)


def build(out: Path, cache: Path | None = None, strict: bool = True) -> Path:
    """Stage and build the site into ``out``; returns the path of its index.html."""
    source = out.parent / f"{out.name}-source"
    stage(source)
    if out.exists():
        shutil.rmtree(out)  # no page or file left from an earlier build
    unpack_widgets(source / "_static" / "widgets", cache or cache_dir())
    strictness = ["-n", "-W", "--keep-going"] if strict else []
    command = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-E", *strictness, str(source), str(out)]
    subprocess.run(command, check=True)
    return out / "index.html"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/site.py", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "site", help="output folder (default build/site)")
    parser.add_argument("--no-strict", action="store_true", help="do not turn Sphinx warnings into errors")
    args = parser.parse_args(argv)
    try:
        import myst_nb  # noqa: F401
        import sphinx_book_theme  # noqa: F401
    except ImportError as err:
        fix = "pip install -r requirements-site.txt -c requirements-lock.txt"
        print(f"error: {err.name} is missing: {fix}", file=sys.stderr)
        return 2
    try:
        index = build(args.out.resolve(), strict=not args.no_strict)
    except SiteError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except subprocess.CalledProcessError as err:
        print(f"error: sphinx-build failed (exit {err.returncode}); its messages are above", file=sys.stderr)
        return 1
    print(f"Site built: {index}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
