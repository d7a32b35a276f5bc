"""Keeps a System V shared memory segment attached (shmget + shmat, as PostgreSQL does for
its interlock) and counts in it: every 10 ms it adds one to a counter in the segment and to
one in its own memory, prints "progress N" every 50 steps, and FAIL if the two ever differ
(a restore that brought back the process but not the segment's contents, or the reverse).
On SIGTERM it removes the segment (IPC_RMID) and exits, so that a run in the host's IPC
namespace leaves nothing behind."""

from __future__ import annotations

import ctypes
import signal
import sys
import time

IPC_PRIVATE, IPC_CREAT, IPC_RMID = 0, 0o1000, 0


def main() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    shmid = libc.shmget(IPC_PRIVATE, 4096, IPC_CREAT | 0o600)
    if shmid < 0:
        raise OSError(ctypes.get_errno(), "shmget")
    addr = libc.shmat(shmid, None, 0)
    if addr in (None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), "shmat")

    def remove(*_: object) -> None:
        libc.shmctl(shmid, IPC_RMID, None)
        sys.exit(0)

    signal.signal(signal.SIGTERM, remove)
    shared = ctypes.c_uint64.from_address(addr)
    mine = 0
    while True:
        shared.value += 1
        mine += 1
        if shared.value != mine:
            print(f"FAIL segment holds {shared.value}, the process counted {mine}", flush=True)
            mine = shared.value
        if mine % 50 == 0:
            print(f"progress {mine // 50}", flush=True)
        time.sleep(0.01)


if __name__ == "__main__":
    main()
