"""Which checkpoint a starting wrapper restores, and what it says when none will do.

- :func:`restore_exactly`: the checkpoint asked for and nothing else; one that does not
  verify fails the start, and no other is restored in its place.
- :func:`restore_newest_good`: the newest checkpoint of the lineage that verifies.
  Untrusted ones are skipped and audited, never restored, never deleted; corrupt ones are
  skipped. A fresh start only for a lineage that has no checkpoint at all, and not even then
  when the start must restore (``start_mode`` "restore"). When none verifies it fails
  (CorruptCheckpoint, or UntrustedCheckpoint when some were untrusted): nothing is started
  and the images are left as they are, so a restore never silently becomes a restart.

The attempts themselves (pipes, the engine's verified restore, the payload) are the
supervisor's (:class:`Attempts`); this module decides only the order and the outcome.

Limits: candidates are tried newest first, one at a time; each failed attempt costs a
verification of that checkpoint.
"""

from __future__ import annotations

from typing import Protocol

from core import errors, logs
from core.model import CheckpointStatus
from core.store.store import CheckpointStore
from core.wrapper.ending import Audit

log = logs.get_logger(__name__)


class Attempts(Protocol):
    """How the supervisor starts its payload."""

    def start_from(self, cid: str) -> None:
        """Restore ``cid`` and run it; CorruptCheckpoint or UntrustedCheckpoint when it
        does not verify (nothing runs then)."""
        ...

    def start_fresh(self) -> None: ...

    def close_pipes(self) -> None:
        """Undo what a failed attempt set up."""
        ...


def audit_untrusted(audit: Audit, name: str, cid: str, why: errors.ClawpointError | str) -> None:
    """Record in the audit log that a restore met (and skipped or refused) an untrusted
    checkpoint: someone may have planted or altered it. Best effort, like the log line."""
    reason = why.message if isinstance(why, errors.ClawpointError) else why
    log.warning("wrapper.untrusted_checkpoint_refused", id=cid, reason=reason)
    audit(
        "checkpoint.untrusted",
        principal=f"wrapper:{name}",
        subject=f"local:{cid}",
        data={"action": "restore", "outcome": "refused", "reason": reason},
    )


def restore_exactly(
    store: CheckpointStore, name: str, cid: str, attempts: Attempts, audit: Audit
) -> str:
    """Restore ``cid`` and nothing else: a corrupt one fails, no other is substituted.
    Returns the start's message."""
    store.get(cid)  # NotFound for a wrong id, before anything
    try:
        attempts.start_from(cid)
    except errors.UntrustedCheckpoint as exc:
        attempts.close_pipes()
        audit_untrusted(audit, name, cid, exc)
        raise errors.UntrustedCheckpoint(
            f"{exc.message}; nothing was started and no other checkpoint was restored in its place",
            hint=exc.hint,
            details={"checkpoint": cid, **exc.details},
        ) from exc
    except errors.CorruptCheckpoint as exc:
        attempts.close_pipes()
        raise errors.CorruptCheckpoint(
            f"checkpoint {cid} is corrupt; nothing was started and no other checkpoint "
            f"was restored in its place ({exc.message})",
            hint=f"restore another checkpoint of {name} (list them with 'clawpoint "
            f"checkpoints local:{name}'), or resume it from its newest good one",
            details={"checkpoint": cid},
        ) from exc
    return f"restored from {cid}"


def restore_newest_good(
    store: CheckpointStore, name: str, start_mode: str, attempts: Attempts, audit: Audit
) -> tuple[str | None, str]:
    """The newest checkpoint that verifies, else a fresh start for a brand-new lineage.
    Returns (the checkpoint restored, None when started fresh; the start's message)."""
    untrusted: list[str] = []
    for info in store.list(name):
        if info.status is CheckpointStatus.UNTRUSTED:
            audit_untrusted(audit, name, info.id, info.extra.get("untrusted_reason", ""))
            untrusted.append(info.id)
            continue
        if info.status is CheckpointStatus.CORRUPT:
            continue
        try:
            attempts.start_from(info.id)
        except errors.UntrustedCheckpoint as exc:
            audit_untrusted(audit, name, info.id, exc)
            untrusted.append(info.id)
            attempts.close_pipes()
            continue
        except errors.CorruptCheckpoint as exc:
            log.warning("wrapper.corrupt_checkpoint_skipped", id=info.id, error=exc.message)
            attempts.close_pipes()
            continue
        return info.id, f"restored from {info.id}"
    published = store.published_ids(name)
    if published or start_mode == "restore":
        raise _none_verifies(name, published, untrusted)
    attempts.start_fresh()
    return None, "started fresh (no checkpoint yet)"


def _none_verifies(name: str, published: list[str], untrusted: list[str]) -> errors.ClawpointError:
    what = (
        f"none of the {len(published)} checkpoint(s) of {name} verifies"
        if published
        else f"{name} has no checkpoint"
    )
    if untrusted:
        what += f" ({len(untrusted)} untrusted: {', '.join(untrusted)})"
    return (errors.UntrustedCheckpoint if untrusted else errors.CorruptCheckpoint)(
        f"{what}; nothing was started (its images were left as they are)",
        hint=(
            "an untrusted checkpoint you wrote before checkpoints were signed can be "
            "re-signed ('clawpoint checkpoints --reseal ID') if nobody else could write "
            "to it; otherwise "
            if untrusted
            else ""
        )
        + "restore a specific checkpoint if one is good; or have a person start it "
        "from scratch ('clawpoint resume WORKLOAD --fresh', 'failover WORKLOAD --fresh', "
        "or 'clawpoint run --fresh --name NAME -- CMD'), which loses its progress",
        details={"workload": name, "checkpoints": published, "untrusted": untrusted},
    )
