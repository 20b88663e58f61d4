"""helpers.models: output shapes, parameter counts, model_device and build_model."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from helpers.models import CNN, MLP, LinearModel, build_model, model_device


@pytest.mark.parametrize("cls", [LinearModel, MLP, CNN])
@pytest.mark.parametrize("batch", [1, 5])
def test_output_shape(cls, batch):
    torch.manual_seed(0)
    out = cls()(torch.randn(batch, 1, 28, 28))  # (B, 1, 28, 28) -> (B, 10)
    assert out.shape == (batch, 10)


def test_num_classes():
    assert CNN(num_classes=3)(torch.randn(2, 1, 28, 28)).shape == (2, 3)
    assert MLP(hidden=8, num_classes=4)(torch.randn(2, 1, 28, 28)).shape == (2, 4)


def test_cnn_is_the_lesson_03_network():
    model = CNN()
    shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}
    assert shapes == {
        "conv1.weight": (6, 1, 5, 5),
        "conv1.bias": (6,),
        "conv2.weight": (12, 6, 5, 5),
        "conv2.bias": (12,),
        "fc1.weight": (120, 192),
        "fc1.bias": (120,),
        "fc2.weight": (60, 120),
        "fc2.bias": (60,),
        "out.weight": (10, 60),
        "out.bias": (10,),
    }


def test_parameter_counts():
    def count(m: nn.Module) -> int:
        return sum(p.numel() for p in m.parameters())

    assert count(LinearModel()) == 784 * 10 + 10
    assert count(MLP()) == 784 * 32 + 32 + 32 * 10 + 10


def test_model_device_follows_the_move():
    model = CNN()
    assert model_device(model) == torch.device("cpu")
    assert model_device(model.to("meta")) == torch.device("meta")


def test_model_device_falls_back_to_buffers():
    assert model_device(nn.BatchNorm1d(3, affine=False).to("meta")) == torch.device("meta")


def test_model_device_without_tensors():
    with pytest.raises(ValueError, match="ReLU has no parameters or buffers"):
        model_device(nn.ReLU())


@pytest.mark.parametrize(("name", "cls"), [("linear", LinearModel), ("MLP", MLP), ("cnn", CNN)])
def test_build_model(name, cls):
    assert type(build_model(name)) is cls


def test_build_model_passes_kwargs():
    assert build_model("mlp", hidden=16).hidden.out_features == 16


def test_build_model_unknown_name():
    with pytest.raises(ValueError, match="Unknown model 'resnet'; choose one of linear, mlp, cnn"):
        build_model("resnet")
