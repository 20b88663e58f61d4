"""The speedrun's measure and verdicts, driven by a fake clock and a fake model."""

from __future__ import annotations

import math

import pytest
import torch

from helpers import models
from helpers.readings import KEPT, NO_CLEAR_DIFFERENCE, NOT_REACHED, SLOWER, keep_verdict
from lessons import lesson_11 as speedrun
from lessons.lesson_11 import time_to_accuracy


class FakeRig:
    """A clock that only moves when the fake model works, a sync that records itself, and a log of both."""

    def __init__(
        self,
        step_s: float = 1.0,
        eval_s: float = 10.0,
        warmup_s: float = 100.0,
        accuracies: tuple[float, ...] = (0.5, 0.7, 0.9, 0.95),
    ) -> None:
        self.now = 0.0
        self.log: list[str] = []
        self.step_s, self.eval_s, self.warmup_s = step_s, eval_s, warmup_s
        self.accuracies = list(accuracies)
        self.steps_taken = 0
        self.pending = 0.0  # work queued on the "device", finished only by sync

    def clock(self) -> float:
        self.log.append("clock")
        return self.now

    def sync(self) -> None:
        self.log.append("sync")
        self.now += self.pending
        self.pending = 0.0

    def steps(self):
        while True:
            self.steps_taken += 1
            self.pending += self.step_s  # asynchronous: only a sync makes the clock see it
            yield None

    def evaluate(self) -> float:
        self.now += self.eval_s
        return self.accuracies.pop(0) if len(self.accuracies) > 1 else self.accuracies[0]

    def warmup(self) -> None:
        self.now += self.warmup_s


def test_stops_at_the_first_evaluation_at_or_above_the_target():
    rig = FakeRig(accuracies=(0.5, 0.7, 0.9, 0.95))
    a = time_to_accuracy(rig.steps(), rig.evaluate, 0.9, eval_every=3, max_steps=100, sync=rig.sync, clock=rig.clock)
    assert a.reached
    assert a.steps == 9 and rig.steps_taken == 9  # three chunks of three steps, then it stopped
    assert a.train_s == pytest.approx(9.0)
    assert a.accuracy == 0.9
    assert [h[0] for h in a.history] == pytest.approx([3.0, 6.0, 9.0])


def test_the_target_is_reached_at_equality_not_only_above():
    rig = FakeRig(accuracies=(0.88,))
    a = time_to_accuracy(rig.steps(), rig.evaluate, 0.88, eval_every=2, max_steps=10, sync=rig.sync, clock=rig.clock)
    assert a.reached and a.steps == 2


def test_evaluation_and_warmup_are_timed_apart_from_training():
    rig = FakeRig(step_s=1.0, eval_s=10.0, warmup_s=100.0, accuracies=(0.5, 0.9))
    a = time_to_accuracy(
        rig.steps(), rig.evaluate, 0.9, eval_every=4, max_steps=100, warmup=rig.warmup, sync=rig.sync, clock=rig.clock
    )
    assert a.train_s == pytest.approx(8.0)  # 8 steps of 1 s: no evaluation, no warm-up in it
    assert a.eval_s == pytest.approx(20.0)
    assert a.warmup_s == pytest.approx(100.0)


def test_the_clock_is_read_only_after_a_sync():
    rig = FakeRig(accuracies=(0.5, 0.9))
    time_to_accuracy(
        rig.steps(), rig.evaluate, 0.9, eval_every=2, max_steps=10, warmup=rig.warmup, sync=rig.sync, clock=rig.clock
    )
    reads = [i for i, e in enumerate(rig.log) if e == "clock"]
    assert reads and all(rig.log[i - 1] == "sync" for i in reads)


def test_without_sync_the_queued_work_would_be_missed():
    # The fake device only finishes work on sync: a measure that forgot to sync would read 0 s of training.
    rig = FakeRig(accuracies=(0.9,))
    a = time_to_accuracy(rig.steps(), rig.evaluate, 0.9, eval_every=5, max_steps=5, sync=lambda: None, clock=rig.clock)
    assert a.train_s == 0.0
    rig = FakeRig(accuracies=(0.9,))
    a = time_to_accuracy(rig.steps(), rig.evaluate, 0.9, eval_every=5, max_steps=5, sync=rig.sync, clock=rig.clock)
    assert a.train_s == pytest.approx(5.0)


