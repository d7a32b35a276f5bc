"""How the service finds what an id names: a backend, a node, a workload, a checkpoint.

The bottom floor of ``Service`` (``core.service.facade``): it turns ids as people and
agents write them (``BACKEND:NAME``, a bare node name, ``BACKEND:WORKLOAD@SEQ``) into a
configured backend and the name that backend uses, and raises ``NotFound`` or
``InvalidInput`` with the ids there are. It also declares the state every floor above
shares; ``Service.__init__`` sets it. Reads only.
"""

from __future__ import annotations

from core import errors
from core.backends.base import Backend
from core.config import Settings
from core.guardrails.audit import AuditLog
from core.guardrails.dry_runs import DryRunAudit
from core.guardrails.guard import Guard
from core.model import parse_ref, validate_name
from core.service.context import WorldContext
from core.service.executor import Executor
from core.service.journal import Journal
from core.service.moves import MoveLog
from core.signals.nvml import ReportCache
from core.state.db import Database


class Lookup(WorldContext):
    """Mixin of ``Service``: id resolution, and the state the service's floors share."""

    settings: Settings
    db: Database
    backends: dict[str, Backend]
    journal: Journal
    executor: Executor
    audit: AuditLog
    guard: Guard
    moves: MoveLog
    dry_runs: DryRunAudit
    gpu_reports: ReportCache

    def backend(self, name: str) -> Backend:
        try:
            return self.backends[name]
        except KeyError:
            raise errors.NotFound(
                f"no backend named {name!r} is configured (have: {', '.join(sorted(self.backends))})",
                hint="use an id with one of the configured backends, e.g. local:NAME",
            ) from None

    def _split(self, ref: str, *, what: str) -> tuple[Backend, str]:
        parsed = parse_ref(ref, what=what)
        return self.backend(parsed.backend), parsed.name

    def resolve_node(self, ref: str) -> tuple[Backend, str]:
        """A node id as people and agents write it: ``BACKEND:NAME`` or a bare ``NAME``.

        A bare name is looked up on every backend: one match is that node; none is
        ``NotFound`` listing the nodes there are; several is ``InvalidInput`` listing the
        candidates (the caller must say which)."""
        if not isinstance(ref, str) or ":" in ref:
            return self._split(ref, what="node")
        validate_name(ref, what="node name")
        found: list[str] = []
        known: list[str] = []
        for backend in self.backends.values():
            try:
                nodes = backend.nodes()
            except errors.BackendUnavailable:
                continue  # a backend that does not answer cannot hold the match we report
            known.extend(n.id for n in nodes)
            found.extend(n.id for n in nodes if n.name == ref)
        if len(found) == 1:
            return self._split(found[0], what="node")
        if found:
            raise errors.InvalidInput(
                f"node name {ref!r} is ambiguous: {', '.join(found)} all have it",
                hint=f"pass the full id, one of: {', '.join(found)}",
                details={"candidates": found},
            )
        raise errors.NotFound(
            f"no node named {ref!r}",
            hint=f"known nodes: {', '.join(known) or '(none)'}",
            details={"known": known},
        )

    def _node_on(self, backend: Backend, ref: str) -> str:
        """``to`` as the target's backend names it: ``NAME`` or ``BACKEND:NAME`` of that
        backend (a node of another backend cannot take the workload)."""
        if ":" not in ref:
            return validate_name(ref, what="node name")
        parsed = parse_ref(ref, what="node")
        if parsed.backend != backend.name:
            raise errors.InvalidInput(
                f"node {ref} is on the {parsed.backend} backend, but the target is on "
                f"{backend.name}",
                hint=f"pass a node of {backend.name} (e.g. {backend.name}:NAME) or omit it",
            )
        return parsed.name

    def _split_checkpoint(self, ref: str) -> tuple[Backend, str]:
        backend_name, sep, rest = ref.partition(":")
        lineage, at, seq = rest.partition("@")
        # ASCII digits only: str.isdigit alone reads "@٣" (Arabic-Indic three) as "@3"; and
        # as ids write it, without leading zeros: "@0001" would silently name "@1".
        if (not sep or not at or not (seq.isascii() and seq.isdigit()) or len(seq) > 18
                or seq != str(int(seq))):  # fmt: skip
            raise errors.InvalidInput(
                f"malformed checkpoint id {ref!r}: expected BACKEND:WORKLOAD@SEQ",
                hint=f"list checkpoints with {errors.step('list_checkpoints')} and copy an id "
                "(BACKEND:WORKLOAD@SEQ, the sequence number without leading zeros)",
            )
        parse_ref(f"{backend_name}:{lineage}", what="checkpoint")
        return self.backend(backend_name), f"{lineage}@{int(seq)}"
