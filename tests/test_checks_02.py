"""Lesson 02 checkers: each accepts the reference solution and rejects wrong answers."""

from types import MappingProxyType

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from exercises.checks import CHECKERS
from helpers.transfer import to_device

CPU, META = torch.device("cpu"), torch.device("meta")
TESTED = {"02_read_the_error", "02_batch_on_device", "02_fix_the_train_step", "02_tensor_made_in_forward"}
NEW = (
    "Expected all tensors to be on the same device, but got mat1 is on cpu, different from other tensors on "
    "cuda:0 (when checking argument in method wrapper_CUDA_addmm)"
)
OLD = (
    "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu! "
    "(when checking argument for argument target in method wrapper_CUDA_nll_loss_forward)"
)


def test_every_lesson_02_checker_is_tested():
    assert {k for k in CHECKERS if k.startswith("02_")} == TESTED


def test_read_the_error():
    check = CHECKERS["02_read_the_error"]
    assert check("mat1", "cpu", NEW) is True
    assert check(None, None, NEW) is False
    assert check("mat2", "cpu", NEW) is False  # wrong argument
    assert check("mat1", "cuda:0", NEW) is False  # the other tensors' device
    assert check("target", "cpu", OLD) is True  # the older wording
    assert check("target", "cuda:0", OLD) is False
    no_argument = "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"
    assert check("x", "cpu", no_argument) is False


def _batch():
    return {
        "images": torch.randn(4, 1, 28, 28),
        "targets": {"labels": torch.tensor([1, 0, 3, 2]), "weights": torch.ones(4)},
        "split": "train",
    }


def _move(obj, target):
    if isinstance(obj, torch.Tensor):
        return obj.to(target)
    if isinstance(obj, dict):
        return {k: _move(v, target) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_move(v, target) for v in obj)
    return obj


def test_batch_on_device_accepts_right_answers(capsys):
    check = CHECKERS["02_batch_on_device"]
    batch = _batch()

    def with_pytree(obj, target):  # another walker: torch's own tree_map
        from torch.utils._pytree import tree_map

        return tree_map(lambda leaf: leaf.to(target) if isinstance(leaf, torch.Tensor) else leaf, obj)

    def copied_then_moved_in_the_copy(obj, target):
        import copy

        new = copy.deepcopy(obj)
        for key, value in new.items():
            new[key] = _move(value, target)
        return new

    for right in (_move, with_pytree, copied_then_moved_in_the_copy, lambda obj, target: to_device(obj, target)):
        assert check(right, batch, CPU) is True
        assert check(right, batch, META) is True
    assert capsys.readouterr().out.count("[pass]") == 8
    assert batch["images"].device == CPU and batch["targets"]["labels"].device == CPU  # the sample left alone


def test_batch_on_device_rejects_wrong_answers(capsys):
    check = CHECKERS["02_batch_on_device"]
    batch = _batch()
    assert check(None, batch, CPU) is False
    assert "[waiting]" in capsys.readouterr().out
    assert check(_move(batch, META), batch, CPU) is False  # the moved batch, not the function that moves it
    assert check(lambda obj, target: obj, batch, CPU) is False  # nothing moved
    assert "still on cpu" in capsys.readouterr().out

    def top_level_only(obj, target):  # the nested tensors left behind
        return {k: v.to(target) if isinstance(v, torch.Tensor) else v for k, v in obj.items()}

    assert check(top_level_only, batch, CPU) is False
    assert "batch['targets']['labels'] is still on cpu" in capsys.readouterr().out
    assert check(lambda obj, target: {**_move(obj, target), "split": "test"}, batch, CPU) is False
    assert check(lambda obj, target: list(_move(obj, target).values()), batch, CPU) is False  # structure changed

    def remade(obj, target):  # right devices, shapes and dtypes on meta, but zeros instead of the values
        return _move(_map_tensors(obj, torch.zeros_like), target)

    assert check(remade, batch, CPU) is False
    assert "other values" in capsys.readouterr().out

    def in_place(obj, target):  # moves the sample's own tensors, then hands it back
        for key, value in obj.items():
            obj[key] = _move(value, target)
        return obj

    assert check(in_place, _batch(), CPU) is False
    assert "changed the batch it was given" in capsys.readouterr().out
    assert check(lambda obj, target: 1 / 0, batch, CPU) is False
    assert "ZeroDivisionError" in capsys.readouterr().out


def _map_tensors(obj, fn):
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, dict):
        return {k: _map_tensors(v, fn) for k, v in obj.items()}
    return obj


