"""What the backend runs inside a wrapped container (through ``pods/exec``).

``python -m core.backends.kubernetes.incontainer checkpoint LINEAGE [--stop]`` asks the
wrapper serving LINEAGE in this container (its control socket under ``$CLAWPOINT_HOME``) for
a checkpoint and prints the published checkpoint's manifest as one JSON line; errors are one
JSON line on stderr (``{"error": CODE, "message", "hint"}``) and the error's exit code.
``checkpoint LINEAGE --stop --hand-over TOKEN`` gives the workload to the standby pod
that announced itself as TOKEN (a live move: ``core.backends.kubernetes.handoff``) and
prints the checkpoint's fields with ``handoff`` ("sent" or why not; absent: no standby
waited, a plain stop). ``status LINEAGE`` prints the wrapper's status (which checkpoint it restored, its state).

It talks to the wrapper directly, not through the service: the container's own clawpoint
has no policy of its own to consult; the guardrails already ran where the plan was made.
Limits: the wrapper must run in this container (it is the container's entrypoint); when none
holds the lineage's lock for a few seconds, the exec fails at once (code
``kubernetes-wrapper-missing``) instead of waiting the whole socket wait.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from pathlib import Path

from core import errors
from core.model import validate_name
from core.specs import check_standby_token
from core.wrapper.control import ControlClient

SOCKET_WAIT_S = 60.0
# How long a container may go without a wrapper holding the lineage's lock before the exec
# concludes none runs here: the interpreter's start, or a restart after an exit.
NO_WRAPPER_S = 5.0


def wrapper_holds_lock(run: Path, lineage: str) -> bool:
    """Whether a wrapper of ``lineage`` runs in this container: it takes ``LINEAGE.lock``
    (an exclusive flock) first thing and keeps it until it exits."""
    try:
        fd = os.open(run / f"{lineage}.lock", os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # closing drops a lock taken here
    return False


def wrapper_starting(lineage: str) -> bool:
    """Whether a process of this container looks like a wrapper of ``lineage`` still starting
    (its interpreter loading, before it takes its lock): ``clawpoint run`` or ``python -m
    core.cli run`` with ``--name BASE`` (``lineage`` itself or a pod's ``BASE-INDEX``) in some
    ``/proc/PID/cmdline`` (the exec shares the container's PID namespace). A busy node can
    take seconds to start an interpreter."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        words = [a.rsplit(b"/", 1)[-1] for a in argv]
        if b"run" not in words or not (b"clawpoint" in words or b"core.cli" in words):
            continue
        names = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == b"--name"]
        names += [a[len(b"--name=") :] for a in argv if a.startswith(b"--name=")]
        want = lineage.encode()
        if any(want == n or want.startswith(n + b"-") for n in names):
            return True
    return False


def wait_for_socket(run: Path, lineage: str) -> Path:
    """The wrapper's control socket. A wrapper still starting or restoring (it holds its
    lock) has none yet: wait for it up to ``SOCKET_WAIT_S``. When for ``NO_WRAPPER_S`` no
    wrapper holds the lock and no process of the container is a wrapper starting, the container
    does not run one (say its image's entrypoint is not the wrapper): refuse at once rather
    than after the whole wait."""
    sock = run / f"{lineage}.sock"
    start = time.monotonic()
    last_seen = start
    while not sock.exists():
        now = time.monotonic()
        if wrapper_holds_lock(run, lineage) or wrapper_starting(lineage):
            last_seen = now
        elif now - last_seen >= NO_WRAPPER_S:
            raise errors.NotSupported(
                f"no clawpoint wrapper runs {lineage} in this container (no lock held in "
                f"{run} after {NO_WRAPPER_S:g}s)",
                code="kubernetes-wrapper-missing",
                hint="start the container with `clawpoint run --name LINEAGE -- <command>` as "
                "its command (or the image's entrypoint), with CLAWPOINT_HOME set the same "
                "for the container and exec",
            )
        if now - start >= SOCKET_WAIT_S:
            break  # the client's connect reports the missing socket
        time.sleep(0.1)
    return sock


def run_dir() -> Path:
    """The wrapper's run directory: ``$CLAWPOINT_HOME/run`` (set in wrapped containers; read
    without loading the whole configuration, which would double the time of each exec)."""
    home = os.environ.get("CLAWPOINT_HOME")
    if home:
        return Path(home).expanduser().resolve() / "run"
    from core.config import load_settings

    return load_settings().run_dir


def _print_and_exit(line: str) -> None:
    """The checkpoint as one JSON line (a handoff's: its fields and ``handoff``), then exit."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
    os._exit(0)  # the socket stays open until this process is gone


def main(argv: list[str]) -> int:
    try:
        if len(argv) < 2 or argv[0] not in ("checkpoint", "status"):
            raise errors.InvalidInput(
                "usage: incontainer checkpoint LINEAGE [--stop [--hand-over TOKEN]] | status LINEAGE",
                hint="the Kubernetes backend runs this through pods/exec",
            )
        lineage = validate_name(argv[1], what="lineage")
        extra = argv[2:]
        token = extra[2] if extra[:2] == ["--stop", "--hand-over"] and len(extra) == 3 else None
        if token is not None:
            check_standby_token(token)
        known = extra in ([], ["--stop"]) or token is not None
        if not known or (extra and argv[0] != "checkpoint"):
            raise errors.InvalidInput(f"unexpected arguments {extra!r}", hint="see --help")
        sock = wait_for_socket(run_dir(), lineage)
        client = ControlClient(sock)
        if argv[0] == "status":
            print(json.dumps(client.status(), default=str))
            return 0
        # Print and exit before hanging up: after a stop checkpoint the wrapper (the
        # container's PID 1) ends once we hang up, and its end kills every process of the
        # container; exiting first leaves our output and our exit status 0 behind.
        if token is not None:  # a live move: the standby pod waits for this token's order
            client.stop_and_hand_over_remote(
                token=token, on_result=lambda r: _print_and_exit(json.dumps(r, default=str))
            )
        else:
            client.checkpoint(
                stop=bool(extra), on_info=lambda info: _print_and_exit(info.model_dump_json())
            )
        raise errors.OperationFailed(  # the callbacks always exit; this is not reached
            "the checkpoint's answer was not printed", hint="this is a bug; report it"
        )
    except errors.ClawpointError as exc:
        print(json.dumps(exc.to_dict(), default=str), file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
