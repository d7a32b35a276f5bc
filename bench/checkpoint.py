"""Benchmark: clawpoint checkpoint/restore vs raw CRIU and dd, same workload, same disk.

Run as root: ``.venv/bin/python bench/checkpoint.py [--quick] [--sizes 256 1024] [--reps 3]``.

For each size the counter workload (``core.workloads.counter``) holding that many MiB runs
under the real wrapper (``launch_detached``: its own PID namespace, pipes owned by the
wrapper), and each repetition measures, in this order and on the same filesystem:

1. raw ``criu dump --leave-running`` of the payload (same ``--external`` pipes as
   clawpoint), then ``fsync`` of every image file and the directory ("raw + sync");
2. a clawpoint checkpoint through the control socket (leave-running): CRIU dump with
   concurrent hashing and early write-back, then publish (fsync, manifest, rename);
3. ``dd if=/dev/zero of=FILE bs=1M count=N conv=fsync`` writing as many MiB as the image;
4. raw ``criu restore -d`` of the raw images (new pipes via ``--inherit-fd``), then a raw
   ``criu dump`` (kill mode) of that restored copy: the raw baseline for "stop";
5. a clawpoint checkpoint-and-stop through the control socket (dump frozen, publish, kill);
6. a clawpoint restore: a new wrapper started from that checkpoint; its restore time is the
   one the wrapper measures around ``criu_restore_verified`` (``--leave-stopped`` restore,
   full digest verification concurrently, SIGCONT), reported by its status.

Before every timed step the page cache is written back and dropped (``sync``; ``echo 3 >
/proc/sys/vm/drop_caches``), for raw and clawpoint alike: restores read images from disk.
Also reported for steps 1 and 2: the workload's frozen time, from CRIU's own ``stats-dump``
(``frozen_time``; for clawpoint plus ``held_after_dump_s``, the time the tree stays stopped
after CRIU to have its files copied): for a leave-running checkpoint that is the pause the
workload sees, and hashing and publishing happen after it ends. Before the runs, the
digest's hash rate from the page cache is measured on a 1 GiB file with 1 and 2 hashing
threads (and plain sha256).
Reported: medians of ``--reps`` runs (>= 3). JSON: ``bench/results/checkpoint.json``.
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.checkpoint import criu, stats  # noqa: E402
from core.config import Settings, load_settings  # noqa: E402
from core.model import WorkloadState  # noqa: E402
from core.specs import RunSpec  # noqa: E402
from core.state.db import Database  # noqa: E402
from core.state.workloads import WorkloadRegistry  # noqa: E402
from core.store import digest  # noqa: E402
from core.wrapper import fence  # noqa: E402
from core.wrapper.control import ControlClient  # noqa: E402
from core.wrapper.launch import launch_detached  # noqa: E402

KEYS = (
    "raw_dump_s",
    "raw_dump_sync_s",
    "cp_ckpt_s",
    "raw_stop_s",
    "raw_stop_sync_s",
    "cp_stop_s",
    "dd_fsync_s",
    "raw_restore_s",
    "cp_restore_s",
    "cp_restore_launch_s",
    "image_mib",
    "cp_criu_dump_s",
    "cp_publish_s",
    "raw_frozen_s",
    "cp_frozen_s",
)


def drop_caches(enabled: bool) -> None:
    """Write back dirty pages, then drop clean ones (when enabled)."""
    os.sync()
    if enabled:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")


def sync_dir(d: Path) -> float:
    """fsync every file of ``d`` and ``d`` itself; returns the seconds it took."""
    t0 = time.perf_counter()
    for p in d.iterdir():
        fd = os.open(p, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(fd)
    os.close(fd)
    return time.perf_counter() - t0


def timed(argv: list[str], **kw: Any) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, **kw)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        log = argv[argv.index("-o") + 1] if "-o" in argv else ""
        tail = Path(log).read_text(errors="replace")[-1500:] if log else proc.stderr[-800:]
        raise RuntimeError(f"{argv[:2]} failed ({proc.returncode}): {tail}")
    return wall


def pipe_inodes(pid: int) -> list[int]:
    out = []
    for fd in (1, 2):
        target = os.readlink(f"/proc/{pid}/fd/{fd}")
        if target.startswith("pipe:["):
            out.append(int(target[6:-1]))
    return out


def wait_until(what: str, check: Callable[[], bool], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {what}")


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS"):
            return int(line.split()[1])
    return 0


def kill_wait(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        wait_until(f"pid {pid} to go", lambda: not Path(f"/proc/{pid}").exists(), 30)


class Bench:
    def __init__(self, work: Path, *, drop: bool) -> None:
        self.work = work
        self.drop = drop
        self.criu = criu.require()
        self.settings: Settings = load_settings(work / "home")
        self.registry = WorkloadRegistry(Database(self.settings.state_db))

    def launch(self, name: str, mb: int, restore_from: str | None = None) -> float:
        spec = RunSpec(
            name=name,
            command=[
                sys.executable,
                "-m",
                "core.workloads.counter",
                "--state-mb",
                str(mb),
                "--step-seconds",
                "0.5",
                "--print-every",
                "1000000",
            ],
            home=str(self.settings.home),
            restore_from=restore_from,
        )
        t0 = time.perf_counter()
        launch_detached(self.settings, spec, wait_s=300)
        return time.perf_counter() - t0

    def client(self, name: str) -> ControlClient:
        return ControlClient(self.settings.run_dir / f"{name}.sock")

    def payload_pid(self, name: str) -> int:
        record = self.registry.get(name)
        assert record is not None and record.pid is not None
        return record.pid

    def stop_wrapper(self, name: str) -> None:
        try:
            self.client(name).terminate(timeout_s=5)
        except Exception:
            pass
        record = self.registry.get(name)
        if record is not None:
            fence.fence(self.settings, record)

    def rep_with_retry(self, mb: int, rep: int) -> dict[str, float]:
        """``one_rep``, repeated once under a new name if it failed (a failure is reported)."""
        try:
            return self.one_rep(mb, rep)
        except Exception as exc:
            _retry_note(mb, rep, exc)
            return self.one_rep(mb, rep + 1000)

    def one_rep(self, mb: int, rep: int) -> dict[str, float]:
        r: dict[str, float] = {}
        name = f"bench-{mb}-{rep}"
        self.launch(name, mb)
        pid = self.payload_pid(name)
        wait_until("the workload to fill its memory", lambda: rss_kib(pid) >= mb * 1024)
        inodes = pipe_inodes(pid)
        ext = [a for ino in inodes for a in ("--external", f"pipe[{ino}]")]
        raw = self.work / "raw"
        try:
            # 1. raw dump, leave running (+ sync of its images)
            shutil.rmtree(raw, ignore_errors=True)
            raw.mkdir()
            drop_caches(self.drop)
            r["raw_dump_s"] = timed(
                [
                    self.criu,
                    "dump",
                    "-t",
                    str(pid),
                    "-D",
                    str(raw),
                    "-o",
                    str(self.work / "dump.log"),
                    *ext,
                    "--leave-running",
                ]
            )
            r["raw_dump_sync_s"] = r["raw_dump_s"] + sync_dir(raw)
            r["raw_frozen_s"] = stats.read_stats(raw / "stats-dump").get("frozen_s", float("nan"))
            # 2. clawpoint checkpoint, leave running
            drop_caches(self.drop)
            t0 = time.perf_counter()
            info = self.client(name).checkpoint(stop=False)
            r["cp_ckpt_s"] = time.perf_counter() - t0
            r["cp_criu_dump_s"] = info.timings.get("criu_dump_s", 0.0)
            r["cp_publish_s"] = info.timings.get("publish_s", 0.0)
            # A tree whose files are copied stays stopped after CRIU until the copy is done.
            r["cp_frozen_s"] = info.timings.get("frozen_s", float("nan")) + info.timings.get(
                "held_after_dump_s", 0.0
            )
            r["image_mib"] = info.size_bytes / 2**20
            # 3. dd of the same number of bytes, with fsync
            drop_caches(self.drop)
            dd_file = self.work / "dd.bin"
            count = max(1, round(r["image_mib"]))
            r["dd_fsync_s"] = timed(
                ["dd", "if=/dev/zero", f"of={dd_file}", "bs=1M", f"count={count}", "conv=fsync"]
            ) * (r["image_mib"] / count)
            dd_file.unlink()
            # 4. raw restore of the raw images, then a raw kill-mode dump of that copy
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            pidfile = self.work / "raw.pid"
            pidfile.unlink(missing_ok=True)
            inherit = []
            for ino, fd in zip(inodes, (out_w, err_w), strict=False):
                inherit += ["--inherit-fd", f"fd[{fd}]:pipe:[{ino}]"]
            drop_caches(self.drop)
            r["raw_restore_s"] = timed(
                [
                    self.criu,
                    "restore",
                    "-D",
                    str(raw),
                    "-d",
                    "--restore-sibling",
                    "-o",
                    str(self.work / "restore.log"),
                    "--pidfile",
                    str(pidfile),
                    *inherit,
                ],
                pass_fds=(out_w, err_w),
            )
            rpid = int(pidfile.read_text())
            new_ext = [
                a for fd in (out_r, err_r) for a in ("--external", f"pipe[{os.fstat(fd).st_ino}]")
            ]
            raw2 = self.work / "raw-stop"
            shutil.rmtree(raw2, ignore_errors=True)
            raw2.mkdir()
            drop_caches(self.drop)
            r["raw_stop_s"] = timed(
                [
                    self.criu,
                    "dump",
                    "-t",
                    str(rpid),
                    "-D",
                    str(raw2),
                    "-o",
                    str(self.work / "stop.log"),
                    *new_ext,
                ]
            )
            r["raw_stop_sync_s"] = r["raw_stop_s"] + sync_dir(raw2)
            kill_wait(rpid)
            for fd in (out_r, out_w, err_r, err_w):
                os.close(fd)
            shutil.rmtree(raw2, ignore_errors=True)
            # 5. clawpoint checkpoint and stop
            drop_caches(self.drop)
            t0 = time.perf_counter()
            stopped = self.client(name).checkpoint(stop=True)
            r["cp_stop_s"] = time.perf_counter() - t0
            wait_until(
                "the wrapper to stop",
                lambda: (
                    (rec := self.registry.get(name)) is not None
                    and rec.state is WorkloadState.STOPPED
                ),
            )
            wait_until(
                "the wrapper socket to go", lambda: not self.client(name).socket_path.exists()
            )
            # 6. clawpoint restore (a new wrapper from that checkpoint)
            drop_caches(self.drop)
            r["cp_restore_launch_s"] = self.launch(name, mb, restore_from=stopped.id)
            timings = self.client(name).status()["restore"]["timings"]
            r["cp_restore_s"] = float(timings["restore_total_s"])
        finally:
            self.stop_wrapper(name)
            shutil.rmtree(raw, ignore_errors=True)
            shutil.rmtree(self.settings.checkpoint_dir / name, ignore_errors=True)
        return r


def _retry_note(mb: int, rep: int, exc: Exception) -> None:
    print(f"rep {rep} at {mb} MiB failed, repeating it once: {exc}", file=sys.stderr)


def summarise(mb: int, runs: list[dict[str, float]]) -> dict[str, Any]:
    med = {k: statistics.median(run[k] for run in runs) for k in KEYS}
    mib = med["image_mib"]
    row: dict[str, Any] = {"state_mib": mb, **{k: round(v, 4) for k, v in med.items()}}
    row.update(
        {
            "ckpt_vs_raw": med["cp_ckpt_s"] / med["raw_dump_s"],
            "ckpt_vs_raw_sync": med["cp_ckpt_s"] / med["raw_dump_sync_s"],
            "stop_vs_raw": med["cp_stop_s"] / med["raw_stop_s"],
            "stop_vs_raw_sync": med["cp_stop_s"] / med["raw_stop_sync_s"],
            "restore_vs_raw": med["cp_restore_s"] / med["raw_restore_s"],
            "cp_mib_s": mib / med["cp_ckpt_s"],
            "dd_fsync_mib_s": mib / med["dd_fsync_s"],
            "cp_vs_dd": med["dd_fsync_s"] / med["cp_ckpt_s"],
            "frozen_vs_raw": med["cp_frozen_s"] / med["raw_frozen_s"],
        }
    )
    for k in list(row):
        if isinstance(row[k], float):
            row[k] = round(row[k], 3)
    row["samples"] = {k: [round(run[k], 4) for run in runs] for k in KEYS}
    return row


def machine(criu_version: str | None, work: Path) -> dict[str, Any]:
    def first(path: str, prefix: str) -> str:
        try:
            for line in Path(path).read_text().splitlines():
                if line.startswith(prefix):
                    return line.split(":", 1)[1].strip()
        except OSError:
            pass
        return "?"

    fs = subprocess.run(
        ["df", "--output=source,fstype", str(work)], capture_output=True, text=True
    ).stdout.splitlines()[-1:]
    return {
        "cpu": first("/proc/cpuinfo", "model name"),
        "cores": os.cpu_count(),
        "memory": first("/proc/meminfo", "MemTotal"),
        "disk": " ".join(fs[0].split()) if fs else "?",
        "kernel": platform.release(),
        "criu": criu_version,
        "python": platform.python_version(),
        "debian": Path("/etc/debian_version").read_text().strip(),
    }


def hash_rates(work: Path, mib: int = 1024) -> dict[str, float]:
    """MiB/s of ``file_digest`` on a ``mib`` MiB file in the page cache: tree with 1 and 2
    threads, and plain sha256 (one stream). Best of 3, to see the hashing, not the neighbours."""
    path = work / "hash-rate.bin"
    block = os.urandom(1 << 20)
    with open(path, "wb") as f:
        for _ in range(mib):
            f.write(block)
    digest.file_digest(path, "sha256")  # warm: the whole file is in the page cache now
    rates: dict[str, float] = {}
    saved = os.environ.get(digest.ENV_THREADS)
    try:
        for label, algo, threads in [
            ("sha256", "sha256", "1"),
            (f"{digest.TREE}_1_thread", digest.TREE, "1"),
            (f"{digest.TREE}_2_threads", digest.TREE, "2"),
        ]:
            os.environ[digest.ENV_THREADS] = threads
            best = float("inf")
            for _ in range(3):
                t0 = time.perf_counter()
                digest.file_digest(path, algo)
                best = min(best, time.perf_counter() - t0)
            rates[label] = round(mib / best)
    finally:
        if saved is None:
            os.environ.pop(digest.ENV_THREADS, None)
        else:
            os.environ[digest.ENV_THREADS] = saved
        path.unlink()
    return rates


def has_blake3() -> bool:
    try:
        digest.new_hasher("blake3")
    except Exception:
        return False
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="256 MiB only, 3 repetitions")
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 1024])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument(
        "--digests",
        nargs="+",
        default=None,
        help=f"digest algorithms to measure (default: {digest.TREE}, and blake3 if installed)",
    )
    ap.add_argument("--warm", action="store_true", help="do not drop the page cache")
    ap.add_argument("--dir", type=Path, default=Path("/var/tmp"), help="parent of the work dir")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "checkpoint.json")
    args = ap.parse_args()
    sizes = [256] if args.quick else args.sizes
    reps = max(3, args.reps)
    status = criu.criu_status()
    if not status.available:
        print(f"CRIU unavailable: {status.reason}", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="clawpoint-bench-", dir=args.dir))
    os.environ["CLAWPOINT_HOME"] = str(work / "home")
    bench = Bench(work, drop=not args.warm)
    digests = args.digests or [digest.TREE] + (["blake3"] if has_blake3() else [])
    rows = []
    rates: dict[str, float] = {}
    try:
        rates = hash_rates(work)
        print(f"hash rates (MiB/s, page cache): {rates}", file=sys.stderr)
        for algo in digests:
            os.environ[digest.ENV_DIGEST] = algo  # inherited by the wrappers the bench starts
            digest.new_hasher(algo)
            for mb in sizes:
                runs = [bench.rep_with_retry(mb, i) for i in range(reps)]
                rows.append({"digest": algo, **summarise(mb, runs)})
                print(f"done: {algo} {mb} MiB: {json.dumps(rows[-1])}", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    info = machine(status.version, args.dir)
    print(json.dumps({k: v for k, v in info.items()}, indent=None))
    print(f"page cache dropped before each step: {not args.warm}; medians of {reps} runs")
    print(f"hash rates, MiB/s from the page cache: {rates}")
    head = (
        f"{'digest':>10} {'MiB':>5} {'raw':>6} {'raw+s':>6} {'cp':>6} {'x raw':>6} {'x r+s':>6} "
        f"{'rawStp':>6} {'cpStop':>6} {'x raw':>6} {'x r+s':>6} "
        f"{'rawRst':>6} {'cpRst':>6} {'x raw':>6} {'cpMiB/s':>8} {'ddMiB/s':>8} {'x dd':>5} "
        f"{'rawFrz':>6} {'cpFrz':>6} {'x raw':>5}"
    )
    print(head)
    for r in rows:
        print(
            f"{r['digest']:>10} {r['image_mib']:>5.0f} {r['raw_dump_s']:>6.2f} {r['raw_dump_sync_s']:>6.2f} "
            f"{r['cp_ckpt_s']:>6.2f} {r['ckpt_vs_raw']:>6.2f} {r['ckpt_vs_raw_sync']:>6.2f} "
            f"{r['raw_stop_s']:>6.2f} {r['cp_stop_s']:>6.2f} {r['stop_vs_raw']:>6.2f} "
            f"{r['stop_vs_raw_sync']:>6.2f} {r['raw_restore_s']:>6.2f} {r['cp_restore_s']:>6.2f} "
            f"{r['restore_vs_raw']:>6.2f} {r['cp_mib_s']:>8.0f} {r['dd_fsync_mib_s']:>8.0f} "
            f"{r['cp_vs_dd']:>5.2f} {r['raw_frozen_s']:>6.3f} {r['cp_frozen_s']:>6.3f} "
            f"{r['frozen_vs_raw']:>5.2f}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    payload = {"machine": info, "drop_caches": not args.warm, "reps": reps, "results": rows}
    args.out.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
