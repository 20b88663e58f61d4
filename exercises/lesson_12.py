"""Lesson 12's exercise checkers."""

from __future__ import annotations

import argparse
import contextlib
import io
import shlex

from exercises.core import exercise


@exercise(
    "12_node_rank",
    "rank and world size of local rank {local_rank} on node {node_rank} ({nnodes} nodes, {nproc} processes each)",
    answers=2,
)
def check_node_rank(
    rank: int | None, world_size: int | None, nnodes: int, nproc: int, node_rank: int, local_rank: int
) -> str | None:
    """The RANK and WORLD_SIZE torchrun gives the worker of ``local_rank`` on node ``node_rank`` (GROUP_RANK) of a job
    of ``nnodes`` nodes with ``nproc`` workers each."""
    for name, value in (("rank", rank), ("world_size", world_size)):
        if isinstance(value, bool) or not isinstance(value, int):
            return f"{name} should be a whole number, got {type(value).__name__}"
    if world_size != nnodes * nproc:
        if world_size in (nnodes, nproc):
            return "the world counts every process of the job: nodes times processes per node"
        return f"the world size is the number of processes in the whole job, not {world_size}"
    if rank != node_rank * nproc + local_rank:
        if rank == local_rank:
            return "that is the local rank, the worker's number on its own node; the rank counts across nodes"
        if rank == node_rank * nnodes + local_rank:
            return "each node before this one holds nproc-per-node ranks, not nnodes"
        return "the nodes before this one hold node_rank * nproc-per-node ranks; this worker comes after them"
    return None


def parse_torchrun(line: str) -> argparse.Namespace:
    """``line`` (``torchrun ...`` as typed) read by torchrun's own parser; ValueError where torchrun would refuse it."""
    from torch.distributed.run import get_args_parser

    words = shlex.split(line)
    if not words or words[0] != "torchrun":
        raise ValueError("the line should start with torchrun")
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            return get_args_parser().parse_args(words[1:])
    except SystemExit:
        said = errors.getvalue().strip().splitlines()
        reason = said[-1].split("error: ", 1)[-1] if said else "torchrun's parser stopped"
        raise ValueError(f"torchrun would refuse it: {reason}") from None


def _flag(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "y", "on")


@exercise("12_node_line", "node 1's torchrun line")
def check_node_line(line: str | None, node0_line: str, node1_address: str) -> str | None:
    """``line`` is node 1's torchrun command for the job whose node 0 runs ``node0_line``: torchrun's parser must
    read the same node count, processes per node, rendezvous backend, endpoint, id and script from both; where node 0
    names its own address (--local-addr), node 1 names ``node1_address``, and only node 0 hosts the store (is_host)."""
    if not isinstance(line, str):
        return f"write the line as a string, got {type(line).__name__}"
    try:
        mine = parse_torchrun(line)
    except ValueError as err:
        return str(err)
    theirs = parse_torchrun(node0_line)
    if mine.standalone:
        return "--standalone starts a rendezvous of one node on this machine; node 1 must meet node 0"
    fields = [
        ("nnodes", "--nnodes", "every node gives the same number of nodes"),
        ("nproc_per_node", "--nproc-per-node", "each node starts as many workers as node 0 here"),
        ("rdzv_backend", "--rdzv-backend", "all nodes use the same rendezvous backend"),
        ("rdzv_endpoint", "--rdzv-endpoint", "the endpoint is node 0's address and port, the same on every node"),
        ("rdzv_id", "--rdzv-id", "the rendezvous id names the job: a node with another id waits in another group"),
        ("training_script", "the script", "every node runs the same training script"),
        ("training_script_args", "the script's arguments", "every node passes the script the same arguments"),
    ]
    for field, option, why in fields:
        if getattr(mine, field) != getattr(theirs, field):
            return f"{option} is {getattr(mine, field)!r}, node 0 has {getattr(theirs, field)!r}: {why}"
    if mine.module != theirs.module:
        return "node 0 runs the script as a module (-m); node 1 must too"
    conf = dict(item.split("=", 1) for item in mine.rdzv_conf.split(",") if "=" in item)
    if _flag(conf.get("is_host", "0")):
        return "is_host=1 makes node 1 host the rendezvous store; only node 0, the endpoint's host, does"
    if theirs.local_addr and mine.local_addr != node1_address:
        got = repr(mine.local_addr) if mine.local_addr else "missing"
        return f"--local-addr is {got}: node 1 names the address the other nodes reach it at, {node1_address}"
    return None
