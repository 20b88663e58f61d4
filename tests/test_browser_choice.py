"""Which lessons the JupyterLab browser test runs: those whose saved outputs the page draws or styles beyond plain
text. The rule is read from the saved outputs, so a lesson that gains a figure or a shown error is run there again."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent


def browser_test():
    spec = importlib.util.spec_from_file_location("browser_choice", ROOT / "tests" / "browser" / "test_jupyterlab.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def lesson(folder: Path, name: str, *outputs: dict) -> None:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("print('hello')")
    cell.outputs = [nbformat.from_dict(out) for out in outputs]
    nb.cells = [nbformat.v4.new_markdown_cell(f"# {name}"), cell]
    nbformat.write(nb, folder / name)


def shown(mime: str, value, kind: str = "display_data") -> dict:
    out = {"output_type": kind, "metadata": {}, "data": {mime: value}}
    return {**out, "execution_count": 1} if kind == "execute_result" else out


def test_only_lessons_with_more_than_plain_text_run_in_the_browser(tmp_path: Path) -> None:
    text = {"output_type": "stream", "name": "stdout", "text": "rank 0: done\n"}
    widget = {"model_id": "abc", "version_major": 2, "version_minor": 0}
    lesson(tmp_path, "00_text_only.ipynb", text, shown("text/plain", "42", "execute_result"))
    lesson(tmp_path, "01_figure.ipynb", text, shown("image/png", "iVBORw0KGgo="))
    lesson(tmp_path, "02_shown_error.ipynb", {"output_type": "stream", "name": "stderr", "text": "ValueError: x\n"})
    lesson(tmp_path, "03_progress.ipynb", shown("application/vnd.jupyter.widget-view+json", widget))
    lesson(tmp_path, "04_bare_figure.ipynb", shown("text/plain", "<Figure size 640x480 with 1 Axes>", "execute_result"))
    chosen = browser_test().notebooks_to_run(tmp_path)
    assert chosen[0] == "smoke_widgets_figures_errors.ipynb"
    assert chosen[1:] == ["01_figure.ipynb", "02_shown_error.ipynb", "03_progress.ipynb", "04_bare_figure.ipynb"]


def test_the_course_s_lessons_with_figures_are_chosen() -> None:
    chosen = browser_test().notebooks_to_run()
    for name in ("05_mnist_on_gpu.ipynb", "11_speedrun.ipynb"):  # progress bars and figures
        assert name in chosen
    assert len(chosen) > 10
