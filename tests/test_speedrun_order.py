"""The speedrun's rules that read the run's own measurements: which of the network and the data rung comes first (the
loader's share of the baseline step), the one-cycle rung's budget (the kept rung's steps), and when test-time flips run
(only on a recipe trained with flips)."""

from __future__ import annotations

import math

import pytest
import torch
from speedrun_cli import run_faked

from lessons import lesson_11 as speedrun

CPU = torch.device("cpu")


# --- the order of the first two rungs -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("feed_s", "step_s", "share", "data_first"),
    [
        (7.0e-3, 0.5e-3, 0.933, True),  # a fast device behind a per-sample DataLoader: the loader is the step
        (5.0e-3, 45.0e-3, 0.10, False),  # a CPU on which the example's CNN takes most of the step
        (1.0, 1.0, 0.5, False),  # exactly half is not most of it
        (1.01, 1.0, 0.502, True),
    ],
)
def test_the_loader_share_decides_which_rung_comes_first(feed_s, step_s, share, data_first):
    split = speedrun.LoaderShare(feed_s, step_s)
    assert split.share == pytest.approx(share, abs=1e-3)
    assert split.data_first is data_first
    rungs = speedrun.ladder(CPU, quick=False, data_first=split.data_first)
    first, second = ("data on the device", "network sized for the device")[:: 1 if data_first else -1]
    assert rungs[1].name == f"1 {first}" and rungs[2].name == f"2 {second}"
    assert ("loader" in rungs[1].change) is data_first and ("model" in rungs[2].change) is data_first


@pytest.mark.parametrize(
    ("split", "words"),
    [
        (speedrun.LoaderShare(7.0e-3, 0.5e-3), ("93%", "more than 50%", "data on the device comes first (rung 1)")),
        (speedrun.LoaderShare(5.0e-3, 45.0e-3), ("10%", "at most 50%", "network sized for the device comes first")),
    ],
)
def test_the_order_line_prints_the_measured_split_and_the_order(split, words):
    line = split.line()
    assert speedrun.format_seconds(split.feed_s) in line and speedrun.format_seconds(split.step_s) in line
    for w in words:
        assert w in line, (w, line)


def test_without_a_step_the_share_is_zero_not_an_error():
    assert speedrun.LoaderShare(0.0, 0.0).share == 0.0


