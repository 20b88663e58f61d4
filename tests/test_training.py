"""helpers.training on tiny synthetic data: learning happens, accuracy is counted right, runs repeat, modes are set."""

from __future__ import annotations

import importlib
import io
import math
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers import training


def blobs(n: int = 256, seed: int = 0) -> TensorDataset:
    """Two Gaussian clouds in 8 dimensions, one per class: learnable in a few epochs."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 2, (n,), generator=g)
    X = torch.randn(n, 8, generator=g) + 1.5 * (2 * y[:, None] - 1)
    return TensorDataset(X, y)


def loaders(seed: int = 0) -> tuple[DataLoader, DataLoader]:
    train = DataLoader(blobs(256, seed), batch_size=32, shuffle=True)
    val = DataLoader(blobs(128, seed + 1), batch_size=64)
    return train, val


class ModeSpy(nn.Module):
    """A linear layer that records, at every forward, whether it was in training mode and whether grad was on."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 2)
        self.seen: list[tuple[bool, bool]] = []

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        self.seen.append((self.training, torch.is_grad_enabled()))
        return self.linear(X)


def test_fit_learns_and_records_history():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    train, val = loaders()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    history = training.fit(model, train, val, opt, epochs=4, progress=False)
    assert len(history) == 4
    assert len(history.val_accuracy) == len(history.seconds) == 4
    assert history.train_loss[-1] < history.train_loss[0]
    assert history.val_accuracy[-1] > 0.9
    assert len(history.train_accuracy) == len(history.val_loss) == 4


def test_evaluate_on_a_hand_made_case():
    # Identity weights: the logits are the inputs themselves, so the right answers can be counted by eye.
    model = nn.Linear(3, 3, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.eye(3))
    X = torch.tensor([[5.0, 0.0, 0.0], [0.0, 5.0, 0.0], [0.0, 0.0, 5.0], [5.0, 0.0, 0.0], [0.0, 5.0, 0.0]])
    y = torch.tensor([0, 1, 0, 2, 1])  # rows 0, 1 and 4 are right: 3 of 5
    loader = DataLoader(TensorDataset(X, y), batch_size=2)  # uneven batches: 2, 2, 1
    result = training.evaluate(model, loader)
    assert result["accuracy"] == pytest.approx(3 / 5)
    assert result["loss"] == pytest.approx(F.cross_entropy(X, y).item())
    right = -math.log(math.exp(5) / (math.exp(5) + 2))
    wrong = -math.log(1 / (math.exp(5) + 2))
    assert result["loss"] == pytest.approx((3 * right + 2 * wrong) / 5)


def test_train_epoch_counts_what_it_trained_on():
    model = nn.Linear(3, 3, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.eye(3))
    X = torch.tensor([[5.0, 0.0, 0.0], [0.0, 0.0, 5.0]])
    y = torch.tensor([0, 1])
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # no update, so the figures are those of the identity
    result = training.train_epoch(model, [(X, y)], opt)
    assert result["accuracy"] == 0.5
    assert result["loss"] == pytest.approx(F.cross_entropy(X, y).item())


def test_same_seed_same_run():
    def run() -> tuple[training.History, list[torch.Tensor]]:
        torch.manual_seed(1)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 2))
        train, val = loaders()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        history = training.fit(model, train, val, opt, epochs=2, seed=5, progress=False)
        return history, [p.detach().clone() for p in model.parameters()]

    (h1, p1), (h2, p2) = run(), run()
    assert h1.train_loss == h2.train_loss and h1.val_accuracy == h2.val_accuracy
    assert all(torch.equal(a, b) for a, b in zip(p1, p2, strict=True))


def test_different_seed_different_run():
    results = []
    for seed in (5, 6):
        torch.manual_seed(1)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 2))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        results.append(training.fit(model, loaders()[0], None, opt, epochs=1, seed=seed, progress=False).train_loss)
    assert results[0] != results[1]


def test_modes_and_no_grad():
    model = ModeSpy()
    train, val = loaders()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model.eval()  # train_epoch must switch it back on
    training.train_epoch(model, train, opt)
    assert model.seen and all(seen == (True, True) for seen in model.seen)
    model.seen.clear()
    training.evaluate(model, val)
    assert model.seen and all(seen == (False, False) for seen in model.seen)
    assert model.training  # evaluate restores the mode it found
    model.eval()
    training.evaluate(model, val)
    assert not model.training


def test_scheduler_steps_once_per_batch():
    class Counter:
        steps = 0

        def step(self) -> None:
            self.steps += 1

    model = nn.Linear(8, 2)
    train, _ = loaders()
    sched = Counter()
    training.train_epoch(model, train, torch.optim.SGD(model.parameters(), lr=0.1), scheduler=sched)
    assert sched.steps == len(train)


def test_progress_bar_advances_per_batch():
    class Bar:
        n = 0

        def update(self, k: int) -> None:
            self.n += k

    model = nn.Linear(8, 2)
    train, _ = loaders()
    bar = Bar()
    training.train_epoch(model, train, torch.optim.SGD(model.parameters(), lr=0.1), progress=bar)
    assert bar.n == len(train)