def test_a_missed_target_runs_the_whole_budget_and_says_so():
    rig = FakeRig(accuracies=(0.5, 0.6))
    a = time_to_accuracy(rig.steps(), rig.evaluate, 0.9, eval_every=3, max_steps=10, sync=rig.sync, clock=rig.clock)
    assert not a.reached
    assert a.steps == 10 and a.train_s == pytest.approx(10.0)
    assert len(a.history) == 4  # after 3, 6, 9 and the last 10th step


def test_steps_that_run_out_end_the_run():
    rig = FakeRig(accuracies=(0.5,))
    a = time_to_accuracy(
        iter([None] * 4), rig.evaluate, 0.9, eval_every=3, max_steps=100, sync=rig.sync, clock=rig.clock
    )
    assert not a.reached and a.steps == 4


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="eval_every"):
        time_to_accuracy(iter([]), lambda: 1.0, 0.9, eval_every=0, max_steps=1)


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        ([10.0, 11.0, 12.0], [5.0, 5.5, 6.0], KEPT),  # every run faster than every run before
        ([10.0, 11.0, 12.0], [9.5, 10.5, 11.5], NO_CLEAR_DIFFERENCE),  # the ranges overlap
        ([10.0, 11.0, 12.0], [12.5, 13.0, 14.0], SLOWER),
        ([10.0, 11.0, 12.0], [5.0, math.inf, 6.0], NOT_REACHED),  # a run missed the target
        ([10.0, math.inf], [5.0, 6.0], KEPT),  # the rung before missed it, this one never did
        ([10.0], [9.0], KEPT),  # one seed each: no spread to hide in
    ],
)
def test_verdict_rule_on_seeds_times(before, after, expected):
    assert keep_verdict(before, after) == expected


def test_verdict_needs_times():
    with pytest.raises(ValueError):
        keep_verdict([], [1.0])


@pytest.mark.parametrize("device", ["cpu", "cuda", "mps"])
@pytest.mark.parametrize("quick", [False, True])
@pytest.mark.parametrize("data_first", [False, True])
def test_each_rung_changes_one_thing_and_the_ladder_builds_on_kept_rungs(device, quick, data_first, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))  # a T4, for "cuda"
    fields = set(speedrun.SpeedrunRecipe.__dataclass_fields__)
    rungs = speedrun.ladder(torch.device(device), quick, data_first=data_first)
    assert [r.name.split()[0] for r in rungs] == [str(i) for i in range(len(rungs))]
    for rung in rungs[1:]:
        assert set(rung.change) <= fields
        changed = {k for k in rung.change if k != "epochs"}  # the budget follows the network it was planned with
        assert 1 <= len(changed) <= 2, rung.name  # "bigger batch + one-cycle" is one recipe: the batch and its schedule


def test_the_one_cycle_rung_plans_its_batch_for_the_device(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))  # an H100, for "cuda"
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert speedrun.one_cycle_plan(cpu, quick=False)["batch_size"] == 128  # compute-bound: a bigger batch buys little
    assert speedrun.one_cycle_plan(cuda, quick=False)["batch_size"] == 512  # launch-bound: fixed costs paid less often
    assert speedrun.one_cycle_plan(cpu, quick=True) == speedrun.one_cycle_plan(cuda, quick=True)
    for device in (cpu, cuda):
        change = next(r.change for r in speedrun.ladder(device, False) if r.change.get("optimizer") == "SGD+OneCycle")
        assert change == speedrun.one_cycle_plan(device, False)
        assert change["batch_size"] > speedrun.SpeedrunRecipe().batch_size


