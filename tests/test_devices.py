"""helpers.devices: choosing, validating and synchronising devices, with GPUs simulated where the machine has none."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers import devices
from helpers.devices import DeviceUnavailableError, pick_device
from lessons import lesson_00
from lessons import lesson_01 as visible_devices


@pytest.fixture(autouse=True)
def _no_override(monkeypatch):
    monkeypatch.delenv("COURSE_DEVICE", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(devices, "accelerator_available", lambda kind: False)
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: False)


@pytest.fixture
def two_gpus(monkeypatch):
    """A machine with two CUDA GPUs, as far as pick_device can tell."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: ["sm_75", "sm_80"])
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=None: (7, 5))


def test_auto_is_cpu_without_accelerators(no_gpu):
    assert pick_device() == torch.device("cpu")
    assert pick_device("auto") == torch.device("cpu")
    assert devices.available_types() == ["cpu"]


def test_auto_prefers_cuda_and_names_the_index(two_gpus):
    assert pick_device() == torch.device("cuda", 0)
    # an indexed device compares equal to where tensors end up; a bare "cuda" would not
    assert str(pick_device("cuda")) == "cuda:0"
    assert pick_device("cuda:1") == torch.device("cuda", 1)
    assert pick_device(torch.device("cuda", 1)) == torch.device("cuda", 1)


def test_auto_takes_mps_when_no_cuda(monkeypatch, no_gpu):
    monkeypatch.setattr(devices, "accelerator_available", lambda kind: kind == "mps")
    assert pick_device() == torch.device("mps", 0)


def test_accelerator_that_is_not_usable_is_ignored(monkeypatch, no_gpu):
    # current_accelerator() may name a backend this machine cannot use
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda *a, **k: torch.device("xpu"))
    assert devices.available_types() == ["cpu"]
    monkeypatch.setattr(devices, "accelerator_available", lambda kind: kind == "xpu")
    assert devices.available_types() == ["xpu", "cpu"]


@pytest.mark.parametrize("name", ["tpu", "gpu", "cuda0", "", "meta"])
def test_unknown_name_lists_choices(name):
    with pytest.raises(ValueError, match="'auto', 'cpu', 'cuda', 'mps', 'xpu'"):
        pick_device(name)


@pytest.mark.parametrize("name", ["cuda:x", "cpu:1"])
def test_malformed_index(name):
    with pytest.raises(ValueError):
        pick_device(name)


def test_wrong_type():
    with pytest.raises(TypeError, match="str or torch.device"):
        pick_device(0)


def test_missing_cuda_names_colab_and_kaggle(no_gpu):
    with pytest.raises(DeviceUnavailableError) as info:
        pick_device("cuda")
    message = str(info.value)
    assert "Runtime > Change runtime type" in message
    assert "Kaggle: Settings > Accelerator" in message
    assert isinstance(info.value, RuntimeError)


def test_missing_cuda_mentions_visible_devices_when_set(monkeypatch, no_gpu):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(DeviceUnavailableError, match="CUDA_VISIBLE_DEVICES='' hides every GPU from this process"):
        pick_device("cuda:0")


def test_index_out_of_range_says_how_many(two_gpus):
    with pytest.raises(DeviceUnavailableError, match=r"only 2 GPU\(s\) are visible.*CUDA_VISIBLE_DEVICES"):
        pick_device("cuda:7")


def test_cuda_7_is_unavailable_on_this_machine():
    with pytest.raises(DeviceUnavailableError):
        pick_device("cuda:7")


@pytest.mark.parametrize("name", ["mps", "xpu"])
def test_missing_other_accelerators(no_gpu, name):
    with pytest.raises(DeviceUnavailableError, match=name.upper()):
        pick_device(name)


