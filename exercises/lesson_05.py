"""Lesson 05's exercise checkers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from exercises.core import Recorder, exercise, learner_code
from helpers.placement import same_device


@exercise("05_count_correct", "count correct predictions", function=True)
def check_count_correct(count_correct: Callable[[torch.Tensor, torch.Tensor], Any] | None) -> str | None:
    """``count_correct(logits, y)`` returns how many rows' highest score is at the true class, as an int."""
    logits = torch.tensor([[0.1, 2.0, -1.0], [3.0, 0.0, 0.5], [0.2, 0.1, 0.9], [1.0, 4.0, 2.0]])  # (4, 3)
    y = torch.tensor([1, 2, 2, 0])  # rows 0 and 2 are right
    got = count_correct(logits, y)
    if isinstance(got, torch.Tensor):
        return "it returns a tensor; call .item() to get a Python number for logging"
    if not isinstance(got, int) or isinstance(got, bool):
        return f"expected an int, got {type(got).__name__}"
    if got != 2:
        return f"got {got} on a case with 2 right out of 4; compare logits.argmax(dim=1) with y"
    return None


@exercise("05_predict_proba", "predict probabilities", function=True)
def check_predict_proba(
    predict_proba: Callable[[torch.nn.Module, torch.Tensor], Any] | None, device: torch.device
) -> str | None:
    """Class probabilities in eval mode, without a graph, on the CPU, leaving the model's mode as it was."""
    nn = torch.nn
    with torch.random.fork_rng(devices=[]):  # a fixed test case that leaves the lesson's random state alone
        torch.random.default_generator.manual_seed(0)
        model = nn.Sequential(nn.Flatten(), nn.Linear(16, 8), nn.Dropout(0.5), nn.Linear(8, 3)).to(device)
        X = torch.randn(5, 1, 4, 4).to(device)  # (B, C, H, W)
    model.eval()
    with torch.no_grad():
        expected = model(X).softmax(dim=1).cpu()
    model.train()
    got = predict_proba(model, X)
    if not isinstance(got, torch.Tensor):
        return f"expected a tensor, got {type(got).__name__}"
    if got.requires_grad:
        return "the result carries a graph (requires_grad=True): use torch.no_grad()"
    if got.device.type != "cpu":
        return f"the result is on {got.device}; bring it back with .cpu()"
    if tuple(got.shape) != (5, 3):
        return f"shape {tuple(got.shape)}, expected (5, 3): one row of probabilities per image"
    if not torch.allclose(got, expected, atol=1e-5):
        if torch.allclose(got.sum(dim=1), torch.ones(5), atol=1e-4):
            return "rows sum to 1 but differ from eval mode's: call model.eval() (dropout is on)"
        return "these are not probabilities per row: apply softmax over dim=1 to the logits"
    if not model.training:
        return "the model was left in eval mode; restore it with model.train(was_training)"
    return None


def _resident_generator(where: torch.device, seed: int) -> torch.Generator:
    """A generator on ``where`` (a CPU one for the meta device, which has none), seeded."""
    return torch.Generator(device="cpu" if where.type == "meta" else where).manual_seed(seed)


@exercise("05_resident_batches", "one epoch of device-resident batches", function=True)
def check_resident_batches(epoch_batches: Callable | None, device: torch.device) -> str | None:
    """``epoch_batches(X, y, batch_size, generator)`` returns one shuffled epoch of ``(X, y)`` batches, cut from
    ``torch.randperm(len(y), device=X.device, generator=generator)``: every sample once, the same batches as that
    permutation gives. Run on ``device`` (values checked), then on the GPU, or without one on the meta device, where
    a permutation made on the CPU (then used or copied over) is recorded and refused."""
    from helpers.placement import gpu_or_meta

    n, batch_size, seed = 10, 4, 7
    randperm = "torch.randperm(len(y), device=X.device, generator=generator)"
    for where in (torch.device(device), gpu_or_meta(device)):
        X = torch.arange(2 * n, dtype=torch.float32, device=where).view(n, 2)  # (N, 2): row i holds 2i and 2i+1
        y = torch.arange(n, device=where)  # (N,): sample i has label i, so a batch says which samples it holds
        recorder, fix = Recorder(), f"; make the permutation with {randperm}"
        with torch.random.fork_rng(devices=[]), recorder, learner_code(f"with X on {where} it raised ", fix):
            batches = [tuple(b) for b in epoch_batches(X, y, batch_size, _resident_generator(where, seed))]
        on_cpu = [func for func, device_type, numel in recorder.made if device_type == "cpu" and numel == n]
        if where.type != "cpu" and on_cpu:
            return (
                f"with X on {where}, {on_cpu[0]} made a tensor of {n} elements on the CPU: build the permutation "
                f"where the data is, {randperm}"
            )
        if not all(len(b) == 2 and all(isinstance(t, torch.Tensor) for t in b) for b in batches):
            return "each batch should be a pair of tensors (X_batch, y_batch)"
        if elsewhere := sorted({str(t.device) for b in batches for t in b if not same_device(t.device, where)}):
            return f"with X on {where} some batches are on {', '.join(elsewhere)}"
        sizes = [len(b[1]) for b in batches]
        if where.type == "meta":
            if sizes != [len(c) for c in torch.arange(n).split(batch_size)]:
                return f"{n} samples in batches of {batch_size} gave batch sizes {sizes}"
            continue
        labels = torch.cat([b[1] for b in batches]).cpu() if batches else torch.zeros(0, dtype=torch.long)
        counts = torch.bincount(labels, minlength=n)
        if not bool((counts == 1).all()):
            missing, repeated = int((counts == 0).sum()), int((counts > 1).sum())
            return f"of {n} samples, {missing} are missing and {repeated} repeated: an epoch holds each once"
        if any(not torch.equal(bx.cpu(), 2 * by.cpu()[:, None] + torch.tensor([0.0, 1.0])) for bx, by in batches):
            return "the images and labels of a batch do not belong together: index both alike"
        order = torch.randperm(n, device=where, generator=_resident_generator(where, seed)).cpu()
        if sizes != [len(c) for c in order.split(batch_size)] or not torch.equal(labels, order):
            return (
                f"batches of sizes {sizes} in another order than the permutation would give: cut {randperm} "
                "into slices of batch_size, in order"
            )
    return None


def _best_change_name(best_change: Any, results: list, task: str) -> str:
    from lessons import lesson_05

    return f"the change that paid most ({lesson_05.TASK_TITLES[task]})"


@exercise("05_best_change", _best_change_name)
def check_best_change(best_change: str | None, results: list, task: str = "cnn") -> str | None:
    """The pipeline (a name in ``lesson_05.PIPELINES``) whose one change raised ``task``'s images per second most
    against the row it changes from, in this run's ``results``."""
    from helpers.text import ratio_text
    from lessons import lesson_05

    ratios = {p: c.speedup for (p, t), c in lesson_05.row_comparisons(results).items() if t == task}
    if best_change not in ratios:
        return f"answer with the pipeline name of a row that changes one thing: one of {', '.join(map(repr, ratios))}"
    best = max(ratios, key=ratios.__getitem__)
    if best_change != best:
        got, top = ratio_text(ratios[best_change]), ratio_text(ratios[best])
        return f"{best_change!r} gained {got} over its row; another row gained more ({top})"
    return None
