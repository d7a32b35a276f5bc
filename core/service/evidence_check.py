"""Is a sighting still true? The checks that end evidence when the world contradicts it.

Trigger-scoped standing approvals rest on evidence a watch pass recorded
(``core.guardrails.evidence``). Between passes the condition may have gone (the node came
back, the cloud withdrew its notice, the GPU recovered); a grant must not be claimed on it
then. ``contradiction`` reads the condition again, the way the watch pass reads it, and
says why a sighting no longer holds; the grant store asks it right before a claim
(``EvidenceStore.confirm``). ``healthy_observations`` is the watch pass's side: what one
pass saw that ends earlier sightings.

Only a positive observation ends evidence: a backend that does not answer, a provider that
cannot be reached, or an NVML that cannot be read says nothing, and the sighting stands
until it expires. Limits: GPUs are read on this host only (``signals.node``), as the watch
pass reads them; planner triggers (SLA, queue, cost) are not re-read here (their evidence
is about the planner's own readings and lapses after ``DEFAULT_TTL_S``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from core import errors
from core.guardrails.evidence import Evidence
from core.model import NodeHealth, NodeInfo
from core.signals.model import GpuHealth, GpuVerdict, InterruptionNotice
from core.signals.nodes import node_health
from core.signals.nvml import NvmlStatus

if TYPE_CHECKING:
    from core.service.facade import Service
    from core.signals.cloud import ProviderStatus

NOTICE_TRIGGERS = frozenset({"spot-interruption", "maintenance"})


def same_node(a: str | None, b: str | None) -> bool:
    """Node names as signals give them (``local:node-a`` or ``node-a``) name the same node."""
    if not a or not b:
        return False
    bare = ":" not in a or ":" not in b  # one side without its backend
    return a == b or (bare and a.rpartition(":")[2] == b.rpartition(":")[2])


def node_is_up(node: NodeInfo) -> str | None:
    """Why ``node`` contradicts a node-down sighting (None: it is still down)."""
    health = node_health(node).health
    if health is NodeHealth.DOWN:
        return None
    return f"{node.id} is {health.value} again"


def gpus_are_healthy(node: str, gpus: Sequence[GpuHealth]) -> str | None:
    """Why this reading of ``node``'s GPUs contradicts a gpu-failure sighting (None: it
    does not: a GPU still failed, or none of that node was read)."""
    mine = [g for g in gpus if same_node(g.node, node)]
    if not mine or any(g.verdict is not GpuVerdict.HEALTHY for g in mine):
        return None
    return f"the GPUs of {node} read healthy"


def notice_is_gone(
    node: str, notices: Iterable[InterruptionNotice], providers: Sequence[ProviderStatus]
) -> str | None:
    """Why a poll contradicts a notice sighting about ``node`` (None: a notice is still
    there, or no provider answered, so nothing is known)."""
    if not any(p.available for p in providers):
        return None
    if any(same_node(n.node or n.subject, node) for n in notices):
        return None
    answered = ", ".join(p.provider.value for p in providers if p.available)
    return f"the cloud metadata ({answered}) no longer announces a notice for {node}"


def contradiction(service: Service, evidence: Evidence) -> str | None:
    """Why ``evidence`` no longer holds, read from the world now; None when it holds or
    the world cannot be read (see the module)."""
    try:
        if evidence.trigger == "node-down":
            return _node_down(service, evidence.subject)
        if evidence.trigger == "gpu-failure":
            return _gpu_failure(service, evidence.subject)
        if evidence.trigger in NOTICE_TRIGGERS:
            return _notice(service, evidence.subject)
    except errors.ClawpointError:
        return None  # cannot read it now: the sighting stands until it expires
    return None


def _node_down(service: Service, subject: str) -> str | None:
    backend_name, sep, name = subject.partition(":")
    backend = service.backends.get(backend_name)
    if not sep or backend is None:
        return None
    found = next((n for n in backend.nodes() if n.name == name or n.id == subject), None)
    return node_is_up(found) if found is not None else None


def _here(service: Service, subject: str) -> bool:
    """Is ``subject`` this host's node (the only one its metadata and NVML speak for)?"""
    return same_node(service.settings.signals.node, subject)


def _gpu_failure(service: Service, subject: str) -> str | None:
    cfg = service.settings.signals
    if not cfg.nvml.enabled or not _here(service, subject):
        return None
    report = service.gpu_reports.report(node=cfg.node, event_wait_ms=cfg.nvml.event_wait_ms)
    if report.status is not NvmlStatus.OK:
        return None
    gpus = [g if g.node else g.model_copy(update={"node": subject}) for g in report.gpus]
    return gpus_are_healthy(subject, gpus)


def _notice(service: Service, subject: str) -> str | None:
    cfg = service.settings.signals
    if not (cfg.aws.enabled or cfg.gcp.enabled or cfg.azure.enabled):
        return None
    if not _here(service, subject):
        return None  # the metadata endpoint speaks for this host only
    # Imported here: the cloud probes bring an HTTP client that most processes never use.
    from core.signals.cloud import NoticePoller

    with NoticePoller(cfg) as poller:
        polled = poller.poll()
    return notice_is_gone(subject, polled.notices, polled.providers)
