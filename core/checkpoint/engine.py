"""The checkpoint engine protocol, the registry of engines, and helpers on process trees.

An engine is one module of ``core.checkpoint`` that defines ``ENGINE``, an object following
``Engine``; ``ENGINES`` (``core.engine_names``) names each engine's module. Everything else (the wrapper, the
configuration, the command line, cluster status, diagnostics, the demo) reads these two, so
adding an engine is one module plus one ``ENGINES`` entry. ``core.checkpoint.ops`` drives an
engine through the one checkpoint sequence (begin -> dump -> publish, or abort and resume)
and the one verified restore.

Modules are imported on first use (``get``): probing CRIU runs a binary and the GPU engine
loads the driver library, which a process that only lists engines must not pay for.

Limits: the tree helpers read ``/proc`` (Linux only) and act on the tree as it is at the
moment they walk it; a process forked during the walk may be missed, which is why callers
only use them on frozen (stopped) trees or as a best effort before a kill.
"""

from __future__ import annotations

import importlib
import os
import signal
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from core import logs
from core.engine_names import DEFAULT_ENGINE as DEFAULT_ENGINE
from core.engine_names import ENGINES as ENGINES
from core.engine_names import check

# The names live below every layer (core.engine_names: the configuration checks them without
# importing the engines); re-exported here for the engines' readers.
from core.schema_base import Model

if TYPE_CHECKING:
    from core.config import CheckpointConfig
    from core.model import CheckpointInfo
    from core.store.disk import PendingCheckpoint

log = logs.get_logger(__name__)

Progress = Callable[[float, float | None, str], None]


def _no_progress(done: float, total: float | None, message: str) -> None:
    return None


class EngineStatus(Model):
    name: str
    available: bool
    version: str | None = None
    reason: str = ""


@dataclass
class DumpRequest:
    """What one checkpoint asks of an engine (``ops.checkpoint`` fills it)."""

    pid: int  # root of the payload's tree
    pending: PendingCheckpoint
    stop: bool  # the tree ends once the checkpoint is published
    cfg: CheckpointConfig
    pipes: Sequence[int] = ()  # inodes of the payload's stdout/stderr pipes
    link: Path | None = None  # the cooperative engine's stable directory link
    exclude: tuple[str, ...] = ()  # paths never copied as the workload's files (the store)
    # Files the tree does not hold open that its checkpoint carries all the same (the progress
    # protocol's temporary files: ``core.checkpoint.files``), listed while it is frozen. When
    # set, an engine that copies files dumps with the tree left frozen to list them.
    side_files: Callable[[], Sequence[Path]] | None = None
    alive: Callable[[], bool] = lambda: True
    progress: Progress = _no_progress
    # A migration's handoff: nothing but the dump inside the freeze (no hashing or write-back
    # while the engine writes); the images are hashed and made durable after the handoff.
    staged: bool = False
    # Set to stop the dump now (a person kills the workload while it hangs): the engine
    # gives up, the tree is resumed, nothing is kept. Engines that cannot stop may ignore it.
    abort: threading.Event = field(default_factory=threading.Event)


@dataclass
class Dumped:
    """An engine's dump: timings, manifest extras, and whether the tree is still frozen.

    ``frozen``: the tree is stopped; ``ops`` kills it once the checkpoint is published (a
    stop) or resumes it (``Engine.resume``) if publishing fails: never lose the workload."""

    timings: dict[str, float]
    extra: dict[str, Any] = field(default_factory=dict)
    frozen: bool = False


@dataclass
class RestoreRequest:
    images: Path
    info: CheckpointInfo
    work_dir: Path
    cfg: CheckpointConfig
    inherit_pipes: Mapping[int, int] = field(default_factory=dict)
    abort: threading.Event = field(default_factory=threading.Event)
    lazy: bool = False  # post-copy where the engine can; others restore as usual
    # Run in the restoring process before it execs (a CRIU engine's ``criu restore``): it
    # enters the workload's cgroup, and the tasks it restores are born there.
    join: Callable[[], None] | None = None
    # Filled by ``prepare_restore``: what it did to the workload's files (files.put_back).
    files: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Restored:
    """A restored tree (``pid``, still stopped), or ``pid`` None: start the command afresh
    with ``env`` added (an engine whose application reloads its own state). ``files``: the
    files put back, rewound or kept (``files.put_back``'s report)."""

    pid: int | None
    timings: dict[str, float] = field(default_factory=dict)
    files: list[dict[str, Any]] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


