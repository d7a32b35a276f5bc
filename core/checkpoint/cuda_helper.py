"""A ``cuda-checkpoint``-compatible helper on the driver API, for CRIU's CUDA plugin.

CRIU's plugin (``plugins/cuda``) execs a binary named ``cuda-checkpoint`` with only these
forms, which this module implements with ``core.checkpoint.cuda_driver``::

    cuda-checkpoint -h                                   (the plugin looks for --action)
    cuda-checkpoint --get-state --pid PID                 prints running|locked|checkpointed|failed
    cuda-checkpoint --get-restore-tid --pid PID           prints the restore thread id
    cuda-checkpoint --action lock|checkpoint|restore|unlock --pid PID [--timeout MS]
    cuda-checkpoint --toggle --pid PID [--timeout MS]     running -> checkpointed, or back

Exit status 0 on success; 1 with the CUresult's name on stderr when the driver refuses; 2
for bad arguments. The GPU engine (``core.checkpoint.cuda``) puts a ``cuda-checkpoint`` that
runs this module first on CRIU's ``PATH``. Limits: no ``gpuPairs`` remapping on restore
(same GPUs only). Not yet verified with CRIU's plugin on hardware.
"""

from __future__ import annotations

import argparse
import sys

from core.checkpoint import cuda_driver
from core.checkpoint.cuda_driver import ProcessState


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cuda-checkpoint",
        description="Lock, checkpoint, restore or unlock the CUDA state of a process "
        "(clawpoint's compatible helper on the CUDA driver checkpoint API).",
    )
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--action", choices=["lock", "checkpoint", "restore", "unlock"])
    what.add_argument("--toggle", action="store_true", help="running <-> checkpointed")
    what.add_argument("--get-state", action="store_true")
    what.add_argument("--get-restore-tid", action="store_true")
    p.add_argument("--pid", "-p", type=int, required=True)
    p.add_argument("--timeout", type=int, default=0, help="lock timeout in ms (0: none)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        drv = cuda_driver.load()
    except cuda_driver.DriverUnavailable as exc:
        print(f"cuda-checkpoint: {exc}", file=sys.stderr)
        return 1
    pid = int(args.pid)
    try:
        if args.get_state:
            print(drv.state(pid).name.lower())
        elif args.get_restore_tid:
            print(drv.restore_thread(pid))
        elif args.toggle:
            if drv.state(pid) is ProcessState.RUNNING:
                drv.lock(pid, args.timeout)
                drv.checkpoint(pid)
            else:
                drv.restore(pid)
                drv.unlock(pid)
        elif args.action == "lock":
            drv.lock(pid, args.timeout)
        else:
            getattr(drv, args.action)(pid)
    except cuda_driver.CudaError as exc:
        print(f"cuda-checkpoint: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
