"""GPU state of a process: what the checkpoint API cannot carry, and suspend/resume in place.

``suspend(pid)`` locks the process's CUDA calls, checkpoints its GPU state into its own host
memory and so frees the GPU, while the process keeps running on the CPU side (a CUDA call
blocks until ``resume``). ``resume(pid)`` restores the GPU state and unlocks it. Both
measure the GPU memory in use before and after with NVML, so the report says how much was
freed or taken back. This is what lets a scheduler lend a GPU to urgent work without
killing a long job (``core.checkpoint.cuda`` builds checkpoint/restore on the same calls).

``refusals(pid)`` lists, read-only and cheapest first, what cannot work, so nothing is
locked when it would fail anyway: MIG mode on a GPU (the API does not support it), MPS (the
process is a client of the MPS server), a process on more than one GPU, a live NCCL
communicator (NCCL threads or ``nccl-*`` shared memory) or a rank of a distributed job
(``WORLD_SIZE`` > 1): their peers would hang (an application can suspend its communicators
itself with NCCL's ``ncclCommSuspend``). Managed (UVM) memory shows only as a failing lock: the lock is
bounded by ``lock_timeout_ms`` and its failure becomes the refusal "managed memory or a
kernel that does not end". Any failure after the lock unlocks again: the process is never
left frozen.

Limits: one process, not a tree; NVML's process list and memory counts are per GPU (in a
PID namespace NVML may report other pids: then the GPU count check is skipped). Not yet
verified on hardware by this project's tests (fakes of the driver API and of NVML).
"""

from __future__ import annotations

import importlib
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import Field

from core import errors
from core.checkpoint import cuda_driver, files
from core.checkpoint.cuda_driver import CudaError, Driver, ProcessState
from core.schema_base import Model

DEFAULT_LOCK_TIMEOUT_MS = 10_000
CODE = "gpu-unsupported"


class GpuMemory(Model):
    index: int
    name: str
    uuid: str = ""
    used_bytes: int
    total_bytes: int
    mig: bool = False
    pids: list[int] = Field(default_factory=list)


class GpuRefusal(Model):
    resource: str
    reason: str
    hint: str

    def __str__(self) -> str:
        return f"{self.resource}: {self.reason} ({self.hint})"


class GpuSuspendReport(Model):
    pid: int
    action: str  # suspend | resume
    state_before: str
    state_after: str
    used_before_bytes: int | None
    used_after_bytes: int | None
    freed_bytes: int | None  # positive: freed (suspend); negative: taken back (resume)
    gpus: list[str] = Field(default_factory=list)
    timings: dict[str, float] = Field(default_factory=dict)
    nvml: str = "ok"  # or why memory could not be measured


# -- NVML -----------------------------------------------------------------------------------


def _import_nvml() -> Any:
    return importlib.import_module("pynvml")


def gpus(nvml: Any | None = None) -> tuple[list[GpuMemory], str]:
    """Every GPU's memory in use, MIG mode and compute pids; ([], why) when NVML cannot tell."""
    try:
        nv = nvml or _import_nvml()
    except ImportError:
        return [], "the nvidia-ml-py package is not installed"
    try:
        nv.nvmlInit()
    except Exception as exc:  # noqa: BLE001 (any NVML failure is a reason, not a crash)
        return [], f"NVML did not initialise: {exc}"
    out: list[GpuMemory] = []
    try:
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            mem = nv.nvmlDeviceGetMemoryInfo(h)
            try:
                mig = bool(nv.nvmlDeviceGetMigMode(h)[0])
            except Exception:  # noqa: BLE001 (no MIG support on this GPU: not in MIG mode)
                mig = False
            try:
                pids = [int(p.pid) for p in nv.nvmlDeviceGetComputeRunningProcesses(h)]
            except Exception:  # noqa: BLE001 (unknown pids: the GPU-count check is skipped)
                pids = []
            name = nv.nvmlDeviceGetName(h)
            uuid = nv.nvmlDeviceGetUUID(h)
            out.append(
                GpuMemory(
                    index=i,
                    name=name.decode() if isinstance(name, bytes) else str(name),
                    uuid=uuid.decode() if isinstance(uuid, bytes) else str(uuid),
                    used_bytes=int(mem.used),
                    total_bytes=int(mem.total),
                    mig=mig,
                    pids=pids,
                )
            )
    except Exception as exc:  # noqa: BLE001
        return out, f"NVML query failed: {exc}"
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:  # noqa: BLE001, S110 (shutting down a session we are done with)
            pass
    return out, "ok"


