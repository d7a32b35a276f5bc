"""Benchmark: clawpoint checkpoint/restore vs raw CRIU and dd, same workload, same disk.

Run as root: ``.venv/bin/python bench/checkpoint.py [--sizes 256 1024] [--reps 3]``.
For each size a counter workload holding that many MiB runs in its own PID namespace; each
repetition does a raw ``criu dump --leave-running`` and a clawpoint checkpoint (engine dump
with concurrent hashing + store publish with fsync), then kills the workload and times a raw
``criu restore -d`` and a clawpoint restore (``--leave-stopped`` + concurrent verification +
SIGCONT). Throughput is compared with ``dd`` writing the same bytes with and without
``conv=fsync``: clawpoint's checkpoint includes fsync, raw CRIU's does not. Medians reported;
JSON written to bench/results/checkpoint.json. Limits: page cache is warm (images are read
back from memory when hashing/verifying), as it would be right after a dump.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.checkpoint import criu  # noqa: E402
from core.store.store import CheckpointStore  # noqa: E402

CRIU = shutil.which("criu") or "criu"


def _gone(pid: int) -> bool:
    try:
        st = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return st.split(")")[1].split()[0] in ("Z", "X")


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    while not _gone(pid):
        time.sleep(0.01)


def _start(mb: int, out_w: int) -> tuple[subprocess.Popen[bytes], int]:
    cmd = ["unshare", "--pid", "--fork", "setsid", sys.executable, "-m",
           "core.workloads.counter", "--state-mb", str(mb), "--step-seconds", "0.05",
           "--print-every", "1000000"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CLAWPOINT_WORKLOAD": "bench"}
    proc = subprocess.Popen(cmd, stdout=out_w, stderr=out_w, stdin=subprocess.DEVNULL, env=env)
    while True:
        kids = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        if kids:
            pid = int(kids[0])
            status = Path(f"/proc/{pid}/status").read_text()
            rss = int(next(ln.split()[1] for ln in status.splitlines() if ln.startswith("VmRSS")))
            if rss >= mb * 1024:
                return proc, pid
        time.sleep(0.05)


def _timed(argv: list[str], **kw: Any) -> float:
    t0 = time.monotonic()
    subprocess.run(argv, check=True, capture_output=True, **kw)
    return time.monotonic() - t0


def _dd(path: Path, mb: int, fsync: bool) -> float:
    argv = ["dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={mb}"]
    t = _timed(argv + (["conv=fsync"] if fsync else []))
    path.unlink()
    return t


def bench_size(mb: int, reps: int, work: Path) -> dict[str, Any]:
    res: dict[str, list[float]] = {k: [] for k in (
        "raw_dump_s", "raw_dump_fsync_s", "cp_checkpoint_s", "raw_restore_s", "cp_restore_s", "dd_fsync_s",
        "dd_nofsync_s", "image_bytes")}  # fmt: skip
    store = CheckpointStore(work / "store", keep=2)
    for _ in range(reps):
        r, w = os.pipe()
        proc, pid = _start(mb, w)
        ino = criu.pipe_inode(pid, 1)
        raw_dir = work / "raw"
        shutil.rmtree(raw_dir, ignore_errors=True)
        raw_dir.mkdir()
        res["raw_dump_s"].append(_timed([CRIU, "dump", "-t", str(pid), "-D", str(raw_dir),
                                         "--external", f"pipe[{ino}]", "--leave-running",
                                         "-o", str(work / "raw-dump.log")]))  # fmt: skip
        t0 = time.monotonic()
        for f in raw_dir.iterdir():  # like with like: raw CRIU plus making its images durable
            fd = os.open(f, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
        res["raw_dump_fsync_s"].append(res["raw_dump_s"][-1] + time.monotonic() - t0)
        t0 = time.monotonic()
        pending = store.begin("bench", engine="criu", node=None)
        dres = criu.dump(pid, pending.images_dir, leave_running=True,
                         log_path=pending.tmp_dir / "dump.log")  # fmt: skip
        pending.digests = dres.digests
        info = store.publish(pending, timings=dres.timings, leave_running=True, extra=dres.extra)
        res["cp_checkpoint_s"].append(time.monotonic() - t0)
        res["image_bytes"].append(float(info.size_bytes))
        _kill(pid)
        proc.wait()
        # raw restore
        r2, w2 = os.pipe()
        pidfile = work / "raw.pid"
        pidfile.unlink(missing_ok=True)
        res["raw_restore_s"].append(_timed(
            [CRIU, "restore", "-D", str(raw_dir), "-d", "--pidfile", str(pidfile),
             "--inherit-fd", f"fd[{w2}]:pipe:[{ino}]", "-o", str(work / "raw-restore.log")],
            pass_fds=[w2]))  # fmt: skip
        _kill(int(pidfile.read_text()))
        # clawpoint restore (verification concurrent, SIGCONT after)
        r3, w3 = os.pipe()
        t0 = time.monotonic()
        rres = criu.restore(store.images_dir(info.id), pipes={"stdout": ino}, fds={"stdout": w3},
                            log_path=work / "cp-restore.log",
                            verify=lambda: store.verify(info.id))  # fmt: skip
        res["cp_restore_s"].append(time.monotonic() - t0)
        _kill(rres.pid)
        for fd in (r, w, r2, w2, r3, w3):
            os.close(fd)
        res["dd_fsync_s"].append(_dd(work / "dd.bin", mb, True))
        res["dd_nofsync_s"].append(_dd(work / "dd.bin", mb, False))
        store.apply_retention("bench")
    med = {k: statistics.median(v) for k, v in res.items()}
    gib = med["image_bytes"] / 2**20
    return {
        "state_mib": mb,
        "image_mib": round(gib, 1),
        **{k: round(v, 4) for k, v in med.items() if k != "image_bytes"},
        "checkpoint_ratio": round(med["cp_checkpoint_s"] / med["raw_dump_s"], 3),
        "checkpoint_ratio_vs_raw_fsync": round(med["cp_checkpoint_s"] / med["raw_dump_fsync_s"], 3),
        "restore_ratio": round(med["cp_restore_s"] / med["raw_restore_s"], 3),
        "cp_mib_s": round(gib / med["cp_checkpoint_s"], 1),
        "raw_criu_mib_s": round(gib / med["raw_dump_s"], 1),
        "dd_fsync_mib_s": round(mb / med["dd_fsync_s"], 1),
        "dd_nofsync_mib_s": round(mb / med["dd_nofsync_s"], 1),
        "cp_vs_dd_fsync": round((gib / med["cp_checkpoint_s"]) / (mb / med["dd_fsync_s"]), 3),
        "raw_criu_vs_dd_nofsync": round(
            (gib / med["raw_dump_s"]) / (mb / med["dd_nofsync_s"]), 3),
        "samples": {k: [round(x, 4) for x in v] for k, v in res.items()},
    }  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 1024])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dir", type=Path, default=None, help="work dir (default: under /var/tmp)")
    args = ap.parse_args()
    status = criu.criu_status()
    if not status.available:
        print(f"CRIU unavailable: {status.reason}", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="cp-bench-", dir=args.dir or "/var/tmp"))
    try:
        rows = [bench_size(mb, args.reps, work) for mb in args.sizes]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    machine = {"kernel": platform.release(), "cpus": os.cpu_count(), "criu": status.version,
               "python": platform.python_version(),
               "debian": Path("/etc/debian_version").read_text().strip()}  # fmt: skip
    print(f"{'MiB':>5} {'raw dump':>9} {'cp ckpt':>8} {'ratio':>6} {'r+fsync':>8} {'ratio':>6} {'raw rst':>8} {'cp rst':>7} "
          f"{'ratio':>6} {'cp MiB/s':>9} {'dd fsync':>9} {'cp/dd':>6}")  # fmt: skip
    for r in rows:
        print(f"{r['state_mib']:>5} {r['raw_dump_s']:>9.3f} {r['cp_checkpoint_s']:>8.3f} "
              f"{r['checkpoint_ratio']:>6.2f} {r['raw_dump_fsync_s']:>8.3f} "
              f"{r['checkpoint_ratio_vs_raw_fsync']:>6.2f} {r['raw_restore_s']:>8.3f} {r['cp_restore_s']:>7.3f} "
              f"{r['restore_ratio']:>6.2f} {r['cp_mib_s']:>9.1f} {r['dd_fsync_mib_s']:>9.1f} "
              f"{r['cp_vs_dd_fsync']:>6.2f}")  # fmt: skip
    out = ROOT / "bench" / "results" / "checkpoint.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": machine, "results": rows}, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
