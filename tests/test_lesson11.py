"""Lesson 11's sources: its progress bar comes from the course helper that knows when tqdm's widget can work, and the
training step and the ladder's rule it walks through are the ones ``python -m lessons.lesson_11`` runs: printed from
``lessons/lesson_11.py``, never defined again in the cells."""

from __future__ import annotations

import ast
from pathlib import Path

import nbformat
from IPython.core.inputtransformer2 import TransformerManager

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "11_speedrun.ipynb"
MODULE = ROOT / "lessons" / "lesson_11.py"


def code_cells() -> dict[str, str]:
    """The lesson's code cells by id, as Python (shell and magic lines turned into calls, as IPython runs them)."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    return {c.id: TransformerManager().transform_cell(c.source) for c in nb.cells if c.cell_type == "code"}


def defined_names(source: str) -> set[str]:
    """The functions and classes a piece of code defines at its top level."""
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {node.name for node in ast.parse(source).body if isinstance(node, kinds)}


def copies(cells: dict[str, str]) -> dict[str, set[str]]:
    """Each cell that defines a function or class which lessons/lesson_11.py also defines, with those names."""
    module = defined_names(MODULE.read_text(encoding="utf-8"))
    found = {cell_id: defined_names(source) & module for cell_id, source in cells.items()}
    return {cell_id: names for cell_id, names in found.items() if names}


def test_the_ladder_bar_is_made_by_training_progress_bar_not_by_tqdm_auto():
    cells = code_cells()
    code = "\n".join(cells.values())
    assert "tqdm" not in code.replace("training.progress_bar", "")  # tqdm.auto warns in a notebook without ipywidgets
    assert "bar = training.progress_bar(" in cells["c08"]


def test_the_cells_define_nothing_the_lessons_module_defines():
    """One copy: the step and the rule the lesson shows are the module's, printed, so nothing holds two copies equal."""
    assert copies(code_cells()) == {}


def test_a_copy_of_a_module_function_in_a_cell_is_found():
    cells = {"step": "def train_step(recipe, model, X, y, opt, scaler, dtype):\n    pass\n", "other": "x = 1\n"}
    assert copies(cells) == {"step": {"train_step"}}
    assert copies({"c": "class SpeedrunRecipe:\n    pass\n\n\ndef climb():\n    pass\n"}) == {
        "c": {"SpeedrunRecipe", "climb"}
    }


def test_the_lesson_prints_the_modules_step_and_ladder_rule_and_calls_them():
    cells = code_cells()
    assert "inspect.getsource(lesson_11.train_step)" in cells["step"]
    assert "inspect.getsource(lesson_11.climb)" in cells["climb"]
    assert "lesson_11.climb(" in cells["c08"]
