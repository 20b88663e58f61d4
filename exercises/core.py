"""What every exercise checker shares. ``@exercise`` registers a checker and owns what each would otherwise repeat:
the unanswered cell, an error raised by the learner's code, and the printed verdict. A checker's body then says only
what is wrong with an answer: it returns the hint, or None when the answer is right.

Each checker prints one line, a pass or a hint, and returns True or False; none raises, so a notebook with an
unfinished exercise still runs to the end. An exercise cell starts with its answers set to ``None``: the checker then
says it is waiting.
"""

from __future__ import annotations

import dis
import functools
import importlib
import inspect
import textwrap
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

CHECKERS: dict[str, Callable[..., bool]] = {}
"""Every checker by exercise id ("NN_name"); the tests run each against a reference solution and wrong answers."""

WAITING = "replace the None placeholders with your answer and run the cell again."


class NotYet(Exception):
    """A wrong answer, raised anywhere inside a checker's body; the message is the hint the learner reads."""


class NotebookFunction:
    """A function defined in a notebook, carried to a spawned process as its source: a spawned process imports what
    it runs by name, and a notebook's functions have no module to import. The modules, values and other notebook
    functions its code names go with it; it is rebuilt on its first call."""

    def __init__(self, fn: Callable) -> None:
        self.name = fn.__name__
        if self.name == "<lambda>":
            raise NotYet("a lambda cannot be sent to another process by its source; define the function with def")
        try:
            self.source = textwrap.dedent(inspect.getsource(fn))
        except (OSError, TypeError) as err:
            raise NotYet(f"{self.name} has no source to send to another process ({err}); define it with def") from err
        self.modules: dict[str, str] = {}
        self.values: dict[str, Any] = {}
        self.functions: dict[str, NotebookFunction] = {}
        code = compile(self.source, "<notebook cell>", "exec", dont_inherit=True)  # as Jupyter compiles a cell
        for name in _names_used(code):  # the def's annotations and defaults too
            if name == self.name or name not in fn.__globals__:
                continue  # itself, or a builtin
            value = fn.__globals__[name]
            if isinstance(value, types.ModuleType):
                self.modules[name] = value.__name__
            elif inspect.isfunction(value) and value.__module__ == "__main__":
                self.functions[name] = NotebookFunction(value)
            else:
                self.values[name] = value
        self._built: Callable | None = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_built": None}

    def build(self) -> Callable:
        namespace: dict[str, Any] = {"__name__": "__notebook__"}
        namespace.update({name: importlib.import_module(module) for name, module in self.modules.items()})
        namespace.update(self.values)
        namespace.update({name: function.build() for name, function in self.functions.items()})
        exec(compile(self.source, f"<notebook cell defining {self.name}>", "exec", dont_inherit=True), namespace)
        return namespace[self.name]

    def __call__(self, *args, **kwargs):
        if self._built is None:
            self._built = self.build()
        return self._built(*args, **kwargs)


_GLOBAL_LOADS = {"LOAD_GLOBAL", "LOAD_NAME", "LOAD_FROM_DICT_OR_GLOBALS"}


def _names_used(code: types.CodeType) -> set[str]:
    """The global names ``code`` and the functions, lambdas and comprehensions inside it load. Not every name of
    ``co_names``: that also holds attribute names (``exit`` of ``sys.exit``), which may name an unrelated global."""
    names = {ins.argval for ins in dis.get_instructions(code) if ins.opname in _GLOBAL_LOADS}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names_used(const)
    return names


def multiprocessing_context(method: str):
    """``multiprocessing.get_context(method)``: one place the tests can watch which start method a check used."""
    import multiprocessing

    return multiprocessing.get_context(method)


def _portable(value: Any) -> Any:
    return NotebookFunction(value) if inspect.isfunction(value) and value.__module__ == "__main__" else value


