"""Whether a checkpoint may be believed: its manifest's authenticity and its files'
integrity, and the errors that refuse one that fails either.

``authenticate`` decides a manifest's status from who owns its directories, what it records
and its seal (``core.store.seal``); ``check_files`` compares the images with the manifest
(file set, sizes, and optionally digests). Both are pure reads: marking a checkpoint corrupt
and refusing it are the store's (``core.store.store``).

Limits: authenticity is only decided for our own lineages with our key; another uid's
checkpoints are at best ``unverified``. Digests are re-hashed with two threads, biggest first.
"""

from __future__ import annotations

import os
import stat
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from core import errors
from core.model import CheckpointInfo, CheckpointStatus
from core.store import digest, perms, seal
from core.store.disk import OWNER_UID, SEAL, UNTRUSTED_REASON, checkpoint_id

# Files an engine may add to an images dir after publish (CRIU writes stats-restore on each
# restore); verification ignores them, everything else unknown is suspicious.
_RESTORE_BYPRODUCTS = frozenset({"stats-restore"})


def authenticate(
    path: Path, raw: bytes, info: CheckpointInfo, owner: int, *, uid: int, key: seal.StoreKey | None
) -> tuple[CheckpointStatus, str]:
    """(status, why): whether this manifest is its lineage owner's, as far as we can tell, for a
    reader of euid ``uid`` holding ``key`` (None: it cannot authenticate)."""
    untrusted = CheckpointStatus.UNTRUSTED
    st = os.lstat(path)
    if st.st_uid != owner:
        return untrusted, (
            f"its directory belongs to {perms.user_name(st.st_uid)}, its lineage to "
            f"{perms.user_name(owner)}: someone else put it there"
        )
    lineage, seq = path.parent.name, int(path.name)
    if (info.id, info.lineage, info.seq) != (checkpoint_id(lineage, seq), lineage, seq):
        return untrusted, (
            f"its manifest describes {info.id}, but it lies at {checkpoint_id(lineage, seq)}"
        )
    recorded = info.extra.get(OWNER_UID)
    if owner != uid:
        if recorded is not None and recorded != owner:
            return untrusted, (
                f"its manifest records owner uid {recorded}, but its directory belongs to "
                f"{perms.user_name(owner)}"
            )
        return CheckpointStatus.UNVERIFIED, (
            f"it belongs to {perms.user_name(owner)}: only its owner's key can "
            "authenticate it (its wrapper does before any restore)"
        )
    if key is None:
        return CheckpointStatus.UNVERIFIED, "this process has no store key to check it with"
    try:
        sealed = perms.read_nofollow(path / SEAL)
    except OSError as exc:
        return untrusted, f"manifest authentication failed: {SEAL} unreadable: {exc}"
    problem = key.check(raw, sealed)
    if problem is None and recorded != uid:
        problem = f"its manifest records owner uid {recorded}, not yours ({uid})"
    if problem is not None:
        return untrusted, f"manifest authentication failed: {problem}"
    return CheckpointStatus.GOOD, ""


def check_files(info: CheckpointInfo, images: Path, *, digests: bool) -> str | None:
    """What is wrong with the images in ``images`` against the manifest, or None; sizes only
    unless ``digests``."""
    expected = {f.name: f for f in info.files}
    try:
        if not stat.S_ISDIR(os.lstat(images).st_mode):
            return "the images directory is not a directory (a link?)"
        present = {p.name for p in images.iterdir()} - _RESTORE_BYPRODUCTS
    except OSError as exc:
        return f"images directory unreadable: {exc}"
    if missing := sorted(set(expected) - present):
        return f"missing files: {', '.join(missing)}"
    if unknown := sorted(present - set(expected)):
        return f"unexpected files: {', '.join(unknown)}"
    for f in info.files:
        st = os.lstat(images / f.name)
        if not stat.S_ISREG(st.st_mode):
            return f"{f.name} is not a regular file (a link?)"
        if st.st_size != f.size:
            return f"{f.name} has {st.st_size} bytes, the manifest says {f.size} (truncated?)"
    if not digests:
        return None
    big_first = sorted(info.files, key=lambda f: -f.size)
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = pool.map(
            lambda f: digest.file_digest(images / f.name, digest.algo_of(f.digest)), big_first
        )
        for f, (_, got) in zip(big_first, results, strict=True):
            if got != f.digest:
                return f"{f.name} digest {got} does not match the manifest's {f.digest}"
    return None


def corrupt_error(info: CheckpointInfo, problem: str) -> errors.CorruptCheckpoint:
    """The refusal of a corrupt checkpoint, saying what to restore instead."""
    return errors.CorruptCheckpoint(
        f"checkpoint {info.id} is corrupt and will not be restored: {problem}",
        hint=f"restore an older checkpoint of {info.lineage} (the newest good one is used "
        "automatically) and delete this one",
        details={"checkpoint": info.id, "problem": problem},
    )


def untrusted_error(info: CheckpointInfo) -> errors.UntrustedCheckpoint:
    """The refusal of an untrusted checkpoint, saying how to recover."""
    problem = str(info.extra.get(UNTRUSTED_REASON, "manifest authentication failed"))
    return errors.UntrustedCheckpoint(
        f"checkpoint {info.id} is untrusted and will not be restored: {problem}",
        hint=f"restore another checkpoint of {info.lineage} (the newest good one is used "
        "automatically). If it was written by your clawpoint before checkpoints were "
        "signed and nobody else could write to its directory, re-sign it with "
        f"'clawpoint checkpoints --reseal {info.id}'; otherwise take a new checkpoint. "
        "It was kept: nothing deletes it but you",
        details={"checkpoint": info.id, "problem": problem},
    )


def foreign_error(d: Path, *, owner: int, uid: int) -> errors.UntrustedCheckpoint:
    """The refusal of lineage directory ``d``, which ``owner`` owns, to a process of euid ``uid``."""
    return errors.UntrustedCheckpoint(
        f"the lineage directory {d} belongs to {perms.user_name(owner)}, not to you "
        f"({perms.user_name(uid)}): clawpoint neither writes into it nor restores "
        "from it",
        hint=f"another user created a lineage of this name in a shared store: use another "
        f"workload name, or have that user or an administrator remove {d}",
        details={"path": str(d), "owner_uid": owner},
    )
