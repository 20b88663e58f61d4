"""Lesson 12 checkers: reference solutions pass, wrong answers do not, and every 12_ checker is covered."""

from __future__ import annotations

from exercises.checks import CHECKERS

COVERED = {"12_node_rank", "12_node_line"}
NODE0 = (
    "torchrun --nnodes=2 --nproc-per-node=4 --rdzv-backend=c10d --rdzv-endpoint=10.20.0.5:29500 --rdzv-id=mnist-7 "
    "--rdzv-conf=is_host=1 --local-addr=10.20.0.5 -m lessons.lesson_13 --device cuda --steps 600"
)
NODE1 = NODE0.replace("is_host=1", "is_host=0").replace("--local-addr=10.20.0.5", "--local-addr=10.20.0.6")
PLAIN = NODE0.replace("--rdzv-conf=is_host=1 --local-addr=10.20.0.5 ", "")


def test_every_lesson_12_checker_is_covered() -> None:
    assert {k for k in CHECKERS if k.startswith("12_")} == COVERED


def test_node_rank() -> None:
    check = CHECKERS["12_node_rank"]
    assert check(9, 12, 3, 4, 2, 1)
    assert check(5, 8, 2, 4, 1, 1)
    assert not check(1, 12, 3, 4, 2, 1)  # the local rank
    assert not check(7, 12, 3, 4, 2, 1)  # node rank times the number of nodes
    assert not check(9, 4, 3, 4, 2, 1)  # the processes of one node
    assert not check(9, 3, 3, 4, 2, 1)  # the number of nodes
    assert not check(9.0, 12, 3, 4, 2, 1)
    assert not check(None, None, 3, 4, 2, 1)  # the untouched cell
    assert not check(9, None, 3, 4, 2, 1)


def test_node_line() -> None:
    check = lambda line, node0=NODE0: CHECKERS["12_node_line"](line, node0, "10.20.0.6")  # noqa: E731
    assert check(NODE1)
    assert check(NODE1.replace("--rdzv-conf=is_host=0 ", ""))  # no is_host: node 1 finds it is not the endpoint
    assert check(PLAIN, PLAIN)  # where node 0 names no address, the same line runs on every node
    spaced = NODE1.replace("--nnodes=2", "--nnodes 2").replace("--rdzv-id=", "--rdzv_id=")
    assert check(spaced)  # the same options, written the other ways torchrun accepts
    assert check(NODE1.replace("--nnodes=2", "--nnodes=2 --node-rank=1"))
    assert not check(NODE0)  # node 0's own line: it claims the store and node 0's address
    assert not check(NODE1.replace("--local-addr=10.20.0.6", "--local-addr=10.20.0.5"))
    assert not check(NODE1.replace("--local-addr=10.20.0.6 ", ""))
    assert not check(NODE1.replace("is_host=0", "is_host=true"))
    assert not check(NODE1.replace("10.20.0.5:29500", "10.20.0.6:29500"))  # its own address as the endpoint
    assert not check(NODE1.replace("10.20.0.5:29500", "localhost:29500"))
    assert not check(NODE1.replace("mnist-7", "mnist-8"))
    assert not check(NODE1.replace("--nnodes=2", "--nnodes=1"))
    assert not check(NODE1.replace("--nproc-per-node=4", "--nproc-per-node=1"))
    assert not check(NODE1.replace("c10d", "static"))
    assert not check(NODE1.replace("--steps 600", "--steps 60"))
    assert not check(NODE1.replace("-m lessons.lesson_13", "lessons/lesson_13.py"))
    assert not check("torchrun --standalone --nproc-per-node=4 -m lessons.lesson_13 --device cuda --steps 600")
    assert not check("torchrun --nnodes=2")  # no script: torchrun's parser refuses it
    assert not check("python -m lessons.lesson_13")
    assert not check("torchrun --nnodes=2 'unclosed")
    assert not check(["torchrun"])
    assert not check(None)  # the untouched cell
