"""The data-pipeline benchmark of lesson 05 (``lessons.lesson_05``) from a terminal; run from the clone's root.

python -m tools.bench                 # MNIST on the device pick_device() chooses
python -m tools.bench --quick --dataset FashionMNIST --device cpu
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
from torch.utils.data import Subset

from helpers import arguments, data, devices, settings
from lessons.lesson_05 import absent_rows, findings, format_table, goal_lines, run_benchmark


def _parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tools.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", help="device to run on (default: auto, as pick_device chooses)")
    parser.add_argument(
        "--dataset",
        default="MNIST",
        type=arguments.argtype(data.canonical_name),
        help="MNIST (default) or FashionMNIST (available offline)",
    )
    parser.add_argument("--quick", action="store_true", help="a short run: 30 batches per measurement")
    parser.add_argument(
        "--batches", type=arguments.count, help="batches per timed run (default 200, 30 with --quick; 0: an epoch)"
    )
    parser.add_argument(
        "--repeats", type=arguments.positive_int, default=3, help="timed runs per figure; the median is reported"
    )
    parser.add_argument("--workers", type=arguments.count, default=2, help="DataLoader worker processes (default 2)")
    parser.add_argument(
        "--batch-size", type=arguments.positive_int, default=128, help="images per batch (default 128, as in the lab)"
    )
    parser.add_argument(
        "--subset", type=arguments.positive_int, help="use only the first N training images, N >= 1 (for tests)"
    )
    parser.add_argument(
        "--data-dir", type=arguments.data_folder, help=f"data folder (default ${settings.DATA_DIR} or ./data)"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the table; returns the exit status."""
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    try:
        device = devices.pick_device(args.device)
        dataset = data.load_dataset(args.dataset, train=True, root=args.data_dir, verbose=False)
    except (ValueError, devices.DeviceUnavailableError, data.DatasetUnavailableError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.subset:
        dataset = Subset(dataset, range(min(args.subset, len(dataset))))
    batches = args.batches if args.batches is not None else (30 if args.quick else 200)
    batches = batches or None  # 0 means a whole epoch
    print(
        f"Pipeline benchmark: {args.dataset} ({len(dataset):,} training images) on {device}, "
        f"batch {args.batch_size}, {'a whole epoch' if batches is None else f'{batches} batches'} per run, "
        f"median of {args.repeats} interleaved runs after warm-up; torch {torch.__version__}, "
        f"{torch.get_num_threads()} CPU threads, {os.cpu_count()} CPUs",
        flush=True,
    )
    results = run_benchmark(
        dataset,
        device,
        batches,
        args.repeats,
        args.workers,
        batch_size=args.batch_size,
        progress=lambda what: print(f"  {what} ...", file=sys.stderr, flush=True),
    )
    print(format_table(results, len(dataset), args.workers))
    print("Each cell: images/s (median of the repeats), their spread (slowest minus fastest, over the median), and the")
    print("ratio to the images/s of the row named in the first column.")
    print("Epoch: time for all training images at the CNN's rate.")
    for line in absent_rows(device) + findings(results, args.workers):
        print("-", line)
    print("The last row against the lab's setup, and the goals:")
    print("\n".join(goal_lines(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