# -- refusals -------------------------------------------------------------------------------


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def _nccl_communicator(pid: int) -> str | None:
    """Evidence of a live NCCL communicator (not just the library, which PyTorch always
    loads): its threads ("NCCL ..." names) or its shared-memory segments (``nccl-*``)."""
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                name = Path(f"/proc/{pid}/task/{task}/comm").read_text().strip()
            except OSError:
                continue
            if name.upper().startswith("NCCL"):
                return f"thread {name!r}"
    except OSError:
        return None
    try:
        lines = Path(f"/proc/{pid}/maps").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split()
        if len(parts) >= 6 and os.path.basename(parts[-1]).startswith("nccl-"):
            return f"shared memory {parts[-1]}"
    return None


def refusals(pid: int, devices: list[GpuMemory]) -> list[GpuRefusal]:
    """What about ``pid`` (and the GPUs NVML lists) the checkpoint API cannot handle."""
    out: list[GpuRefusal] = []
    mine = [g for g in devices if pid in g.pids]
    for g in mine or devices:
        if g.mig:
            out.append(
                GpuRefusal(
                    resource=f"GPU {g.index} ({g.name})",
                    reason="MIG mode is on: the CUDA checkpoint API does not support MIG",
                    hint="run the workload on a GPU with MIG disabled",
                )
            )
    env = _environ(pid)
    if "CUDA_MPS_PIPE_DIRECTORY" in env or Path("/tmp/nvidia-mps/control").exists():  # noqa: S108 (MPS's fixed default pipe directory)
        out.append(
            GpuRefusal(
                resource="MPS",
                reason="the process is (or may be) a client of an MPS server, which the CUDA "
                "checkpoint API does not support",
                hint="run the workload without MPS (stop nvidia-cuda-mps-control)",
            )
        )
    if len(mine) > 1:
        out.append(
            GpuRefusal(
                resource=f"{len(mine)} GPUs",
                reason="the process uses more than one GPU; clawpoint suspends and restores "
                "one GPU per process",
                hint="run one process per GPU (CUDA_VISIBLE_DEVICES) for a workload to suspend",
            )
        )
    nccl = _nccl_communicator(pid)
    world = env.get("WORLD_SIZE", "1")
    if nccl or (world.isdigit() and int(world) > 1):
        out.append(
            GpuRefusal(
                resource="NCCL",
                reason=(
                    f"the process has a live NCCL communicator ({nccl})"
                    if nccl
                    else f"the process is one of {world} ranks of a distributed job (WORLD_SIZE)"
                )
                + ": its peers would hang or fail while its GPU state is away",
                hint="have the application suspend its communicators (ncclCommSuspend, NCCL "
                ">= 2.29.7) and checkpoint it itself, or use the cooperative engine",
            )
        )
    return out


def refuse(pid: int, found: list[GpuRefusal], *, action: str) -> None:
    if found:
        raise errors.CheckpointError(
            f"cannot {action} pid {pid}: " + "; ".join(str(r) for r in found),
            hint="nothing was locked or changed; see each reason",
            code=CODE,
            details={"refusals": [r.model_dump() for r in found]},
        )


