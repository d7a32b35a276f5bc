"""Ending a clawpoint process at once when it is done: ``exit_now``.

Role: Python's own teardown of a process that has loaded clawpoint (module by module, every
object freed, the state database's connections closed with a WAL checkpoint) took 50-70 ms
of every ``clawpoint`` command's wall time and 100-170 ms of a wrapper's on this 2-vCPU VM,
after the command's work and output were complete. For a wrapper that stops its workload
that time is inside a move's pause: on Slurm the job leaves its node, and can be requeued,
only once its wrapper has exited. ``exit_now`` does what matters of that teardown and ends
the process: it waits for the threads that are not daemons and runs the exit handlers, as
Python would (``threading._shutdown``, ``atexit``), flushes standard output and error, and
calls ``os._exit``.

Used by the installed console script (``core.cli.app.console``) and the detached wrapper
(``core.wrapper.__main__``), never by code that may run inside another program (a test
calling ``core.cli.app.main`` keeps its ``SystemExit``).

Limits: what only the teardown would have done is skipped: a file object still open and
referenced at exit is not flushed (clawpoint closes its files; its logs and output go to
the standard streams, flushed here), and the state database's WAL is left for its next
opener to fold in (SQLite does so on open; committed transactions are in it already).
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn


def exit_code(code: object) -> int:
    """The process exit status ``sys.exit(code)`` gives: None is 0, an int is itself, and
    anything else is printed to stderr and exits 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def exit_now(code: int) -> NoReturn:
    """End the process with ``code`` after its threads and exit handlers (see the module)."""
    shutdown = getattr(threading, "_shutdown", None)  # what Python's own exit calls first
    if callable(shutdown):
        shutdown()
    else:  # pragma: no cover (every CPython this project supports has it)
        for thread in threading.enumerate():
            if thread is not threading.current_thread() and not thread.daemon:
                thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # closed, or a broken pipe: nothing more can be said
            pass
    os._exit(code)
