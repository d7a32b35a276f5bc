"""The ctypes binding of the driver's checkpoint API against a fake libcuda.so.1 that follows
the documented state machine and error codes."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

from core.checkpoint import cuda_driver
from core.checkpoint.cuda_driver import CudaError, ProcessState
from tests.gpu.conftest import GIB, HANGS, MANAGED, FakeCuda


def test_full_cycle_running_locked_checkpointed_locked_running(fake_cuda: FakeCuda) -> None:
    fake_cuda.add(4242, 8 * GIB)
    drv = cuda_driver.load()
    assert drv.version() >= cuda_driver.MIN_DRIVER_API
    seen = [drv.state(4242)]
    for step in (drv.lock, drv.checkpoint, drv.restore, drv.unlock):
        step(4242)
        seen.append(drv.state(4242))
        if step == drv.checkpoint:
            assert fake_cuda.device_bytes(4242) == 0  # the GPU memory moved to the host
    assert seen == [
        ProcessState.RUNNING,
        ProcessState.LOCKED,
        ProcessState.CHECKPOINTED,
        ProcessState.LOCKED,
        ProcessState.RUNNING,
    ]
    assert fake_cuda.device_bytes(4242) == 8 * GIB


@pytest.mark.parametrize(
    ("state", "call"),
    [
        (0, "checkpoint"),  # running: must lock first
        (0, "restore"),
        (0, "unlock"),
        (1, "lock"),  # locked twice
        (1, "restore"),  # locked, not checkpointed
        (2, "lock"),
        (2, "unlock"),  # checkpointed: restore first
        (2, "checkpoint"),
    ],
)
def test_calls_out_of_order_are_illegal_state(fake_cuda: FakeCuda, state: int, call: str) -> None:
    fake_cuda.add(7, GIB, state=state)
    drv = cuda_driver.load()
    with pytest.raises(CudaError) as exc:
        getattr(drv, call)(7)
    assert (exc.value.code, exc.value.name) == (401, "CUDA_ERROR_ILLEGAL_STATE")
    assert drv.state(7) == ProcessState(state)  # nothing changed


def test_lock_timeout_leaves_running_and_managed_is_not_supported(fake_cuda: FakeCuda) -> None:
    fake_cuda.add(10, GIB, flags=HANGS)
    fake_cuda.add(11, GIB, flags=MANAGED)
    drv = cuda_driver.load()
    with pytest.raises(CudaError) as hang:
        drv.lock(10, 50)
    assert hang.value.name == "CUDA_ERROR_TIMEOUT" and drv.state(10) is ProcessState.RUNNING
    with pytest.raises(CudaError) as managed:
        drv.lock(11, 50)
    assert managed.value.code == cuda_driver.CUDA_ERROR_NOT_SUPPORTED


def test_unknown_pid_and_calls_before_cuinit(fake_cuda: FakeCuda) -> None:
    drv = cuda_driver.load()
    with pytest.raises(CudaError) as exc:
        drv.state(999_999)
    assert exc.value.name == "CUDA_ERROR_INVALID_VALUE" and exc.value.pid == 999_999
    # The library is loaded once per process and cuInit already ran in it: a copy of the
    # file is a separate load that has not been initialised.
    copy = fake_cuda.state.parent / "copy" / "libcuda.so.1"
    copy.parent.mkdir()
    copy.write_bytes(fake_cuda.lib.read_bytes())
    fresh = cuda_driver.Driver(ctypes.CDLL(str(copy)), str(copy))
    fake_cuda.add(5, GIB)
    with pytest.raises(CudaError) as uninit:
        fresh.lock(5)
    assert uninit.value.name == "CUDA_ERROR_NOT_INITIALIZED"


def test_no_library_and_old_driver_are_unavailable_with_the_reason(
    fake_libs: dict[str, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(cuda_driver.LIB_ENV, str(tmp_path / "nowhere" / "libcuda.so.1"))
    with pytest.raises(cuda_driver.DriverUnavailable, match="no NVIDIA driver library"):
        cuda_driver.load()
    monkeypatch.setenv(cuda_driver.LIB_ENV, str(fake_libs["old"]))
    with pytest.raises(cuda_driver.DriverUnavailable, match=r"cuCheckpointProcessLock.*550"):
        cuda_driver.load()
    monkeypatch.setenv(cuda_driver.LIB_ENV, str(fake_libs["new"]))
    monkeypatch.setenv("FAKE_CUDA_VERSION", "12040")
    with pytest.raises(cuda_driver.DriverUnavailable, match=r"12\.4.*too old"):
        cuda_driver.load()