class _Images:
    """An MNIST-shaped torchvision-like data set: a (1, 28, 28) float image and a label per item."""

    def __init__(self, n: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.images = torch.rand(n, 1, 28, 28, generator=g)
        self.labels = torch.randint(0, 10, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return self.images[i], int(self.labels[i])


def test_the_split_is_measured_on_the_baseline_recipe():
    split = speedrun.measure_loader_share(speedrun.Data(_Images(96), None, "FashionMNIST"), CPU, quick=True, repeats=3)
    assert split.feed_s > 0 and split.step_s > 0 and 0 < split.share < 1


def test_a_slower_loader_raises_the_measured_share(monkeypatch):
    # The same data behind a loader that sleeps per item: the measured share must follow the loader's cost.
    import time

    class Slow(_Images):
        def __getitem__(self, i):
            time.sleep(2e-3)
            return super().__getitem__(i)

    fast = speedrun.measure_loader_share(speedrun.Data(_Images(128), None, None), CPU, quick=True, repeats=3)
    slow = speedrun.measure_loader_share(speedrun.Data(Slow(128), None, None), CPU, quick=True, repeats=3)
    assert slow.feed_s > fast.feed_s + 16 * 2e-3 * 0.9  # 16 items a batch (128 // 8), 2 ms each
    assert slow.share > fast.share and slow.data_first is (slow.share > speedrun.DATA_FIRST_SHARE)


# --- the one-cycle rung's budget ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("steps", "batch", "train_size", "quick", "epochs"),
    [
        (940, 512, 60_000, False, 8),  # 118 steps an epoch: 8 epochs give 944 >= 940
        (944, 512, 60_000, False, 8),
        (945, 512, 60_000, False, 9),
        (3055, 128, 60_000, False, 7),  # 469 an epoch: 7 give 3283
        (20, 128, 1024, True, 2),  # quick mode doubles the budget: 2 epochs run as 4, 32 steps
        (1, 64, 64, False, 1),
    ],
)
def test_epochs_for_steps_gives_the_fewest_epochs_with_enough_steps(steps, batch, train_size, quick, epochs):
    got = speedrun.epochs_for_steps(steps, batch, train_size, quick)
    assert got == epochs
    per_epoch = math.ceil(train_size / batch) * (speedrun.QUICK_EPOCHS if quick else 1)
    assert got * per_epoch >= steps > (got - 1) * per_epoch


def test_epochs_for_steps_refuses_nonsense():
    with pytest.raises(ValueError):
        speedrun.epochs_for_steps(0, 512, 60_000, False)


def _attempt(seconds: float, steps: int) -> speedrun.Attempt:
    return speedrun.Attempt(True, seconds, 0.0, 0.0, steps, 0.9, [(seconds, 0.9)])


def _ladder_with_steps(steps_by_rung: dict[str, list[int]], quick: bool = False, train_size: int = 60_000):
    """Run the real ladder with a fake run that returns the given steps (every rung faster than the last)."""
    rungs = speedrun.ladder(CPU, quick)
    clock = iter(range(1000, 0, -1))
    done = [0]  # runs finished or skipped: each rung ticks once per seed, so this names the rung now running

    def tick(name, runs):
        done[0] += runs

    def fake_run(recipe, data, device, target, seed, quick):
        steps = steps_by_rung.get(rungs[done[0] // 2].name, [100, 100])[seed]
        return _attempt(float(next(clock)), steps)

    results = speedrun.climb(
        speedrun.Data(range(train_size), None, "FashionMNIST"),
        CPU,
        0.88,
        [0, 1],
        quick,
        rungs,
        run=fake_run,
        progress=tick,
    )
    return {r.rung.name: r for r in results}


def test_the_one_cycle_budget_follows_the_kept_rungs_slowest_seed():
    results = _ladder_with_steps({"2 data on the device": [2820, 3055]})
    one_cycle = results["3 bigger batch + one-cycle"]
    assert one_cycle.recipe.batch_size == 128 and one_cycle.recipe.optimizer == "SGD+OneCycle"
    assert one_cycle.recipe.epochs == 7  # 3055 steps at 469 steps an epoch
    results = _ladder_with_steps({"2 data on the device": [200, 400]})
    assert results["3 bigger batch + one-cycle"].recipe.epochs == 1  # 400 steps fit in one epoch of 469


def test_the_one_cycle_budget_counts_quick_modes_factor():
    results = _ladder_with_steps({"2 data on the device": [16, 20]}, quick=True, train_size=1024)
    recipe = results["3 bigger batch + one-cycle"].recipe
    size = speedrun.batch_size(recipe, 1024)
    assert size == 128
    run_steps = recipe.epochs * speedrun.QUICK_EPOCHS * math.ceil(1024 / size)
    assert run_steps >= 20 and recipe.epochs == 2


def test_the_one_cycle_budget_does_not_depend_on_the_device_kind(monkeypatch):
    # Same kept steps, batch and data: the same epochs on a CPU and on a (faked) GPU.
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    budgets = []
    for device in (CPU, torch.device("cuda")):
        rungs = [
            speedrun.Rung("0 base", {"loader": "resident"}, "m"),
            speedrun.Rung("1 one-cycle", {"batch_size": 512, "optimizer": "SGD+OneCycle"}, "m", epochs_from_kept=True),
        ]
        seen = []

        def fake_run(recipe, data, device, target, seed, quick, seen=seen):
            seen.append(recipe)
            return _attempt(10.0 - len(seen), 940)

        speedrun.climb(speedrun.Data(range(60_000), None, None), device, 0.88, [0], False, rungs, run=fake_run)
        budgets.append(seen[-1].epochs)
    assert budgets == [8, 8]


# --- test-time flips -----------------------------------------------------------------------------------------------


def test_test_time_flips_run_only_on_a_recipe_trained_with_flips():
    reason = speedrun.skip_reason(speedrun.SpeedrunRecipe(test_flips=True), CPU, "FashionMNIST")
    assert reason and "never trained on mirrored images" in reason
    assert speedrun.skip_reason(speedrun.SpeedrunRecipe(flips=True, test_flips=True), CPU, "FashionMNIST") is None


def test_in_the_ladder_test_time_flips_follow_the_flip_rungs_verdict():
    def run_with_flips(kept_flips: bool):
        calls = []

        def fake_run(recipe, data, device, target, seed, quick):
            calls.append(recipe)
            slow = recipe.flips and not kept_flips  # the flip rung is slower, so not kept
            return _attempt(100.0 if slow else 10.0 - len(calls) * 0.1, 10)

        results = speedrun.climb(
            speedrun.Data(range(60_000), None, "FashionMNIST"), CPU, 0.88, [0], False, run=fake_run
        )
        return results[-1], calls

    last, calls = run_with_flips(kept_flips=False)
    assert last.rung.name == "8 test-time flips" and last.skipped and "random-flips rung was not kept" in last.skipped
    assert not any(r.test_flips for r in calls)
    last, calls = run_with_flips(kept_flips=True)
    assert last.skipped is None and calls[-1].test_flips and calls[-1].flips


# --- the command line records the split ------------------------------------------------------------------------------


def test_the_command_prints_the_split_and_records_it(monkeypatch, tmp_path, capsys):
    seen, record = run_faked(monkeypatch, tmp_path, ["--quick"], share=(9.0, 1.0))
    assert "The loader takes 90% of the step" in capsys.readouterr().out
    assert seen["rungs"][1] == "1 data on the device"
    assert record["loader_share"] == {"feed_s": 9.0, "step_s": 1.0, "share": pytest.approx(0.9), "data_first": True}


# --- the ladder plot ------------------------------------------------------------------------------------------------


def test_the_ladder_plots_legend_sits_outside_the_axes():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    history = [(0.1, 0.70), (1.0, 0.85), (5.0, 0.89)]  # crosses the target near the lower right corner
    results = [
        speedrun.RungResult(
            speedrun.Rung(f"{i} rung", {}, "m"),
            speedrun.SpeedrunRecipe(),
            [speedrun.Attempt(True, 5.0, 0.0, 0.0, 10, 0.89, history)],
            "baseline",
        )
        for i in range(9)
    ]
    ax = speedrun.plot_ladder(results, 0.88)
    ax.figure.canvas.draw()
    legend, axes = ax.get_legend().get_window_extent(), ax.get_window_extent()
    assert legend.x0 >= axes.x1  # right of the plotting area: it can cover no line
    plt.close(ax.figure)
