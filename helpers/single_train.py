"""Lesson 07: the training loop of lessons/lesson_07/ddp_train.py in one process, without DDP, to diff the two against.

    python -m helpers.single_train --epochs 2 --batch-size 64

Also the data and the command line both scripts share (the DDP script adds its own options).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers import arguments
from helpers.checkpoints import save_checkpoint
from helpers.models import MODELS, build_model
from helpers.training import evaluate

SUMMARY_FILE = "summary.json"
CHECKPOINT_FILE = "checkpoint.pt"


def parser(prog: str, description: str) -> argparse.ArgumentParser:
    """The options of both scripts, each checked as it is read; every default runs in seconds on a CPU."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument(
        "--dataset",
        type=arguments.argtype(dataset_name),
        default="synthetic",
        help="synthetic, MNIST or FashionMNIST (default: synthetic)",
    )
    p.add_argument(
        "--data-dir",
        type=arguments.data_folder,
        default=None,
        help="data root (default: $COURSE_DATA_DIR, else data/ in the clone)",
    )
    p.add_argument("--limit", type=arguments.count, default=0, help="use only the first N training images (0: all)")
    p.add_argument(
        "--synthetic-size", type=arguments.positive_int, default=512, help="images in the synthetic training set"
    )
    p.add_argument("--model", type=str.lower, default="mlp", choices=MODELS, help="linear, mlp or cnn (helpers.models)")
    p.add_argument("--epochs", type=arguments.positive_int, default=2)
    p.add_argument(
        "--batch-size", type=arguments.positive_int, default=32, help="per process; the global batch is this times N"
    )
    p.add_argument("--lr", type=arguments.positive_number, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="checkpoints/ddp", help="folder for the checkpoint and summary (rank 0)")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"), help="auto: a GPU if there is one")
    return p


def dataset_name(text: str) -> str:
    """The name for ``--dataset``: synthetic, or a dataset helpers.data loads (its canonical name); else ValueError."""
    if text.strip().lower() == "synthetic":
        return "synthetic"
    from helpers.data import DATASETS, canonical_name

    try:
        return canonical_name(text)
    except ValueError:
        raise ValueError(f"Unknown dataset {text!r}. Choose one of: synthetic, {', '.join(DATASETS)}.") from None


def synthetic_data(size: int, image_seed: int, teacher_seed: int) -> TensorDataset:
    """Random 28x28 images labelled by a fixed random linear "teacher", so there is something to learn."""
    X = torch.randn(size, 1, 28, 28, generator=torch.Generator().manual_seed(image_seed))  # (N, 1, 28, 28)
    teacher = torch.randn(28 * 28, 10, generator=torch.Generator().manual_seed(teacher_seed))
    y = (X.flatten(1) @ teacher).argmax(dim=1)  # (N,)
    return TensorDataset(X, y)


def load_data(args: argparse.Namespace) -> tuple[TensorDataset, TensorDataset]:
    """Train and test sets as tensors (faster to index than images to decode). Files missing: helpers.data lets one
    process download (or unpack) them while the others wait, then find them."""
    if args.dataset.lower() == "synthetic":
        train = synthetic_data(args.synthetic_size, args.seed, args.seed)
        return train, synthetic_data(max(args.synthetic_size // 4, 1), args.seed + 1, args.seed)  # same teacher
    from helpers.data import load_dataset
    from helpers.transfer import DeviceResidentLoader

    sets = []
    for train, limit in ((True, args.limit), (False, args.limit // 5)):
        raw = load_dataset(args.dataset, train=train, root=args.data_dir, verbose=False)
        # The loader converts the uint8 images as the dataset's own transform would (ToTensor, then Normalize).
        converted = DeviceResidentLoader.from_dataset(raw, "cpu", shuffle=False, seed=0)
        X, y = converted.images, converted.labels  # (N, 1, 28, 28) float32, (N,) int64
        sets.append(TensorDataset(X[:limit], y[:limit]) if limit > 0 else TensorDataset(X, y))
    return sets[0], sets[1]


def train(args: argparse.Namespace, data: tuple[TensorDataset, TensorDataset], device: torch.device) -> dict:
    """The training loop in one process: the same loop as ddp_train.train, without what DDP adds."""
    train_set, test_set = data
    loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
    print(f"one process on {device}: {len(train_set)} images per epoch, {len(loader)} steps", flush=True)

    torch.manual_seed(args.seed)
    model = build_model(args.model).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()

    Path(args.out).mkdir(parents=True, exist_ok=True)
    start, history = time.perf_counter(), []
    for epoch in range(args.epochs):
        totals = torch.zeros(2, device=device)  # (sum of losses, number of images)
        for X, y in loader:
            X, y = X.to(device), y.to(device)
            loss = loss_fn(model(X), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            totals[0] += loss.detach() * len(y)
            totals[1] += len(y)
        history.append((totals[0] / totals[1]).item())
        print(f"epoch {epoch + 1}/{args.epochs}: mean training loss {history[-1]:.4f}", flush=True)
        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch + 1}
        save_checkpoint(state, Path(args.out) / CHECKPOINT_FILE)
    seconds = time.perf_counter() - start

    summary = {"world_size": 1, "losses": history, "seconds": seconds, "checkpoint": CHECKPOINT_FILE}
    summary["test_accuracy"] = evaluate(model, DataLoader(test_set, batch_size=1000))["accuracy"]
    print(f"test accuracy {summary['test_accuracy']:.1%}, {seconds:.1f} s of training", flush=True)
    (Path(args.out) / SUMMARY_FILE).write_text(json.dumps(summary, indent=2))
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    """Train in this process on one device; returns the exit code."""
    args = parser("python -m helpers.single_train", __doc__.splitlines()[0]).parse_args(argv)
    cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    train(args, load_data(args), torch.device("cuda" if cuda else "cpu"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
