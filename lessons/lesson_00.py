"""Lesson 00's diagnostics: what PyTorch sees on this machine, as data and as a report to paste into a question.

    python -m lessons.lesson_00     # print the report

The lesson types each check it gathers (versions, ``torch.cuda.is_available()``, the GPUs' properties) in its cells
first; this module puts them in one place, with the version floors the course is tested on.
"""

from __future__ import annotations

import os
import platform
import re
import sys
import textwrap
from typing import Any

import torch

from helpers import devices, settings

TORCH_FLOOR = (2, 8)
"""The lowest PyTorch the course supports (requirements.txt says the same; CI runs the course on it)."""
TORCHVISION_FLOOR = "0.23"  # the torchvision released with that PyTorch
PYTHON_FLOOR = (3, 10)


def runtime() -> str:
    """Where this runs: "Colab", "Kaggle" or "local"."""
    if "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ:
        return "Colab"
    if "KAGGLE_KERNEL_RUN_TYPE" in os.environ or "KAGGLE_URL_BASE" in os.environ:
        return "Kaggle"
    return "local"


def environment_report() -> dict[str, Any]:
    """What PyTorch can see here, as data: versions, GPUs, MPS, CPU threads, runtime, the device ``pick_device()``
    chooses and ``course_device``, the value of ``$COURSE_DEVICE`` when it overrides that choice (None otherwise)."""
    try:
        import torchvision

        torchvision_version = torchvision.__version__
    except ImportError:
        torchvision_version = None
    cudnn = None
    if torch.backends.cudnn.is_available():
        v = torch.backends.cudnn.version()  # 92400 means 9.24.0; cuDNN 8 packed 8902 as 8.9.2
        major = 10000 if v >= 90000 else 1000
        cudnn = f"{v // major}.{v % major // 100}.{v % 100}"
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    gpus = [
        {
            "index": i,
            "name": props.name,
            "memory_gib": round(props.total_memory / 2**30, 1),
            "compute_capability": f"{props.major}.{props.minor}",
            "multiprocessors": props.multi_processor_count,
            "supported_by_this_build": devices.arch_supported(i),
        }
        for i, props in enumerate(map(torch.cuda.get_device_properties, range(count)))
    ]
    try:
        auto_device = str(devices.pick_device())
    except (devices.DeviceUnavailableError, ValueError) as exc:
        auto_device = f"nothing: {str(exc).splitlines()[0]}"
    return {
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "torch": torch.__version__,
        "torchvision": torchvision_version,
        "cuda_build": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "cudnn": cudnn,
        "cuda_arch_list": torch.cuda.get_arch_list() if torch.version.cuda else [],
        "gpus": gpus,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "mps_built": torch.backends.mps.is_built(),
        "mps_available": devices.accelerator_available("mps"),
        "xpu_available": devices.accelerator_available("xpu"),
        "cpu_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "runtime": runtime(),
        "auto_device": auto_device,
        "course_device": settings.device(),
        "why_no_cuda": None
        if torch.cuda.is_available()
        else devices.why_no_cuda(torch.version.cuda, devices.nvidia_driver(), os.environ.get("CUDA_VISIBLE_DEVICES")),
    }


def _release(version: str) -> tuple[int, ...]:
    """(2, 8) from "2.8.0+cu128", (2, 10) from "2.10.0a0+git1234"."""
    return tuple(int(re.match(r"\d*", part).group() or 0) for part in version.split("+")[0].split(".")[:2])


def version_problems(torch_version: str | None = None, python_version: str | None = None) -> list[str]:
    """One message for each of torch and Python that is older than the course supports, with the fix."""
    torch_version = torch_version or torch.__version__
    python_version = python_version or platform.python_version()
    found = []
    if _release(torch_version) < TORCH_FLOOR:
        floor = ".".join(map(str, TORCH_FLOOR))
        found.append(
            f"PyTorch {torch_version} is older than {floor}, the lowest version this course is tested on: lessons "
            "use APIs that older releases lack or treat differently, and may stop with errors. "
            f'Fix: pip install -U "torch>={floor}" "torchvision>={TORCHVISION_FLOOR}", then restart the kernel '
            "(Colab: Runtime > Restart session; Kaggle: Run > Restart & clear cell outputs). "
            "The course never reinstalls PyTorch by itself."
        )
    if _release(python_version) < PYTHON_FLOOR:
        floor = ".".join(map(str, PYTHON_FLOOR))
        found.append(
            f"Python {python_version} is older than {floor}, the lowest version this course supports (and no PyTorch "
            f"the course supports installs on it). Fix: make the environment with a newer Python, say "
            f"`python3.12 -m venv .venv` (`python3 --version` names the default one; install python3.12 from your "
            f"system's packages or python.org where it is missing), then run the set-up command again. Colab and "
            f"Kaggle already run a newer Python."
        )
    return found


def format_report(report: dict[str, Any] | None = None) -> str:
    """The environment report as aligned text lines; the chosen device says "(from COURSE_DEVICE)" when that variable
    chose it."""
    r = environment_report() if report is None else report
    cuda = f"built for CUDA {r['cuda_build']}" if r["cuda_build"] else "CPU-only build (no CUDA)"
    lines = [
        ("Python", f"{r['python']} on {r['platform']}"),
        ("PyTorch", f"{r['torch']} ({cuda})"),
        ("torchvision", r["torchvision"] or "not installed"),
        ("CUDA available", "yes" if r["cuda_available"] else "no"),
        ("cuDNN", r["cudnn"] if r["cudnn"] is not None else "n/a"),
    ]
    for gpu in r["gpus"]:
        spec = f"{gpu['name']}, {gpu['memory_gib']} GiB, compute capability {gpu['compute_capability']}"
        unsupported = "" if gpu.get("supported_by_this_build", True) else " (NOT supported by this PyTorch build)"
        lines.append((f"GPU {gpu['index']}", f"{spec}, {gpu['multiprocessors']} SMs{unsupported}"))
    if r["cuda_visible_devices"] is not None:
        lines.append(("CUDA_VISIBLE_DEVICES", repr(r["cuda_visible_devices"])))
    mps = "available" if r["mps_available"] else ("built, not available" if r["mps_built"] else "no")
    # An unusable COURSE_DEVICE makes auto_device "nothing: COURSE_DEVICE=... is set", which names it already.
    forced = r.get("course_device") and not r["auto_device"].startswith("nothing")
    chosen_by = f" (from {settings.DEVICE})" if forced else ""
    lines += [
        ("MPS (Apple GPU)", mps),
        ("XPU (Intel GPU)", "available" if r["xpu_available"] else "no"),
        ("CPU", f"{r['cpu_count']} logical cores, torch uses {r['cpu_threads']} threads"),
        ("Runtime", r["runtime"]),
        ("pick_device() chooses", r["auto_device"] + chosen_by),
    ]
    width = max(len(k) for k, _ in lines)
    text = "\n".join(f"{k:<{width}}  {v}" for k, v in lines)
    if r.get("why_no_cuda"):
        text += "\n\n" + textwrap.fill(f"Why no CUDA: {r['why_no_cuda']}", 110)
    problems = version_problems(r["torch"], r["python"])
    return text + "".join(f"\n\nWARNING: {p}" for p in problems)


def main() -> None:
    """Print the environment report (``python -m lessons.lesson_00``)."""
    print(format_report())


if __name__ == "__main__":
    main()