class Engine(Protocol):
    """One way of checkpointing a payload. Every method raises ``ClawpointError`` only."""

    name: str
    needs_pid_namespace: bool  # the payload starts as init of its own PID namespace
    # A restore recreates the process tree itself (``Restored.pid``), not a restart of the
    # command that reloads its state: only then can its memory come in after it runs
    # (post-copy, ``RestoreRequest.lazy``).
    restores_process: bool
    # A live move may hand the frozen tree to a standby wrapper waiting on the target
    # (``core.wrapper.handoff``): the dump can be staged and restored before it is published.
    supports_handoff: bool

    def status(self, cfg: CheckpointConfig) -> EngineStatus:
        """Can it work here, and if not, why (cheap enough for ``config check``)."""
        ...

    def require(self, cfg: CheckpointConfig) -> None:
        """EngineUnavailable (with the reason and what to do) unless it can work here."""
        ...

    def payload_env(self, link: Path) -> dict[str, str]:
        """Environment the payload starts with (``link``: a stable path the engine owns)."""
        ...

    def dump(self, req: DumpRequest) -> Dumped:
        """Save the tree into ``req.pending``; with ``stop``, leave it frozen or ended."""
        ...

    def resume(self, pid: int) -> None:
        """Let a tree a dump left frozen run on (a failed publish: keep the workload)."""
        ...

    def end(self, pid: int, exited: threading.Event) -> None:
        """End the tree after a stop checkpoint was published."""
        ...

    def refusals(self, pid: int) -> list[str]:
        """What in the running tree rooted at ``pid`` this engine cannot carry (read-only:
        a plan names it before anything is paused); empty when it finds nothing."""
        ...

    def prepare_restore(self, req: RestoreRequest) -> None:
        """Checks and put-backs before the restore (may raise CorruptCheckpoint)."""
        ...

    def restore(self, req: RestoreRequest) -> Restored:
        """Recreate the tree stopped (``ops`` resumes it once verified), or say how to start."""
        ...


def names() -> list[str]:
    return list(ENGINES)


def get(name: str) -> Engine:
    """The engine called ``name``; InvalidInput naming the known ones otherwise."""
    found: Engine = importlib.import_module(ENGINES[check(name)]).ENGINE
    return found


def statuses(cfg: CheckpointConfig) -> dict[str, EngineStatus]:
    """Every engine's availability here, with the reason when not (never raises)."""
    out: dict[str, EngineStatus] = {}
    for name in ENGINES:
        try:
            out[name] = get(name).status(cfg)
        except Exception as exc:  # noqa: BLE001 (a broken probe is a reason, not a crash)
            out[name] = EngineStatus(name=name, available=False, reason=f"probe failed: {exc}")
    return out


def children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            out += [int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
        except OSError:
            continue
    return out


def tree(pid: int) -> list[int]:
    """``pid`` and all its descendants, parents first."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop(0)
        out.append(p)
        todo += children(p)
    return out


def signal_tree(pid: int, sig: int) -> None:
    """Send ``sig`` to every process of the tree rooted at ``pid`` (ignoring ones that left)."""
    for p in tree(pid):
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            continue


def kill_tree(pid: int) -> None:
    signal_tree(pid, signal.SIGKILL)


_SIGTERM_BIT = 1 << (signal.SIGTERM - 1)  # its bit in /proc/PID/status's signal masks


def sigterm_is_lost(pid: int) -> bool:
    """Would a SIGTERM to ``pid`` be thrown away with nothing to react to it?

    True for the init of a PID namespace (the payload as clawpoint starts it, without
    ``--init``) that neither catches, ignores nor blocks SIGTERM and has no child: the kernel
    discards a signal whose action is the default one when it is sent to a namespace's init
    (kernel/signal.c ``sig_task_ignored``, SIGNAL_UNKILLABLE with SIG_DFL; pid_namespaces(7)),
    where outside the namespace that default action would have ended the program at once.
    Waiting a grace period for it then only delays the same end. False whenever in doubt: a
    handler (it may save something), a blocked or ignored SIGTERM (as outside the namespace,
    it gets its grace), children (they may handle the SIGTERM sent to their group), or a
    status that cannot be read."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    nspid = fields.get("NSpid", "").split()
    if len(nspid) < 2 or nspid[-1] != "1":
        return False
    try:
        masks = [int(fields[k], 16) for k in ("SigCgt", "SigIgn", "SigBlk")]
    except (KeyError, ValueError):
        return False
    return not any(m & _SIGTERM_BIT for m in masks) and not children(pid)


def terminate_tree(pid: int, *, grace_s: float, exited: threading.Event) -> None:
    """SIGTERM the payload rooted at ``pid``, then SIGKILL its tree if it has not exited
    within ``grace_s`` (``exited``: set when it has).

    The SIGTERM goes to the root's process group where the root leads one (the payload as
    the wrapper starts it): a PID-namespace init ignores SIGTERM unless it installed a
    handler, but the other processes of its group (a script's running command) may not,
    and once they end the script often does. A root in a group it does not lead (a
    cooperative payload shares the wrapper's) gets it alone. Where nothing would ever see
    that SIGTERM (``sigterm_is_lost``), the SIGKILL comes at once, which is what the SIGTERM
    would have done outside the namespace.
    """
    if sigterm_is_lost(pid):
        log.info("payload.sigkill_for_lost_sigterm", pid=pid)
        kill_tree(pid)
        return
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, signal.SIGTERM)
        else:
            os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    if not exited.wait(grace_s):
        log.warning("payload.sigkill_after_grace", pid=pid, grace_s=grace_s)
        kill_tree(pid)


def resident_bytes(pid: int) -> int | None:
    """Resident memory of the tree rooted at ``pid`` (VmRSS summed; None if unreadable)."""
    total = 0
    for p in tree(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except (OSError, ValueError):
            continue
    return total or None
