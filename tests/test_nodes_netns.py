"""The two-node rehearsal across a real network interface: each torchrun agent in a network namespace of its own
(``ip netns``), the two joined by a veth pair with an address on each side, so the rendezvous and gloo's traffic
leave through an interface that is not loopback, as between two machines. Needs root and ``ip``; skipped with the
reason where namespaces cannot be made."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import nodes
from helpers.distributed import run_together
from lessons import lesson_13 as elastic_train

pytestmark = pytest.mark.slow  # two torchrun agents and their workers

SUBNET = "10.213.77"


def ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)


@pytest.fixture
def two_hosts() -> Iterator[list[tuple[str, str, str]]]:
    """Two namespaces joined by a veth pair: (namespace, its address, its interface) for each."""
    if shutil.which("ip") is None:
        pytest.skip("the ip command (iproute2) is not installed")
    if os.geteuid() != 0:
        pytest.skip("making network namespaces needs root (CI runs as root)")
    tag = f"c{os.getpid() % 100000}"
    hosts = [(f"{tag}n{i}", f"{SUBNET}.{i + 1}", f"{tag}v{i}") for i in range(2)]
    made = []
    try:
        for name, _, _ in hosts:
            done = ip("netns", "add", name)
            if done.returncode != 0:
                pytest.skip(f"ip netns add failed here: {done.stderr.strip()}")
            made.append(name)
        (n0, a0, v0), (n1, a1, v1) = hosts
        steps = [
            ("link", "add", v0, "netns", n0, "type", "veth", "peer", "name", v1, "netns", n1),
            ("-n", n0, "addr", "add", f"{a0}/24", "dev", v0),
            ("-n", n1, "addr", "add", f"{a1}/24", "dev", v1),
            *[("-n", n, "link", "set", dev, "up") for n, _, dev in hosts],
            *[("-n", n, "link", "set", "lo", "up") for n, _, _ in hosts],
        ]
        for step in steps:
            done = ip(*step)
            assert done.returncode == 0, f"ip {' '.join(step)}: {done.stderr}"
        yield hosts
    finally:
        for name in made:  # deleting a namespace deletes its end of the veth pair, and with it the pair
            ip("netns", "delete", name)


def test_two_nodes_in_two_namespaces_train_over_a_veth_pair(two_hosts, tmp_path: Path) -> None:
    (n0, a0, _), _ = two_hosts
    endpoint = f"{a0}:{nodes.free_port()}"  # node 0's address: the rendezvous is reached across the pair
    commands = []
    for node, (name, address, dev) in enumerate(two_hosts):
        args = ["--steps", "6", "--every", "3", "--synthetic-size", "128", "--timeout", "30", "--out", str(tmp_path)]
        # torchrun hosts the rendezvous store where the endpoint's host name is this machine's; inside a namespace
        # the machine's name does not resolve to the namespace's address, so node 0 is told (is_host), as it would
        # be on a cluster whose endpoint is an address rather than the first node's name.
        # Likewise each node gives the address the others reach it at (local_addr), where the store of the workers
        # is served and found.
        conf = f"is_host={int(node == 0)}"
        agent = nodes.agent_command(2, 1, endpoint, "netns", args, rdzv_conf=conf, local_addr=address)
        # Each node names its own interface for gloo, as one would with GLOO_SOCKET_IFNAME on a real cluster.
        commands.append(["ip", "netns", "exec", name, "env", f"GLOO_SOCKET_IFNAME={dev}", *agent])
    results = run_together(commands, timeout=180)
    for result in results:
        assert isinstance(result, subprocess.CompletedProcess), f"an agent hung:\n{result.stderr}"
        assert result.returncode == 0, result.stderr[-3000:]
    said = "".join(r.stdout for r in results)
    assert "[node 0, local rank 0]" in said and "[node 1, local rank 0]" in said
    assert "largest difference from rank 0's weights 0.0e+00" in said
    logged = [json.loads(line) for line in (tmp_path / elastic_train.LOSSES).read_text().splitlines()]
    assert [entry["step"] for entry in logged] == list(range(1, 7))