def test_environment_overrides_auto_only(monkeypatch, no_gpu):
    monkeypatch.setenv("COURSE_DEVICE", "cpu")
    assert pick_device() == torch.device("cpu")
    monkeypatch.setenv("COURSE_DEVICE", "cuda")
    with pytest.raises(DeviceUnavailableError):
        pick_device("auto")
    assert pick_device("cpu") == torch.device("cpu")  # an explicit request wins over the environment
    monkeypatch.setenv("COURSE_DEVICE", "auto")
    assert pick_device() == torch.device("cpu")


def test_synchronize_calls_the_right_backend(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(("cuda", device)))
    monkeypatch.setattr(torch.mps, "synchronize", lambda: calls.append(("mps", None)))
    devices.synchronize("cpu")
    devices.synchronize("meta")
    assert calls == []
    devices.synchronize("cuda:1")
    devices.synchronize(torch.device("mps"))
    assert calls == [("cuda", torch.device("cuda", 1)), ("mps", None)]


def test_runtime_detection(monkeypatch):
    monkeypatch.delenv("COLAB_RELEASE_TAG", raising=False)
    monkeypatch.delenv("KAGGLE_KERNEL_RUN_TYPE", raising=False)
    monkeypatch.delenv("KAGGLE_URL_BASE", raising=False)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    assert lesson_00.runtime() == "local"
    monkeypatch.setenv("KAGGLE_KERNEL_RUN_TYPE", "Interactive")
    assert lesson_00.runtime() == "Kaggle"
    monkeypatch.setenv("COLAB_RELEASE_TAG", "release-colab")
    assert lesson_00.runtime() == "Colab"


def test_report_as_data_and_text():
    report = lesson_00.environment_report()
    assert report["torch"] == torch.__version__
    assert report["cuda_available"] == torch.cuda.is_available()
    assert report["cpu_threads"] == torch.get_num_threads()
    text = lesson_00.format_report(report)
    assert f"PyTorch                {torch.__version__}" in text
    table = text.split("\n\n")[0]  # the aligned lines; a note on why there is no CUDA may follow
    assert table.splitlines()[-1].startswith("pick_device() chooses")


def test_report_says_when_course_device_chose_the_device(monkeypatch, no_gpu):
    monkeypatch.setenv("COURSE_DEVICE", " cpu ")
    report = lesson_00.environment_report()
    assert report["auto_device"] == "cpu" and report["course_device"] == "cpu"
    assert "pick_device() chooses  cpu (from COURSE_DEVICE)" in lesson_00.format_report(report)
    for value in ("auto", " AUTO ", ""):  # not an override: pick_device searches for the best device itself
        monkeypatch.setenv("COURSE_DEVICE", value)
        report = lesson_00.environment_report()
        assert report["course_device"] is None
        assert "COURSE_DEVICE" not in lesson_00.format_report(report)
    monkeypatch.delenv("COURSE_DEVICE")
    assert lesson_00.environment_report()["course_device"] is None
    monkeypatch.setenv("COURSE_DEVICE", "cuda")  # unusable here: the line says why, and no "(from ...)" is added
    line = lesson_00.format_report().split("\n\n")[0].splitlines()[-1]
    assert line.startswith("pick_device() chooses  nothing: COURSE_DEVICE='cuda' is set")
    assert not line.endswith("(from COURSE_DEVICE)")
    older = {k: v for k, v in lesson_00.environment_report().items() if k != "course_device"}
    assert lesson_00.format_report(older)  # a report made without the key still formats


def test_report_lists_each_gpu():
    report = lesson_00.environment_report() | {
        "gpus": [
            {"index": 0, "name": "Tesla T4", "memory_gib": 14.6, "compute_capability": "7.5", "multiprocessors": 40}
        ],
    }
    assert "GPU 0" in lesson_00.format_report(report)
    assert "Tesla T4, 14.6 GiB, compute capability 7.5, 40 SMs" in lesson_00.format_report(report)


def test_report_command_runs():
    out = subprocess.run([sys.executable, "-m", "lessons.lesson_00"], capture_output=True, text=True, check=True)
    assert "CUDA available" in out.stdout and "pick_device() chooses" in out.stdout


