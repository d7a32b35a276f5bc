"""The watch pass's guard of unsaved work: each backend that is a ``DisruptionGuard`` keeps its
orchestrator's voluntary disruption off workloads whose newest good checkpoint is stale, and
takes that back once a fresh one exists (on Kubernetes: ``karpenter.sh/do-not-disrupt``).

Why no plan and no approval: the change only asks the orchestrator to wait (it never stops,
moves or deletes anything, and only ever removes what clawpoint itself set), so it cannot
lose work; it is the protection a person would otherwise have to remember. It is still a
write, so each change is audited, one entry per change (``do-not-disrupt.set`` /
``do-not-disrupt.cleared``, subject the workload, the pod and the reason in the data); a pass
that changes nothing writes nothing. Limits: a change made just before the process dies may
miss its entry (the cluster is changed first, then the entry written).
"""

from __future__ import annotations

from datetime import datetime

from core import errors, logs
from core.backends.disruption_guard import DisruptionGuard, GuardChange, GuardPass
from core.service.facade import Service

log = logs.get_logger("clawpoint.disruption")

AUDIT_KIND = "do-not-disrupt"


def guard_unsaved_work(service: Service, now: datetime, *, principal: str) -> GuardPass:
    """One reconcile over every guarding backend; problems are returned, never raised."""
    done = GuardPass()
    for name, backend in service.backends.items():
        if not isinstance(backend, DisruptionGuard):
            continue

        def audited(change: GuardChange) -> None:
            service.audit.append(
                f"{AUDIT_KIND}.{change.change}",
                principal=principal,
                subject=change.workload,
                data=change.model_dump(mode="json", exclude={"workload"}),
            )
            log.info("disruption guard", change=change.change, pod=change.pod, why=change.reason)

        try:
            got = backend.guard_unsaved_work(now, audited)
        except errors.ClawpointError as exc:  # e.g. the API unreachable: the next pass retries
            done.errors.append(f"{name}: {exc.message}")
            continue
        done.changes.extend(got.changes)
        done.errors.extend(f"{name}: {e}" for e in got.errors)
    return done
