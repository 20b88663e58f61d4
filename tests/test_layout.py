"""Where the course's code lives: ``helpers/`` holds what two or more lessons use and stays small; each lesson's own
code is in ``lessons/``; nothing a lesson writes in its cells is kept a second time in the installed code; a name
means one thing; and the helper code a lesson's cells name directly stays within what a learner can read
(tools/helper_lines.py)."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from tools import helper_lines

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
INSTALLED = ("helpers", "lessons", "exercises")
HELPERS_LINES = 3500
LESSON_HELPER_LINES = 250
MODULE_IN_TEXT = re.compile(r"(?:^|-m\s+)((?:helpers|lessons)(?:\.\w+)+)$|-m\s+((?:helpers|lessons)(?:\.\w+)+)")
"""A module run by name: a string that is one (``module="helpers.x"``) or follows ``-m`` in a command line."""
ENTRY_POINTS = {"main", "parse_args", "train"}
"""Names every script under torchrun or ``python -m`` gives its own entry, argument parser and training loop."""


def module_files(package: str) -> list[Path]:
    return sorted(path for path in (ROOT / package).rglob("*.py") if "__pycache__" not in path.parts)


def dotted(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def imported_modules(tree: ast.AST) -> set[str]:
    """Every course module a piece of code imports or launches: ``helpers.x`` and ``lessons.lesson_NN`` (with their
    parents), and a module a string runs by name, as in ``torchrun ... -m lessons.lesson_13``."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.update(name for match in MODULE_IN_TEXT.findall(node.value.strip()) for name in match if name)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in found if name.split(".")[0] in ("helpers", "lessons")}


def code_cells(notebook: Path) -> list[ast.Module]:
    return [ast.parse(source) for source in helper_lines.cell_sources(notebook)]


def helpers_reached(start: set[str], graph: dict[str, set[str]]) -> set[str]:
    """The helpers modules ``start`` reaches through imports, directly or through other course modules."""
    seen: set[str] = set()
    todo = [name for name in start if name in graph]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(graph[name] - seen)
    return {name for name in seen if name.startswith("helpers.") and name != "helpers.__init__"}


def course_graph() -> dict[str, set[str]]:
    graph = {}
    for package in ("helpers", "lessons"):
        for path in module_files(package):
            graph[dotted(path)] = {n for n in imported_modules(ast.parse(path.read_text(encoding="utf-8")))}
    for name in list(graph):
        graph[name] = {n for n in graph[name] if n in graph}
    return graph


def lesson_uses(number: str, graph: dict[str, set[str]]) -> set[str]:
    """The helpers modules lesson ``number`` runs: from its cells, its checkers and its own module."""
    (notebook,) = [nb for nb in NOTEBOOKS if nb.name.startswith(number)]
    start: set[str] = set()
    for tree in code_cells(notebook):
        start |= imported_modules(tree)
    own = [ROOT / "exercises" / f"lesson_{number}.py", ROOT / "lessons" / f"lesson_{number}.py"]
    own += module_files("lessons/" + f"lesson_{number}") if (ROOT / "lessons" / f"lesson_{number}").is_dir() else []
    for path in own:
        if path.is_file():
            start |= imported_modules(ast.parse(path.read_text(encoding="utf-8")))
            start.add(dotted(path))
    return helpers_reached(start, graph)


def test_helpers_stays_small() -> None:
    lines = {path.name: len(path.read_text(encoding="utf-8").splitlines()) for path in module_files("helpers")}
    total = sum(lines.values())
    largest = ", ".join(f"{name} {n}" for name, n in sorted(lines.items(), key=lambda item: -item[1])[:5])
    assert total <= HELPERS_LINES, f"helpers/ has {total} lines, more than {HELPERS_LINES}; the largest: {largest}"


