"""helpers.training: the evaluation loop on tiny synthetic data (counted right, modes set and restored) and the
progress bar with and without ipywidgets, in a terminal and in a notebook."""

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


def test_evaluate_runs_in_eval_mode_without_grad_and_restores_the_mode():
    model = ModeSpy()
    _, val = loaders()
    model.train()
    training.evaluate(model, val)
    assert model.seen and all(seen == (False, False) for seen in model.seen)
    assert model.training  # evaluate restores the mode it found
    model.eval()
    training.evaluate(model, val)
    assert not model.training


def test_bad_arguments():
    model = nn.Linear(8, 2)
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


def test_the_bar_falls_back_to_the_text_bar_quietly_without_ipywidgets(monkeypatch):
    from tqdm.std import TqdmWarning
    from tqdm.std import tqdm as text_bar

    notebook_without_ipywidgets(monkeypatch)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with training.progress_bar(total=3, file=io.StringIO()) as bar:
            bar.update(3)
    assert isinstance(bar, text_bar)
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
