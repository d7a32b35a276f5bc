"""The ``cuda`` engine: CRIU with its CUDA plugin, for a payload holding GPU state.

At dump, CRIU's CUDA plugin (``cuda_plugin.so``, CRIU >= 4.0) runs a ``cuda-checkpoint``
helper to lock the payload's CUDA calls and move its GPU memory into host memory; CRIU then
dumps the process like any other, and at restore the plugin puts the GPU state back and
unlocks it. No package registry ships NVIDIA's helper, so this engine puts clawpoint's own
(``core.checkpoint.cuda_helper``, same command line, on the driver API) first on CRIU's
``PATH``. Everything else (files, pipes, verification) is the criu engine's.

Refused, with the reason, before anything is locked: no driver with the checkpoint API
(driver >= 550), no CRIU or no CUDA plugin; MIG, MPS, a process on more than one GPU, NCCL
loaded (``core.checkpoint.gpu.refusals``); managed (UVM) memory, which the plugin's lock
reports; at restore, a GPU model or count other than the one recorded at dump; pre-copy
(CRIU's plugin disables itself for pre-dump, so iterative copies cannot carry GPU state).

A leave-running checkpoint of a tree whose files are copied is dumped ``--leave-stopped``
(``core.checkpoint.criu``); after it, CRIU's plugin leaves the GPU state suspended, so this
engine's ``resume`` restores and unlocks it (CRIU does that itself only for
``--leave-running``).

Limits: same GPU type and count on restore; one process per GPU. Not yet verified on
hardware: the tests run on machines without a GPU, against fakes of the driver and NVML.
"""

from __future__ import annotations

import functools
import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core import errors
from core.checkpoint import criu, cuda_driver, engine, files, gpu

if TYPE_CHECKING:
    from core.config import CheckpointConfig

PLUGIN = "cuda_plugin.so"
PLUGIN_DIRS_ENV = "CLAWPOINT_CRIU_PLUGIN_DIRS"  # colon-separated; default: CRIU's own
DEFAULT_PLUGIN_DIRS = ("/usr/lib/criu", "/usr/local/lib/criu", "/usr/lib64/criu")
GPU_KEY = "gpu"  # manifest extra: {"models": [...], "count": N}


def plugin_path() -> Path | None:
    dirs = os.environ.get(PLUGIN_DIRS_ENV, "").split(":") if os.environ.get(PLUGIN_DIRS_ENV) else []
    for d in [*dirs, *DEFAULT_PLUGIN_DIRS]:
        if d and (Path(d) / PLUGIN).is_file():
            return Path(d) / PLUGIN
    return None


@functools.lru_cache(maxsize=1)
def helper_dir() -> Path:
    """A private directory holding ``cuda-checkpoint``, which runs clawpoint's helper."""
    d = Path(tempfile.mkdtemp(prefix="clawpoint-cuda-"))
    exe = d / "cuda-checkpoint"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m core.checkpoint.cuda_helper "$@"\n')
    exe.chmod(0o755)
    return d


