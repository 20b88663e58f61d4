"""What every exercise checker shares. ``@exercise`` registers a checker and owns what each would otherwise repeat:
the unanswered cell, an error raised by the learner's code, and the printed verdict. A checker's body then says only
what is wrong with an answer: it returns the hint, or None when the answer is right.

Each checker prints one line, a pass or a hint, and returns True or False; none raises, so a notebook with an
unfinished exercise still runs to the end. An exercise cell starts with its answers set to ``None``: the checker then
says it is waiting.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

CHECKERS: dict[str, Callable[..., bool]] = {}
"""Every checker by exercise id ("NN_name"); the tests run each against a reference solution and wrong answers."""

WAITING = "replace the None placeholders with your answer and run the cell again."


class NotYet(Exception):
    """A wrong answer, raised anywhere inside a checker's body; the message is the hint the learner reads."""


def forked_ranks(target: Callable, args: Callable[[int], tuple], world: int, timeout: float, stuck: str) -> list | str:
    """Run ``target(*args(rank), send)`` in ``world`` forked processes and return what each sent through ``send``, or
    why there is nothing: the fork is unavailable, a rank ran past ``timeout`` seconds (``stuck`` says what to look
    for), or a rank ended without sending. Forked, the learner's function (defined in a notebook) is copied rather
    than pickled by name, which spawn cannot do. No process outlives the call."""
    import multiprocessing

    from helpers.distributed import wait_for_exit

    if "fork" not in multiprocessing.get_all_start_methods():
        return f"this checker forks {world} processes, which this system cannot; run it on Linux"
    context = multiprocessing.get_context("fork")
    pipes = [context.Pipe(duplex=False) for _ in range(world)]
    ranks = [
        context.Process(target=target, args=(*args(rank), send), daemon=True) for rank, (_, send) in enumerate(pipes)
    ]
    for process in ranks:
        process.start()
    try:
        wait_for_exit(ranks, timeout=timeout)
    except TimeoutError:
        return f"the ranks had not finished after {timeout:g} s: {stuck}"
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
