"""Every code cell of lessons 03, 05, 06 and 07 can run again in the same kernel: none deletes a name that it reads
before assigning it itself (lesson 05 once ended a cell with ``del X_res, ...`` after reading X_res, so running that
cell again raised NameError). Read from the committed notebooks' sources, without running them."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
LESSONS = ["03", "05", "06", "07"]


def deleted_before_assigned(source: str) -> list[str]:
    """The names a cell deletes whose first use in it, in source order, is a read: the cell needs them from an earlier
    cell and leaves them gone, so running it again stops with NameError. IPython's ``%`` and ``!`` lines
    read as ``pass``."""
    if source.lstrip().startswith("%%"):
        return []
    lines = [
        line[: len(line) - len(line.lstrip())] + "pass" if line.lstrip().startswith(("%", "!")) else line
        for line in source.splitlines()
    ]
    tree = ast.parse("\n".join(lines))
    uses = sorted(
        (node.lineno, node.col_offset, node.id, type(node.ctx).__name__)
        for node in ast.walk(tree)
        if isinstance(node, ast.Name)
    )
    deleted = {name for _, _, name, ctx in uses if ctx == "Del"}
    first = {}
    for _, _, name, ctx in uses:
        first.setdefault(name, ctx)
    return sorted(name for name in deleted if first[name] == "Load")


def test_the_rule_finds_a_cell_that_deletes_what_it_reads() -> None:
    assert deleted_before_assigned("mine = f(X_res)\ndel X_res, mine") == ["X_res"]
    assert deleted_before_assigned("mine = f(X)\ndel mine") == []
    assert deleted_before_assigned("!echo hi\nX = 1\nprint(X)\ndel X") == []


@pytest.mark.parametrize("lesson", LESSONS)
def test_no_cell_deletes_a_name_it_needs_from_before(lesson: str) -> None:
    (path,) = NOTEBOOKS.glob(f"{lesson}_*.ipynb")
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    found = {
        cell.get("id"): names
        for cell in cells
        if cell["cell_type"] == "code" and (names := deleted_before_assigned("".join(cell["source"])))
    }
    assert not found, f"{path.name}: cells that delete names they read from earlier cells: {found}"