def _lock_refusal(pid: int, exc: CudaError, timeout_ms: int) -> errors.CheckpointError:
    if exc.code in (cuda_driver.CUDA_ERROR_NOT_SUPPORTED, cuda_driver.CUDA_ERROR_TIMEOUT):
        return errors.CheckpointError(
            f"cannot suspend pid {pid}: the driver would not lock it ({exc.name}): it uses "
            "managed (UVM) memory, which the CUDA checkpoint API does not support, or a "
            f"kernel did not finish within {timeout_ms} ms",
            hint="the process was left running as it was; managed memory cannot be suspended "
            "(allocate with cudaMalloc instead of cudaMallocManaged); for a long kernel, "
            "retry with a longer lock timeout",
            code=CODE,
            details={"cuda_error": exc.name, "timeout_ms": timeout_ms},
        )
    return _driver_error(pid, exc, "lock")


def _driver_error(pid: int, exc: CudaError, what: str) -> errors.CheckpointError:
    hint = "the process was left as it was"
    if exc.code == cuda_driver.CUDA_ERROR_INVALID_VALUE:
        hint = f"pid {pid} may not be a CUDA process (no GPU context): check the pid"
    return errors.CheckpointError(
        f"cannot {what} the GPU state of pid {pid}: {exc}",
        hint=hint,
        details={"cuda_error": exc.name, "code": exc.code},
    )


# -- suspend / resume -----------------------------------------------------------------------


def gpu_processes(root: int) -> list[int]:
    """The processes of the tree rooted at ``root`` with an NVIDIA device open."""
    out = []
    for pid in files.tree_pids(root):
        if any(t.startswith("/dev/nvidia") for _fd, _src, t in files.open_fds(pid)):
            out.append(pid)
    return out


def suspend_tree(root: int, **kw: Any) -> list[GpuSuspendReport]:
    """Suspend the GPU state of every process of the tree that holds some (else ``root``).

    All or nothing: if one is refused, those already suspended are resumed before the
    error is raised."""
    done: list[GpuSuspendReport] = []
    for pid in gpu_processes(root) or [root]:
        try:
            done.append(suspend(pid, **kw))
        except errors.ClawpointError:
            for report in reversed(done):
                resume(report.pid, driver=kw.get("driver"), nvml=kw.get("nvml"))
            raise
    return done


def resume_tree(root: int, **kw: Any) -> list[GpuSuspendReport]:
    """Resume every suspended process of the tree (a suspended one has no device open, so
    the candidates are all its processes the driver knows as not running)."""
    drv = kw.pop("driver", None) or _load()
    out: list[GpuSuspendReport] = []
    for pid in files.tree_pids(root):
        try:
            state = drv.state(pid)
        except CudaError:
            continue  # not a CUDA process
        if state is not ProcessState.RUNNING:
            out.append(resume(pid, driver=drv, **kw))
    if not out:
        raise errors.Conflict(
            f"no process of the tree of pid {root} has suspended GPU state",
            hint="nothing to resume; nothing was changed",
        )
    return out


def _load() -> Driver:
    try:
        return cuda_driver.load()
    except cuda_driver.DriverUnavailable as exc:
        raise errors.EngineUnavailable(
            f"GPU suspend is not possible here: {exc}",
            hint="run on a machine with an NVIDIA driver >= 550 (570+ for PyTorch)",
            details={"reason": str(exc)},
        ) from None


