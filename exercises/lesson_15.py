"""Lesson 15's exercise checkers."""

from __future__ import annotations

import concurrent.futures
import os
import random
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from exercises.core import NotYet, _portable, exercise, learner_code, multiprocessing_context


@exercise("15_find_culprit", "name the rank that never came, and the collective", function=True)
def check_find_culprit(find_culprit: Callable | None) -> str | None:
    """``find_culprit(dumps)`` gets ``{rank: what that rank printed}`` of a fresh hang (faulthandler's stacks,
    taken while it hung, and its messages) and returns ``(rank, collective)``: the rank that never called the
    collective, and the collective the others wait in. Two hangs are staged, culprit 0 and culprit 1, each with a
    collective drawn at random, so that no fixed answer passes."""
    from lessons import lesson_15

    picks = random.Random().sample(lesson_15.COLLECTIVES, 2)
    culprits = [0, 1]
    random.shuffle(culprits)

    def staged(culprit: int, name: str) -> lesson_15.Staged:
        extra = ["--culprit", str(culprit), "--collective", name, "--timeout", "2"]
        signal_each = lesson_15.send_to_each(signal.SIGUSR1)
        return lesson_15.stage("skip", extra, deadline=40, while_hanging=signal_each, end_after=True)

    with concurrent.futures.ThreadPoolExecutor(2) as pool:  # both hangs at once: half the wait
        hangs = list(pool.map(staged, culprits, picks))
    for culprit, name, hang in zip(culprits, picks, hangs, strict=True):
        dumps = dict(enumerate(hang.said))
        if not all(lesson_15.stacks(s) for s in hang.said):
            return "the staged hang gave no stacks this time (the machine may be very busy); run the cell again"
        with learner_code("find_culprit raised "):
            got = find_culprit(dumps)
        if not isinstance(got, tuple | list) or len(got) != 2:
            return f"return two things, (rank, collective); got {got!r}"
        rank, collective = got
        if rank != culprit:
            return (
                f"named rank {rank!r}, but rank {culprit} was the one that never called {name}: look for the rank "
                "whose stack holds no frame in distributed_c10d.py"
            )
        if str(collective).removeprefix("dist.").removeprefix("torch.distributed.") != name:
            return f"named the collective {collective!r}; the others waited in {name} (the innermost c10d frame)"
    return None


# Exercise 2: a handler that finishes the step, saves atomically and exits 75.

STEPS = 400  # far more than the check waits for: the signal always comes mid-loop
STOP_AFTER = 5  # the check sends SIGTERM once this many steps are done
STOPPED = 75
START_WAIT = 60  # seconds the process may take to start and finish STOP_AFTER steps before SIGTERM is sent
EXIT_WAIT = 60  # seconds the process may take to finish its step, save and exit after SIGTERM (20 s was once too few)


def small_model() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def take_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, step: int) -> None:
    """One training step, a little slow on purpose (a signal arrives while it runs); it notes each finished step."""
    g = torch.Generator().manual_seed(step)
    X, y = torch.randn(8, 4, generator=g), torch.randint(0, 2, (8,), generator=g)
    loss = torch.nn.functional.cross_entropy(model(X), y)
    optimizer.zero_grad()
    loss.backward()
    time.sleep(0.05)
    optimizer.step()
    Path(os.environ["COURSE_STEPS_DONE"]).write_text(str(step))


def _child(train: Callable, path: str, saves: str) -> None:
    """The learner's loop in its own process; every torch.save it makes is noted in ``saves``."""
    plain_save = torch.save

    def noted_save(obj, f, *args, **kwargs):
        with open(saves, "a") as notes:
            notes.write(f"{os.fspath(f) if isinstance(f, str | os.PathLike) else getattr(f, 'name', '?')}\n")
        return plain_save(obj, f, *args, **kwargs)

    torch.save = noted_save
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    model, optimizer = small_model()
    try:
        train(model, optimizer, path, STEPS, take_step)
    except SystemExit as stop:  # the learner's sys.exit: its code, at once, without the teardown of this harness
        # process (spawned from a notebook, it imported the kernel's launcher as its main module)
        code = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    os._exit(0)


