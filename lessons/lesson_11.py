"""Lesson 11: a time-to-accuracy speedrun. A ladder of training recipes, each changing one thing, each timed to a
target test accuracy over several seeds and kept only when it is faster beyond the noise.

The measure (``time_to_accuracy``): training time on a synchronised clock, from the first step to the step after
which the test accuracy first reaches the target; evaluation is timed apart and left out of it; a first-call
warm-up is timed apart and shown as its own column. The clock and the synchronisation are arguments, so the tests
drive the measure with a fake clock and a fake model.

Run the ladder outside Jupyter with ``python -m lessons.lesson_11 --help``.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import datetime
import json
import math
import os
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from helpers import arguments, devices
from helpers.models import MLP
from helpers.readings import KEPT, NO_CLEAR_DIFFERENCE, SLOWER, keep_verdict
from helpers.text import format_rows, format_seconds
from helpers.timing import time_on_device

# The two networks the speedrun trains, its own: the examples CNN and a faster conv-BatchNorm net.


class ExamplesNet(nn.Module):
    """The CNN of pytorch/examples mnist/main.py: two 3x3 convolutions (32, 64), max pooling, dropout, 9216->128->10.

    ``width`` scales the channels and the hidden layer (quick mode uses a quarter of them).
    """

    def __init__(self, width: float = 1.0, num_classes: int = 10) -> None:
        super().__init__()
        c1, c2, hidden = max(1, round(32 * width)), max(1, round(64 * width)), max(1, round(128 * width))
        self.conv1 = nn.Conv2d(1, c1, 3, 1)
        self.conv2 = nn.Conv2d(c1, c2, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(c2 * 12 * 12, hidden)
        self.fc2 = nn.Linear(hidden, num_classes)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        X = F.relu(self.conv1(X))  # (B, 1, 28, 28) -> (B, c1, 26, 26)
        X = F.max_pool2d(F.relu(self.conv2(X)), 2)  # -> (B, c2, 24, 24) -> (B, c2, 12, 12)
        X = F.relu(self.fc1(self.dropout1(X).flatten(1)))  # -> (B, hidden)
        return self.fc2(self.dropout2(X))  # -> (B, 10); cross_entropy takes the scores (the example's log_softmax)


class ConvBNNet(nn.Module):
    """Three conv-BatchNorm-ReLU blocks, each followed by 2x2 max pooling, then a global max and a linear layer."""

    def __init__(self, widths: Sequence[int] = (64, 128, 256), num_classes: int = 10) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        cin = 1
        for w in widths:
            layers += [
                nn.Conv2d(cin, w, 3, padding=1, bias=False),
                nn.BatchNorm2d(w),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(2),
            ]
            cin = w
        self.features = nn.Sequential(*layers)  # (B, 1, 28, 28) -> (B, w3, 3, 3)
        self.head = nn.Linear(cin, num_classes)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(X).amax(dim=(2, 3)))  # (B, w3, 3, 3) -> (B, w3) -> (B, 10)


@dataclass(frozen=True)
class DatasetPlan:
    """What a speedrun on one dataset aims for, and which augmentations keep its labels true."""

    target: float
    """The test accuracy a full run is timed to."""
    quick_target: float
    """The same for quick mode's small subset and small models."""
    stretch: float | None
    """A harder target for records (``--target``), or None."""
    mirror_keeps_label: bool
    """Whether an image mirrored left-right still shows its class: a mirrored shirt is a shirt, a mirrored 2 is no
    digit at all. The flip rungs run only where it does."""


DATASETS = {
    "FashionMNIST": DatasetPlan(target=0.88, quick_target=0.60, stretch=0.94, mirror_keeps_label=True),
    "MNIST": DatasetPlan(target=0.99, quick_target=0.80, stretch=None, mirror_keeps_label=False),
}
"""Each dataset's targets: on MNIST every rung passes 88% at its first evaluation, so MNIST speedruns aim for 99%."""


def default_target(dataset: str, quick: bool) -> float:
    """The target of ``dataset`` (a name ``helpers.data.canonical_name`` accepts) for a full run or quick mode."""
    from helpers.data import canonical_name

    plan = DATASETS[canonical_name(dataset)]
    return plan.quick_target if quick else plan.target


QUICK_RUNS = 2
QUICK_EPOCHS = 2
"""Quick mode multiplies every recipe's epoch budget by this: its subset gives 8 steps an epoch at batch 512, too few
for a one-cycle schedule to reach the quick target within the full ladder's budget."""
SKIPPED = "skipped"

# ---------------------------------------------------------------------------------------------------------------------
# The measure


@dataclass(frozen=True)
class Attempt:
    """One training run timed to a target accuracy."""

    reached: bool
    train_s: float
    """Training seconds up to the evaluation that first reached the target (or to the end of the budget)."""
    warmup_s: float
    """The untimed-for-the-record first calls, measured apart: never part of ``train_s``."""
    eval_s: float
    """Seconds spent evaluating, excluded from ``train_s``."""
    steps: int
    accuracy: float
    """Test accuracy at the last evaluation."""
    history: list[tuple[float, float]] = field(default_factory=list)
    """(training seconds so far, test accuracy) after each evaluation."""


