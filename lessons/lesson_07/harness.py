"""Lesson 07: lessons/lesson_07/ddp_train.py with the course's checks around it, for the lesson's runs and the tests.

    torchrun --standalone --nproc-per-node 2 -m lessons.lesson_07.harness --check-equivalence  # against one process
    torchrun --standalone --nproc-per-node 2 -m lessons.lesson_07.harness --fail-rank 1        # rank 1 fails

It runs ddp_train's own ``setup`` and ``train`` and adds, without a line in that file: a refusal of a bad ``--out`` or
``--fail-rank`` before anything starts; ``--check-equivalence`` (helpers/ddp_check.py: rank 0 trains a plain copy on
each step's global batch, from a hook after every optimizer step); ``--fail-rank`` (a hook before the first forward
pass raises on that rank); the check that every replica holds rank 0's weights; and a clean exit
(``distributed.leaving_cleanly``, and torch._dynamo imported before the group: that function's docstring says why).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch
import torch._dynamo  # noqa: F401  before any process group (helpers.distributed.leaving_cleanly says why)
import torch.distributed as dist
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.modules.module import register_module_forward_pre_hook
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
from torch.utils.data import DistributedSampler, TensorDataset

from helpers import arguments, ddp_check, distributed
from helpers.distributed import say
from helpers.models import build_model
from helpers.single_train import SUMMARY_FILE, load_data
from lessons.lesson_07 import ddp_train

PROG = "lessons.lesson_07.harness"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """ddp_train's options, plus the checks'."""
    p = ddp_train.parser(f"python -m {PROG}", __doc__.splitlines()[0])
    p.add_argument("--timeout", type=arguments.seconds, default=60.0, help="seconds a collective may wait (default 60)")
    p.add_argument("--check-equivalence", action="store_true", help="compare with one process on the global batch")
    p.add_argument("--equivalence-steps", type=arguments.count, default=ddp_check.STEPS, help="steps compared (0: all)")
    p.add_argument("--fail-rank", type=arguments.rank_or_none, default=-1, help="this rank fails at its first forward")
    args = p.parse_args(argv)
    distributed.check_fail_rank(args.fail_rank, PROG)  # a rank this job has, or every process exits with one message
    return args


class Watch:
    """What the harness sees of ddp_train's run through PyTorch's global hooks: the trained parameters (the
    optimizer's), and, on rank 0 with ``--check-equivalence``, the one-process reference after every step."""

    def __init__(self, args: argparse.Namespace, train_set: TensorDataset, device: torch.device) -> None:
        self.args, self.train_set, self.device = args, train_set, device
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        share = len(DistributedSampler(train_set, num_replicas=self.world_size, rank=self.rank))
        self.steps_per_epoch = math.ceil(share / args.batch_size)
        self.params: list[nn.Parameter] = []
        self.reference: ddp_check.Reference | None = None
        self.steps = 0

    def before_forward(self, module: nn.Module, inputs: object) -> None:
        """--fail-rank: that rank raises before its first forward pass; the others wait in their first all-reduce."""
        if self.rank == self.args.fail_rank:
            distributed.fail_here(self.args.fail_rank)

    def before_step(self, optimizer: torch.optim.Optimizer, *_: object) -> None:
        """At the first step of the script's optimizer, keep its parameters and, for the check, a plain copy of the
        model holding their values (rank 0's start, which DDP gave every rank)."""
        if self.params or (self.reference is not None and optimizer is self.reference.optimizer):
            return
        self.params = [p for group in optimizer.param_groups for p in group["params"]]
        if self.args.check_equivalence and self.rank == 0:
            twin = build_model(self.args.model).to(self.device)
            with torch.no_grad():
                for mine, theirs in zip(twin.parameters(), self.params, strict=True):
                    mine.copy_(theirs)
            self.reference = ddp_check.Reference(twin, self.args, self.train_set, self.world_size)

    def after_step(self, optimizer: torch.optim.Optimizer, *_: object) -> None:
        """The reference takes the same step on the global batch and compares weights."""
        if self.reference is None or optimizer is self.reference.optimizer:
            return
        trained = torch.cat([p.detach().flatten() for p in self.params])
        self.reference.step(trained, self.steps // self.steps_per_epoch)
        self.steps += 1

    @contextlib.contextmanager
    def hooked(self) -> Iterator[None]:
        """The hooks, installed for the block only."""
        handles = [register_optimizer_step_pre_hook(self.before_step)]
        handles.append(register_optimizer_step_post_hook(self.after_step))
        if self.args.fail_rank >= 0:
            handles.append(register_module_forward_pre_hook(self.before_forward))
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()


def run(args: argparse.Namespace, data: tuple[TensorDataset, TensorDataset], device: torch.device) -> dict:
    """ddp_train.train under watch, then the replicas' check (every rank) and rank 0's report and summary entries."""
    watch = Watch(args, data[0], device)
    with watch.hooked():
        summary = ddp_train.train(args, data, device)
    summary["replica_max_abs_diff"] = ddp_check.replica_gap(nn.ParameterList(watch.params))  # a collective
    if watch.rank == 0:
        say(f"replicas agree: largest difference from rank 0's weights {summary['replica_max_abs_diff']:.1e}")
        if watch.reference is not None:
            found, line = watch.reference.report()
            summary.update(found)
            say(line)
        (Path(args.out) / SUMMARY_FILE).write_text(json.dumps(summary, indent=2))
    return summary


@record  # on failure, torchrun's summary shows this process's traceback, not only an exit code
def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    distributed.check_out_folder(args.out, PROG)  # a bad --out: one line with the fix, exit 2
    data = load_data(args)  # before the process group: a download may take longer than the collective timeout
    device = ddp_train.setup(args.device, args.timeout)
    with distributed.leaving_cleanly(args.timeout):  # a barrier at the end; destroy_process_group whatever happens
        run(args, data, device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