def test_every_helpers_module_serves_two_lessons() -> None:
    graph = course_graph()
    users: dict[str, list[str]] = {name: [] for name in graph if name.startswith("helpers.") and name != "helpers"}
    for notebook in NOTEBOOKS:
        number = notebook.name[:2]
        for name in lesson_uses(number, graph):
            users[name].append(number)
    lonely = {name: found for name, found in users.items() if len(found) < 2}
    assert not lonely, (
        "helpers/ keeps what two or more lessons use; move each of these to its lesson's own module in lessons/: "
        + ", ".join(f"{name} (lessons {found or 'none'})" for name, found in sorted(lonely.items()))
    )


def test_the_measure_reaches_through_a_lesson_module(tmp_path: Path) -> None:
    # A helpers module a lesson reaches only through its own module in lessons/ still counts as used by that lesson.
    graph = {"lessons.lesson_98": {"helpers.a"}, "helpers.a": {"helpers.b"}, "helpers.b": set(), "helpers.c": set()}
    assert helpers_reached({"lessons.lesson_98"}, graph) == {"helpers.a", "helpers.b"}
    assert helpers_reached({"helpers.c", "torch"}, graph) == {"helpers.c"}


def _without_docstring(node: ast.AST) -> str:
    body = list(node.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return ast.dump(ast.Module(body=body, type_ignores=[]))


def _definitions(tree: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef]:
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return [node for node in ast.walk(tree) if isinstance(node, kinds)]


IDIOM_STATEMENTS = 5
"""Bodies shorter than this are idioms every lesson may type (a training step's four lines, a loop of products), not
copies of a lesson's code."""


def copies(cells: list[ast.Module], installed: dict[str, ast.AST]) -> list[str]:
    """Each function or class of ``IDIOM_STATEMENTS`` statements or more that the cells define and whose body
    (docstring aside) the installed code also has, under any name."""
    bodies: dict[str, str] = {}
    for where, tree in installed.items():
        for node in _definitions(tree):
            bodies.setdefault(_without_docstring(node), f"{where}:{node.name}")
    found = []
    for tree in cells:
        for node in _definitions(tree):
            statements = sum(isinstance(n, ast.stmt) for n in ast.walk(node)) - 1
            if statements >= IDIOM_STATEMENTS and _without_docstring(node) in bodies:
                found.append(f"{node.name} (also {bodies[_without_docstring(node)]})")
    return found


def installed_trees() -> dict[str, ast.AST]:
    return {
        str(path.relative_to(ROOT)): ast.parse(path.read_text(encoding="utf-8"))
        for package in INSTALLED
        for path in module_files(package)
    }


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[nb.name[:2] for nb in NOTEBOOKS])
def test_nothing_a_lesson_writes_is_kept_twice(notebook: Path) -> None:
    found = copies(code_cells(notebook), installed_trees())
    assert not found, f"{notebook.name} writes out code the installed package keeps a copy of: {', '.join(found)}"


def test_a_copy_is_found_even_renamed_and_redocumented() -> None:
    body = "    c = a + b\n    d = c * 2\n    e = d - a\n    f = e / b\n    return f\n"
    installed = {"helpers/x.py": ast.parse(f'def step(a, b):\n    """Doc."""\n{body}')}
    cell = ast.parse(f'def my_step(a, b):\n    """Another doc."""\n{body}')
    assert copies([cell], installed) == ["my_step (also helpers/x.py:step)"]
    changed = ast.parse("def step(a, b):\n" + body.replace("a + b", "a - b"))
    assert copies([changed], installed) == []
    idiom = ast.parse("def step(a, b):\n    c = a + b\n    return c * 2\n")  # shorter than IDIOM_STATEMENTS
    assert copies([idiom], {"helpers/x.py": idiom}) == []


def test_a_name_means_one_thing() -> None:
    where: dict[str, list[str]] = {}
    for package in ("helpers", "lessons"):
        for path in module_files(package):
            for node in ast.parse(path.read_text(encoding="utf-8")).body:
                kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
                if isinstance(node, kinds) and not node.name.startswith("_") and node.name not in ENTRY_POINTS:
                    where.setdefault(node.name, []).append(str(path.relative_to(ROOT)))
    twice = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert not twice, f"names defined in more than one module, with different meanings: {twice}"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[nb.name[:2] for nb in NOTEBOOKS])