def time_to_accuracy(
    steps: Iterator[Any],
    evaluate: Callable[[], float],
    target: float,
    eval_every: int,
    max_steps: int,
    warmup: Callable[[], None] | None = None,
    sync: Callable[[], None] = lambda: None,
    clock: Callable[[], float] = time.perf_counter,
) -> Attempt:
    """Train by pulling ``next(steps)`` (one training step each) until ``evaluate()`` reaches ``target``.

    The clock is read only right after ``sync()``, so work the device has queued is counted where it was queued.
    ``warmup()`` runs first, timed on its own. Every ``eval_every`` steps (and at the end) the training clock stops,
    ``evaluate()`` runs on its own clock, and the run ends as soon as the accuracy is at least ``target``.
    """
    if eval_every < 1 or max_steps < 1:
        raise ValueError(f"need eval_every >= 1 and max_steps >= 1, got {eval_every} and {max_steps}.")

    def timed(work: Callable[[], Any]) -> tuple[float, Any]:
        sync()  # queued work from before must not be counted here
        start = clock()
        result = work()
        sync()  # and this work must be finished before the clock is read
        return clock() - start, result

    warmup_s = timed(warmup)[0] if warmup is not None else 0.0
    train_s = eval_s = 0.0
    done, accuracy, history = 0, float("nan"), []

    def chunk() -> int:
        n = 0
        for _ in range(min(eval_every, max_steps - done)):
            if next(steps, StopIteration) is StopIteration:
                break
            n += 1
        return n

    while done < max_steps:
        seconds, n = timed(chunk)
        train_s += seconds
        done += n
        seconds, accuracy = timed(evaluate)
        eval_s += seconds
        history.append((train_s, float(accuracy)))
        if accuracy >= target:
            return Attempt(True, train_s, warmup_s, eval_s, done, float(accuracy), history)
        if n == 0:
            break  # the steps ran out before the budget
    return Attempt(False, train_s, warmup_s, eval_s, done, float(accuracy), history)


def mean_and_range(values: Sequence[float]) -> str:
    """'12.3 s (11.9-12.8)' for times; the range is the spread of the seeds."""
    finite = [v for v in values if math.isfinite(v)]
    if len(finite) < len(values):
        return f"missed in {len(values) - len(finite)} of {len(values)}"
    mean = statistics.fmean(finite)
    if len(finite) == 1:
        return format_seconds(mean)
    return f"{format_seconds(mean)} ({format_seconds(min(finite))}-{format_seconds(max(finite))})"


# ---------------------------------------------------------------------------------------------------------------------
# The models


def sized_network(device: torch.device, quick: bool) -> nn.Module:
    """What the network rung trains on ``device``: wide convolutions on a CUDA GPU, which has arithmetic to spare; on a
    CPU, where a small convolution uses its few cores poorly, a one-hidden-layer net of matrix products. Quick mode's
    tiny subset gets a small ConvBNNet everywhere."""
    if quick:
        return ConvBNNet((8, 16, 32))
    if device.type == "cuda":
        return ConvBNNet((64, 128, 256))
    if device.type == "cpu":
        return MLP(512)
    return ConvBNNet((16, 32, 64))


def sized_epochs(device: torch.device, quick: bool) -> int:
    """The epoch budget planned with the sized network: a CPU's dense net needs more epochs, each far cheaper."""
    return 8 if device.type == "cpu" and not quick else 3


def one_cycle_plan(device: torch.device, quick: bool) -> dict[str, Any]:
    """The one-cycle rung's change: SGD with a one-cycle schedule, and a bigger batch. 512 where a step's fixed cost
    dominates (a GPU: lesson 08's launch-bound steps); on a CPU, whose step time grows with the batch and whose dense
    net needs many updates, 128. Its epoch budget is set when it runs, from the kept rung (``epochs_for_steps``)."""
    size = 128 if device.type == "cpu" and not quick else 512
    return {"batch_size": size, "optimizer": "SGD+OneCycle"}


def epochs_for_steps(steps: int, batch: int, train_size: int, quick: bool) -> int:
    """The fewest epochs of ``train_size`` images in batches of ``batch`` that give at least ``steps`` steps, counting
    quick mode's ``QUICK_EPOCHS`` (``run_recipe`` multiplies the budget by it).

    The one-cycle rung's budget: as many steps as the kept rung took to reach the target in its slowest seed (its
    whole budget where it missed), each on a bigger batch. A one-cycle schedule anneals the learning rate over the
    whole budget and is least accurate while the rate is high, so a budget far shorter than that ends below the
    target; the run stops as soon as the target is reached, so a longer one costs only the steps actually taken."""
    if steps < 1 or batch < 1 or train_size < 1:
        raise ValueError(f"need steps, batch and train_size of at least 1, got {steps}, {batch} and {train_size}.")
    per_epoch = math.ceil(train_size / batch) * (QUICK_EPOCHS if quick else 1)
    return math.ceil(steps / per_epoch)


# ---------------------------------------------------------------------------------------------------------------------
# The recipes


