"""Lesson 12: the cluster files it shows are the files in cluster/, and the helpers.nodes pieces it prints with."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import nbformat
import pytest

from helpers import nodes

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "12_many_nodes.ipynb"


def fenced_blocks(language: str) -> list[str]:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    text = "\n".join(cell.source for cell in nb.cells if cell.cell_type == "markdown")
    return re.findall(rf"```{language}\n(.*?)\n```", text, flags=re.S)


@pytest.mark.parametrize(
    ("language", "path"), [("bash", "cluster/slurm/train.sbatch"), ("yaml", "cluster/kubernetes/trainjob.yaml")]
)
def test_the_lesson_shows_the_cluster_files_as_they_are(language: str, path: str) -> None:
    assert fenced_blocks(language) == [(ROOT / path).read_text().rstrip("\n")]


def test_agent_line_types_torchrun_after_the_settings_of_an_env_prefix() -> None:
    command = nodes.agent_command(2, 4, "10.0.0.1:29500", "job", ["--steps", "3"], rdzv_conf="is_host=1")
    assert nodes.agent_line(command).startswith("torchrun --nnodes=2 --nproc-per-node=4 --rdzv-backend=c10d ")
    assert nodes.agent_line(command).endswith("--rdzv-conf=is_host=1 -m lessons.lesson_13 --steps 3")
    shown = nodes.agent_line(nodes.on_gpus(command, [2, 3]))
    assert shown == "CUDA_VISIBLE_DEVICES=2,3 " + nodes.agent_line(command)


def test_on_gpus_runs_the_command_with_only_those_gpus_visible() -> None:
    command = nodes.on_gpus(["sh", "-c", 'echo "$CUDA_VISIBLE_DEVICES"'], range(2, 4))
    assert subprocess.run(command, capture_output=True, text=True, check=True).stdout == "2,3\n"


def test_outcome_names_the_last_error_of_a_failed_agent() -> None:
    stderr = (
        "torch.distributed.DistNetworkError: The client socket has timed out\n"
        "The above exception was the direct cause of the following exception:\n"
        "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store\n"
    )
    assert nodes.outcome(subprocess.CompletedProcess([], 1, "", stderr)) == (
        "exit code 1, RendezvousConnectionError: it lost the rendezvous' store: the node hosting it at the endpoint is "
        "gone, or another program answers"
    )
    timed_out = "    raise RendezvousTimeoutError\ntorch.distributed.elastic.rendezvous.api.RendezvousTimeoutError\n"
    assert nodes.outcome(subprocess.CompletedProcess([], 1, "", timed_out)) == (
        "exit code 1, RendezvousTimeoutError: the other nodes did not all join within join_timeout (600 s, torchrun's "
        "default)"
    )
    assert nodes.outcome(subprocess.CompletedProcess([], 0, "", "UserWarning: x\n")) == "exit code 0"
    assert nodes.outcome(subprocess.CompletedProcess([], 2, "", "")) == "exit code 2"
    assert nodes.outcome(subprocess.TimeoutExpired([], 15)) == "still running after 15 s, then stopped"


def test_a_name_lookup_is_bounded_and_its_error_is_said():
    import threading

    from helpers import nodes

    never = threading.Event()
    assert nodes.looked_up(lambda: never.wait(30) and "late", timeout=0.1) == "no answer within 0.1 s"
    never.set()

    def fails() -> str:
        raise OSError("[Errno -2] Name or service not known")

    assert nodes.looked_up(fails) == "no answer ([Errno -2] Name or service not known)"
    assert nodes.looked_up(lambda: "10.0.0.1") == "10.0.0.1"


def test_the_rehearsed_nodes_give_the_loopback_address_not_the_host_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """socket.getfqdn(), torchrun's default, often does not resolve (a Mac's NAME.local): each agent names 127.0.0.1,
    an option the installed torchrun's parser reads."""
    from torch.distributed.run import get_args_parser

    started = []
    monkeypatch.setattr(nodes, "run_together", lambda commands, timeout, env: started.extend(commands) or [])
    nodes.rehearse(2, 1, ["--steps", "3"])
    assert len(started) == 2
    for command in started:
        assert get_args_parser().parse_args(command[3:]).local_addr == "127.0.0.1"
