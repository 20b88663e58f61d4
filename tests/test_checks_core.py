"""The ``@exercise`` decorator every checker is built with: the unanswered cell, an error raised by the learner's code,
and the printed verdict; and the lessons' way in, ``checks.check_xxx``."""

import re
import sys
from pathlib import Path

import pytest

from exercises import checks, core

ROOT = Path(__file__).resolve().parent.parent
WAITING = "replace the None placeholders with your answer and run the cell again."


@pytest.fixture
def registry(monkeypatch):
    """An empty ``CHECKERS`` for the test's own checkers, so the course's stay as they are."""
    monkeypatch.setattr(core, "CHECKERS", {})
    return core.CHECKERS


def test_a_body_that_returns_none_passes_and_a_hint_fails(registry, capsys):
    @core.exercise("99_sign", "the sign")
    def check_sign(answer, number):
        return None if answer == (number > 0) else f"{number} is {'positive' if number > 0 else 'not positive'}"

    assert registry == {"99_sign": check_sign}
    assert check_sign(True, 3) is True
    assert capsys.readouterr().out == "[pass] the sign\n"
    assert check_sign(False, 3) is False
    assert capsys.readouterr().out == "[not yet] the sign: 3 is positive\n"
    assert check_sign.__name__ == "check_sign"  # the lessons call it by this name


def test_an_unanswered_cell_waits_without_running_the_body(registry, capsys):
    ran = []

    @core.exercise("99_pair", "a pair", answers=2)
    def check_pair(first, second, reference):
        ran.append((first, second))
        return None

    for first, second in [(None, 1), (1, None), (None, None)]:
        assert check_pair(first, second, reference=0) is False
        assert capsys.readouterr().out == f"[waiting] a pair: {WAITING}\n"
    assert ran == []
    assert check_pair(0, 0, None) is True  # only the answers count: a reference of None is no unanswered cell
    assert ran == [(0, 0)]


def test_an_error_in_the_learners_code_is_a_hint_with_its_first_line(registry, capsys):
    @core.exercise("99_call", "call it", function=True)
    def check_call(fn, context):
        if context:
            with core.learner_code(f"{context} it raised ", "; fix it"):
                fn()
        fn()
        return None

    def fails():
        raise ValueError("the first line\nand a second one")

    assert check_call(fails, "") is False
    assert capsys.readouterr().out == "[not yet] call it: it raised ValueError: the first line\n"
    assert check_call(fails, "on meta") is False
    assert capsys.readouterr().out == "[not yet] call it: on meta it raised ValueError: the first line; fix it\n"
    assert check_call(lambda: None, "") is True
    assert check_call(42, "") is False
    assert capsys.readouterr().out == "[pass] call it\n[not yet] call it: fn should be a function, got int\n"


def test_not_yet_raised_deep_in_a_body_is_the_hint(registry, capsys):
    def helper(x):
        if x < 0:
            raise core.NotYet(f"{x} is negative")

    @core.exercise("99_helper", "a helper")
    def check_helper(x):
        helper(x)
        return None

    assert check_helper(-1) is False
    assert capsys.readouterr().out == "[not yet] a helper: -1 is negative\n"


def test_the_title_is_formatted_with_the_arguments_defaults_included(registry, capsys):
    @core.exercise("99_title", "{n:,} items in batches of {size}")
    def check_title(answer, n, size=64):
        return None

    @core.exercise("99_named", lambda answer, task: f"the {task.upper()} task")
    def check_named(answer, task):
        return None

    check_title(None, 60_000)
    check_named(1, task="cnn")
    assert capsys.readouterr().out == f"[waiting] 60,000 items in batches of 64: {WAITING}\n[pass] the CNN task\n"


def test_two_checkers_for_one_exercise_are_refused(registry):
    core.exercise("99_once", "once")(lambda answer: None)
    with pytest.raises(ValueError, match="Two checkers"):
        core.exercise("99_once", "twice")(lambda answer: None)


def test_every_checker_sits_in_its_lessons_file_and_is_exported_by_name():
    for exercise_id, check in core.CHECKERS.items():
        assert check.__module__ == f"exercises.lesson_{exercise_id[:2]}", exercise_id
        assert getattr(checks, check.__name__) is check
    lessons = {p.stem for p in (ROOT / "exercises").glob("lesson_*.py")}
    assert lessons == {f"lesson_{i[:2]}" for i in core.CHECKERS}
    # test_checks_NN.py, and test_checks_NN_topic.py for more tests of lesson NN
    tested = {"lesson_" + p.stem.split("_")[2] for p in (ROOT / "tests").glob("test_checks_[0-9]*.py")}
    assert lessons == tested


def test_every_checker_a_notebook_calls_exists():
    called = set()
    for notebook in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        called |= set(re.findall(r"checks\.(check_\w+)\(", notebook.read_text(encoding="utf-8")))
    assert len(called) == len(core.CHECKERS)  # each checker is called by a lesson
    assert {name for name in called if not callable(getattr(checks, name, None))} == set()


def _defined_in_a_notebook(source: str, name: str, **names):
    """``name`` from ``source`` run as Jupyter runs a cell: in ``__main__``, its source in ``linecache``."""
    import linecache

    filename = f"/tmp/ipykernel_test/{name}.py"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    namespace = {"__name__": "__main__", **names}
    exec(compile(source, filename, "exec", dont_inherit=True), namespace)  # without this file's __future__ import
    return namespace[name]


def test_a_notebook_function_travels_as_source_with_the_names_it_uses():
    import math
    import pickle

    from torch.utils.data import Dataset

    helper = _defined_in_a_notebook("def halve(x):\n    return x / 2\n", "halve")
    fn = _defined_in_a_notebook(
        "def answer(data: Dataset, scale=math.pi) -> float:\n    return halve(len(data) * scale)\n",
        "answer",
        math=math,
        Dataset=Dataset,  # named only in an annotation: the rebuilt def still needs it
        halve=helper,
    )
    carried = pickle.loads(pickle.dumps(core.NotebookFunction(fn)))
    assert (
        carried.modules == {"math": "math"}
        and set(carried.values) == {"Dataset"}
        and set(carried.functions) == {"halve"}
    )
    assert carried([1, 2]) == fn([1, 2]) == math.pi


def test_a_lambda_cannot_travel_as_source_and_the_hint_says_use_def():
    with pytest.raises(core.NotYet, match="define the function with def"):
        core.NotebookFunction(_defined_in_a_notebook("f = lambda x: x\n", "f"))