@dataclass(frozen=True)
class SpeedrunRecipe:
    """Everything a rung trains with. Each rung of the ladder is the last kept recipe with one field changed."""

    loader: str = "DataLoader"  # "DataLoader" (ToTensor/Normalize per sample, .to(device) per batch) or "resident"
    batch_size: int = 64
    optimizer: str = "Adadelta+StepLR"  # the example's; or "SGD+OneCycle" (Nesterov momentum, one-cycle schedule)
    model: str = "examples"  # or "sized" (``sized_network``: chosen for the device)
    mixed_precision: bool = False
    """Autocast to the 16-bit type ``devices.autocast_dtype`` picks for the device (a GradScaler with float16), and
    channels_last."""
    fused: bool = False
    flips: bool = False
    label_smoothing: float = 0.0
    test_flips: bool = False
    epochs: int = 3
    """Budget: the schedule's length; the run stops earlier once the target is reached."""


@dataclass(frozen=True)
class Rung:
    name: str
    change: dict[str, Any]
    mechanism: str
    """Why the change could pay: the lesson it comes from."""
    epochs_from_kept: bool = False
    """The epoch budget is set when the rung runs: ``epochs_for_steps`` of the kept rung's steps to the target."""

    def describe(self) -> str:
        """What the rung changes, for a listing of the ladder."""
        if not self.change:
            return "nothing: the baseline"
        budget = "; epochs: as many steps as the kept rung's slowest seed took" if self.epochs_from_kept else ""
        return f"{self.change}{budget}"


def _rung_dtype(device: torch.device) -> torch.dtype | None:
    """The type the mixed-precision rung autocasts to on ``device``: it runs on CUDA GPUs only, so None elsewhere."""
    return devices.autocast_dtype(device) if device.type == "cuda" else None


def precision_name(device: torch.device) -> str:
    """How the mixed-precision rung is named on ``device``: the type it autocasts to there (on a CUDA GPU)."""
    dtype = _rung_dtype(device)
    short = {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype, "16-bit")
    return f"{short} autocast{' + GradScaler' if devices.needs_grad_scaler(dtype) else ''} + channels_last"


def precision_mechanism(device: torch.device) -> str:
    """Why the mixed-precision rung could pay, for the type it uses on ``device``."""
    dtype = _rung_dtype(device)
    cores = "on tensor cores where the GPU has them; it pays where the kernels take the time"
    if dtype is torch.float16:
        return f"lesson 09: fp16 matrix products and convolutions, the GradScaler guarding fp16's narrow range, {cores}"
    if dtype is torch.bfloat16:
        return f"lesson 09: bf16 matrix products and convolutions, float32's range so no scaler, {cores}"
    return f"lesson 09: 16-bit matrix products and convolutions, {cores}"


def ladder(device: torch.device, quick: bool, data_first: bool = False) -> list[Rung]:
    """The rungs, in order. The sized network and its budget, the one-cycle rung's batch and the precision rung's
    16-bit type depend on the device; the one-cycle rung's epochs on the kept rung (``epochs_for_steps``).

    A rung can pay only where the step spends its time, so the order of the first two is measured, not assumed
    (``measure_loader_share``, ``LoaderShare.data_first``): where the baseline's DataLoader takes most of each step,
    the data goes on the device first, since a different network cannot show what it costs or saves while every step
    waits for the loader; otherwise the network comes first, since feeding a step the network dominates faster hardly
    shows until a cheaper network has taken its place."""
    network = (
        "network sized for the device",
        {"model": "sized", "epochs": sized_epochs(device, quick)},
        "lesson 09: arithmetic shaped for the hardware: wide conv-BatchNorm layers where a GPU has arithmetic "
        "to spare, dense matrix products where a CPU has little",
    )
    data = (
        "data on the device",
        {"loader": "resident"},
        "lesson 05: no per-sample Python work and no copy per batch; the images are converted once. It pays "
        "when feeding the data, not the network, limits the step",
    )
    first, second = (data, network) if data_first else (network, data)
    return [
        Rung("0 pytorch/examples loop", {}, "the baseline: the loop of pytorch/examples mnist/main.py"),
        Rung(f"1 {first[0]}", *first[1:]),
        Rung(f"2 {second[0]}", *second[1:]),
        Rung(
            "3 bigger batch + one-cycle",
            one_cycle_plan(device, quick),
            "lessons 05 and 08: a step's fixed cost is paid less often; the one-cycle schedule lets the larger "
            "batch train with a high learning rate, over as many steps as the kept rung needed",
            epochs_from_kept=True,
        ),
        Rung(f"4 {precision_name(device)}", {"mixed_precision": True}, precision_mechanism(device)),
        Rung(
            "5 fused optimizer", {"fused": True}, "lesson 08: one kernel for the whole update instead of one per tensor"
        ),
        Rung(
            "6 random flips on the device",
            {"flips": True},
            "augmentation made on the device: more varied images for no copy",
        ),
        Rung("7 label smoothing", {"label_smoothing": 0.1}, "softer targets that keep the net from over-confidence"),
        Rung(
            "8 test-time flips",
            {"test_flips": True},
            "average the scores of each test image and its mirror; costs evaluation time only",
        ),
    ]