def suspend(
    pid: int,
    *,
    driver: Driver | None = None,
    nvml: Any | None = None,
    lock_timeout_ms: int = DEFAULT_LOCK_TIMEOUT_MS,
    clock: Callable[[], float] = time.perf_counter,
) -> GpuSuspendReport:
    """Move ``pid``'s GPU state to host memory and free the GPU; the process keeps existing."""
    drv = driver or _load()
    t0 = clock()
    try:
        state = drv.state(pid)
    except CudaError as exc:
        raise _driver_error(pid, exc, "suspend") from None
    if state is not ProcessState.RUNNING:
        raise errors.Conflict(
            f"pid {pid} is not running on the GPU (its CUDA state is {state.name.lower()})",
            hint="a suspended process is resumed with resume_gpu; nothing was changed",
            details={"state": state.name.lower()},
        )
    before, why = gpus(nvml)
    refuse(pid, refusals(pid, before), action="suspend")
    names = [g.name for g in before if pid in g.pids] or [g.name for g in before]
    t1 = clock()
    try:
        drv.lock(pid, lock_timeout_ms)
    except CudaError as exc:
        raise _lock_refusal(pid, exc, lock_timeout_ms) from None
    t2 = clock()
    try:
        drv.checkpoint(pid)
    except CudaError as exc:
        _unlock_quietly(drv, pid)
        raise _driver_error(pid, exc, "checkpoint") from None
    t3 = clock()
    after, why_after = gpus(nvml)
    return _report(
        pid, "suspend", state, drv.state(pid), before, after, why, why_after, names,
        {"probe_s": t1 - t0, "lock_s": t2 - t1, "checkpoint_s": t3 - t2, "total_s": t3 - t0},
    )  # fmt: skip


def resume(
    pid: int,
    *,
    driver: Driver | None = None,
    nvml: Any | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> GpuSuspendReport:
    """Put ``pid``'s GPU state back on the GPU and let its CUDA calls go on."""
    drv = driver or _load()
    t0 = clock()
    try:
        state = drv.state(pid)
    except CudaError as exc:
        raise _driver_error(pid, exc, "resume") from None
    if state is ProcessState.RUNNING:
        raise errors.Conflict(
            f"pid {pid} is not suspended (its CUDA state is running)",
            hint="nothing to resume; nothing was changed",
            details={"state": "running"},
        )
    before, why = gpus(nvml)
    t1 = clock()
    if state is ProcessState.CHECKPOINTED:
        try:
            drv.restore(pid)
        except CudaError as exc:
            raise errors.CheckpointError(
                f"cannot put the GPU state of pid {pid} back: {exc}",
                hint="the process is still suspended with its GPU state in host memory; free "
                "GPU memory (the restore needs as much as it held) and retry resume_gpu",
                details={"cuda_error": exc.name, "code": exc.code},
            ) from None
    t2 = clock()
    try:
        drv.unlock(pid)
    except CudaError as exc:
        raise _driver_error(pid, exc, "unlock") from None
    t3 = clock()
    after, why_after = gpus(nvml)
    return _report(
        pid, "resume", state, drv.state(pid), before, after, why, why_after,
        [g.name for g in after if pid in g.pids] or [g.name for g in after],
        {"restore_s": t2 - t1, "unlock_s": t3 - t2, "total_s": t3 - t0},
    )  # fmt: skip


def _unlock_quietly(drv: Driver, pid: int) -> None:
    try:
        drv.unlock(pid)
    except CudaError:
        pass


def _report(
    pid: int,
    action: str,
    state_before: ProcessState,
    state_after: ProcessState,
    before: list[GpuMemory],
    after: list[GpuMemory],
    why: str,
    why_after: str,
    names: list[str],
    timings: dict[str, float],
) -> GpuSuspendReport:
    measured = why == "ok" and why_after == "ok" and bool(before)
    # Compare the same GPUs: the process's own (its pid is gone from NVML once suspended).
    idx = {g.index for g in before if pid in g.pids} | {g.index for g in after if pid in g.pids}
    pick = (lambda gs: [g for g in gs if g.index in idx]) if idx else (lambda gs: gs)
    used_before = sum(g.used_bytes for g in pick(before)) if measured else None
    used_after = sum(g.used_bytes for g in pick(after)) if measured else None
    return GpuSuspendReport(
        pid=pid,
        action=action,
        state_before=state_before.name.lower(),
        state_after=state_after.name.lower(),
        used_before_bytes=used_before,
        used_after_bytes=used_after,
        freed_bytes=None if used_before is None or used_after is None else used_before - used_after,
        gpus=names,
        timings={k: round(v, 6) for k, v in timings.items()},
        nvml="ok" if measured else (why if why != "ok" else why_after),
    )
