"""A self-verifying counter: the demo and test payload for checkpoint/restore.

It holds ``--state-mb`` MB of memory in 1 MiB chunks. Step ``k`` overwrites chunk ``k % N``
with a pattern derived from ``k`` after checking that the chunk still holds the pattern of
step ``k - N``, and also checks one random other chunk; so every byte of state is checked
within N steps, and a restore that lost or mixed up memory is caught. On any mismatch it
prints "STATE CHECK FAILED" and exits with status 3.

Protocols it speaks: the progress file (``CLAWPOINT_PROGRESS_FILE``, written atomically,
never held open: CRIU refuses to restore a regular file that grew after the dump) and the
cooperative checkpoint (on SIGUSR1 it saves its counter and a state digest into
``CLAWPOINT_CHECKPOINT_DIR`` and writes ``COMPLETE``; with ``CLAWPOINT_RESTORE_DIR`` set it
resumes from there). Limits: a test workload, not a benchmark of anything but memory.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import signal
import sys
import time
from pathlib import Path

CHUNK = 1 << 20
_PATTERN_REPEAT = CHUNK // 32


def pattern(value: int) -> bytes:
    return hashlib.sha256(str(value).encode()).digest() * _PATTERN_REPEAT


class State:
    def __init__(self, chunks: int, counter: int) -> None:
        self.n = chunks
        self.counter = counter
        self.mem = bytearray(chunks * CHUNK)
        for c in range(chunks):  # chunk c was last written at the largest k <= counter, k = c mod n
            self._write(c, self._last_write(c))

    def _last_write(self, chunk: int) -> int:
        return self.counter - ((self.counter - chunk) % self.n)

    def _write(self, chunk: int, value: int) -> None:
        self.mem[chunk * CHUNK : (chunk + 1) * CHUNK] = pattern(value)

    def _check(self, chunk: int) -> None:
        want = pattern(self._last_write(chunk))
        if self.mem[chunk * CHUNK : (chunk + 1) * CHUNK] != want:
            print(f"STATE CHECK FAILED at counter {self.counter} chunk {chunk}", flush=True)
            sys.exit(3)

    def step(self) -> None:
        nxt = self.counter + 1
        self._check(nxt % self.n)
        self._check(random.randrange(self.n))
        self.counter = nxt
        self._write(nxt % self.n, nxt)

    def digest(self) -> str:
        return hashlib.sha256(self.mem).hexdigest()


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _save(state: State, directory: Path) -> None:
    data = {"counter": state.counter, "chunks": state.n, "digest": state.digest()}
    (directory / "counter.json").write_text(json.dumps(data))
    (directory / "COMPLETE").write_text("ok\n")  # last: the marker says the rest is written


def _resume(directory: Path, chunks: int) -> State:
    data = json.loads((directory / "counter.json").read_text())
    state = State(int(data["chunks"]), int(data["counter"]))
    if state.digest() != data["digest"] or state.n != chunks:
        print(f"STATE CHECK FAILED: restored state of counter {state.counter}", flush=True)
        sys.exit(3)
    return state


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m core.workloads.counter")
    parser.add_argument("--state-mb", type=int, default=200)
    parser.add_argument("--step-seconds", type=float, default=0.05)
    parser.add_argument("--steps", type=int, default=0, help="stop after this counter (0: never)")
    parser.add_argument("--print-every", type=int, default=20)
    args = parser.parse_args(argv)
    chunks = max(1, args.state_mb)

    restore_dir = os.environ.get("CLAWPOINT_RESTORE_DIR")
    state = _resume(Path(restore_dir), chunks) if restore_dir else State(chunks, 0)
    print(f"counter start {state.counter} state_mb {chunks}", flush=True)

    requested = False

    def on_request(signum: int, frame: object) -> None:
        nonlocal requested
        requested = True

    signal.signal(signal.SIGUSR1, on_request)
    # A PID-namespace init ignores signals it has no handler for: handle SIGTERM explicitly.
    signal.signal(signal.SIGTERM, lambda s, f: sys.exit(143))
    progress = os.environ.get("CLAWPOINT_PROGRESS_FILE")
    ckpt_dir = os.environ.get("CLAWPOINT_CHECKPOINT_DIR")
    while not args.steps or state.counter < args.steps:
        state.step()
        if progress:
            _atomic_write(
                Path(progress), json.dumps({"step": state.counter, "total": args.steps or None})
            )
        if state.counter % args.print_every == 0:
            print(f"counter {state.counter}", flush=True)
        if requested and ckpt_dir:
            requested = False
            _save(state, Path(ckpt_dir))
            print(f"saved counter {state.counter}", flush=True)
        time.sleep(args.step_seconds)
    print(f"counter done {state.counter}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