def skip_reason(recipe: SpeedrunRecipe, device: torch.device, dataset: str | None = None) -> str | None:
    """Why ``recipe`` cannot run on ``device`` with ``dataset`` (None if it can)."""
    if (recipe.flips or recipe.test_flips) and dataset in DATASETS and not DATASETS[dataset].mirror_keeps_label:
        return (
            f"a mirrored image is not always of its class on {dataset} (a mirrored 2, 3 or 7 is not that digit), "
            "so flips would train on wrong labels"
        )
    if recipe.mixed_precision and device.type != "cuda":
        return f"mixed precision is tried on CUDA GPUs only; on {device.type} lesson 09 measures autocast instead"
    if recipe.fused and recipe.optimizer != "SGD+OneCycle":
        return (
            f"the fused update is tried with SGD, and the kept recipe trains with {recipe.optimizer.split('+')[0]} "
            "(the one-cycle rung was not kept)"
        )
    if recipe.test_flips and not recipe.flips:
        return (
            "the random-flips rung was not kept, so the kept recipe never trained on mirrored images, and "
            "averaging in the scores of mirrored test images would score the model on images unlike any it learnt "
            "from"
        )
    if recipe.fused:
        try:
            torch.optim.SGD([torch.zeros(1, device=device, requires_grad=True)], lr=0.1, fused=True)
        except (RuntimeError, TypeError, ValueError) as exc:
            return f"this PyTorch has no fused SGD on {device.type}: {str(exc).splitlines()[0]}"
    return None


def model_for_recipe(recipe: SpeedrunRecipe, device: torch.device, quick: bool) -> nn.Module:
    """A fresh model for ``recipe`` on ``device`` (channels_last when the recipe says so)."""
    model = ExamplesNet(width=0.25 if quick else 1.0) if recipe.model == "examples" else sized_network(device, quick)
    model = model.to(device)
    return model.to(memory_format=torch.channels_last) if recipe.mixed_precision else model


def recipe_autocast_dtype(recipe: SpeedrunRecipe, device: torch.device) -> torch.dtype | None:
    """The type ``recipe`` autocasts to on ``device``: None without mixed precision (or where autocast cannot run);
    otherwise ``devices.autocast_dtype``: on CUDA, fp16 below compute capability 8.0 and bf16 from 8.0."""
    return devices.autocast_dtype(device) if recipe.mixed_precision else None


def grad_scaler(dtype: torch.dtype | None, device: torch.device) -> torch.amp.GradScaler | None:
    """A GradScaler where training under ``dtype`` needs one (fp16), else None."""
    return torch.amp.GradScaler(device.type) if devices.needs_grad_scaler(dtype) else None


def build_optimizer(recipe: SpeedrunRecipe, model: nn.Module, total_steps: int):
    """The optimizer and the per-step learning-rate schedule of ``recipe``."""
    if recipe.optimizer == "Adadelta+StepLR":  # the example's: lr 1.0, decayed 0.7x per epoch
        opt = torch.optim.Adadelta(model.parameters(), lr=1.0)
        per_epoch = max(1, total_steps // max(1, recipe.epochs))
        return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 0.7 ** (step // per_epoch))
    extra = {"fused": True} if recipe.fused else {}
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4, **extra)
    return opt, torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.05, total_steps=total_steps, pct_start=0.25)


def mirror_half(X: torch.Tensor) -> torch.Tensor:
    """A random half of the batch (B, C, H, W) mirrored left-right, the choice made on the batch's device."""
    flip = torch.rand(X.shape[0], device=X.device) < 0.5
    return torch.where(flip[:, None, None, None], X.flip(3), X)


def train_step(
    recipe: SpeedrunRecipe,
    model: nn.Module,
    X: torch.Tensor,
    y: torch.Tensor,
    opt: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler | None,
    dtype: torch.dtype | None,
) -> None:
    """One training step of ``recipe`` on a batch (X, y) already on the model's device. The timed steps and the
    warm-up both call it, so the warm-up loads every kernel the timed steps launch; lesson 11 prints it."""
    if recipe.flips:  # rung 6: mirror a random half of the batch, chosen on the device (exercise 4)
        X = mirror_half(X)
    if recipe.mixed_precision:  # rung 4: the memory layout that 16-bit convolution kernels read
        X = X.contiguous(memory_format=torch.channels_last)
    with torch.autocast(X.device.type, dtype=dtype, enabled=dtype is not None):  # None: float32 throughout
        loss = F.cross_entropy(model(X), y, label_smoothing=recipe.label_smoothing)  # rung 7 sets the smoothing
    opt.zero_grad(set_to_none=True)
    if scaler is None:  # float32 or bfloat16
        loss.backward()
        opt.step()
    else:  # float16: the scaled loss keeps small gradients from rounding to zero; an overflowed step is skipped
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()