def test_bad_arguments():
    model = nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="epochs"):
        training.fit(model, loaders()[0], None, opt, epochs=0)
    with pytest.raises(ValueError, match="no batches"):
        training.train_epoch(model, [], opt)
    with pytest.raises(ValueError, match="no batches"):
        training.evaluate(model, [])


def notebook_without_ipywidgets(monkeypatch: pytest.MonkeyPatch) -> None:
    """What tqdm sees in a Jupyter kernel where ipywidgets is not installed, with tqdm's notebook modules unloaded."""
    import types

    monkeypatch.setitem(sys.modules, "ipykernel.zmqshell", types.ModuleType("ipykernel.zmqshell"))
    ipython = types.ModuleType("IPython")
    ipython.get_ipython = lambda: None  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "IPython", ipython)
    monkeypatch.setitem(sys.modules, "IPython.html", None)  # unimportable, as on IPython 4 and later
    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # None in sys.modules: import raises ImportError
    for name in ("tqdm.auto", "tqdm.autonotebook", "tqdm.notebook"):
        monkeypatch.delitem(sys.modules, name, raising=False)


def test_the_simulated_notebook_is_where_tqdm_auto_warns(monkeypatch):
    from tqdm.std import TqdmWarning

    notebook_without_ipywidgets(monkeypatch)
    with pytest.warns(TqdmWarning, match="IProgress not found"):
        importlib.import_module("tqdm.auto")


def test_fit_falls_back_to_the_text_bar_quietly_without_ipywidgets(monkeypatch):
    from tqdm.std import TqdmWarning
    from tqdm.std import tqdm as text_bar

    notebook_without_ipywidgets(monkeypatch)
    bars = []
    real = training.progress_bar

    def recording_bar(**kwargs):
        bars.append(real(**kwargs))
        return bars[-1]

    monkeypatch.setattr(training, "progress_bar", recording_bar)
    train, val = loaders()
    model = nn.Linear(8, 2)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        training.fit(model, train, val, torch.optim.SGD(model.parameters(), lr=0.1), epochs=1, progress=False)
    assert len(bars) == 1 and isinstance(bars[0], text_bar)
    assert [str(w.message) for w in seen if w.category is TqdmWarning] == []
    assert "tqdm.auto" not in sys.modules


def test_importing_the_training_helpers_does_not_import_tqdm_auto(monkeypatch):
    import helpers

    notebook_without_ipywidgets(monkeypatch)
    monkeypatch.delitem(sys.modules, "helpers.training")
    monkeypatch.setattr(helpers, "training", training)  # put back after the test, as sys.modules' entry is
    importlib.import_module("helpers.training")
    assert "tqdm.auto" not in sys.modules


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def run_the_ladder_bar(stream: io.StringIO) -> str:
    """Lesson 11's use of the bar, 18 runs in quick succession, each with a new description; what the stream got."""
    bar = training.progress_bar(total=18, unit="run", file=stream)
    for run in range(18):
        bar.set_description(f"rung {run // 2}")
        bar.update(1)
    bar.close()
    return stream.getvalue()


def test_without_ipywidgets_the_text_bar_draws_sparsely_where_its_stream_is_no_terminal(monkeypatch):
    notebook_without_ipywidgets(monkeypatch)
    written = run_the_ladder_bar(io.StringIO())
    draws = written.count("\r")
    assert draws == 2, written  # when it starts and when it closes; a redraw per run would be 18 pieces of output more
    last = written.split("\r")[-1]
    assert "18/18" in last and "rung 8" in last  # the close shows the last description and the count
    assert "tqdm.auto" not in sys.modules


def test_in_a_terminal_the_text_bar_redraws_in_place_as_often_as_tqdm_does(monkeypatch):
    from tqdm.std import tqdm as text_bar

    notebook_without_ipywidgets(monkeypatch)
    assert type(training.progress_bar(total=1, file=Terminal())) is text_bar
    assert run_the_ladder_bar(Terminal()).count("\r") > 10


def test_an_ipywidgets_that_is_installed_but_does_not_import_gets_the_text_bar_quietly(monkeypatch, tmp_path):
    from tqdm.std import TqdmWarning
    from tqdm.std import tqdm as text_bar

    broken = tmp_path / "ipywidgets"
    broken.mkdir()
    (broken / "__init__.py").write_text('raise ImportError("this ipywidgets is broken")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    notebook_without_ipywidgets(monkeypatch)
    monkeypatch.delitem(sys.modules, "ipywidgets")
    assert importlib.util.find_spec("ipywidgets") is not None  # found, so a check by name alone would pick tqdm.auto
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        bar = training.progress_bar(total=1, file=io.StringIO())
    assert isinstance(bar, text_bar)
    assert [str(w.message) for w in seen if w.category is TqdmWarning] == []
    assert "tqdm.auto" not in sys.modules