@pytest.mark.parametrize(
    ("capability", "arch_list", "supported"),
    [
        ((7, 5), ["sm_75", "sm_80", "sm_90"], True),  # T4 on a current build
        ((8, 6), ["sm_75", "sm_80"], True),  # a cubin runs on later minor versions of its major
        ((6, 0), ["sm_75", "sm_80", "sm_120"], False),  # P100 on a build without Pascal kernels
        ((7, 0), ["sm_75", "sm_80"], False),  # V100: sm_75 code does not run on 7.0
        ((12, 1), ["sm_80", "compute_90"], True),  # PTX compiles for newer GPUs
        ((8, 0), ["sm_75", "compute_90"], False),  # but not for older ones
    ],
)
def test_gpu_without_kernels_is_refused_with_the_fix(monkeypatch, two_gpus, capability, arch_list, supported):
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: arch_list)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=None: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: "Tesla P100-PCIE-16GB")
    assert devices.arch_supported(0) is supported
    if supported:
        assert pick_device() == torch.device("cuda", 0)
        return
    for request in (None, "cuda", "cuda:1"):
        with pytest.raises(DeviceUnavailableError, match="no kernels for it.*GPU T4 x2"):
            pick_device(request)


def test_an_old_torch_or_python_gets_one_message_with_the_install_line():
    (torch_problem, python_problem) = lesson_00.version_problems("2.7.1+cu126", "3.9.18")
    assert "PyTorch 2.7.1+cu126 is older than 2.8" in torch_problem
    assert 'pip install -U "torch>=2.8" "torchvision>=0.23"' in torch_problem
    assert "Python 3.9.18 is older than 3.10" in python_problem
    assert lesson_00.version_problems("2.8.0+cu128", "3.10.0") == []
    assert lesson_00.version_problems("2.10.0a0+git1234", "3.13.0") == []


def test_the_report_warns_below_the_floor_and_is_silent_above_it():
    report = lesson_00.environment_report()
    assert "WARNING" not in lesson_00.format_report(report)
    assert "WARNING: PyTorch 2.4.1 is older than 2.8" in lesson_00.format_report({**report, "torch": "2.4.1"})


def test_the_floor_constants_agree_with_requirements_txt():
    text = (Path(__file__).resolve().parent.parent / "requirements.txt").read_text()
    assert f"torch>={'.'.join(map(str, lesson_00.TORCH_FLOOR))}\n" in text
    assert f"torchvision>={lesson_00.TORCHVISION_FLOOR}\n" in text