def schedule_step(schedule: torch.optim.lr_scheduler.LRScheduler, scaler: torch.amp.GradScaler | None) -> None:
    """Advance the learning-rate schedule by one step. A step the scaler skipped leaves the schedule a step ahead, as
    PyTorch's AMP recipe does; its warning about the order of the calls is expected there and silenced."""
    if scaler is None:
        schedule.step()
        return
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler\.step\(\)`")
        schedule.step()


@dataclass
class Data:
    """The train and test sets of one run, as torchvision datasets (or Subsets of them), and the dataset's name."""

    train: Any
    test: Any
    name: str | None = None
    """``"MNIST"`` or ``"FashionMNIST"``: which rungs suit the data (``skip_reason``); None when unknown."""


def batch_size(recipe: SpeedrunRecipe, train_size: int) -> int:
    """The recipe's batch size, capped so that an epoch has at least 8 steps (quick mode's small subset)."""
    return max(1, min(recipe.batch_size, train_size // 8))


def training_steps(
    recipe: SpeedrunRecipe, model: nn.Module, data: Data, device: torch.device, seed: int
) -> tuple[Iterator[None], int]:
    """An iterator that performs one ``train_step`` per ``next()``, and its total number of steps."""
    size = batch_size(recipe, len(data.train))
    from torch.utils.data import DataLoader

    from helpers.transfer import DeviceResidentLoader

    if recipe.loader == "resident":
        loader = DeviceResidentLoader.from_dataset(data.train, device, size, shuffle=True, seed=seed)
    else:
        generator = torch.Generator().manual_seed(seed)
        loader = DataLoader(data.train, batch_size=size, shuffle=True, generator=generator)
    total = recipe.epochs * len(loader)
    opt, schedule = build_optimizer(recipe, model, total)
    dtype = recipe_autocast_dtype(recipe, device)
    scaler = grad_scaler(dtype, device)

    def steps() -> Iterator[None]:
        model.train()
        for _ in range(recipe.epochs):
            for X, y in loader:
                X, y = X.to(device), y.to(device)  # a no-op for device-resident batches
                train_step(recipe, model, X, y, opt, scaler, dtype)
                schedule_step(schedule, scaler)
                yield None

    return steps(), total


def evaluator(recipe: SpeedrunRecipe, model: nn.Module, data: Data, device: torch.device) -> Callable[[], float]:
    """Test accuracy of ``model`` (with mirrored copies averaged in when the recipe says so)."""
    from helpers.transfer import DeviceResidentLoader

    test = DeviceResidentLoader.from_dataset(data.test, device, batch_size=1000, shuffle=False)
    dtype = recipe_autocast_dtype(recipe, device)
    amp = torch.autocast(device.type, dtype=dtype, enabled=dtype is not None)

    def evaluate() -> float:
        model.eval()
        correct = torch.zeros((), device=device, dtype=torch.long)
        with torch.inference_mode(), amp:
            for X, y in test:
                scores = model(X).float()
                if recipe.test_flips:
                    scores = scores + model(X.flip(3)).float()
                correct += (scores.argmax(1) == y).sum()
        model.train()
        return correct.item() / len(test.labels)

    return evaluate


def warmup_call(
    recipe: SpeedrunRecipe, model: nn.Module, device: torch.device, batch: int, calls: int = 2
) -> Callable[[], None]:
    """First calls of the recipe's ``train_step`` (with its schedule) on a throwaway copy of the model, so one-off
    costs are paid and timed apart."""

    def warmup() -> None:
        twin = copy.deepcopy(model)
        opt, schedule = build_optimizer(recipe, twin, total_steps=calls)
        X = torch.randn(batch, 1, 28, 28, device=device)
        y = torch.randint(0, 10, (batch,), device=device)
        dtype = recipe_autocast_dtype(recipe, device)
        scaler = grad_scaler(dtype, device)
        for _ in range(calls):
            train_step(recipe, twin, X, y, opt, scaler, dtype)
            schedule_step(schedule, scaler)

    return warmup


def run_recipe(
    recipe: SpeedrunRecipe,
    data: Data,
    device: torch.device,
    target: float,
    seed: int,
    quick: bool,
    evals_per_epoch: int = 4,
) -> Attempt:
    """Train ``recipe`` once from ``seed`` with ``train_step`` and time it to ``target`` test accuracy
    (``QUICK_EPOCHS`` x the budget in quick mode)."""
    if quick:
        recipe = dataclasses.replace(recipe, epochs=recipe.epochs * QUICK_EPOCHS)
    torch.manual_seed(seed)
    model = model_for_recipe(recipe, device, quick)
    steps, total = training_steps(recipe, model, data, device, seed)
    eval_every = max(1, math.ceil(total / recipe.epochs / evals_per_epoch))
    warmup = warmup_call(recipe, model, device, batch_size(recipe, len(data.train)))
    return time_to_accuracy(
        steps,
        evaluator(recipe, model, data, device),
        target,
        eval_every,
        total,
        warmup=warmup,
        sync=lambda: devices.synchronize(device),
    )


# ---------------------------------------------------------------------------------------------------------------------
# The order of the first two rungs

DATA_FIRST_SHARE = 0.5
"""The data rung comes first when making and copying a batch takes more than this share of the baseline's step: most
of it, the line lesson 05's benchmark draws for "feeding the data is still most of the step"."""


@dataclass(frozen=True)
class LoaderShare:
    """The baseline's step in two parts (medians of repeats): making a batch with its DataLoader and copying it to the
    device, then the training step on a batch already there."""

    feed_s: float
    step_s: float

    @property
    def share(self) -> float:
        """The loader's share of the step: feed / (feed + step)."""
        total = self.feed_s + self.step_s
        return self.feed_s / total if total > 0 else 0.0

    @property
    def data_first(self) -> bool:
        """Whether the data rung comes before the network rung: the loader takes most of the step."""
        return self.share > DATA_FIRST_SHARE

    def line(self) -> str:
        """The measured split and the order it implies, in one sentence."""
        split = (
            f"The baseline's step: making a batch with the DataLoader and copying it to the device "
            f"{format_seconds(self.feed_s)}, the training step on a batch already there "
            f"{format_seconds(self.step_s)}. The loader takes {self.share:.0%} of the step"
        )
        if self.data_first:
            return (
                f"{split}, more than {DATA_FIRST_SHARE:.0%}: data on the device comes first (rung 1), because "
                "while every step waits for the loader a different network cannot show what it costs or saves; "
                "the network sized for the device comes after it (rung 2)."
            )
        return (
            f"{split}, at most {DATA_FIRST_SHARE:.0%}: the network sized for the device comes first (rung 1), "
            f"because feeding the data faster can save at most that {self.share:.0%} while the network takes the "
            "rest; data on the device comes after it (rung 2)."
        )


def measure_loader_share(
    data: Data, device: torch.device, quick: bool, repeats: int = 10, seed: int = 0
) -> LoaderShare:
    """Time the baseline recipe's step in two parts on ``device`` (``timing.time_on_device``: medians of ``repeats``
    after a warm-up, as lesson 05 splits a step): its DataLoader making one batch and the copy of it to the device,
    then one ``train_step`` of a fresh baseline model on a batch already on the device."""
    from torch.utils.data import DataLoader

    recipe = SpeedrunRecipe()
    torch.manual_seed(seed)
    model = model_for_recipe(recipe, device, quick)
    opt, _ = build_optimizer(recipe, model, total_steps=1)
    loader = DataLoader(
        data.train,
        batch_size=batch_size(recipe, len(data.train)),
        shuffle=True,
        generator=torch.Generator().manual_seed(seed),
    )

    def endless() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        while True:
            yield from loader

    batches = endless()
    feed = time_on_device(lambda: [t.to(device) for t in next(batches)], device, repeats=repeats, warmup=2)
    X, y = (t.to(device) for t in next(batches))

    model.train()
    train = time_on_device(lambda: train_step(recipe, model, X, y, opt, None, None), device, repeats=repeats, warmup=2)
    return LoaderShare(feed.median, train.median)


# ---------------------------------------------------------------------------------------------------------------------
# The ladder


@dataclass
class RungResult:
    rung: Rung
    recipe: SpeedrunRecipe
    attempts: list[Attempt]
    verdict: str
    skipped: str | None = None
    compared_with: str | None = None

    @property
    def times(self) -> list[float]:
        """Time to target of each seed, ``inf`` where the target was missed."""
        return [a.train_s if a.reached else math.inf for a in self.attempts]

    def figures(self) -> dict[str, Any]:
        """Everything measured for this rung, for JSON."""
        return {
            "rung": self.rung.name,
            "change": self.rung.change,
            "verdict": self.verdict,
            "skipped": self.skipped,
            "compared_with": self.compared_with,
            "recipe": dataclasses.asdict(self.recipe),
            "runs": [dataclasses.asdict(a) for a in self.attempts],
        }


def climb(
    data: Data,
    device: torch.device,
    target: float,
    seeds: Sequence[int],
    quick: bool,
    rungs: Sequence[Rung] | None = None,
    run: Callable[..., Attempt] = run_recipe,
    progress: Callable[[str, int], None] = lambda name, runs: None,
) -> list[RungResult]:
    """Every rung for every seed, each built on the last kept recipe and kept only when it beats that recipe.

    ``run`` trains one seed and times it to the target (``run_recipe``); ``progress(rung name, runs)`` hears of
    every run done. Without ``rungs``, the ladder in its network-first order."""
    results: list[RungResult] = []
    kept: RungResult | None = None
    for rung in rungs if rungs is not None else ladder(device, quick):
        recipe = dataclasses.replace(kept.recipe if kept else SpeedrunRecipe(), **rung.change)  # one change
        if rung.epochs_from_kept and kept:  # the one-cycle rung: as many steps as the kept rung took
            recipe = budget_like(kept, recipe, len(data.train), quick)
        reason = skip_reason(recipe, device, getattr(data, "name", None))
        if reason:  # the device or the dataset cannot use this rung
            results.append(RungResult(rung, recipe, [], SKIPPED, skipped=reason))
            progress(rung.name, len(seeds))
            continue
        attempts = []
        for seed in seeds:
            attempts.append(run(recipe, data, device, target, seed, quick))
            progress(rung.name, 1)
        result = RungResult(rung, recipe, attempts, verdict="baseline")
        if kept is not None:  # every seed must beat every seed of the kept rung
            result.verdict = keep_verdict(kept.times, result.times)
            result.compared_with = kept.rung.name
        if kept is None or result.verdict == KEPT:
            kept = result
        results.append(result)
    return results


def budget_like(kept: RungResult, recipe: SpeedrunRecipe, train_size: int, quick: bool) -> SpeedrunRecipe:
    """``recipe`` with the fewest epochs that give it as many steps as ``kept`` took in its slowest seed
    (``epochs_for_steps``): the one-cycle rung's budget."""
    if not kept.attempts:
        return recipe
    steps = max(a.steps for a in kept.attempts)
    batch = batch_size(recipe, train_size)
    return dataclasses.replace(recipe, epochs=epochs_for_steps(steps, batch, train_size, quick))


def best(results: Sequence[RungResult]) -> RungResult:
    """The last kept rung (the baseline when nothing was kept)."""
    chosen = results[0]
    for r in results[1:]:
        if r.verdict == KEPT:
            chosen = r
    return chosen


def ladder_table(results: Sequence[RungResult], target: float) -> str:
    """The ladder as a text table: time to target (mean, min-max over seeds), one-time costs, accuracy, verdict."""
    rows: list[list[str]] = [["rung", f"time to {target:.0%}", "warm-up", "evaluation", "accuracy", "verdict"]]
    for r in results:
        if r.skipped:
            rows.append([r.rung.name, "-", "-", "-", "-", f"skipped: {r.skipped}"])
            continue
        acc = [a.accuracy for a in r.attempts]
        acc_text = f"{statistics.fmean(acc):.1%}" + (f" ({min(acc):.1%}-{max(acc):.1%})" if len(acc) > 1 else "")
        warm = statistics.fmean(a.warmup_s for a in r.attempts)
        ev = statistics.fmean(a.eval_s for a in r.attempts)
        rows.append(
            [r.rung.name, mean_and_range(r.times), format_seconds(warm), format_seconds(ev), acc_text, r.verdict]
        )
    return format_rows(rows, right=[1, 2, 3, 4])


def speedup_line(results: Sequence[RungResult], target: float) -> str:
    """How the last kept rung compares with rung 0, from the means of their times to target."""
    base, top = results[0], best(results)
    if top is base:
        return "No rung beat the baseline beyond the noise."
    if any(math.isinf(t) for t in base.times):
        return f"{top.rung.name} reached {target:.0%} in every run; the baseline did not within its budget."
    ratio = statistics.fmean(base.times) / statistics.fmean(top.times)
    return (
        f"{top.rung.name}: {ratio:.1f}x faster to {target:.0%} than {base.rung.name} "
        f"({format_seconds(statistics.fmean(base.times))} -> {format_seconds(statistics.fmean(top.times))}, "
        f"means over {len(top.times)} seeds)."
    )


def verdict_sentences(results: Sequence[RungResult]) -> list[str]:
    """One sentence per rung, generated from its measurements."""
    out = []
    for r in results[1:]:
        if r.skipped:
            out.append(f"{r.rung.name}: skipped ({r.skipped}).")
            continue
        before = next(x for x in results if x.rung.name == r.compared_with)
        figures = f"{mean_and_range(r.times)} against {mean_and_range(before.times)} for {before.rung.name}"
        if r.verdict == KEPT:
            text = "every run beat every run of the rung before, so it is kept"
        elif r.verdict == SLOWER:
            text = "every run was slower, so it is not kept"
        elif r.verdict == NO_CLEAR_DIFFERENCE:
            text = "the ranges overlap, so noise alone could explain the difference; not kept"
        else:
            text = "at least one run missed the target within the budget; not kept"
        out.append(f"{r.rung.name}: {figures}: {text}. ({r.rung.mechanism}.)")
    return out


def plot_ladder(results: Sequence[RungResult], target: float, ax=None):
    """Test accuracy against training time (log axis) for every rung that ran: one line per seed, the target dashed."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(9.0, 4.0), layout="constrained")
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, r in enumerate(x for x in results if not x.skipped):
        color = colors[i % len(colors)]
        for j, a in enumerate(r.attempts):
            xs, ys = zip(*a.history, strict=True) if a.history else ((), ())
            ax.plot(xs, ys, marker=".", color=color, alpha=0.8, label=r.rung.name if j == 0 else None)
    ax.axhline(target, color="black", linestyle="--", linewidth=1, label=f"target {target:.0%}")
    ax.set_xscale("log")
    ax.set_xlabel("training time (s, log scale; evaluation excluded)")
    ax.set_ylabel("test accuracy")
    ax.set_ylim(max(0.0, target - 0.25), 1.0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)  # outside: covers no line
    return ax


# ---------------------------------------------------------------------------------------------------------------------
# Data and the command line


def load_splits(dataset: str, quick: bool, verbose: bool = False) -> Data:
    """The dataset's train and test splits; quick mode keeps a fixed random 1,024 training and 256 test images."""
    from torch.utils.data import Subset

    from helpers.data import canonical_name, load_dataset

    train = load_dataset(dataset, train=True, verbose=verbose)
    test = load_dataset(dataset, train=False, verbose=verbose)
    if quick:
        g = torch.Generator().manual_seed(0)
        train = Subset(train, torch.randperm(len(train), generator=g)[:1024].tolist())
        test = Subset(test, torch.randperm(len(test), generator=g)[:256].tolist())
    return Data(train, test, canonical_name(dataset))


def hardware(device: torch.device) -> dict[str, Any]:
    """What the figures were measured on."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else (platform.processor() or platform.machine())
    return {
        "device": str(device),
        "device_name": name,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m lessons.lesson_11``: run the ladder, print the table, optionally write JSON."""
    from helpers.data import DatasetUnavailableError, canonical_name

    parser = argparse.ArgumentParser(prog="python -m lessons.lesson_11", description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="auto", help="auto (default), cpu, cuda, cuda:N or mps")
    defaults = "; ".join(
        f"{name} {plan.target:.0%}"
        + (f" (stretch {plan.stretch:.0%})" if plan.stretch else "")
        + f", quick mode {plan.quick_target:.0%}"
        for name, plan in DATASETS.items()
    )
    parser.add_argument(
        "--target",
        type=arguments.accuracy,
        default=None,
        help=f"test accuracy to reach: 0.88 or 88 (default: the dataset's own: {defaults})".replace("%", "%%"),
    )
    parser.add_argument("--runs", type=arguments.positive_int, default=3, help="seeds per rung (default 3)")
    parser.add_argument(
        "--dataset",
        type=arguments.argtype(canonical_name),
        default="FashionMNIST",
        help="FashionMNIST (default) or MNIST",
    )
    parser.add_argument("--quick", action="store_true", help="a small subset and small models: seconds on a CPU")
    parser.add_argument("--json", metavar="PATH", help="write the hardware, versions, date and every figure here")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    try:
        device = devices.pick_device(args.device)
    except (ValueError, devices.DeviceUnavailableError) as exc:
        parser.error(f"--device {args.device}: {exc}")
    dataset = args.dataset
    target = args.target if args.target is not None else default_target(dataset, args.quick)
    from helpers.training import progress_bar

    seeds = list(range(args.runs))
    # One bar from the start: it names what runs now (loading, timing rung 0's step, then each rung and seed) and is
    # drawn again as each run starts, so the first minutes of a full run on a CPU no longer sit at 0/N unexplained.
    bar = progress_bar(total=None, unit="run", file=sys.stderr, disable=args.no_progress)

    def now(what: str) -> None:
        bar.set_description(what)
        bar.refresh()  # also where the bar redraws sparsely (no terminal): once per run is cheap

    try:
        now(f"loading {dataset}")
        try:
            data = load_splits(dataset, args.quick)
        except DatasetUnavailableError as exc:
            bar.close()
            print(f"error: {exc}", file=sys.stderr)
            return 1
        now("timing rung 0's step")
        split = measure_loader_share(data, device, args.quick)
        bar.clear()
        print(split.line(), flush=True)
        rungs = ladder(device, args.quick, data_first=split.data_first)
        bar.total = len(rungs) * len(seeds)

        def run(
            recipe: SpeedrunRecipe, data: Data, device: torch.device, target: float, seed: int, quick: bool
        ) -> Attempt:
            rung = rungs[min(bar.n // len(seeds), len(rungs) - 1)]  # a skipped rung counts all its seeds at once
            now(f"{rung.name[:30]}, seed {seed}")
            return run_recipe(recipe, data, device, target, seed, quick)

        def tick(name: str, runs: int) -> None:
            bar.update(runs)

        results = climb(data, device, target, seeds, args.quick, rungs, run=run, progress=tick)
    finally:
        bar.close()
    print(
        f"{dataset} to {target:.0%} test accuracy on {device} ({hardware(device)['device_name']}), "
        f"{len(seeds)} seed(s) per rung{', quick mode' if args.quick else ''}"
    )
    print(ladder_table(results, target))
    print(speedup_line(results, target))
    if args.json:
        record = {
            "hardware": hardware(device),
            "dataset": dataset,
            "target": target,
            "quick": args.quick,
            "seeds": seeds,
            "loader_share": {**dataclasses.asdict(split), "share": split.share, "data_first": split.data_first},
            "rungs": [r.figures() for r in results],
            "summary": speedup_line(results, target),
        }
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1, default=str)
        print(f"wrote {args.json}")
    return 0


STOPPED = "Stopped by SIGINT before the ladder finished; nothing was written."
"""The one line ``python -m lessons.lesson_11`` ends with on Ctrl-C (exit status 130), as the course runner does."""


def stop_children() -> int:
    """End the processes this one started (multiprocessing's: DataLoader workers) and wait for them; how many."""
    import multiprocessing

    children = multiprocessing.active_children()
    for child in children:
        child.terminate()
    for child in children:
        child.join(5)
        if child.is_alive():
            child.kill()
            child.join()
    return len(children)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        stop_children()
        print(STOPPED, file=sys.stderr)
        sys.exit(130)
