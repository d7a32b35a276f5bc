#!/usr/bin/env python3
"""GPU check, for a machine with an NVIDIA GPU (run through scripts/gpu-check.sh).

Phases, each bounded and reported whatever happens to the others:

1. probe: driver version (NVML, nvidia-smi), GPUs, MIG and persistence mode, the driver's
   checkpoint API (``core.checkpoint.cuda_driver``), ``cuda.core``'s checkpoint module;
2. bandwidth: host<->device copy bandwidth of the same size, pinned and pageable (torch),
   in a process of its own: the physical limit of moving the state;
3. suspend: a process holding SIZE GiB of GPU state with a checksum is suspended in place
   (``core.checkpoint.gpu.suspend`` where pydantic/structlog are importable, otherwise the
   same driver calls directly), NVML shows the memory freed, its CPU side keeps beating,
   the helper reads its state; then it is resumed and the checksum recomputed on the GPU;
4. managed: a process holding managed (UVM) memory is refused fast and left running;
5. criu: where ``criu`` and CRIU's CUDA plugin are present, a GPU process is dumped,
   restored and its checksum verified; skipped with the reason otherwise.

Writes a JSON summary to stdout (last line) and to ``$OUT/gpu-check.json`` when ``OUT`` is
set. Needs: Python 3.11+, torch with CUDA, nvidia-ml-py; no package registry. Not yet run
on hardware by this project: every phase catches its own failure and says what happened.
"""

from __future__ import annotations

import importlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.checkpoint import cuda_driver  # noqa: E402 (after the path above; ctypes only)

GIB = 2**30
SIZE_GIB = int(os.environ.get("GPU_CHECK_GIB", "8"))
PY = sys.executable
RESULTS: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
WORK = Path(tempfile.mkdtemp(prefix="gpu-check-"))


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def phase(name: str, fn: Callable[[], dict[str, Any]]) -> None:
    t0 = time.perf_counter()
    say(f"== {name}")
    try:
        out = fn()
    except Exception as exc:  # noqa: BLE001 (every phase reports; the next one still runs)
        out = {
            "ok": False,
            "error": f"{type(exc).__name__}: {exc}",
            "trace": traceback.format_exc()[-1500:],
        }
    out["phase_s"] = round(time.perf_counter() - t0, 3)
    RESULTS[name] = out
    say(f"{name}: {json.dumps({k: v for k, v in out.items() if k != 'trace'}, default=str)}")


# -- NVML --------------------------------------------------------------------------------------


def nvml_used() -> list[int]:
    import pynvml

    pynvml.nvmlInit()
    try:
        return [
            int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).used)
            for i in range(pynvml.nvmlDeviceGetCount())
        ]
    finally:
        pynvml.nvmlShutdown()