def test_batch_on_device_compares_by_path_and_never_raises():
    check = CHECKERS["02_batch_on_device"]
    batch = _batch()

    def renamed(obj, target):  # same leaves, other key
        moved = _move(obj, target)
        moved["pixels"] = moved.pop("images")
        return moved

    assert check(renamed, batch, CPU) is False
    wrapped = MappingProxyType({"images": torch.ones(2), "tag": "x"})  # a Mapping that is not a dict
    as_proxy = lambda obj, target: MappingProxyType({"images": obj["images"].to(target), "tag": obj["tag"]})  # noqa: E731
    assert check(as_proxy, wrapped, CPU) is True
    assert check(lambda obj, target: obj, wrapped, CPU) is False
    with_array = {"images": torch.ones(2), "extra": np.zeros(3)}  # == on arrays has no single truth value
    other_array = lambda obj, target: {"images": obj["images"].to(target), "extra": np.ones(3)}  # noqa: E731
    assert check(other_array, with_array, CPU) is False


def weights(device=None):
    return torch.linspace(0.5, 1.5, 10, device=device)


def step_as_handed_over(model, images, labels, optimizer):  # the broken step of the lesson
    logits = model(images.to(next(model.parameters()).device))
    loss = F.cross_entropy(logits, labels, weight=weights())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.detach()


def step(model, images, labels, optimizer, *, move_labels=True, weighted=True, update=True, as_number=False):
    device = next(model.parameters()).device
    logits = model(images.to(device))
    labels = labels.to(device) if move_labels else labels
    loss = F.cross_entropy(logits, labels, weight=weights(device) if weighted else None)
    optimizer.zero_grad()
    loss.backward()
    if update:
        optimizer.step()
    return loss.item() if as_number else loss.detach()


def test_fix_the_train_step(capsys):
    check = CHECKERS["02_fix_the_train_step"]
    device = torch.device("cpu")
    assert check(step, device) is True
    assert check(None, device) is False
    capsys.readouterr()
    # On this CPU-only machine the meta device stands in for the GPU and raises the mismatch.
    assert check(step_as_handed_over, device) is False
    assert "RuntimeError" in capsys.readouterr().out
    assert check(lambda *a: step(*a, move_labels=False), device) is False
    assert check(lambda *a: step(*a, weighted=False), device) is False  # the class weights were dropped
    assert check(lambda *a: step(*a, update=False), device) is False  # nothing learned
    assert check(lambda *a: step(*a, as_number=True), device) is False  # .item() every step
    assert check("train_step", device) is False


def test_train_step_checker_leaves_the_gpu_alone_when_the_lesson_runs_on_the_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU machine where DEVICE = "cpu"
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    check = CHECKERS["02_fix_the_train_step"]
    device = torch.device("cpu")
    assert check(step, device) is True  # a model moved to a real cuda:0 would fail here: the second run is on meta
    assert check(step_as_handed_over, device) is False


class AddPositions(nn.Module):  # the lesson's module, as handed over: positions made on the CPU
    def __init__(self, dim: int = 4) -> None:
        super().__init__()
        self.linear = nn.Linear(dim, dim)

    def forward(self, x):
        return self.linear(x) + torch.arange(x.shape[1])[:, None]


class WithDevice(AddPositions):  # the reference answer
    def forward(self, x):
        return self.linear(x) + torch.arange(x.shape[1], device=x.device)[:, None]


class WithBuffer(AddPositions):
    def __init__(self, dim: int = 4, max_len: int = 16) -> None:
        super().__init__(dim)
        self.register_buffer("positions", torch.arange(max_len), persistent=False)

    def forward(self, x):
        return self.linear(x) + self.positions[: x.shape[1], None]


class MovedAfterwards(AddPositions):  # made on the CPU, then copied: slower, but on the right device
    def forward(self, x):
        return self.linear(x) + torch.arange(x.shape[1]).to(x.device)[:, None]


class ZerosOnTheCpu(AddPositions):  # a tensor made without a device, as torch.zeros does it
    def forward(self, x):
        offset = torch.zeros(x.shape[1], 1)
        return self.linear(x) + torch.arange(x.shape[1], device=x.device)[:, None] + offset


class PlainAttribute(AddPositions):  # made in __init__ but not registered: .to() leaves it behind
    def __init__(self, dim: int = 4) -> None:
        super().__init__(dim)
        self.positions = torch.arange(16)

    def forward(self, x):
        return self.linear(x) + self.positions[: x.shape[1], None]


class LayerInForward(nn.Module):  # the layer built inside forward, on the CPU
    def forward(self, x):
        return nn.Linear(4, 4)(x) + torch.arange(x.shape[1], device=x.device)[:, None]


class LayerInForwardOnTheDevice(nn.Module):  # built where the input is, but new weights on every call
    def forward(self, x):
        return nn.Linear(4, 4, device=x.device)(x) + torch.arange(x.shape[1], device=x.device)[:, None]


class Unseeded(WithDevice):  # right devices, wrong sum
    def forward(self, x):
        return self.linear(x)


def test_made_in_forward_accepts_the_reference_and_other_right_answers(capsys):
    check = CHECKERS["02_tensor_made_in_forward"]
    for answer in (WithDevice, WithBuffer, MovedAfterwards):
        assert check(answer, torch.device("cpu")) is True, answer.__name__
        assert check(answer, torch.device("meta")) is True, answer.__name__
    assert "[pass]" in capsys.readouterr().out


