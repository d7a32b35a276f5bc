"""Start CMD as the init of a new PID namespace and report how it ended: ``nsinit.py CMD...``.

Run by the wrapper as ``python -I -S nsinit.py CMD...`` (a file, no imports from clawpoint:
it starts in milliseconds). It replaces ``unshare --pid --fork --kill-child setsid CMD``,
whose parent exits 1 ("sigprocmask unblock failed") when CMD is killed by SIGKILL, so the
wrapper recorded a killed payload as ``exit 1``. Here the parent ends the way CMD ended:
the same exit code, or killed by the same signal, so the wrapper's wait sees the truth.

The child is a session leader inside the namespace (CRIU needs that) and gets SIGKILL when
this process dies; this process ignores SIGINT/SIGTERM (a terminal's Ctrl-C reaches the
wrapper, which decides) and exits 2 with a message if the namespace cannot be made.

Limits: Linux only (unshare(2), prctl(2)); needs CAP_SYS_ADMIN for CLONE_NEWPID.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1
_CLONE_NEWPID = 0x20000000  # os.unshare/os.CLONE_NEWPID need Python 3.12


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: nsinit.py CMD [ARGS...]", file=sys.stderr)
        return 2
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWPID) != 0:
        err = ctypes.get_errno()
        print(f"nsinit: cannot create a PID namespace: {os.strerror(err)}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    pid = os.fork()
    if pid == 0:  # the namespace's init
        try:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            os.setsid()
            os.execvp(argv[0], argv)
        except OSError as exc:
            print(f"nsinit: cannot run {argv[0]!r}: {exc}", file=sys.stderr)
        os._exit(127)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig != signal.SIGKILL:
            signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
        return 128 + sig  # only if the signal did not end us (it should have)
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
