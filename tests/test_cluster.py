"""The cluster files lesson 12 hands over (cluster/): what can be checked without a cluster. The SLURM script is valid
bash and, run with stand-ins for scontrol and srun, starts one torchrun per node whose arguments torchrun's own parser
reads as a c10d rendezvous at the allocation's first node; the TrainJob parses as YAML with the fields of the Kubeflow
Trainer's v1alpha1 API that it uses. Both run the course's own script with arguments its parser accepts."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from torch.distributed.run import get_args_parser

from lessons import lesson_13 as elastic_train

ROOT = Path(__file__).resolve().parents[1]
SBATCH = ROOT / "cluster" / "slurm" / "train.sbatch"
TRAINJOB = ROOT / "cluster" / "kubernetes" / "trainjob.yaml"


def torchrun_args(words: list[str]):
    """The words after ``torchrun``, read by torchrun's parser; the script must be the course's, its arguments valid."""
    args = get_args_parser().parse_args(words)
    assert args.module and args.training_script == "lessons.lesson_13"
    elastic_train.parse_args(args.training_script_args)  # exits (a test failure) on an argument the script lacks
    return args


def test_the_batch_script_is_valid_bash() -> None:
    result = subprocess.run([bash(), "-n", str(SBATCH)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_the_batch_script_asks_slurm_for_one_task_per_node() -> None:
    directives = [line.split()[1] for line in SBATCH.read_text().splitlines() if line.startswith("#SBATCH")]
    assert "--ntasks-per-node=1" in directives  # one torchrun per node: it starts the workers itself
    assert any(d.startswith("--nodes=") for d in directives)


def test_the_batch_script_asks_for_a_warning_before_the_stop_and_may_be_queued_again() -> None:
    directives = [line.split()[1] for line in SBATCH.read_text().splitlines() if line.startswith("#SBATCH")]
    assert "--requeue" in directives
    assert "--signal=B:USR1@120" in directives  # USR1 to the batch shell, 120 s before the stop


def stand_in_env(tmp_path: Path, job_id: str, srun: str) -> dict[str, str]:
    """The environment sbatch gives the script as job ``job_id`` on two nodes, with stand-ins for scontrol (it lists
    the nodes and writes any other call to scontrol.txt) and for srun (the shell code ``srun``)."""
    stand_ins = tmp_path / "bin"
    stand_ins.mkdir(exist_ok=True)
    calls = shlex.quote(str(tmp_path / "scontrol.txt"))
    hostnames = 'printf "gpu-a07\\ngpu-b12\\n"'
    (stand_ins / "scontrol").write_text(
        f'#!/bin/sh\nif [ "$1 $2" = "show hostnames" ]; then {hostnames}; else echo "$@" >> {calls}; fi\n'
    )
    (stand_ins / "srun").write_text(f"#!/bin/sh\n{srun}\n")
    for tool in stand_ins.iterdir():
        tool.chmod(0o755)
    env = {**os.environ, "PATH": f"{stand_ins}:{os.environ['PATH']}", "SLURM_JOB_NODELIST": "gpu-a07,gpu-b12"}
    env.update(SLURM_JOB_ID=job_id, SLURM_JOB_NUM_NODES="2", SLURM_JOB_NAME="elastic-train", SLURM_CPUS_PER_TASK="16")
    return env


def bash() -> str:
    found = shutil.which("bash")
    assert found, "bash is needed for this check"
    return found


def submitted(tmp_path: Path, job_id: str) -> list[str]:
    """The words the batch script passes to srun, run with stand-ins for scontrol and srun as job ``job_id`` on two
    nodes with the environment sbatch gives it."""
    env = stand_in_env(tmp_path, job_id, f'printf "%s\\n" "$@" > {shlex.quote(str(tmp_path / "srun.txt"))}')
    result = subprocess.run([bash(), str(SBATCH)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "scontrol.txt").exists()  # a job that ends by itself is not queued again
    return (tmp_path / "srun.txt").read_text().splitlines()


# srun's stand-in: says it started, then runs until SIGTERM, which it notes before exiting with status 1, as torchrun
# does when it is stopped by a signal.
TRAINING = """trap 'echo TERM >> "$SRUN_LOG"; exit 1' TERM
echo started >> "$SRUN_LOG"
while :; do sleep 0.1; done"""


@pytest.mark.parametrize("signum", [signal.SIGUSR1, signal.SIGTERM], ids=["USR1", "TERM"])
def test_a_signal_to_the_batch_shell_stops_the_training_and_queues_the_job_again(tmp_path: Path, signum) -> None:
    env = {**stand_in_env(tmp_path, "4242", TRAINING), "SRUN_LOG": str(tmp_path / "srun.log")}
    job = subprocess.Popen([bash(), str(SBATCH)], env=env, cwd=tmp_path, stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "srun.log").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (tmp_path / "srun.log").exists(), "srun's stand-in never started"
        job.send_signal(signum)  # as SLURM does: to the batch shell alone
        said, _ = job.communicate(timeout=30)
    finally:
        job.kill()
        job.wait()
    assert (tmp_path / "srun.log").read_text().split() == ["started", "TERM"]  # passed on to srun as SIGTERM
    assert (tmp_path / "scontrol.txt").read_text().split() == ["requeue", "4242"]
    assert job.returncode == 75, said  # STOPPED, as lessons.lesson_13's workers exit
    assert f"got {signum.name}" in said


def test_a_training_that_fails_without_a_signal_is_not_queued_again(tmp_path: Path) -> None:
    env = stand_in_env(tmp_path, "4242", "exit 3")
    result = subprocess.run([bash(), str(SBATCH)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 3
    assert not (tmp_path / "scontrol.txt").exists()


def test_the_batch_script_runs_one_torchrun_per_node_meeting_at_the_first_node(tmp_path: Path) -> None:
    words = submitted(tmp_path, "4242")
    srun = words[: words.index("torchrun")]
    assert "--ntasks-per-node=1" in srun
    assert "--cpus-per-task=16" in srun  # srun is told itself: some SLURM versions do not take it from sbatch
    args = torchrun_args(words[words.index("torchrun") + 1 :])
    assert (args.nnodes, args.nproc_per_node, args.rdzv_backend) == ("2", "4", "c10d")
    assert (args.rdzv_endpoint, args.rdzv_id) == ("gpu-a07:29742", "4242")  # 29500 + 4242 % 1000
    assert not args.standalone


def test_two_jobs_on_one_first_node_meet_on_different_ports(tmp_path: Path) -> None:
    endpoints = []
    for job_id in ("4242", "4243"):
        words = submitted(tmp_path, job_id)
        endpoints.append(torchrun_args(words[words.index("torchrun") + 1 :]).rdzv_endpoint)
    assert endpoints[0] != endpoints[1]
    assert all(29500 <= int(endpoint.rsplit(":", 1)[1]) < 30500 for endpoint in endpoints)


def test_the_job_submitted_again_resumes_from_the_same_folder(tmp_path: Path) -> None:
    """A lost node ends the step; the job submitted again gets a new id and must find the old checkpoints."""
    outs = []
    for job_id in ("4242", "5077"):
        words = submitted(tmp_path, job_id)
        script = torchrun_args(words[words.index("torchrun") + 1 :]).training_script_args
        outs.append(elastic_train.parse_args(script).out)
    assert outs[0] == outs[1] and "4242" not in outs[0]


def test_the_trainjob_has_the_fields_the_trainer_reads() -> None:
    job = yaml.safe_load(TRAINJOB.read_text())
    assert (job["apiVersion"], job["kind"]) == ("trainer.kubeflow.org/v1alpha1", "TrainJob")
    assert job["metadata"]["name"]
    assert set(job["spec"]) == {"runtimeRef", "trainer"}
    assert job["spec"]["runtimeRef"] == {"name": "torch-distributed"}
    trainer = job["spec"]["trainer"]
    assert set(trainer) <= {"image", "command", "args", "env", "numNodes", "resourcesPerNode", "numProcPerNode"}
    assert isinstance(trainer["numNodes"], int) and trainer["numNodes"] >= 2
    assert trainer["resourcesPerNode"]["limits"]["nvidia.com/gpu"] >= 1
    assert all(set(item) == {"name", "value"} and isinstance(item["value"], str) for item in trainer["env"])


def test_the_trainjob_runs_the_course_script_with_torchrun(monkeypatch: pytest.MonkeyPatch) -> None:
    trainer = yaml.safe_load(TRAINJOB.read_text())["spec"]["trainer"]
    assert trainer["command"] == ["bash", "-c"] and len(trainer["args"]) == 1
    steps = [shlex.split(step) for step in trainer["args"][0].split("&&")]
    assert steps[0][:2] == ["pip", "install"]
    assert steps[-1][:2] == ["exec", "torchrun"]
    # The runtime passes the node settings as PET_ variables; torchrun's parser reads them as its defaults.
    pet = {
        "PET_NNODES": "2",
        "PET_NPROC_PER_NODE": "4",
        "PET_NODE_RANK": "1",
        "PET_MASTER_ADDR": "elastic-train-node-0-0",
    }
    for name, value in pet.items():
        monkeypatch.setenv(name, value)
    args = torchrun_args(steps[-1][2:])
    assert (args.nnodes, args.nproc_per_node, args.node_rank) == ("2", "4", 1)
    assert args.master_addr == pet["PET_MASTER_ADDR"]
    # Given a node rank and a master address, torchrun meets the other pods at the static rendezvous, not c10d: the
    # file says so, and that a failed pod means running the TrainJob again
    assert args.rdzv_backend == "static"
    comments = " ".join(line.lstrip("# ") for line in TRAINJOB.read_text().splitlines() if line.startswith("#"))
    assert "static rendezvous, not c10d" in comments and "resumes from the newest checkpoint" in comments
