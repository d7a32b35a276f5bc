"""How a wrapper's payload ends, and what each end leaves behind.

:class:`Termination` carries out the termination contract (``core.wrapper.supervisor``'s
module doc): a SIGTERM or SIGINT to the wrapper starts ``[wrapper] term_grace_s`` of grace; a
stop checkpoint is taken if it is on and expected to finish in what is left (judged by
:func:`checkpoint_estimate_s`); then the payload is stopped for real (:func:`stop_payload`),
and a watchdog stops it at the deadline whatever is in progress. :meth:`Termination.record`
and :func:`record_end` write the end: the registry row (state, exit status, a message that
replaces whatever the payload's run said), the log line, and for a termination the audit
record; they return the wrapper's exit code.

Limits: the estimate is the last checkpoint's duration with a margin; a checkpoint much
slower than the last one is cut short by the watchdog (the workload then ends without it).
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from core import logs
from core.checkpoint import engine
from core.config import Settings
from core.model import WorkloadState
from core.state.workloads import WorkloadRegistry
from core.store.store import CheckpointStore
from core.wrapper import payload

log = logs.get_logger(__name__)


class Audit(Protocol):
    """Appends one record to the audit log, best effort (the wrapper's ``audit``)."""

    def __call__(
        self, kind: str, *, principal: str, subject: str, data: dict[str, Any]
    ) -> None: ...


def stop_payload(p: payload.Payload, kill_after_s: float) -> None:
    """Really stop it (``engine.terminate_tree``: SIGTERM to its process group, SIGKILL of
    the tree after ``kill_after_s``, at once where the SIGTERM would reach nothing)."""
    engine.terminate_tree(p.pid, grace_s=kill_after_s, exited=p.exited)
    p.exited.wait(10)


def checkpoint_estimate_s(last_s: float | None, store: CheckpointStore, name: str) -> float | None:
    """How long a stop checkpoint is expected to take: the last one's duration (``last_s``,
    this wrapper's, else the lineage's newest recorded), with a margin; None if unknown."""
    last = last_s
    if last is None:
        newest = store.list(name)[:1]  # newest first
        # Its manifest holds the phases (the total is only known after it is written):
        # the longest phase is a lower bound, which the margin below covers.
        phases = [float(v) for i in newest for k, v in i.timings.items() if k.endswith("_s")]
        last = max(phases) if phases else None
    return None if last is None else last * 1.5 + 0.5


class Termination:
    """One wrapper's handling of a termination signal (at most one: later ones are ignored)."""

    def __init__(
        self, settings: Settings, name: str, registry: WorkloadRegistry, audit: Audit
    ) -> None:
        self.settings = settings
        self.name = name
        self.registry = registry
        self.audit = audit
        self.signal: str | None = None  # set once a termination signal is handled
        self.reason: str | None = None
        self.deadline = 0.0

    def begin(self, signum: int) -> bool:
        """A termination signal arrived (called in the signal handler): the grace budget
        starts. False when one was already being handled."""
        if self.signal is not None:
            return False
        self.signal = signal.Signals(signum).name
        self.deadline = time.monotonic() + self.settings.wrapper.term_grace_s
        return True

    def watch(self, p: payload.Payload) -> None:
        """Start the watchdog (a thread: safe to start in a signal handler)."""
        threading.Thread(target=self._watchdog, args=(p,), daemon=True).start()

    def _watchdog(self, p: payload.Payload) -> None:
        """At the deadline, stop the payload whatever is in progress (a slow checkpoint)."""
        if p.exited.wait(max(0.0, self.deadline - time.monotonic())):
            return
        if self.reason is None:
            self.reason = (
                f"terminated without checkpoint: none finished within the "
                f"{self.settings.wrapper.term_grace_s:g}s grace budget"
            )
        stop_payload(p, self.settings.wrapper.term_kill_after_s)

    def handle(
        self,
        p: payload.Payload,
        *,
        estimate_s: Callable[[], float | None],
        stop_checkpoint: Callable[[], str | None],
    ) -> None:
        """On the main thread, in turn: the stop checkpoint if it fits in what is left
        (``stop_checkpoint`` returns the new checkpoint's id, None if it failed), then
        the payload's stop."""
        if p.exited.is_set():
            return
        cfg = self.settings.wrapper
        left = self.deadline - time.monotonic()
        why: str | None = None
        if not cfg.term_checkpoint:
            why = "checkpoint on termination is off ([wrapper] term_checkpoint = false)"
        else:
            estimate = estimate_s()
            if estimate is not None and estimate > left:
                why = (
                    f"a checkpoint takes about {estimate:.1f}s and only {max(left, 0):.1f}s of "
                    f"the {cfg.term_grace_s:g}s grace budget was left"
                )
        if why is None:
            saved = stop_checkpoint()
            if saved is not None:
                if self.reason is None:
                    self.reason = f"terminated, checkpoint {saved} saved"
            else:
                why = "the checkpoint failed (see the wrapper log)"
        if why is not None and self.reason is None:
            self.reason = f"terminated without checkpoint: {why}"
        if not p.exited.is_set():
            stop_payload(p, cfg.term_kill_after_s)

    def record(self, last_checkpoint: str | None) -> int:
        """The terminated workload's end: STOPPED with the reason, audited; the exit code
        (0 when a checkpoint was saved, else 128 + the signal)."""
        reason = self.reason or "terminated without checkpoint: the workload ended first"
        saved = not reason.startswith("terminated without")
        self.registry.update(
            self.name,
            state=WorkloadState.STOPPED,
            message=reason,
            exit_status=f"terminated by {self.signal}",
        )
        log.warning("wrapper.terminated", workload=self.name, signal=self.signal, reason=reason)
        self.audit(
            "terminated",
            principal=f"signal:{self.signal}",
            subject=f"local:{self.name}",
            data={"reason": reason, "checkpoint": last_checkpoint if saved else None},
        )
        if saved:
            return 0
        return 128 + int(signal.Signals[self.signal or "SIGTERM"])


def record_end(
    registry: WorkloadRegistry,
    name: str,
    code: int,
    *,
    stopping: bool,
    terminating: bool,
    last_checkpoint: str | None,
) -> int:
    """Any other end of the payload (``code``: its exit status, negative for a signal):
    stopped at a checkpoint, ended on request, completed or failed. Returns the exit code."""
    # Each end replaces the message: what it said while the payload ran (a restore's or a
    # checkpoint's news) is stale once it has ended.
    if stopping:
        registry.update(
            name,
            state=WorkloadState.STOPPED,
            exit_status=None,
            message=f"stopped at checkpoint {last_checkpoint}",
        )
        log.info("wrapper.stopped", workload=name, checkpoint=last_checkpoint)
        return 0
    if terminating:
        # Ended on request: COMPLETED, so nothing (failover) brings it back by itself.
        status = f"terminated on request ({'exit ' + str(code) if code >= 0 else 'killed'})"
        registry.update(name, state=WorkloadState.COMPLETED, exit_status=status, message=status)
        return 0
    if code == 0:
        registry.update(
            name, state=WorkloadState.COMPLETED, exit_status="exit 0", message="completed"
        )
        return 0
    status = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit {code}"
    registry.update(
        name, state=WorkloadState.FAILED, exit_status=status, message=f"ended: {status}"
    )
    log.warning("wrapper.payload_failed", workload=name, status=status)
    return 128 - code if code < 0 else code
