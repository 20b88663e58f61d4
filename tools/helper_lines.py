"""How much of ``helpers/`` each lesson's cells name directly, in lines of source.

    python -m tools.helper_lines            # a table: lesson, lines, the names and their lines
    python -m tools.helper_lines --limit 250  # the same, and exit 1 when a lesson names more than 250 lines

The rule, read from the code alone (nothing is imported or run): every code cell of a lesson is parsed; a name the
cells take from ``helpers`` counts once per lesson, by the lines of its definition at the top of its module
(decorators, docstring and blank lines inside it included). Named three ways:
``from helpers.mod import name``; ``from helpers import mod`` and then ``mod.name``; ``import helpers.mod`` and then
``helpers.mod.name``. What a named function calls in turn is not counted: that is what "directly" means here. A
lesson's own module (``lessons/lesson_NN``) is not a helper and is not counted; the lesson prints it.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from functools import cache
from pathlib import Path

from IPython.core.inputtransformer2 import TransformerManager

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
PACKAGE = "helpers"


def cell_sources(notebook: Path) -> list[str]:
    """The lesson's code cells as Python, shell and magic lines turned into calls the way IPython runs them."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    sources = []
    for cell in cells:
        if cell["cell_type"] != "code":
            continue
        sources.append(TransformerManager().transform_cell("".join(cell["source"])))
    return sources


def named(sources: list[str]) -> set[tuple[str, str]]:
    """(module, name) pairs of ``helpers`` the cells name."""
    found: set[tuple[str, str]] = set()
    modules: dict[str, str] = {}  # a local name bound to a helpers module -> that module
    trees = [ast.parse(source) for source in sources]
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if node.module == PACKAGE:
                    for alias in node.names:
                        modules[alias.asname or alias.name] = alias.name
                elif node.module.startswith(PACKAGE + "."):
                    module = node.module.split(".", 1)[1]
                    found.update((module, alias.name) for alias in node.names)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith(PACKAGE + ".") and alias.asname:
                        modules[alias.asname] = alias.name.split(".", 1)[1]
    for tree in trees:
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute):
                continue
            value = node.value
            if isinstance(value, ast.Name) and value.id in modules:
                found.add((modules[value.id], node.attr))
            elif isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and value.value.id == PACKAGE:
                found.add((value.attr, node.attr))
    return found


@cache
def definitions(module: str) -> dict[str, int]:
    """Each top-level name of ``helpers/<module>.py`` and the lines of the statement that defines it."""
    path = ROOT / PACKAGE / f"{module}.py"
    if not path.exists():
        return {}
    lines: dict[str, int] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        size = node.end_lineno - start + 1
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            lines[node.name] = size
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    lines[target.id] = size
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            lines[node.target.id] = size
    return lines


def lesson_lines(notebook: Path) -> tuple[int, list[tuple[str, int]]]:
    """The lines of helper code a lesson names directly, and each name with its lines (largest first)."""
    parts = []
    for module, name in named(cell_sources(notebook)):
        size = definitions(module).get(name)
        if size is not None:
            parts.append((f"{module}.{name}", size))
    parts.sort(key=lambda part: (-part[1], part[0]))
    return sum(size for _, size in parts), parts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.helper_lines", description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, help="exit 1 when a lesson names more lines of helpers than this")
    parser.add_argument("--names", action="store_true", help="list every name a lesson counts, with its lines")
    args = parser.parse_args(argv)
    over = []
    for notebook in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        total, parts = lesson_lines(notebook)
        print(f"{notebook.stem:36s} {total:4d} lines in {len(parts)} names")
        if args.names:
            for name, size in parts:
                print(f"    {size:4d}  {name}")
        if args.limit is not None and total > args.limit:
            over.append(notebook.stem)
    if over:
        print(f"over {args.limit} lines: {', '.join(over)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