def test_made_in_forward_waits_for_the_untouched_cell(capsys):
    assert CHECKERS["02_tensor_made_in_forward"](None, torch.device("cpu")) is False
    assert "[waiting]" in capsys.readouterr().out


def test_a_tensor_made_in_forward_without_a_device_fails_on_a_cpu_only_lesson(capsys):
    check = CHECKERS["02_tensor_made_in_forward"]
    cpu = torch.device("cpu")
    for answer in (AddPositions, ZerosOnTheCpu, PlainAttribute):
        assert check(answer, cpu) is False, answer.__name__
        out = capsys.readouterr().out
        assert "[not yet]" in out and "on meta" in out and "RuntimeError" in out, out


def test_a_layer_built_in_forward_fails(capsys):
    check = CHECKERS["02_tensor_made_in_forward"]
    for answer in (LayerInForward, LayerInForwardOnTheDevice):
        assert check(answer, torch.device("cpu")) is False, answer.__name__
        assert "new random weights" in capsys.readouterr().out


def test_made_in_forward_rejects_other_wrong_answers(capsys):
    check = CHECKERS["02_tensor_made_in_forward"]
    cpu = torch.device("cpu")
    assert check(WithDevice(), cpu) is False  # an instance, not the class
    assert "class itself" in capsys.readouterr().out
    assert check("AddPositionsFixed", cpu) is False
    assert check(Unseeded, cpu) is False
    assert "does not compute" in capsys.readouterr().out

    class Renamed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.Linear(4, 4)

        def forward(self, x):
            return self.layer(x) + torch.arange(x.shape[1], device=x.device)[:, None]

    assert check(Renamed, cpu) is False
    assert "self.linear" in capsys.readouterr().out

    class NeedsArguments(WithDevice):
        def __init__(self, dim: int) -> None:
            super().__init__(dim)

    assert check(NeedsArguments, cpu) is False
    assert "building the module" in capsys.readouterr().out


def test_made_in_forward_leaves_the_learners_random_state_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    CHECKERS["02_tensor_made_in_forward"](WithDevice, torch.device("cpu"))
    assert torch.equal(torch.rand(3), expected)


class CopiesLayerInForward(AddPositions):  # the same weights on every call, but a layer made on the CPU
    def forward(self, x):
        layer = nn.Linear(4, 4)
        layer.load_state_dict(self.linear.state_dict())
        return layer(x) + torch.arange(x.shape[1], device=x.device)[:, None]


def test_a_layer_built_in_forward_fails_on_the_second_device_even_with_fixed_weights(capsys):
    check = CHECKERS["02_tensor_made_in_forward"]
    assert check(CopiesLayerInForward, torch.device("cpu")) is False
    assert "on meta" in capsys.readouterr().out


def test_made_in_forward_checker_leaves_the_gpu_alone_when_the_lesson_runs_on_the_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU machine where DEVICE = "cpu"
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    check = CHECKERS["02_tensor_made_in_forward"]
    assert check(WithDevice, torch.device("cpu")) is True  # the second run is on meta, not on a real cuda:0
    assert check(AddPositions, torch.device("cpu")) is False


def test_read_the_error_accepts_the_device_as_a_torch_device():
    assert CHECKERS["02_read_the_error"]("mat1", torch.device("cpu"), NEW) is True
    assert CHECKERS["02_read_the_error"](" mat1 ", "cpu ", NEW) is True


def step_with_a_loss_module(model, images, labels, optimizer):  # the other common fix, names imported from torch
    from torch.nn import CrossEntropyLoss

    device = next(model.parameters()).device
    loss_fn = CrossEntropyLoss(weight=torch.linspace(0.5, 1.5, 10)).to(device)
    loss = loss_fn(model(images.to(device)), labels.to(device))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.detach()


def step_reading_the_logits_device(model, images, labels, optimizer):
    from torch.nn.functional import cross_entropy

    logits = model(images.to(next(model.parameters()).device))
    loss = cross_entropy(logits, labels.to(logits.device), weight=torch.linspace(0.5, 1.5, 10, device=logits.device))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss  # not detached: still a 0-dim tensor


class PositionsOnTheWeightsDevice(AddPositions):
    def forward(self, x):
        return self.linear(x) + torch.arange(x.shape[1], device=self.linear.weight.device)[:, None]


class PositionsFromNewTensor(AddPositions):
    def forward(self, x):
        return self.linear(x) + x.new_tensor(range(x.shape[1]))[:, None]


def test_right_answers_written_differently_pass(capsys):
    for answer in (step_with_a_loss_module, step_reading_the_logits_device):
        assert CHECKERS["02_fix_the_train_step"](answer, torch.device("cpu")) is True, answer.__name__
    for answer in (PositionsOnTheWeightsDevice, PositionsFromNewTensor):
        assert CHECKERS["02_tensor_made_in_forward"](answer, torch.device("cpu")) is True, answer.__name__
    assert capsys.readouterr().out.count("[pass]") == 4