def test_the_sized_network_follows_the_device():
    import torch

    X = torch.randn(2, 1, 28, 28)
    cpu, cuda, mps = torch.device("cpu"), torch.device("cuda"), torch.device("mps")
    assert isinstance(speedrun.sized_network(cpu, quick=False), models.MLP)
    assert isinstance(speedrun.sized_network(cuda, quick=False), speedrun.ConvBNNet)
    assert isinstance(speedrun.sized_network(mps, quick=False), speedrun.ConvBNNet)
    wide, narrow = speedrun.sized_network(cuda, quick=False), speedrun.sized_network(cpu, quick=True)
    assert sum(p.numel() for p in wide.parameters()) > 20 * sum(p.numel() for p in narrow.parameters())
    for net in (wide, narrow, speedrun.sized_network(cpu, quick=False)):
        assert net(X).shape == (2, 10)
    # the CPU's dense net is cheap per epoch and planned for more of them; quick mode keeps one budget everywhere
    assert speedrun.sized_epochs(cpu, quick=False) > speedrun.sized_epochs(cuda, quick=False)
    assert speedrun.sized_epochs(cpu, quick=True) == speedrun.sized_epochs(cuda, quick=True)
    change = next(r.change for r in speedrun.ladder(cpu, False) if r.change.get("model") == "sized")
    assert change["epochs"] == speedrun.sized_epochs(cpu, False)


def _attempt(seconds: float, reached: bool = True) -> speedrun.Attempt:
    return speedrun.Attempt(reached, seconds, 0.1, 0.2, 10, 0.9 if reached else 0.5, [(seconds, 0.9)])


def test_climb_keeps_only_what_pays_and_changes_the_last_kept_recipe():
    import torch

    ladder = [
        speedrun.Rung("0 base", {}, "baseline"),
        speedrun.Rung("1 faster", {"loader": "resident"}, "m"),
        speedrun.Rung("2 noise", {"label_smoothing": 0.1}, "m"),
        speedrun.Rung("3 faster again", {"flips": True}, "m"),
    ]
    times = {"0 base": [10.0, 11.0], "1 faster": [5.0, 5.5], "2 noise": [4.9, 5.6], "3 faster again": [2.0, 2.2]}
    seen = []

    def fake_run(recipe, data, device, target, seed, quick):
        name = {r.name for r in ladder if r.change and all(getattr(recipe, k) == v for k, v in r.change.items())}
        key = max(name) if name else "0 base"
        seen.append((key, recipe))
        return _attempt(times[key][seed])

    results = speedrun.climb(None, torch.device("cpu"), 0.9, [0, 1], False, ladder, run=fake_run)
    assert [r.verdict for r in results] == ["baseline", KEPT, NO_CLEAR_DIFFERENCE, KEPT]
    last = [recipe for key, recipe in seen if key == "3 faster again"][0]
    assert last.loader == "resident" and last.label_smoothing == 0.0  # built on rung 1, not on the rejected rung 2
    assert speedrun.best(results).rung.name == "3 faster again"
    assert "5.0x faster" in speedrun.speedup_line(results, 0.9)  # 10.5 s -> 2.1 s
    table = speedrun.ladder_table(results, 0.9)
    assert "no clear difference" in table and "10.5 s (10.0 s-11.0 s)" in table


def test_a_rung_the_device_cannot_run_is_skipped_with_its_reason():
    import torch

    reason = speedrun.skip_reason(speedrun.SpeedrunRecipe(mixed_precision=True), torch.device("cpu"))
    assert reason and "CUDA" in reason
    assert speedrun.skip_reason(speedrun.SpeedrunRecipe(), torch.device("cpu")) is None


def test_a_fused_rung_on_a_recipe_without_sgd_is_skipped_with_the_reason():
    import torch

    cpu = torch.device("cpu")
    reason = speedrun.skip_reason(speedrun.SpeedrunRecipe(fused=True), cpu)  # the baseline's Adadelta: nothing to fuse
    assert reason is not None and "Adadelta" in reason
    assert speedrun.skip_reason(speedrun.SpeedrunRecipe(optimizer="SGD+OneCycle"), cpu) is None


def test_the_warm_up_runs_the_recipes_own_step(monkeypatch):
    """The warm-up must launch what the timed steps launch (flips, label smoothing, the schedule), or their first-call
    costs land inside the record."""
    seen = []

    def fake_step(recipe, model, X, y, opt, scaler, dtype):
        seen.append(recipe)
        opt.step()

    recipe = speedrun.SpeedrunRecipe(optimizer="SGD+OneCycle", flips=True, label_smoothing=0.1)
    model = models.MLP(8)
    monkeypatch.setattr(speedrun, "train_step", fake_step)
    speedrun.warmup_call(recipe, model, torch.device("cpu"), batch=4, calls=2)()
    assert seen == [recipe, recipe]
