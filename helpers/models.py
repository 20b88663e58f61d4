"""The course's models: a linear classifier, an MLP and the two-convolution CNN that lesson 03 prints and lessons 04-10
train. The speedrun's own networks are lesson 11's (``lessons.lesson_11``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class LinearModel(nn.Module):
    """Multinomial logistic regression on 28x28 images: 784 inputs, 10 class scores."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.linear = nn.Linear(28 * 28, num_classes)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return self.linear(X.flatten(1))  # (B, 1, 28, 28) -> (B, 784) -> (B, 10)


class MLP(nn.Module):
    """One hidden layer: 784 -> hidden -> 10."""

    def __init__(self, hidden: int = 32, num_classes: int = 10) -> None:
        super().__init__()
        self.hidden = nn.Linear(28 * 28, hidden)
        self.out = nn.Linear(hidden, num_classes)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return self.out(F.relu(self.hidden(X.flatten(1))))


class CNN(nn.Module):
    """Two 5x5 convolutions (6 and 12 channels), each followed by 2x2 max pooling, then 192 -> 120 -> 60 -> 10."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, kernel_size=5)
        self.conv2 = nn.Conv2d(6, 12, kernel_size=5)
        self.fc1 = nn.Linear(12 * 4 * 4, 120)
        self.fc2 = nn.Linear(120, 60)
        self.out = nn.Linear(60, num_classes)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        X = F.max_pool2d(F.relu(self.conv1(X)), 2)  # (B, 1, 28, 28) -> (B, 6, 24, 24) -> (B, 6, 12, 12)
        X = F.max_pool2d(F.relu(self.conv2(X)), 2)  # -> (B, 12, 8, 8) -> (B, 12, 4, 4)
        X = F.relu(self.fc1(X.flatten(1)))  # -> (B, 192) -> (B, 120)
        X = F.relu(self.fc2(X))  # -> (B, 60)
        return self.out(X)  # -> (B, 10)


MODELS = {"linear": LinearModel, "mlp": MLP, "cnn": CNN}


def build_model(name: str, **kwargs) -> nn.Module:
    """A fresh lesson model by name: "linear", "mlp" or "cnn"."""
    try:
        return MODELS[name.lower()](**kwargs)
    except KeyError:
        raise ValueError(f"Unknown model {name!r}; choose one of {', '.join(MODELS)}.") from None


def model_device(model: nn.Module) -> torch.device:
    """The device of a model's first parameter (or buffer); a module has no device of its own."""
    for tensor in (*model.parameters(), *model.buffers()):
        return tensor.device
    raise ValueError(f"{type(model).__name__} has no parameters or buffers, so it has no device.")
