"""What proving a handoff's staged images costs the pause: hashing them, or checking where
they are (``core.store.staging.link``).

Two ways for a standby to restore only images its source dumped (issue 20):
(a) the source hashes the staged files after CRIU's dump, the digests travel in the order
and the standby re-hashes before it restores: both hashes are in the pause;
(b) the images sit in a per-uid 0700 area no other uid can write, re-verified by the
standby on descriptors, and each hard link it makes is checked (regular file, ours, no
other name). This prints, for a fake dump of ``--mb`` MiB (one pages image plus the small
files CRIU writes), the median over ``--runs`` of: (b) ``link`` with its checks, the plain
links it replaces, and (a) one full hash with the store's algorithm (``digest.file_digest``).

Limits: the hash is measured once per side; (a) pays it twice (source and standby), less
whatever the source could hash while CRIU writes. Page cache warm (a tmpfs: always).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from core.store import digest, staging


def _fake_dump(slot: Path, mb: int) -> None:
    block = os.urandom(1 << 20)
    with open(slot / "pages-1.img", "wb") as f:
        for _ in range(mb):
            f.write(block)
    for name in ("core-1.img", "mm-1.img", "pagemap-1.img", "files.img", "fs-1.img",
                 "ids-1.img", "inventory.img", "pstree.img", "seccomp.img", "tty-info.img"):  # fmt: skip
        (slot / name).write_bytes(os.urandom(4096))


def _median(fn: Callable[[], None], runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(staging_dir: str, mb: int, runs: int) -> dict[str, float]:
    slot = staging.allocate(staging_dir, "bench@1", mb << 20)
    if slot is None:
        raise SystemExit(f"no room to stage {mb} MiB under {staging_dir}")
    try:
        _fake_dump(slot.path, mb)

        def checked() -> None:
            staging.link(staging_dir, slot.path, "bench").remove()

        def plain() -> None:  # what the standby did before: no checks
            links = slot.path.parent / f"{slot.path.name}.plain"
            links.mkdir()
            for f in slot.path.iterdir():
                os.link(f, links / f.name)
            shutil.rmtree(links)

        def hashed() -> None:
            for f in slot.path.iterdir():
                digest.file_digest(f)

        return {
            "mb": mb,
            "hash_threads": digest.hash_threads(),
            "b_link_checked_s": _median(checked, runs),
            "plain_link_s": _median(plain, runs),
            "a_hash_once_s": _median(hashed, runs),
        }
    finally:
        slot.remove()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--dir", default="/dev/shm", help="parent of a fresh staging_dir")
    args = ap.parse_args()
    parent = tempfile.mkdtemp(prefix="clawpoint-bench-", dir=args.dir)
    try:
        print(json.dumps(measure(parent, args.mb, args.runs)))
    finally:
        shutil.rmtree(parent, ignore_errors=True)


if __name__ == "__main__":
    main()
