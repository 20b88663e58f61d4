"""Launch the lesson 07 DDP job many times on a loaded machine and count the launches that fail.

    python tools/ddp_stress.py                 # 100 launches of 2 gloo processes, one CPU-bound process beside them
    python tools/ddp_stress.py --launches 20 --busy 2 --keep-going

A failure is any launch whose torchrun exit code is not 0 or whose checkpoint is missing; its output is saved in the
log folder. Exit status 1 when any launch failed; Ctrl-C ends the launch under way and the busy processes, prints one
line and exits with status 130. This is a benchmark-style check, not a test: it takes about ten seconds a launch on
two cores.
"""

from __future__ import annotations

import argparse
import multiprocessing
import signal
import sys
import tempfile
import time
from pathlib import Path

STOPPED = "Stopped by SIGINT"
"""How the one line printed on Ctrl-C starts (exit status 130, as the course runner's)."""

try:  # torch loads here: a Ctrl-C in these seconds is one line too
    from helpers import distributed
    from lessons.lesson_07 import ddp_train
except KeyboardInterrupt:
    print(f"{STOPPED} before the first launch.", file=sys.stderr)
    sys.exit(128 + signal.SIGINT)

QUICK = ["--device", "cpu", "--epochs", "1", "--synthetic-size", "64", "--batch-size", "16"]


def _spin() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C reaches it too; main ends it
    while True:
        pass


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--launches", type=int, default=100, help="how many launches (default 100)")
    p.add_argument("--nproc", type=int, default=2, help="processes per launch (default 2)")
    p.add_argument("--busy", type=int, default=1, help="CPU-bound processes running beside them (default 1)")
    p.add_argument("--log-dir", default=None, help="where failed launches' output goes (default: a temporary folder)")
    p.add_argument("--keep-going", action="store_true", help="count every failure instead of stopping at the first")
    args = p.parse_args(argv)
    if args.launches < 1 or args.nproc < 1 or args.busy < 0:
        p.error("--launches and --nproc must be at least 1, --busy at least 0")
    log_dir = Path(args.log_dir or tempfile.mkdtemp(prefix="ddp-stress-"))
    log_dir.mkdir(parents=True, exist_ok=True)

    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.busy)]
    for s in spinners:
        s.start()
    failures: list[str] = []
    start = time.perf_counter()
    done, stopped = 0, False
    try:
        for i in range(1, args.launches + 1):
            with tempfile.TemporaryDirectory() as out:
                result = distributed.torchrun(args.nproc, [*QUICK, "--out", out], 300, distributed.HARNESS)
                ok = result.returncode == 0 and (Path(out) / ddp_train.CHECKPOINT_FILE).is_file()
            if not ok:
                log = log_dir / f"launch-{i:03d}.log"
                log.write_text(
                    f"exit code {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
                )
                failures.append(f"launch {i}: exit code {result.returncode} (output in {log})")
                print(failures[-1], flush=True)
                if not args.keep_going:
                    break
            done = i
            if i % 10 == 0:
                print(f"{i} launches, {len(failures)} failed, {time.perf_counter() - start:.0f} s", flush=True)
    except KeyboardInterrupt:  # run_together has stopped the launch under way: torchrun, then its workers
        stopped = True
    finally:
        for s in spinners:
            s.terminate()
            s.join()
    if stopped:
        print(
            f"{STOPPED} after {done} of {args.launches} launches ({len(failures)} failed); every process it started "
            "has ended.",
            file=sys.stderr,
        )
        return 128 + signal.SIGINT
    print(
        f"{done} launches of {args.nproc} processes with {args.busy} busy process(es) beside them: "
        f"{len(failures)} failed, {time.perf_counter() - start:.0f} s"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