def ranks_in_processes(
    target: Callable,
    args: Callable[[int], tuple],
    world: int,
    timeout: float,
    stuck: str,
    backward: bool = False,
    spawned_timeout: float | None = None,
) -> list | str:
    """Run ``target(*args(rank), send)`` in ``world`` processes and return what each sent through ``send``, or why
    there is nothing: the ranks ran past the time limit, ``timeout`` seconds (``spawned_timeout`` for spawned ones,
    which import torch before they start; ``timeout`` when None), and the hint says so, its length and how they were
    started, then ``stuck``, what usually causes it; or a rank ended without sending. No process outlives the call.

    The processes are forked where a fork can: the learner's function (defined in a notebook) is then copied as it
    is. Where it cannot (no fork on this system, or ranks that call ``backward`` after autograd has already run here
    with a GPU present: ``fork_keeps_autograd``), they are spawned, and a function defined in the notebook travels as
    its source (``NotebookFunction``)."""

    from helpers import distributed  # torch.distributed, imported by the checks that start ranks only

    method = distributed.start_method(backward)
    forked = method == "fork"
    limit = timeout if forked or spawned_timeout is None else spawned_timeout
    context = multiprocessing_context(method)
    pipes = [context.Pipe(duplex=False) for _ in range(world)]
    ranks = []
    for rank, (_, send) in enumerate(pipes):
        arguments = args(rank) if forked else tuple(_portable(value) for value in args(rank))
        # not daemonic: a daemonic process may start none of its own, and a rank's DataLoader may start workers
        ranks.append(context.Process(target=target, args=(*arguments, send)))
    try:
        for process in ranks:
            process.start()
        distributed.wait_for_exit(ranks, timeout=limit)
    except TimeoutError:
        how = "forked from this process" if forked else "spawned, each importing torch first"
        return f"the ranks ran past the check's time limit of {limit:g} s ({how}); {stuck}"
    finally:
        for process in ranks:
            if process.is_alive():
                process.kill()
                process.join()
    answers = []
    for rank, (receive, _) in enumerate(pipes):
        if not receive.poll():
            return f"rank {rank} ended without an answer (exit code {ranks[rank].exitcode})"
        answers.append(receive.recv())
    return answers


def first_line(err: BaseException) -> str:
    """``Type: first line of the message``, for a hint about an error the learner's code raised."""
    return f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0]}"


@contextmanager
def learner_code(before: str, after: str = "") -> Iterator[None]:
    """Runs the learner's code: an error it raises becomes the hint ``before + "Type: first line" + after``. Outside
    such a block, an error in a checker's body reads "it raised Type: first line"."""
    try:
        yield
    except NotYet:
        raise
    except Exception as err:  # the learner's code may raise anything; the hint names it
        raise NotYet(f"{before}{first_line(err)}{after}") from err


def exercise(
    exercise_id: str, name: str | Callable[..., str], answers: int = 1, function: bool = False
) -> Callable[[Callable[..., str | None]], Callable[..., bool]]:
    """Turns ``body`` into the checker of ``exercise_id``, registered in ``CHECKERS``.

    ``name`` is the exercise's title in the printed line, formatted with the checker's arguments ("rank {rank}"), or a
    function of them. The first ``answers`` parameters are the learner's: while one is None, the checker is waiting.
    With ``function``, the first must be a function. ``body`` returns None for a right answer, else the hint."""

    def register(body: Callable[..., str | None]) -> Callable[..., bool]:
        if exercise_id in CHECKERS:
            raise ValueError(f"Two checkers for exercise {exercise_id!r}.")
        signature = inspect.signature(body)
        answer_names = list(signature.parameters)[:answers]

        @functools.wraps(body)
        def check(*args: Any, **kwargs: Any) -> bool:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            given = bound.arguments
            title = name(**given) if callable(name) else name.format(**given)
            if any(given[a] is None for a in answer_names):
                print(f"[waiting] {title}: {WAITING}")
                return False
            first = given[answer_names[0]]
            try:
                if function and not callable(first):
                    hint = f"{answer_names[0]} should be a function, got {type(first).__name__}"
                else:
                    hint = body(*bound.args, **bound.kwargs)
            except NotYet as wrong:
                hint = str(wrong)
            except Exception as err:  # the learner's code: any error becomes a hint
                hint = f"it raised {first_line(err)}"
            print(f"[pass] {title}" if hint is None else f"[not yet] {title}: {hint}")
            return hint is None

        CHECKERS[exercise_id] = check
        return check

    return register


class Recorder(torch.overrides.TorchFunctionMode):
    """Notes, while active, every host read of a tensor and every tensor a torch function returns.

    Only calls made by the code under test are seen: a torch function's own inner calls run with the mode off."""

    HOST_READS = {
        "item",
        "tolist",
        "cpu",
        "numpy",
        "__bool__",
        "__float__",
        "__int__",
        "__index__",
        "__repr__",
        "__format__",
    }
    """Tensor methods that copy values to the host, so the CPU waits for the device (``if t > 0`` calls __bool__)."""

    def __init__(self) -> None:
        super().__init__()
        self.host_reads: list[str] = []
        self.made: list[tuple[str, str, int]] = []  # (function, device type, number of elements) per tensor returned

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        name = getattr(func, "__name__", str(func))
        targets = [a for a in (*args[1:], *(kwargs or {}).values()) if isinstance(a, (str, torch.device))]
        if name in self.HOST_READS or (name == "to" and any(str(a).startswith("cpu") for a in targets)):
            self.host_reads.append(name)
        out = func(*args, **(kwargs or {}))
        self.made += [
            (name, t.device.type, t.numel())
            for t in (out if isinstance(out, (list, tuple)) else (out,))
            if isinstance(t, torch.Tensor)
        ]
        return out

    @property
    def made_on(self) -> set[str]:
        """The device types of the tensors made."""
        return {device for _, device, _ in self.made}
