"""The course's models: a linear classifier, an MLP and the two-convolution CNN of lessons 03-10, and the speedrun's
(lesson 11) pytorch/examples CNN and wide conv-BatchNorm network."""

from __future__ import annotations

from collections.abc import Sequence

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
