"""Helpers for models wrapped in ``nn.DataParallel`` or ``DistributedDataParallel``, and for child processes
started from a notebook (lessons 06 and 07)."""

from __future__ import annotations

import contextlib
import logging
import multiprocessing.connection
import os
import sys
import tempfile
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeVar

import torch
from torch import nn

PREFIX = "module."
"""What a wrapper adds in front of every key of the wrapped model's state dict (the wrapper's attribute name)."""

V = TypeVar("V")


def strip_module_prefix(state_dict: Mapping[str, V]) -> OrderedDict[str, V]:
    """A copy of ``state_dict`` with one leading "module." removed from each key that has it; other keys unchanged.

    PyTorch has an in-place equivalent, ``torch.nn.modules.utils.consume_prefix_in_state_dict_if_present``.
    """
    # Only the leading prefix: a layer may itself be called "module" further down (e.g. "encoder.module.weight").
    stripped: OrderedDict[str, V] = OrderedDict((key.removeprefix(PREFIX), value) for key, value in state_dict.items())
    if len(stripped) != len(state_dict):
        raise ValueError('Stripping "module." would merge two keys; this state dict mixes wrapped and unwrapped keys.')
    metadata = getattr(state_dict, "_metadata", None)
    if metadata is not None:
        # load_state_dict reads per-module versions from _metadata, keyed by module path, so strip those too.
        stripped._metadata = OrderedDict((_strip_path(k), v) for k, v in metadata.items())  # type: ignore[attr-defined]
    return stripped


def _strip_path(path: str) -> str:
    """A module path without its leading "module" component: "module" -> "", "module.fc" -> "fc"."""
    return "" if path == PREFIX[:-1] else path.removeprefix(PREFIX)


def is_wrapped(model: nn.Module) -> bool:
    """Whether ``model`` is a DataParallel or DistributedDataParallel wrapper."""
    return isinstance(model, (nn.DataParallel, nn.parallel.DistributedDataParallel))


def unwrap(model: nn.Module) -> nn.Module:
    """The model inside a DataParallel or DistributedDataParallel wrapper; any other model as it is."""
    return model.module if is_wrapped(model) else model


def replica_split(batch_size: int, num_gpus: int) -> list[int]:
    """Batch sizes DataParallel hands each GPU: its scatter uses ``tensor.chunk(num_gpus)``, which may make fewer."""
    if batch_size < 1 or num_gpus < 1:
        raise ValueError(f"Need batch_size >= 1 and num_gpus >= 1, got {batch_size} and {num_gpus}.")
    return [len(chunk) for chunk in torch.arange(batch_size).chunk(num_gpus)]


@contextlib.contextmanager
def child_stderr() -> Iterator[list[str]]:
    """Collect what processes started inside the block write to standard error, as a list of lines, filled on exit.

    Child processes inherit the parent's file descriptor 2, so their tracebacks bypass ``sys.stderr``: a terminal
    shows them, some Jupyter front ends do not. Pointing descriptor 2 at a temporary file for the block (lesson 07)
    lets the caller show them the same way everywhere. torch.multiprocessing's warning that it is terminating the
    remaining children is held back as well: it names process ids that change on every run.
    """
    lines: list[str] = []
    spawn_log = logging.getLogger("torch.multiprocessing.spawn")
    level = spawn_log.level
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 2)
        spawn_log.setLevel(logging.ERROR)
        try:
            yield lines
        finally:
            spawn_log.setLevel(level)
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            lines.extend(sink.read().decode(errors="replace").splitlines())


def wait_for_exit(processes: Sequence[Any], timeout: float) -> None:
    """Wait until every one of ``processes`` (multiprocessing processes) has exited; after ``timeout`` seconds,
    terminate those still running and raise TimeoutError.

    ``torch.multiprocessing``'s ``ProcessContext.join`` reports the first failed child it finds among those that have
    exited by the time it looks. Called after this, it finds all of them and checks them in order, so when several
    fail alike it names the lowest-numbered one every time instead of whichever the operating system reported first.
    """
    deadline = time.monotonic() + timeout
    running = [p for p in processes if p.exitcode is None]
    while running:
        left = deadline - time.monotonic()
        if left <= 0:
            for process in running:
                process.terminate()
            for process in running:
                process.join(5)
            raise TimeoutError(
                f"{len(running)} of {len(processes)} child processes did not finish within {timeout:g} s"
            )
        multiprocessing.connection.wait([p.sentinel for p in running], timeout=left)
        running = [p for p in running if p.exitcode is None]
