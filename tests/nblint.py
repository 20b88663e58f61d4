"""Notebook lint: the rules every committed lesson notebook follows. ``lint(nb)`` returns a list of problems."""

from __future__ import annotations

import getpass
import re

import nbformat

HEADER_WORDS = ("What you will learn", "Prerequisites", "Time", "Hardware")
FORBIDDEN_CALLS = {
    r"set_default_tensor_type": "torch.set_default_tensor_type is deprecated: use torch.set_default_device",
    r"torch\.cuda\.amp|from\s+torch\.cuda\s+import\s+amp": "torch.cuda.amp is deprecated: use torch.amp",
    r"torch\.distributed\.launch": "torch.distributed.launch is deprecated: use torchrun",
    r"DistributedDataParallelCPU": "DistributedDataParallelCPU is gone: use DDP with the gloo backend",
}
LOCAL_PATH = re.compile(r"(/home/\w|/Users/\w|/root/|/work/|/tmp/|[A-Za-z]:\\Users\\|~/\.\w)")
"""A machine's own paths: home folders (also as ``~/.pyenv/...``, what the runner's scrubbing leaves of one) and
temporary folders (another clone's data folder, say)."""


def _text(value: object) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def _output_text(output: dict) -> str:
    parts = [_text(output.get("text", "")), _text(output.get("evalue", "")), _text(output.get("traceback", ""))]
    parts += [_text(v) for k, v in output.get("data", {}).items() if k.startswith("text/")]
    return "\n".join(parts)


def _user_names() -> list[str]:
    name = getpass.getuser()
    return [name] if len(name) >= 4 and name not in ("root", "runner", "jovyan") else []


def lint(nb: nbformat.NotebookNode) -> list[str]:
    """Every rule a notebook breaks, one message each."""
    problems: list[str] = []
    cells = nb.cells
    if not cells or cells[0].cell_type != "markdown" or not cells[0].source.startswith("# "):
        problems.append("header: the first cell must be markdown starting with a '# ' title")
    else:
        header = cells[0].source
        if "colab.research.google.com" not in header or "kaggle.com" not in header:
            problems.append("header: needs the Open in Colab and Open in Kaggle badges")
        problems += [f"header: missing '{w}'" for w in HEADER_WORDS if w not in header]
    if nb.metadata.get("kernelspec", {}).get("name") != "python3":
        problems.append("kernelspec: must be python3")
    if "papermill" in nb.metadata:
        problems.append("metadata: papermill run metadata is committed (use the runner's --write-back)")

    code = [(i, c) for i, c in enumerate(cells) if c.cell_type == "code"]
    tagged = [i for i, c in code if "parameters" in c.metadata.get("tags", [])]
    if len(tagged) != 1:
        problems.append(f"parameters: exactly one code cell must be tagged 'parameters', found {len(tagged)}")
    counts = [c.get("execution_count") for _, c in code]
    if counts != list(range(1, len(code) + 1)):
        problems.append(f"execution: code cells must run in order 1..{len(code)}, found {counts}")
    if not any(c.cell_type == "markdown" and "## Summary" in c.source for c in cells):
        problems.append("structure: a '## Summary' section is missing")

    names = _user_names()
    for i, cell in enumerate(cells):
        tags = cell.metadata.get("tags", [])
        if "injected-parameters" in tags:
            problems.append(f"cell {i}: a papermill injected-parameters cell is committed")
        texts = [cell.source]
        if cell.cell_type == "code":
            if not cell.source.strip():
                problems.append(f"cell {i}: empty code cell")
            for pattern, why in FORBIDDEN_CALLS.items():
                if re.search(pattern, cell.source):
                    problems.append(f"cell {i}: {why}")
            errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
            if errors:
                ename = errors[0].get("ename")
                problems.append(
                    f"cell {i}: error output {ename}: a lesson shows the errors it teaches with "
                    "helpers.lesson.expect_error, so that Run all goes on in every front end"
                )
            if "raises-exception" in tags:
                problems.append(
                    f"cell {i}: tagged raises-exception, which Colab, Kaggle, VS Code and papermill ignore: "
                    "use helpers.lesson.expect_error instead"
                )
            texts += [_output_text(o) for o in cell.get("outputs", [])]
        elif not cell.source.strip():
            problems.append(f"cell {i}: empty {cell.cell_type} cell")
        for text in texts:
            if match := LOCAL_PATH.search(text):
                problems.append(f"cell {i}: absolute local path {match.group(0)!r}")
                break
            if any(n in text for n in names):
                problems.append(f"cell {i}: mentions the local user name")
                break
    return problems