def test_a_bad_course_device_names_the_variable_and_the_fix(monkeypatch):
    monkeypatch.setenv("COURSE_DEVICE", "cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(devices.DeviceUnavailableError) as info:
        devices.pick_device("auto")
    message = str(info.value)
    assert message.startswith("COURSE_DEVICE='cuda' is set in the environment")
    assert "unset COURSE_DEVICE (or set it to auto or cpu)" in message
    monkeypatch.setenv("COURSE_DEVICE", "bogus")
    with pytest.raises(ValueError, match="(?s)COURSE_DEVICE='bogus'.*Unknown device"):
        devices.pick_device()


# --- child processes (lesson 01, CUDA_VISIBLE_DEVICES) ---


def test_child_output_sets_and_removes_variables(monkeypatch):
    monkeypatch.setenv("COURSE_CHILD_KEPT", "inherited")
    monkeypatch.setenv("COURSE_CHILD_GONE", "present")
    code = (
        "import os; env = os.environ; "
        "print(env.get('COURSE_CHILD_SET'), env.get('COURSE_CHILD_GONE'), env['COURSE_CHILD_KEPT'])"
    )
    out = visible_devices.child_output(code, env={"COURSE_CHILD_SET": "x=1", "COURSE_CHILD_GONE": None})
    assert out == "x=1 None inherited"
    assert visible_devices.child_output("print('  padded  ')") == "padded"


def test_child_output_hides_every_gpu_with_an_empty_value():
    code = "import torch; print(torch.cuda.device_count(), torch.cuda.is_available())"
    assert visible_devices.child_output(code, env={"CUDA_VISIBLE_DEVICES": ""}) == "0 False"


def test_child_output_reports_a_failing_child_by_its_last_line():
    with pytest.raises(ChildProcessError, match=r"exit status 1\): ZeroDivisionError: division by zero"):
        visible_devices.child_output("print('partial'); 1 / 0")


def test_child_output_rejects_bad_input_and_says_why():
    with pytest.raises(ValueError, match="non-empty string"):
        visible_devices.child_output("  ")
    with pytest.raises(TypeError, match=r"env\['CUDA_VISIBLE_DEVICES'\] must be a string .* or None"):
        visible_devices.child_output("print(1)", env={"CUDA_VISIBLE_DEVICES": 0})
    with pytest.raises(ChildProcessError, match=r"did not finish within 0.5 s"):
        visible_devices.child_output("import time; time.sleep(30)", timeout=0.5)


@pytest.mark.parametrize(
    ("machine_gpus", "count", "tensor_on", "expected"),
    [
        (0, 0, None, "nothing to hide: this machine shows no CUDA GPU"),
        (1, 0, None, "hidden: no GPU counted"),
        (1, 0, "cuda:0", "NOT hidden: device_count() said 0, yet a tensor still landed on cuda:0"),
        (2, 2, "cuda:0", "NOT hidden: device_count() said 2, and a tensor landed on cuda:0"),
        (1, 1, None, "device_count() said 1, yet no tensor could be put on a GPU"),
    ],
)
def test_hiding_outcome_follows_what_the_child_measured(machine_gpus, count, tensor_on, expected):
    assert visible_devices.hiding_outcome(machine_gpus, count, tensor_on).startswith(expected)


def test_hiding_outcome_refuses_negative_counts():
    with pytest.raises(ValueError, match="cannot be negative"):
        visible_devices.hiding_outcome(-1, 0, None)


@pytest.mark.parametrize(
    ("card", "capability", "dtype"),
    [
        ("P100", (6, 0), torch.float16),
        ("T4", (7, 5), torch.float16),
        ("A100", (8, 0), torch.bfloat16),
        ("H100", (9, 0), torch.bfloat16),
    ],
)
def test_mixed_precision_follows_the_compute_capability(card, capability, dtype):
    assert devices.cuda_autocast_dtype(capability) is dtype, card
    assert devices.needs_grad_scaler(devices.cuda_autocast_dtype(capability)) is (dtype is torch.float16), card


def test_autocast_dtype_asks_the_lessons_cuda_device_for_its_capability(monkeypatch):
    asked = []
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: asked.append(d) or (7, 5))
    assert devices.autocast_dtype("cuda:1") is torch.float16
    assert asked == [torch.device("cuda:1")]
    assert devices.autocast_dtype("cpu") is torch.bfloat16
    assert devices.needs_grad_scaler(torch.bfloat16) is False
    assert devices.needs_grad_scaler(None) is False


