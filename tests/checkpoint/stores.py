"""A checkpoint store as a wrapper opens it: with its owner's manifest key, outside the store."""

from __future__ import annotations

from pathlib import Path

from core.store.store import CheckpointStore


def key_for(root: Path) -> Path:
    """The key of the tests' stores at ``root``: beside it, never in it (the same for every
    process that opens the same root, as a user's key is)."""
    return root.parent / f".{root.name}.keys" / "store.key"


def keyed(
    root: Path, *, keep: int = 3, group: str | None = None, keep_on_request: int = 3
) -> CheckpointStore:
    return CheckpointStore(
        root, keep=keep, key=key_for(Path(root)), group=group, keep_on_request=keep_on_request
    )