class CudaEngine(criu.CriuEngine):
    name = "cuda"
    needs_pid_namespace = True
    restores_process = True
    supports_handoff = True

    def status(self, cfg: CheckpointConfig) -> engine.EngineStatus:
        try:
            drv = cuda_driver.load()
        except cuda_driver.DriverUnavailable as exc:
            return engine.EngineStatus(name=self.name, available=False, reason=str(exc))
        version = f"CUDA API {drv.version()}"
        if plugin_path() is None:
            return engine.EngineStatus(
                name=self.name,
                available=False,
                version=version,
                reason=f"CRIU's CUDA plugin ({PLUGIN}) is not installed in "
                f"{', '.join(DEFAULT_PLUGIN_DIRS)} (or {PLUGIN_DIRS_ENV}): build CRIU >= 4.0 "
                "with its cuda plugin",
            )
        base = criu.criu_status(cfg.criu_path)
        if not base.available:
            return engine.EngineStatus(
                name=self.name, available=False, version=version, reason=base.reason
            )
        return engine.EngineStatus(
            name=self.name, available=True, version=f"{version}, criu {base.version}"
        )

    def require(self, cfg: CheckpointConfig) -> None:
        st = self.status(cfg)
        if not st.available:
            raise errors.EngineUnavailable(
                f"the cuda engine cannot run here: {st.reason}",
                hint="run GPU workloads with it on a machine with an NVIDIA driver >= 550, CRIU "
                "and its CUDA plugin; elsewhere use the cooperative engine (the application "
                "saves its own state)",
                details={"engine": self.name, "reason": st.reason},
            )

    def criu_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PATH"] = f"{helper_dir()}{os.pathsep}{env.get('PATH', '')}"
        return env

    def pre_dump(self) -> None:
        """Pre-copy (iterative dumps) is refused: the plugin cannot carry GPU state in one."""
        raise errors.NotSupported(
            "the cuda engine cannot pre-copy: CRIU's CUDA plugin disables itself for pre-dump, "
            "so GPU state can only be saved by a full, final dump",
            hint="checkpoint without pre-copy (a full dump suspends the GPU state once)",
            code=gpu.CODE,
        )

    def dump(self, req: engine.DumpRequest) -> engine.Dumped:
        devices, why = gpu.gpus()
        for pid in gpu.gpu_processes(req.pid):
            gpu.refuse(pid, gpu.refusals(pid, devices), action="checkpoint")
        dumped = super().dump(req)
        used = [g for g in devices if any(p in g.pids for p in files.tree_pids(req.pid))]
        dumped.extra[GPU_KEY] = {
            "models": sorted({g.name for g in (used or devices)}),
            "count": len(used) or (1 if devices else 0),
            "nvml": why,
        }
        return dumped

    def resume(self, pid: int) -> None:
        """Let a tree left stopped go on with its GPU state back on the GPU.

        A dump left stopped (one whose files are copied while the tree is frozen, then
        resumed) leaves each process's CUDA state locked and in host memory: CRIU's CUDA
        plugin gives it back at the end of a dump only for ``--leave-running`` or a failed
        dump (``cuda_plugin_fini`` in CRIU's plugins/cuda/cuda_plugin.c: ``opts.final_state
        == TASK_ALIVE || ret != 0``). So SIGCONT first (the driver's restore runs on a thread
        of the process, which the plugin itself lets run before it restores), then restore
        and unlock each process not running (``gpu.resume``). A restored tree is already
        running on the GPU: nothing more is done for it."""
        super().resume(pid)
        try:
            drv = cuda_driver.load()
        except cuda_driver.DriverUnavailable:
            return  # no driver here: no CUDA state to give back
        for p in files.tree_pids(pid):
            try:
                state = drv.state(p)
            except cuda_driver.CudaError:
                continue  # not a CUDA process
            if state is not cuda_driver.ProcessState.RUNNING:
                gpu.resume(p, driver=drv)

    def refusals(self, pid: int) -> list[str]:
        # CRIU's refusals but the GPU devices, which the plugin carries; then the GPU's own.
        out = [r for r in super().refusals(pid) if "GPU device" not in r]
        devices, _ = gpu.gpus()
        for p in gpu.gpu_processes(pid):
            out += [f"pid {p}: {r}" for r in gpu.refusals(p, devices)]
        return out

    def prepare_restore(self, req: engine.RestoreRequest) -> None:
        check_same_gpus(req.info.extra.get(GPU_KEY), gpu.gpus()[0])
        super().prepare_restore(req)


def check_same_gpus(recorded: Any, devices: list[gpu.GpuMemory]) -> None:
    """Refuse a restore onto another GPU model or fewer GPUs than were recorded at dump."""
    if not isinstance(recorded, dict):
        return
    want = set(recorded.get("models") or [])
    have = {g.name for g in devices}
    count = int(recorded.get("count") or 0)
    if want and not want <= have:
        raise errors.CheckpointError(
            f"the checkpoint holds GPU state of {', '.join(sorted(want))}; this node has "
            f"{', '.join(sorted(have)) or 'no GPU'}: the CUDA checkpoint API restores onto the "
            "same GPU model only",
            hint="restore it on a node with the same GPU model; the checkpoint is kept",
            code=gpu.CODE,
            details={"recorded": sorted(want), "here": sorted(have)},
        )
    if count > len(devices):
        raise errors.CheckpointError(
            f"the checkpoint needs {count} GPU(s); this node has {len(devices)}",
            hint="restore it on a node with as many GPUs of the same model",
            code=gpu.CODE,
        )


ENGINE = CudaEngine()