def weights_after(steps: int) -> dict[str, torch.Tensor]:
    model, optimizer = small_model()
    for step in range(1, steps + 1):
        g = torch.Generator().manual_seed(step)
        X, y = torch.randn(8, 4, generator=g), torch.randint(0, 2, (8,), generator=g)
        loss = torch.nn.functional.cross_entropy(model(X), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.state_dict()


def _weights_in_child(steps: int, send) -> None:
    send.send({k: v.tolist() for k, v in weights_after(steps).items()})  # plain lists: a tensor would be shared


def _steps_done(done: Path) -> int:
    text = done.read_text().strip() if done.exists() else ""
    return int(text) if text.isdigit() else 0


@exercise("15_stop_handler", "checkpoint and exit 75 on SIGTERM", function=True)
def check_stop_handler(train: Callable | None) -> str | None:
    """``train(model, optimizer, path, steps, take_step)`` calls ``take_step(model, optimizer, step)`` for steps 1 to
    ``steps``; on SIGTERM it finishes the step under way, saves ``{"step", "model", "optimizer"}`` to ``path``
    atomically and exits with 75. The check runs it in a child process and sends SIGTERM mid-loop."""
    from helpers.checkpoints import CorruptCheckpointError, load_checkpoint

    # spawn, never fork: a child forked from a process that has run other threads (gloo's, a DataLoader's) can wait
    # forever on a lock one of them held, before the learner's loop takes its first step
    context = multiprocessing_context("spawn")
    with tempfile.TemporaryDirectory() as folder:
        path, saves, done = (Path(folder) / name for name in ("stop.pt", "saves.txt", "done.txt"))
        os.environ["COURSE_STEPS_DONE"] = str(done)
        child = context.Process(target=_child, args=(_portable(train), str(path), str(saves)))
        child.start()
        try:
            deadline, before, signalled = time.monotonic() + START_WAIT, 0, False
            while time.monotonic() < deadline and child.is_alive():
                if _steps_done(done) >= STOP_AFTER:
                    break
                time.sleep(0.01)
            if not child.is_alive():
                return f"the loop ended before the signal came (exit {child.exitcode}); run all {STEPS} steps"
            before = _steps_done(done)
            if before < STOP_AFTER:
                raise NotYet(f"the loop finished {before} steps in {START_WAIT} s, where {STOP_AFTER} take under a "
                             "second")  # fmt: skip
            os.kill(child.pid, signal.SIGTERM)
            signalled = True
            child.join(EXIT_WAIT)
        finally:
            os.environ.pop("COURSE_STEPS_DONE", None)
            running = child.is_alive()
            if running:
                child.kill()
                child.join()
            if running and signalled:
                after = _steps_done(done)
                saved = "a checkpoint was written" if path.exists() else "no checkpoint"
                raise NotYet(f"the process was still running {EXIT_WAIT} s after SIGTERM (SIGTERM came after step "
                             f"{before}; step {after} had finished; {saved}): save, then sys.exit(75)")  # fmt: skip
        code = child.exitcode
        if code == -signal.SIGTERM:
            return "SIGTERM ended the process as by default: install a handler with signal.signal(signal.SIGTERM, ...)"
        if not path.exists():
            return f"no checkpoint at path (exit {code}): after the step under way, save before exiting"
        targets = saves.read_text().split() if saves.exists() else []
        if str(path) in targets:
            return "torch.save wrote straight onto path: a kill mid-save leaves it cut short; use save_checkpoint"
        leftovers = [p.name for p in Path(folder).iterdir() if p.name not in ("stop.pt", "saves.txt", "done.txt")]
        if leftovers:
            return f"files left beside the checkpoint: {leftovers}"
        try:
            state = load_checkpoint(path, map_location="cpu")
        except CorruptCheckpointError as err:
            return f"the checkpoint cannot be loaded: {str(err).splitlines()[0]}"
        if not isinstance(state, dict) or not {"step", "model", "optimizer"} <= state.keys():
            return "save a dict with the keys step, model and optimizer"
        finished = _steps_done(done)
        if state["step"] != finished:
            return f"the checkpoint says step {state['step']}, but step {finished} had finished: save after the step"
        receive, send = context.Pipe(duplex=False)
        helper = context.Process(target=_weights_in_child, args=(finished, send))
        helper.start()  # computed in another process, as the learner's loop was
        expected = {k: torch.tensor(v) for k, v in receive.recv().items()} if receive.poll(60) else {}
        helper.join(10)
        if helper.is_alive():
            helper.kill()
            helper.join()
        if state["model"].keys() != expected.keys() or not all(
            torch.equal(state["model"][k], expected[k]) for k in expected
        ):
            return f"the saved weights are not those after step {finished}"
        if code != STOPPED:
            return f"the process exited with {code}; exit with {STOPPED} (stopped, resume me) so the job is requeued"
    return None