def test_each_lesson_names_little_helper_code(notebook: Path) -> None:
    total, parts = helper_lines.lesson_lines(notebook)
    assert total <= LESSON_HELPER_LINES, (
        f"{notebook.name}'s cells name {total} lines of helpers/ (at most {LESSON_HELPER_LINES}): "
        + ", ".join(f"{name} {size}" for name, size in parts[:8])
    )


def test_helper_lines_counts_each_way_of_naming(tmp_path: Path) -> None:
    cells = [
        "!pip list | head -1\n%time x = 1\nfrom helpers import devices\nfrom helpers.errors import expect_error\n",
        "import helpers.text as text\nd = devices.synchronize\nd = devices.synchronize\ntext.format_seconds(1.0)\n",
        "devices.no_such_name\nimport torch\ntorch.cuda.is_available()\n",
    ]
    notebook = tmp_path / "98_test.ipynb"
    notebook.write_text(
        json.dumps({"cells": [{"cell_type": "code", "source": c} for c in cells], "metadata": {}}), encoding="utf-8"
    )
    total, parts = helper_lines.lesson_lines(notebook)
    expected = {
        "devices.synchronize": helper_lines.definitions("devices")["synchronize"],
        "errors.expect_error": helper_lines.definitions("errors")["expect_error"],
        "text.format_seconds": helper_lines.definitions("text")["format_seconds"],
    }
    assert dict(parts) == expected
    assert total == sum(expected.values()) > 3 * 5


FIRST_HOUR = {
    "the device line": r'torch\.device\(\s*"cuda"\s+if\s+torch\.cuda\.is_available\(\)\s+else\s+"cpu"\s*\)',
    "its torch.accelerator form": r"torch\.accelerator\.current_accelerator\(\)",
    "a tensor moved with .to(device)": r"\w\.to\(device\)",
    "a model moved before its optimizer is made": (
        r"(\w+)(?:\s*=\s*[\w.]+\([^\n]*\))?\.to\(device\)[^\n]*\n(?:[^\n]*\n){0,3}[^\n]*torch\.optim\.\w+\(\1\.parameters\(\)"
    ),
    "a synchronise before a clock is read": r"synchronize\(\)[^\n]*\n(?:[^\n]*\n){0,2}[^\n]*perf_counter\(\)",
    "a scalar read with .item()": r"\.item\(\)",
    "a checkpoint loaded onto a device, weights only": r"torch\.load\([^)]*map_location=[^)]*weights_only=True",
}
"""What a learner's first hour types, and where lessons 00 to 03 must type it in a code cell."""


def first_hour_missing(sources: list[str]) -> list[str]:
    code = "\n".join(sources)
    return [what for what, pattern in FIRST_HOUR.items() if not re.search(pattern, code)]


def test_lessons_00_to_03_type_the_first_hour_in_plain_pytorch() -> None:
    sources = [source for nb in NOTEBOOKS[:4] for source in helper_lines.cell_sources(nb)]
    assert [nb.name[:2] for nb in NOTEBOOKS[:4]] == ["00", "01", "02", "03"]
    assert first_hour_missing(sources) == []


def test_the_first_hour_check_sees_a_missing_line() -> None:
    typed = [
        'device = torch.device("cuda" if torch.cuda.is_available() else "cpu")\n'
        "acc = torch.accelerator.current_accelerator()\nx = x.to(device)\nmodel.to(device)\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "torch.cuda.synchronize()\nt = time.perf_counter()\nloss.item()\n"
        'state = torch.load(path, map_location="cpu", weights_only=True)\n'
    ]
    assert first_hour_missing(typed) == []
    moved_late = [typed[0].replace("model.to(device)\n", "").replace("lr=0.1)\n", "lr=0.1)\nmodel.to(device)\n")]
    assert first_hour_missing(moved_late) == ["a model moved before its optimizer is made"]
    helper_load = [typed[0].replace("torch.load(path, ", "load_checkpoint(path, ")]
    assert first_hour_missing(helper_load) == ["a checkpoint loaded onto a device, weights only"]
