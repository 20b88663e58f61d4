"""Notebook lint: the rules every committed lesson notebook follows. ``lint(nb)`` returns a list of problems."""

from __future__ import annotations

import ast
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


CUDA_FREE = {"is_available", "device_count", "get_arch_list", "OutOfMemoryError", "manual_seed", "manual_seed_all"}
"""``torch.cuda`` names a lesson may use anywhere: they answer, or do nothing, on a machine without CUDA."""
CUDA_DESCRIBE = {"get_device_properties", "get_device_name", "get_device_capability", "current_device"}
"""``torch.cuda`` calls that describe the machine's GPUs and run nothing on them: allowed under
``devices.machine_gpus`` (the machine's report does not depend on the lesson's device) as well as under
``devices.gpu_section``. Every other ``torch.cuda`` call (streams, events, synchronize, the memory figures,
``torch.cuda.device(...)``, ...) and every ``x.cuda()`` runs on a GPU: only under ``devices.gpu_section``."""
WORK, DESCRIBE = "work", "describe"
LINE = 120
"""The longest code line, but for a shell line (the first cell's install line carries its failure message)."""


def _python(source: str) -> ast.Module | None:
    """A code cell as Python: IPython's magics (``%%writefile``, ``!cmd``) become calls; None if it does not parse."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        source = TransformerManager().transform_cell(source)
    except ImportError:
        pass
    try:
        return ast.parse(source)
    except SyntaxError:
        return None


def _cuda_call(node: ast.Call) -> str | None:
    """WORK or DESCRIBE for a CUDA-only call (``torch.cuda.X(...)`` or ``x.cuda()``), else None."""
    func = node.func
    if not isinstance(func, ast.Attribute):
        return None
    if func.attr == "cuda":
        return WORK
    owner = func.value
    if (
        isinstance(owner, ast.Attribute)
        and owner.attr == "cuda"
        and isinstance(owner.value, ast.Name)
        and owner.value.id == "torch"
        and func.attr not in CUDA_FREE
    ):
        return DESCRIBE if func.attr in CUDA_DESCRIBE else WORK
    return None


def _gate(test: ast.expr) -> str | None:
    """WORK when an ``if`` test calls ``devices.gpu_section``, DESCRIBE when it calls ``devices.machine_gpus``."""
    tests = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
    names = {t.func.attr for t in tests if isinstance(t, ast.Call) and isinstance(t.func, ast.Attribute)}
    return WORK if "gpu_section" in names else DESCRIBE if "machine_gpus" in names else None


def _walk(node: ast.AST, gate: str | None, function: str | None, found: list) -> None:
    """Collect (kind, gate, enclosing top-level function, line, what) for every CUDA-only call and every use of a
    name; ``gate`` is the strongest gate around the node."""
    if isinstance(node, ast.Call) and (kind := _cuda_call(node)):
        found.append((kind, gate, function, node.lineno, ast.unparse(node.func)))
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
        found.append(("use", gate, function, node.lineno, node.id))
    if isinstance(node, ast.If):
        _walk(node.test, gate, function, found)
        inner = _gate(node.test)
        for child in node.body:
            _walk(child, WORK if WORK in (gate, inner) else inner or gate, function, found)
        for child in node.orelse:
            _walk(child, gate, function, found)
        return
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and function is None and gate is None:
        function = node.name
    for child in ast.iter_child_nodes(node):
        _walk(child, gate, function, found)


def _allowed(kind: str, gate: str | None) -> bool:
    return gate == WORK or (kind == DESCRIBE and gate == DESCRIBE)


def ungated_gpu_calls(sources: list[tuple[int, str]]) -> list[str]:
    """Problems for CUDA-only calls outside their gate, in the notebook's code cells ``(index, source)``. A function
    defined outside any gate may make them when every use of its name (a call, or passing it on) is gated."""
    found: list[tuple[int, tuple]] = []
    for i, source in sources:
        tree = _python(source)
        if tree is not None:
            found += [(i, f) for f in _collected(tree)]
    needs: dict[str, str] = {}  # function name -> the gate every use of it needs
    for _ in range(len(found) + 1):  # until no function is added: a function may call another
        before = dict(needs)
        for _i, (kind, gate, function, _line, what) in found:
            if function is None:
                continue
            if kind == "use" and what in needs and not _allowed(needs[what], gate):
                kind = needs[what]
            if kind in (WORK, DESCRIBE) and not _allowed(kind, gate):
                needs[function] = WORK if WORK in (kind, needs.get(function)) else kind
        if needs == before:
            break
    problems = []
    for i, (kind, gate, function, line, what) in found:
        if function is not None:
            continue
        if kind == "use":
            if what not in needs or _allowed(needs[what], gate):
                continue
            kind, what = needs[what], f"{what} (which makes CUDA-only calls)"
        if kind in (WORK, DESCRIBE) and not _allowed(kind, gate):
            wanted = (
                "devices.gpu_section(device, ...)"
                if kind == WORK
                else "devices.gpu_section(device, ...) or devices.machine_gpus(...)"
            )
            problems.append(
                f'cell {i}: line {line}: {what} outside `if {wanted}:`, so DEVICE = "cpu" on a GPU '
                "machine, or a machine without CUDA, does not skip it in one line"
            )
    return problems


def _collected(tree: ast.Module) -> list[tuple]:
    found: list[tuple] = []
    for node in tree.body:
        _walk(node, None, None, found)
    return found


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

    problems += ungated_gpu_calls([(i, c.source) for i, c in code])

    names = _user_names()
    for i, cell in enumerate(cells):
        tags = cell.metadata.get("tags", [])
        if "injected-parameters" in tags:
            problems.append(f"cell {i}: a papermill injected-parameters cell is committed")
        texts = [cell.source]
        if cell.cell_type == "code":
            if not cell.source.strip():
                problems.append(f"cell {i}: empty code cell")
            long = [
                n for n, line in enumerate(cell.source.split("\n"), 1) if len(line) > LINE and line.strip()[:1] != "!"
            ]
            if long:
                problems.append(f"cell {i}: line {long[0]} is over {LINE} characters (ruff's limit for the .py files)")
            for pattern, why in FORBIDDEN_CALLS.items():
                if re.search(pattern, cell.source):
                    problems.append(f"cell {i}: {why}")
            errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
            if errors:
                ename = errors[0].get("ename")
                problems.append(
                    f"cell {i}: error output {ename}: a lesson shows the errors it teaches with "
                    "helpers.errors.expect_error, so that Run all goes on in every front end"
                )
            if "raises-exception" in tags:
                problems.append(
                    f"cell {i}: tagged raises-exception, which Colab, Kaggle, VS Code and papermill ignore: "
                    "use helpers.errors.expect_error instead"
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