@pytest.mark.parametrize(
    ("build", "driver", "visible", "says"),
    [
        (None, "550.54.15", None, "is a CPU-only build, on a machine with NVIDIA driver 550.54.15"),
        (None, "550.54.15", None, "--index-url https://download.pytorch.org/whl/cu126"),
        (None, "580.65.06", None, "--index-url https://download.pytorch.org/whl/cu130"),
        (None, None, None, "no NVIDIA driver was found either"),
        ("13.0", None, None, "built for CUDA 13.0, but no NVIDIA driver was found"),
        ("13.0", "550.54.15", None, "older than PyTorch's CUDA 13.0 needs (driver 580 or newer)"),
        ("13.0", "550.54.15", None, "build for CUDA 12: pip install --force-reinstall torch torchvision --index-url"),
        ("12.8", "470.82.01", None, "older than PyTorch's CUDA 12.8 needs (driver 525 or newer)"),
        ("12.8", "440.33", None, "update the driver; then restart"),
        ("12.8", "570.1", "", "CUDA_VISIBLE_DEVICES='' hides every GPU"),
        ("12.8", "570.1", "-1", "CUDA_VISIBLE_DEVICES='-1' hides every GPU"),
        ("12.8", "570.1", "0", "new enough, yet CUDA did not start: run nvidia-smi"),
    ],
)
def test_why_no_cuda_names_the_cause_and_the_fix(build, driver, visible, says) -> None:
    assert says in devices.why_no_cuda(build, driver, visible, torch_version="2.9.0")


def test_nvidia_driver_reads_nvidia_smi_then_proc(monkeypatch) -> None:
    monkeypatch.setattr(devices.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    done = subprocess.CompletedProcess([], 0, "550.54.15\n550.54.15\n", "")
    monkeypatch.setattr(devices.subprocess, "run", lambda *a, **k: done)
    assert devices.nvidia_driver() == "550.54.15"  # one line per GPU: the first

    monkeypatch.setattr(devices.shutil, "which", lambda name: None)
    proc = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n"
    real_open = open

    def fake_open(path, *args, **kwargs):
        if path == "/proc/driver/nvidia/version":
            return io.StringIO(proc)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", fake_open)
    assert devices.nvidia_driver() == "535.104.05"
    proc = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build\n"
    assert devices.nvidia_driver() == "580.65.06"
    monkeypatch.setattr("builtins.open", real_open)


def test_the_report_says_why_there_is_no_cuda_only_when_there_is_none() -> None:
    report = lesson_00.environment_report()
    if torch.cuda.is_available():
        assert report["why_no_cuda"] is None and "Why no CUDA" not in lesson_00.format_report(report)
    else:
        assert report["why_no_cuda"] and "Why no CUDA: " in lesson_00.format_report(report)
    report["why_no_cuda"] = "because."
    text = lesson_00.format_report(report)
    assert text.count("because.") == 1 and "\n\nWhy no CUDA: because." in text  # after the table, not in it


@pytest.mark.parametrize(
    ("build", "driver", "visible", "says", "never"),
    [
        ("13.0", None, None, "no NVIDIA driver was found", "install a CUDA build"),
        (None, "580.65.06", None, "--index-url https://download.pytorch.org/whl/cu130", "no NVIDIA driver"),
        ("13.0", "535.104.05", None, "older than PyTorch's CUDA 13.0 needs", "install a CUDA build"),
        ("13.0", "580.65.06", "", "CUDA_VISIBLE_DEVICES='' hides every GPU", "install a CUDA build"),
    ],
)
def test_cuda_asked_for_in_vain_names_this_machines_reason(monkeypatch, no_gpu, build, driver, visible, says, never):
    """A CUDA build on a machine without a GPU was told to install a CUDA build: the reason is the driver or the GPU."""
    monkeypatch.setattr(torch.version, "cuda", build)
    monkeypatch.setattr(devices, "nvidia_driver", lambda: driver)
    if visible is not None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    with pytest.raises(DeviceUnavailableError) as info:
        devices.validate("cuda")
    message = str(info.value)
    assert says in message and never not in message
    assert "Colab: Runtime > Change runtime type" in message  # the notebook's own platforms keep their settings


def test_a_python_below_the_floor_is_named_with_the_fix() -> None:
    (problem,) = lesson_00.version_problems(torch_version="2.14.1", python_version="3.9.18")
    assert problem.startswith("Python 3.9.18 is older than 3.10")
    assert "Fix: make the environment with a newer Python, say `python3.12 -m venv .venv`" in problem
    assert lesson_00.version_problems(torch_version="2.14.1", python_version="3.10.0") == []