def probe() -> dict[str, Any]:
    out: dict[str, Any] = {"machine": platform.machine(), "kernel": platform.release()}
    out["python"] = sys.version.split()[0]
    try:
        import pynvml

        pynvml.nvmlInit()
        out["nvml_driver"] = str(pynvml.nvmlSystemGetDriverVersion())
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            g: dict[str, Any] = {"name": str(pynvml.nvmlDeviceGetName(h))}
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            g["memory_total_gib"] = round(mem.total / GIB, 1)
            g["memory_used_gib"] = round(mem.used / GIB, 2)
            for key, fn in (
                ("mig", "nvmlDeviceGetMigMode"),
                ("persistence", "nvmlDeviceGetPersistenceMode"),
            ):
                try:
                    g[key] = getattr(pynvml, fn)(h)
                except Exception as exc:  # noqa: BLE001
                    g[key] = f"n/a ({exc})"
            gpus.append(g)
        out["gpus"] = gpus
        pynvml.nvmlShutdown()
    except Exception as exc:  # noqa: BLE001
        out["nvml_error"] = str(exc)
    smi = shutil.which("nvidia-smi")
    if smi:
        r = subprocess.run(
            [smi, "--query-gpu=name,driver_version,persistence_mode,mig.mode.current", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        out["nvidia_smi"] = r.stdout.strip() or r.stderr.strip()
    try:
        drv = cuda_driver.load()
        out["cuda_api"] = drv.version()
        out["checkpoint_api"] = True
    except cuda_driver.DriverUnavailable as exc:
        out["checkpoint_api"] = False
        out["checkpoint_api_reason"] = str(exc)
    try:
        importlib.import_module("cuda.core")
        out["cuda_core"] = "present"
        try:
            importlib.import_module("cuda.core.checkpoint")
            out["cuda_core_checkpoint"] = True
        except ImportError as exc:
            out["cuda_core_checkpoint"] = f"absent ({exc})"
    except ImportError:
        out["cuda_core"] = "absent"
    try:
        torch: Any = importlib.import_module("torch")
        out["torch"] = torch.__version__
        out["torch_cuda"] = torch.version.cuda
    except ImportError:
        out["torch"] = "absent"
    try:
        from core.checkpoint import gpu  # noqa: F401 (is clawpoint's own suspend code importable?)

        out["clawpoint_gpu_module"] = True
    except ImportError as exc:
        out["clawpoint_gpu_module"] = (
            f"not importable here ({exc}): the driver calls are used directly"
        )
    out["ok"] = bool(out.get("checkpoint_api"))
    return out


# -- bandwidth ---------------------------------------------------------------------------------

BANDWIDTH = r"""
import json, sys, time, torch
n = int(sys.argv[1])
dev = torch.empty(n, dtype=torch.uint8, device="cuda")
dev.fill_(7)
out = {}
for kind, pin in (("pinned", True), ("pageable", False)):
    host = torch.empty(n, dtype=torch.uint8, pin_memory=pin)
    for name, dst, src in (("d2h", host, dev), ("h2d", dev, host)):
        best = None
        for _ in range(2):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            dst.copy_(src, non_blocking=False)
            torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            best = dt if best is None else min(best, dt)
        out[f"{name}_{kind}_gbps"] = round(n / best / 1e9, 2)
        out[f"{name}_{kind}_s"] = round(best, 4)
    del host
print(json.dumps(out))
"""


def bandwidth() -> dict[str, Any]:
    r = subprocess.run(
        [PY, "-c", BANDWIDTH, str(SIZE_GIB * GIB)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if r.returncode != 0:
        return {"ok": False, "error": r.stderr[-1500:]}
    out: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    out["ok"] = True
    out["size_gib"] = SIZE_GIB
    return out


# -- the GPU workload --------------------------------------------------------------------------

WORKLOAD = r"""
import os, sys, threading, time, pathlib, torch
d = pathlib.Path(sys.argv[1]); n = int(sys.argv[2])
g = torch.Generator(device="cuda"); g.manual_seed(1234)
x = torch.randint(-2**31, 2**31 - 1, (n // 4,), dtype=torch.int32, device="cuda", generator=g)
w = torch.arange(1, 4097, dtype=torch.int64, device="cuda")
def checksum():
    v = x.view(torch.int64)
    s = int(v.sum().item())
    t = int((v[: (v.numel() // 4096) * 4096].view(-1, 4096) * w).sum().item())
    return f"{s}:{t}"
beats = [0]
def beat():
    while True:
        beats[0] += 1
        (d / "beat.tmp").write_text(str(beats[0])); os.replace(d / "beat.tmp", d / "beat")
        time.sleep(0.05)
threading.Thread(target=beat, daemon=True).start()
(d / "ready.tmp").write_text(checksum()); os.replace(d / "ready.tmp", d / "ready")
while not (d / "exit").exists():
    if (d / "verify").exists():
        (d / "verify").unlink()
        (d / "verified.tmp").write_text(checksum()); os.replace(d / "verified.tmp", d / "verified")
    time.sleep(0.05)
"""


def wait_file(path: Path, timeout_s: float, proc: subprocess.Popen[bytes] | None = None) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists():
            return path.read_text()
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the workload exited ({proc.returncode}) before {path.name}")
        time.sleep(0.05)
    raise TimeoutError(f"no {path} within {timeout_s}s")


def start_workload(d: Path, size: int, *, new_session: bool = False) -> subprocess.Popen[bytes]:
    d.mkdir(parents=True, exist_ok=True)
    log = open(d / "workload.log", "wb")  # noqa: SIM115 (kept open for the child's life)
    return subprocess.Popen(
        [PY, "-c", WORKLOAD, str(d), str(size)],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=new_session,
    )  # fmt: skip


def verify(d: Path, proc: subprocess.Popen[bytes] | None, timeout_s: float = 60) -> str:
    (d / "verified").unlink(missing_ok=True)
    (d / "verify").write_text("1")
    return wait_file(d / "verified", timeout_s, proc)


def stop(proc: subprocess.Popen[bytes] | None, d: Path) -> None:
    (d / "exit").write_text("1")
    if proc is not None:
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def suspend_resume() -> dict[str, Any]:
    d = WORK / "suspend"
    base = nvml_used()
    proc = start_workload(d, SIZE_GIB * GIB)
    out: dict[str, Any] = {"pid": proc.pid, "size_gib": SIZE_GIB}
    try:
        out["checksum"] = wait_file(d / "ready", 120, proc)
        used_loaded = nvml_used()
        out["nvml_used_gib"] = {"before_start": [round(u / GIB, 2) for u in base],
                                "loaded": [round(u / GIB, 2) for u in used_loaded]}  # fmt: skip
        try:
            from core.checkpoint import gpu

            t0 = time.perf_counter()
            down = gpu.suspend(proc.pid, lock_timeout_ms=30_000)
            out["suspend_s"] = round(time.perf_counter() - t0, 4)
            out["suspend_report"] = down.model_dump()
            out["path"] = "core.checkpoint.gpu"
        except ImportError:
            drv = cuda_driver.load()
            t0 = time.perf_counter()
            drv.lock(proc.pid, 30_000)
            t1 = time.perf_counter()
            drv.checkpoint(proc.pid)
            t2 = time.perf_counter()
            out["suspend_s"] = round(t2 - t0, 4)
            out["suspend_report"] = {"lock_s": round(t1 - t0, 4), "checkpoint_s": round(t2 - t1, 4)}
            out["path"] = "driver calls (clawpoint's gpu module not importable here)"
        used_suspended = nvml_used()
        out["nvml_used_gib"]["suspended"] = [round(u / GIB, 2) for u in used_suspended]
        out["freed_gib"] = round((sum(used_loaded) - sum(used_suspended)) / GIB, 2)
        beat0 = int(wait_file(d / "beat", 5))
        time.sleep(0.5)
        out["cpu_side_beats_while_suspended"] = int(wait_file(d / "beat", 5)) - beat0
        helper = subprocess.run(
            [PY, "-m", "core.checkpoint.cuda_helper", "--get-state", "--pid", str(proc.pid)],
            capture_output=True, text=True, timeout=30, cwd=ROOT, check=False,
        )  # fmt: skip
        out["helper_state_while_suspended"] = (helper.stdout or helper.stderr).strip()
        t0 = time.perf_counter()
        try:
            from core.checkpoint import gpu

            up = gpu.resume(proc.pid)
            out["resume_report"] = up.model_dump()
        except ImportError:
            drv = cuda_driver.load()
            drv.restore(proc.pid)
            drv.unlock(proc.pid)
        out["resume_s"] = round(time.perf_counter() - t0, 4)
        out["nvml_used_gib"]["resumed"] = [round(u / GIB, 2) for u in nvml_used()]
        out["checksum_after"] = verify(d, proc)
        out["checksum_intact"] = out["checksum_after"] == out["checksum"]
        bw = RESULTS.get("bandwidth", {})
        if bw.get("ok"):
            size = SIZE_GIB * GIB
            limit = size / (bw["d2h_pinned_gbps"] * 1e9) + size / (bw["h2d_pinned_gbps"] * 1e9)
            out["copy_limit_s"] = round(limit, 4)
            out["ratio_to_copy_limit"] = round((out["suspend_s"] + out["resume_s"]) / limit, 2)
            out["within_1_5x"] = out["ratio_to_copy_limit"] <= 1.5
        out["ok"] = bool(out["checksum_intact"]) and out["freed_gib"] > SIZE_GIB * 0.9
    finally:
        stop(proc, d)
    return out


MANAGED = r"""
import ctypes, pathlib, sys, time
d = pathlib.Path(sys.argv[1])
cu = ctypes.CDLL("libcuda.so.1")
def ok(r, what):
    if r != 0:
        raise SystemExit(f"{what} failed: {r}")
ok(cu.cuInit(0), "cuInit")
dev = ctypes.c_int(); ok(cu.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
ctx = ctypes.c_void_p(); ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "retain")
ok(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
ptr = ctypes.c_uint64(); size = 1 << 30
ok(cu.cuMemAllocManaged(ctypes.byref(ptr), ctypes.c_size_t(size), 1), "cuMemAllocManaged")
ok(cu.cuMemsetD8_v2(ptr, 1, ctypes.c_size_t(size)), "cuMemsetD8")
ok(cu.cuCtxSynchronize(), "cuCtxSynchronize")
(d / "ready").write_text("1")
while not (d / "exit").exists():
    time.sleep(0.05)
"""


def managed() -> dict[str, Any]:
    d = WORK / "managed"
    d.mkdir()
    proc = subprocess.Popen([PY, "-c", MANAGED, str(d)], stderr=subprocess.PIPE)
    out: dict[str, Any] = {"pid": proc.pid}
    try:
        wait_file(d / "ready", 60, proc)
        t0 = time.perf_counter()
        try:
            from core.checkpoint import gpu

            try:
                gpu.suspend(proc.pid, lock_timeout_ms=2000)
                out["refused"] = False
                gpu.resume(proc.pid)
            except Exception as exc:  # noqa: BLE001
                out["refused"] = True
                out["error"] = str(exc)[:500]
                out["code"] = getattr(exc, "code", None)
        except ImportError:
            drv = cuda_driver.load()
            try:
                drv.lock(proc.pid, 2000)
                try:
                    drv.checkpoint(proc.pid)
                    out["refused"] = False
                    drv.restore(proc.pid)
                except cuda_driver.CudaError as exc:
                    out["refused"] = True
                    out["error"] = f"checkpoint: {exc}"
                drv.unlock(proc.pid)
            except cuda_driver.CudaError as exc:
                out["refused"] = True
                out["error"] = f"lock: {exc}"
        out["refusal_s"] = round(time.perf_counter() - t0, 3)
        out["state_after"] = cuda_driver.load().state(proc.pid).name.lower()
        out["still_alive"] = proc.poll() is None
        out["ok"] = bool(out["refused"]) and out["refusal_s"] < 10 and out["still_alive"]
    finally:
        stop(proc, d)
    return out


# -- CRIU --------------------------------------------------------------------------------------


def criu() -> dict[str, Any]:
    exe = os.environ.get("GPU_CHECK_CRIU") or shutil.which("criu")
    dirs = [p for p in os.environ.get("CLAWPOINT_CRIU_PLUGIN_DIRS", "").split(":") if p]
    dirs += ["/usr/lib/criu", "/usr/local/lib/criu", "/usr/lib64/criu"]
    plugin = next((Path(p) for p in dirs if (Path(p) / "cuda_plugin.so").is_file()), None)
    if not exe or plugin is None or os.geteuid() != 0:
        why = "no criu" if not exe else "no cuda_plugin.so" if plugin is None else "not root"
        return {"ok": None, "skipped": f"{why}: CRIU with its CUDA plugin is not on this machine"}
    shim = WORK / "bin"
    shim.mkdir()
    (shim / "cuda-checkpoint").write_text(
        f'#!/bin/sh\ncd "{ROOT}" && exec "{PY}" -m core.checkpoint.cuda_helper "$@"\n'
    )
    (shim / "cuda-checkpoint").chmod(0o755)
    env = {**os.environ, "PATH": f"{shim}{os.pathsep}{os.environ.get('PATH', '')}"}
    d = WORK / "criu"
    images = d / "images"
    images.mkdir(parents=True)
    proc = start_workload(d, GIB, new_session=True)
    out: dict[str, Any] = {"criu": exe, "plugin": str(plugin)}
    try:
        out["checksum"] = wait_file(d / "ready", 120, proc)
        t0 = time.perf_counter()
        dump = subprocess.run(
            [exe, "dump", "-t", str(proc.pid), "-D", str(images), "-L", str(plugin.parent),
             "-o", "dump.log", "-v4", "--file-locks"],
            capture_output=True, text=True, timeout=180, env=env, check=False,
        )  # fmt: skip
        out["dump_s"] = round(time.perf_counter() - t0, 3)
        out["dump_rc"] = dump.returncode
        if dump.returncode != 0:
            out["dump_log_tail"] = (images / "dump.log").read_text(errors="replace")[-2000:]
            out["ok"] = False
            return out
        proc.wait(30)
        t0 = time.perf_counter()
        restore = subprocess.run(
            [exe, "restore", "-D", str(images), "-L", str(plugin.parent), "-d",
             "-o", "restore.log", "-v4", "--pidfile", str(d / "restored.pid"), "--file-locks"],
            capture_output=True, text=True, timeout=180, env=env, check=False,
        )  # fmt: skip
        out["restore_s"] = round(time.perf_counter() - t0, 3)
        out["restore_rc"] = restore.returncode
        if restore.returncode != 0:
            out["restore_log_tail"] = (images / "restore.log").read_text(errors="replace")[-2000:]
            out["ok"] = False
            return out
        out["checksum_after"] = verify(d, None)
        out["ok"] = out["checksum_after"] == out["checksum"]
    finally:
        (d / "exit").write_text("1")
        if proc.poll() is None:
            proc.kill()
        pidfile = d / "restored.pid"
        if pidfile.exists():
            time.sleep(0.5)
            try:
                os.kill(int(pidfile.read_text().strip()), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
    return out


def main() -> int:
    phase("probe", probe)
    if not RESULTS["probe"].get("checkpoint_api"):
        say("no checkpoint API here: the other phases need it")
    else:
        phase("bandwidth", bandwidth)
        phase("suspend_resume", suspend_resume)
        phase("managed_memory", managed)
        phase("criu", criu)
    RESULTS["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    text = json.dumps(RESULTS, default=str)
    out = os.environ.get("OUT")
    if out:
        Path(out, "gpu-check.json").write_text(json.dumps(RESULTS, indent=2, default=str))
    print(text)
    shutil.rmtree(WORK, ignore_errors=True)
    oks = [
        RESULTS[k].get("ok") for k in ("probe", "suspend_resume", "managed_memory") if k in RESULTS
    ]
    return 0 if oks and all(oks) else 1


if __name__ == "__main__":
    sys.exit(main())
