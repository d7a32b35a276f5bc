"""GPU suspend/resume in place and every refusal, against the fake driver and NVML.

The suspended process is a real one (it keeps running on the CPU side); its GPU state is
the fake driver's, and NVML's memory in use follows it, so the report's freed bytes are
measured the way they are on a GPU."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from core import errors
from core.checkpoint import gpu
from core.checkpoint.cuda_driver import ProcessState, load
from tests.gpu.conftest import GIB, HANGS, MANAGED, FakeCuda, GpuNvml
from tests.signals.fake_nvml import FakeGpu


def _spawn(code: str = "import time; time.sleep(60)", **env: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code], env={**os.environ, **env})


@pytest.fixture
def proc() -> Iterator[subprocess.Popen[bytes]]:
    p = _spawn()
    yield p
    p.kill()
    p.wait()


def _on_gpu(nvml: GpuNvml, fake_cuda: FakeCuda, pid: int, size: int = 8 * GIB, **kw: int) -> None:
    fake_cuda.add(pid, size, **kw)
    nvml.placement[pid] = [0]


def test_suspend_frees_the_gpu_and_resume_takes_it_back(
    fake_cuda: FakeCuda, nvml: GpuNvml, proc: subprocess.Popen[bytes]
) -> None:
    _on_gpu(nvml, fake_cuda, proc.pid)
    down = gpu.suspend(proc.pid, nvml=nvml)
    assert (down.state_before, down.state_after) == ("running", "checkpointed")
    assert down.freed_bytes == 8 * GIB and down.nvml == "ok"
    assert down.used_after_bytes == nvml.base  # only the driver's own reservation is left
    assert down.gpus == ["NVIDIA H200"] and down.timings["total_s"] >= 0
    assert proc.poll() is None  # the process still exists on the CPU side
    up = gpu.resume(proc.pid, nvml=nvml)
    assert (up.state_before, up.state_after) == ("checkpointed", "running")
    assert up.freed_bytes == -8 * GIB and up.used_after_bytes == nvml.base + 8 * GIB
    assert load().state(proc.pid) is ProcessState.RUNNING


def test_suspend_twice_and_resume_of_a_running_process_conflict(
    fake_cuda: FakeCuda, nvml: GpuNvml, proc: subprocess.Popen[bytes]
) -> None:
    _on_gpu(nvml, fake_cuda, proc.pid)
    with pytest.raises(errors.Conflict, match="not suspended"):
        gpu.resume(proc.pid, nvml=nvml)
    gpu.suspend(proc.pid, nvml=nvml)
    with pytest.raises(errors.Conflict, match="checkpointed"):
        gpu.suspend(proc.pid, nvml=nvml)


@pytest.mark.parametrize(
    ("flags", "why"), [(MANAGED, "CUDA_ERROR_NOT_SUPPORTED"), (HANGS, "TIMEOUT")]
)
def test_managed_memory_or_endless_kernel_is_refused_and_left_running(
    fake_cuda: FakeCuda, nvml: GpuNvml, proc: subprocess.Popen[bytes], flags: int, why: str
) -> None:
    _on_gpu(nvml, fake_cuda, proc.pid, flags=flags)
    with pytest.raises(errors.CheckpointError, match="managed \\(UVM\\) memory") as exc:
        gpu.suspend(proc.pid, nvml=nvml, lock_timeout_ms=100)
    assert exc.value.code == gpu.CODE and why in exc.value.details["cuda_error"]
    assert load().state(proc.pid) is ProcessState.RUNNING
    assert fake_cuda.device_bytes(proc.pid) == 8 * GIB


def _refused(pid: int, nvml: GpuNvml, what: str) -> None:
    with pytest.raises(errors.CheckpointError, match=what) as exc:
        gpu.suspend(pid, nvml=nvml)
    assert exc.value.code == gpu.CODE
    assert load().state(pid) is ProcessState.RUNNING  # nothing was locked


def test_mig_is_refused(fake_cuda: FakeCuda, nvml: GpuNvml, proc: subprocess.Popen[bytes]) -> None:
    _on_gpu(nvml, fake_cuda, proc.pid)
    nvml.mig.add(0)
    _refused(proc.pid, nvml, "MIG mode is on")


def test_mps_client_is_refused(fake_cuda: FakeCuda, nvml: GpuNvml) -> None:
    p = _spawn(CUDA_MPS_PIPE_DIRECTORY="/tmp/mps-pipes")  # noqa: S108 (only an env value)
    try:
        _on_gpu(nvml, fake_cuda, p.pid)
        _refused(p.pid, nvml, "MPS server")
    finally:
        p.kill()
        p.wait()


def test_process_on_two_gpus_is_refused(fake_cuda: FakeCuda, proc: subprocess.Popen[bytes]) -> None:
    two = GpuNvml(
        [FakeGpu(uuid="GPU-0", name="NVIDIA H200"), FakeGpu(uuid="GPU-1", name="NVIDIA H200")],
        fake_cuda,
    )
    _on_gpu(two, fake_cuda, proc.pid)
    two.placement[proc.pid] = [0, 1]
    _refused(proc.pid, two, "more than one GPU")


def test_nccl_library_alone_is_not_refused_but_a_communicator_or_a_rank_is(
    fake_cuda: FakeCuda, nvml: GpuNvml, tmp_path: Path
) -> None:
    # PyTorch always loads libnccl: the library alone must not block a suspend.
    lib = tmp_path / "libnccl.so.2"
    seg = tmp_path / "nccl-shm-7f3a"  # the shared memory a live communicator maps
    for f in (lib, seg):
        f.write_bytes(b"\0" * 4096)
    code = (
        "import mmap, os, sys, time\n"
        "maps = [mmap.mmap(os.open(p, os.O_RDONLY), 0, prot=mmap.PROT_READ) for p in sys.argv[1:]]\n"
        "print('ready', flush=True); time.sleep(60)"
    )
    for files, refused in (([lib], False), ([lib, seg], True)):
        p = subprocess.Popen([sys.executable, "-c", code, *map(str, files)], stdout=subprocess.PIPE)
        try:
            assert p.stdout is not None and p.stdout.readline() == b"ready\n"
            _on_gpu(nvml, fake_cuda, p.pid)
            if refused:
                _refused(p.pid, nvml, "live NCCL communicator")
            else:
                assert gpu.suspend(p.pid, nvml=nvml).state_after == "checkpointed"
        finally:
            p.send_signal(signal.SIGKILL)
            p.wait()
    rank = _spawn(WORLD_SIZE="8")
    try:
        _on_gpu(nvml, fake_cuda, rank.pid)
        _refused(rank.pid, nvml, "one of 8 ranks")
    finally:
        rank.kill()
        rank.wait()


def test_not_a_cuda_process_and_no_driver(
    fake_cuda: FakeCuda,
    nvml: GpuNvml,
    proc: subprocess.Popen[bytes],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(errors.CheckpointError, match="CUDA_ERROR_INVALID_VALUE") as exc:
        gpu.suspend(proc.pid, nvml=nvml)
    assert "not be a CUDA process" in exc.value.hint
    monkeypatch.setenv("CLAWPOINT_LIBCUDA", "/nonexistent/libcuda.so.1")
    with pytest.raises(errors.EngineUnavailable, match="no NVIDIA driver library"):
        gpu.suspend(proc.pid, nvml=nvml)


def test_without_nvml_the_suspend_still_works_and_says_why_unmeasured(
    fake_cuda: FakeCuda, nvml: GpuNvml, proc: subprocess.Popen[bytes]
) -> None:
    fake_cuda.add(proc.pid, GIB)
    nvml.init_error = 9  # NVML_ERROR_DRIVER_NOT_LOADED
    down = gpu.suspend(proc.pid, nvml=nvml)
    assert down.state_after == "checkpointed" and down.freed_bytes is None
    assert "NVML did not initialise" in down.nvml
