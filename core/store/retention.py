"""Which checkpoints may be deleted: rotation, the last good checkpoint, and those in use.

Every deletion of a checkpoint goes through here, under the lineage's lock
(``CheckpointStore.locked``, which ``begin`` also takes), so what is decided about a lineage
still holds when its checkpoints are removed:

- ``rotate`` (after each checkpoint the wrapper publishes) keeps ``keep`` checkpoints taken on
  the workload's schedule or when it stopped, and ``keep_on_request`` of those asked for on
  request (``ON_REQUEST``) by agents (``REQUESTED_BY``: an agent's ``checkpoint_workload``)
  and as many of those asked for by anyone else (``clawpoint checkpoint``, SIGUSR1). Each
  kind rotates among itself: any number of an agent's checkpoints pushes out none of a
  person's nor the schedule's (an agent's "safe" calls never delete those), and they are
  capped, so an agent checkpointing all day fills no disk. Scheduled ones still push out
  everything older, on-request ones included.
- The newest checkpoint that verifies is never deleted by rotation, and by ``delete`` (a
  person's or agent's ``delete_checkpoint``) only when the workload is gone: ``delete``
  re-verifies the newer checkpoints first (a plan approved earlier may find them corrupt
  now) and refuses with Conflict ``last-good-checkpoint``.
- A checkpoint a restore reads is held (``hold``: a shared flock on its ``.hold`` file);
  deletion takes that flock exclusively and leaves a held checkpoint alone (rotation skips
  it; ``delete`` refuses with Conflict ``checkpoint-in-use``).

Untrusted checkpoints neither rotate nor are deleted by rotation: someone who planted
checkpoints must not push good ones out, and what is not ours to judge stays for a person.

Limits: verification under the lock hashes the newer checkpoints' images (a checkpoint being
started meanwhile waits for it); a post-copy restore is held until the engine has restored
the tree, not until every page has been faulted in.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager

from core import errors, logs
from core.model import CheckpointInfo, CheckpointStatus
from core.store import perms
from core.store.disk import NEVER_RESTORED, ON_REQUEST, REQUESTED_BY, parse_checkpoint_id
from core.store.store import CheckpointStore

log = logs.get_logger(__name__)

HOLD = ".hold"  # in each checkpoint directory; flocked shared by restores, exclusively by deletion
LAST_GOOD = "last-good-checkpoint"
IN_USE = "checkpoint-in-use"


def _gone(checkpoint_id: str) -> errors.NotFound:
    return errors.NotFound(
        f"no checkpoint {checkpoint_id}", hint="list the checkpoints to see which exist"
    )


@contextmanager
def hold(store: CheckpointStore, checkpoint_id: str, *, missing_ok: bool = False) -> Iterator[None]:
    """Keep a checkpoint from being deleted while it is read (a restore). NotFound when it is
    gone, or went while we waited for a deletion to finish (``missing_ok``: hold nothing and
    let the reader report it). Where we may not create the file (another uid's lineage, where
    we never delete either) nothing is held."""
    path = store.path_of(checkpoint_id)
    if path is None and not missing_ok:
        raise _gone(checkpoint_id)
    fd = -1
    if path is not None:
        try:
            fd = perms.open_file(path / HOLD, store.modes, os.O_RDONLY)
        except OSError as exc:
            log.debug("checkpoint.not_held", id=checkpoint_id, error=str(exc))
    try:
        if fd >= 0:
            fcntl.flock(fd, fcntl.LOCK_SH)  # a deletion holds it only while it renames
            if store.path_of(checkpoint_id) is None and not missing_ok:
                raise _gone(checkpoint_id)
        yield
    finally:
        if fd >= 0:
            os.close(fd)


def _delete_unheld(store: CheckpointStore, checkpoint_id: str) -> None:
    """Delete a checkpoint no restore holds; Conflict ``checkpoint-in-use`` otherwise."""
    path = store.path_of(checkpoint_id)
    if path is None:
        raise _gone(checkpoint_id)
    try:
        fd = perms.open_file(path / HOLD, store.modes, os.O_RDWR)
    except OSError as exc:
        raise errors.CheckpointError(
            f"cannot delete checkpoint {checkpoint_id}: {exc}",
            hint="check the permissions of the checkpoint store",
        ) from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise errors.Conflict(
                f"checkpoint {checkpoint_id} is being restored; nothing was deleted",
                hint="delete it once the restore has finished",
                code=IN_USE,
                details={"checkpoint": checkpoint_id},
            ) from None
        store.delete(checkpoint_id)  # renamed away while we hold it: a restore finds it gone
    finally:
        os.close(fd)


def _verifies(store: CheckpointStore, info: CheckpointInfo) -> str | None:
    """None when ``info`` verifies (digests included); else why not (a corrupt one is marked)."""
    if info.status in NEVER_RESTORED:
        return f"{info.id} is {info.status.value}"
    try:
        store.verify(info.id)
    except errors.CorruptCheckpoint as exc:  # untrusted ones too
        return exc.message
    return None


def last_good_problem(
    store: CheckpointStore, checkpoint_id: str, *, live: bool, label: str = ""
) -> errors.Conflict | None:
    """Why deleting ``checkpoint_id`` would leave a live workload nothing to restore from
    (none of the newer checkpoints verifies and it does), or None. Re-hashes the newer ones,
    newest first, until one verifies. ``label``: prefix of the ids in the message
    (``local:``)."""
    if not live:
        return None
    lineage, _ = parse_checkpoint_id(checkpoint_id)
    infos = store.list(lineage)  # newest first
    at = next((i for i, info in enumerate(infos) if info.id == checkpoint_id), None)
    if at is None:
        return None  # gone: deleting it reports NotFound
    failed: dict[str, str] = {}  # newer checkpoint -> why it does not verify
    for newer in infos[:at]:
        problem = _verifies(store, newer)
        if problem is None:
            return None
        failed[f"{label}{newer.id}"] = problem
    if _verifies(store, infos[at]) is not None:
        return None  # not good itself: deleting it loses nothing restorable
    which = f"{label}{checkpoint_id}"
    since = f" ({', '.join(failed)} no longer verif{'y' if len(failed) > 1 else 'ies'})"
    return errors.Conflict(
        f"checkpoint {which} is now the newest good checkpoint of {label}{lineage}"
        f"{since if failed else ''}: deleting it would leave the workload nothing to come "
        "back from. Nothing was done.",
        hint=f"take a new checkpoint of {label}{lineage} first; once a newer one verifies, "
        f"{which} may be deleted",
        code=LAST_GOOD,
        details={"checkpoint": which, "newer": failed},
    )


def delete(store: CheckpointStore, checkpoint_id: str, *, live: bool, label: str = "") -> None:
    """Delete one checkpoint (``delete_checkpoint``): under the lineage's lock, refused
    (Conflict ``last-good-checkpoint``) when it is the newest good checkpoint of a ``live``
    workload as the newer ones verify now, and (``checkpoint-in-use``) while a restore holds
    it. Refused, nothing changes."""
    lineage, _ = parse_checkpoint_id(checkpoint_id)
    with store.locked(lineage):
        problem = last_good_problem(store, checkpoint_id, live=live, label=label)
        if problem is not None:
            raise problem
        _delete_unheld(store, checkpoint_id)


def _protected(
    store: CheckpointStore, infos: list[CheckpointInfo], fresh: str | None
) -> str | None:
    """The newest checkpoint that verifies (``fresh``, just published and hashed, is trusted);
    the statuses of those above it that fail are updated in ``infos`` (and marked)."""
    for info in infos:
        if info.status in NEVER_RESTORED:
            continue
        if info.id == fresh:
            return info.id
        try:
            store.verify(info.id)
        except errors.UntrustedCheckpoint:
            info.status = CheckpointStatus.UNTRUSTED
            continue
        except errors.CorruptCheckpoint:
            info.status = CheckpointStatus.CORRUPT  # verify marked it
            continue
        return info.id
    return None


def _kind(info: CheckpointInfo) -> str:
    """How a checkpoint rotates: "rotating" (schedule, stop), or on request by "agent" or by
    "other" (a person, SIGUSR1)."""
    if not info.extra.get(ON_REQUEST):
        return "rotating"
    return "agent" if info.extra.get(REQUESTED_BY) == "agent" else "other"


def doomed(
    infos: list[CheckpointInfo], *, keep: int, keep_on_request: int, protected: str | None
) -> list[str]:
    """What rotation removes of ``infos`` (newest first, statuses known): a checkpoint goes
    once ``keep`` rotating ones (not corrupt, not on request) are newer, or, taken on request,
    once ``keep_on_request`` of its own kind (``_kind``, not corrupt) are. Never
    ``protected`` nor an untrusted one."""
    out: list[str] = []
    newer = {"rotating": 0, "agent": 0, "other": 0}
    for info in infos:
        if info.status is CheckpointStatus.UNTRUSTED:
            continue
        kind = _kind(info)
        if info.id != protected and (
            newer["rotating"] >= keep or (kind != "rotating" and newer[kind] >= keep_on_request)
        ):
            out.append(info.id)
        if info.status is not CheckpointStatus.CORRUPT:
            newer[kind] += 1
    return out


def rotate(store: CheckpointStore, lineage: str, *, fresh: str | None = None) -> list[str]:
    """Delete what ``store.keep`` and ``store.keep_on_request`` rotate out, under the lineage's
    lock; never the newest good checkpoint, never one a restore holds. Returns the ids."""
    deleted: list[str] = []
    with store.locked(lineage):
        infos = store.list(lineage)
        protected = _protected(store, infos, fresh)
        for cid in doomed(
            infos, keep=store.keep, keep_on_request=store.keep_on_request, protected=protected
        ):
            try:
                _delete_unheld(store, cid)
            except errors.Conflict as exc:  # in use: the next rotation takes it
                log.info("checkpoint.rotation_skipped", id=cid, why=exc.message)
                continue
            deleted.append(cid)
    return deleted


__all__ = ["HOLD", "IN_USE", "LAST_GOOD", "delete", "doomed", "hold", "last_good_problem", "rotate"]
