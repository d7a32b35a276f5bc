"""A self-verifying stateful workload for demos, tests and benchmarks.

``python -m core.workloads.counter --state-mb 200 [--step-seconds 0.05] [--steps N]``

It holds ``--state-mb`` MiB of memory whose content is a function of a counter. Every step it
first checks that the memory still holds the previous step's value (so a restore that lost
or mixed pages is caught at the next step), then rewrites it for the new value. Checking is
cheap enough for 1 GiB: one 8-byte word per 4 KiB page is compared (every page is touched),
plus a full digest of a small derived sample. On a failed check it prints
``STATE CHECK FAILED`` and exits 3.

It speaks the progress protocol (``$CLAWPOINT_PROGRESS_FILE``, written atomically each
step; no regular file is kept open, which CRIU would refuse to restore if it grew) and the
cooperative checkpoint protocol (on SIGUSR1: counter + digest into
``$CLAWPOINT_CHECKPOINT_DIR`` then a ``COMPLETE`` marker; resumes from
``$CLAWPOINT_RESTORE_DIR``). Limits: single-threaded; the state is synthetic.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
import time
from array import array
from pathlib import Path

PAGE_WORDS = 512  # 4096-byte pages of 8-byte words
SAMPLE_PAGES = 16


class State:
    def __init__(self, mb: int) -> None:
        self.pages = max(1, mb * 256)
        self.buf = bytearray(self.pages * 4096)
        self.words = memoryview(self.buf).cast("Q")
        self.counter = 0

    def _sample(self, value: int) -> bytes:
        # Fills bytes 8..4095 of a page (word 0 holds the counter).
        seed = hashlib.sha256(value.to_bytes(8, "little")).digest()
        return (seed * 128)[8:]

    def write(self, value: int) -> None:
        # Word 0 of every page holds the counter: touches every page (all of it is real state).
        self.words[::PAGE_WORDS] = array("Q", [value]) * self.pages
        sample = self._sample(value)
        for page in range(min(SAMPLE_PAGES, self.pages)):
            self.buf[page * 4096 + 8 : (page + 1) * 4096] = sample
        self.counter = value

    def check(self) -> bool:
        expected = array("Q", [self.counter]) * self.pages
        if self.words[::PAGE_WORDS].tobytes() != expected.tobytes():
            return False
        sample = self._sample(self.counter)
        return all(
            self.buf[page * 4096 + 8 : (page + 1) * 4096] == sample
            for page in range(min(SAMPLE_PAGES, self.pages))
        )

    def digest(self) -> str:
        return hashlib.sha256(
            self.words[::PAGE_WORDS].tobytes() + bytes(self.buf[: SAMPLE_PAGES * 4096])
        ).hexdigest()


def _atomic_json(path: Path, data: dict[str, object]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def _save(state: State, directory: Path) -> None:
    """Cooperative checkpoint: the state file, made durable, then the marker."""
    data = json.dumps({"counter": state.counter, "digest": state.digest()}).encode()
    fd = os.open(directory / "state.json", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    fd = os.open(directory / "COMPLETE", os.O_WRONLY | os.O_CREAT, 0o644)
    os.fsync(fd)
    os.close(fd)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--state-mb", type=int, default=200)
    ap.add_argument("--step-seconds", type=float, default=0.05)
    ap.add_argument("--steps", type=int, default=0, help="stop after N steps (0: never)")
    ap.add_argument("--print-every", type=int, default=20)
    args = ap.parse_args(argv)

    state = State(args.state_mb)
    start = 0
    restore_dir = os.environ.get("CLAWPOINT_RESTORE_DIR")
    if restore_dir:
        saved = json.loads((Path(restore_dir) / "state.json").read_text())
        start = int(saved["counter"])
        state.write(start)
        if state.digest() != saved["digest"]:
            print("STATE CHECK FAILED: restored digest mismatch", flush=True)
            return 3
        print(f"resumed from step {start}", flush=True)
    else:
        state.write(0)

    requested = False

    def on_request(signum: int, frame: object) -> None:
        nonlocal requested
        requested = True

    def on_term(signum: int, frame: object) -> None:
        # As a PID-namespace init we would ignore SIGTERM without a handler.
        print(f"terminated at step {state.counter}", flush=True)
        sys.exit(143)

    signal.signal(signal.SIGUSR1, on_request)
    signal.signal(signal.SIGTERM, on_term)
    progress = os.environ.get("CLAWPOINT_PROGRESS_FILE")
    ckpt_dir = os.environ.get("CLAWPOINT_CHECKPOINT_DIR")
    print(f"counter started: state {args.state_mb} MiB, pid {os.getpid()}", flush=True)
    step = start
    while not args.steps or step < args.steps:
        if not state.check():
            print(f"STATE CHECK FAILED at step {step}", flush=True)
            return 3
        step += 1
        state.write(step)
        if progress:
            _atomic_json(
                Path(progress),
                {"step": step, "total": args.steps or None, "verified": True, "ts": time.time()},
            )
        if step % args.print_every == 0:
            print(f"step {step} verified", flush=True)
        if requested and ckpt_dir:
            requested = False
            _save(state, Path(ckpt_dir))
        time.sleep(args.step_seconds)
    print(f"done after {step} steps", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
