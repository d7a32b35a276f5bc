"""The CUDA driver's process checkpoint API, called with ctypes on ``libcuda.so.1``.

``cuCheckpointProcess{Lock,Checkpoint,Restore,Unlock,GetState,GetRestoreThreadId}`` (driver
>= 550) act on *another* process by pid. Their documented state machine: RUNNING -(lock)->
LOCKED -(checkpoint)-> CHECKPOINTED -(restore)-> LOCKED -(unlock)-> RUNNING. Checkpoint
moves the process's GPU memory into its own host memory and releases the GPU; the process
keeps existing on the CPU, its CUDA calls blocked until unlock. A lock that times out
leaves the process RUNNING.

``Driver`` wraps the library; every failure is a ``CudaError`` carrying the CUresult code
and name, and ``load`` turns a missing library, a driver older than the API or a failing
``cuInit`` into ``DriverUnavailable`` with the reason. ``cuda.core``'s checkpoint module,
where installed, calls the same entry points; ctypes is used so that the library path can
point at a test fake (``CLAWPOINT_LIBCUDA``, default ``libcuda.so.1``) and so that core
needs no CUDA package.

Limits: Linux x86_64/aarch64 with the NVIDIA driver; the caller needs the permission to
ptrace the target (same user or root). Not yet verified on hardware by this project's
tests: they run against a fake library that follows the documented state machine.
"""

from __future__ import annotations

import ctypes
import os
from enum import IntEnum
from typing import Any

LIB_ENV = "CLAWPOINT_LIBCUDA"
DEFAULT_LIB = "libcuda.so.1"
# cuDriverGetVersion: 1000 * major + 10 * minor. The checkpoint API came with 12.8's driver
# (550 and later branches); restore needs a prior cuInit in the caller.
MIN_DRIVER_API = 12080
SYMBOLS = (
    "cuCheckpointProcessLock",
    "cuCheckpointProcessCheckpoint",
    "cuCheckpointProcessRestore",
    "cuCheckpointProcessUnlock",
    "cuCheckpointProcessGetState",
)


class ProcessState(IntEnum):
    RUNNING = 0
    LOCKED = 1
    CHECKPOINTED = 2
    FAILED = 3


# The CUresult codes this module names (cuda.h); others are shown by number.
CUDA_SUCCESS = 0
CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_NOT_INITIALIZED = 3
CUDA_ERROR_NO_DEVICE = 100
CUDA_ERROR_ILLEGAL_STATE = 401
CUDA_ERROR_NOT_PERMITTED = 800
CUDA_ERROR_NOT_SUPPORTED = 801
CUDA_ERROR_TIMEOUT = 909
_NAMES = {
    CUDA_SUCCESS: "CUDA_SUCCESS",
    CUDA_ERROR_INVALID_VALUE: "CUDA_ERROR_INVALID_VALUE",
    CUDA_ERROR_NOT_INITIALIZED: "CUDA_ERROR_NOT_INITIALIZED",
    CUDA_ERROR_NO_DEVICE: "CUDA_ERROR_NO_DEVICE",
    CUDA_ERROR_ILLEGAL_STATE: "CUDA_ERROR_ILLEGAL_STATE",
    CUDA_ERROR_NOT_PERMITTED: "CUDA_ERROR_NOT_PERMITTED",
    CUDA_ERROR_NOT_SUPPORTED: "CUDA_ERROR_NOT_SUPPORTED",
    CUDA_ERROR_TIMEOUT: "CUDA_ERROR_TIMEOUT",
}


class CudaError(Exception):
    """A driver call failed: ``code`` is the CUresult, ``name`` its symbolic name."""

    def __init__(self, fn: str, code: int, name: str, pid: int | None = None) -> None:
        self.fn, self.code, self.name, self.pid = fn, code, name, pid
        who = f" for pid {pid}" if pid is not None else ""
        super().__init__(f"{fn}{who} failed: {name} ({code})")


class DriverUnavailable(Exception):
    """No usable checkpoint API here; the message says why."""


class _LockArgs(ctypes.Structure):
    _fields_ = [  # noqa: RUF012 (ctypes layout)
        ("timeoutMs", ctypes.c_uint),
        ("reserved0", ctypes.c_uint),
        ("reserved1", ctypes.c_uint64 * 7),
    ]


class Driver:
    """The checkpoint entry points of one loaded driver library."""

    def __init__(self, lib: Any, path: str) -> None:
        self._lib = lib
        self.path = path

    def _name(self, code: int) -> str:
        text = ctypes.c_char_p()
        fn = getattr(self._lib, "cuGetErrorName", None)
        if fn is not None and fn(code, ctypes.byref(text)) == CUDA_SUCCESS and text.value:
            return text.value.decode()
        return _NAMES.get(code, f"CUresult {code}")

    def _call(self, fn: str, pid: int | None, *args: Any) -> None:
        code = int(getattr(self._lib, fn)(*args))
        if code != CUDA_SUCCESS:
            raise CudaError(fn, code, self._name(code), pid)

    def version(self) -> int:
        out = ctypes.c_int()
        self._call("cuDriverGetVersion", None, ctypes.byref(out))
        return out.value

    def init(self) -> None:
        self._call("cuInit", None, ctypes.c_uint(0))

    def state(self, pid: int) -> ProcessState:
        out = ctypes.c_int()
        self._call("cuCheckpointProcessGetState", pid, ctypes.c_int(pid), ctypes.byref(out))
        return ProcessState(out.value)

    def restore_thread(self, pid: int) -> int:
        out = ctypes.c_int()
        self._call(
            "cuCheckpointProcessGetRestoreThreadId", pid, ctypes.c_int(pid), ctypes.byref(out)
        )
        return out.value

    def lock(self, pid: int, timeout_ms: int = 0) -> None:
        """RUNNING -> LOCKED; with ``timeout_ms`` (0 = none) a timeout leaves it RUNNING."""
        args = _LockArgs(timeoutMs=max(0, int(timeout_ms)))
        self._call("cuCheckpointProcessLock", pid, ctypes.c_int(pid), ctypes.byref(args))

    def checkpoint(self, pid: int) -> None:
        """LOCKED -> CHECKPOINTED: GPU memory to host memory, GPU released."""
        self._call("cuCheckpointProcessCheckpoint", pid, ctypes.c_int(pid), None)

    def restore(self, pid: int) -> None:
        """CHECKPOINTED -> LOCKED: GPU memory back onto a GPU of the same type."""
        self._call("cuCheckpointProcessRestore", pid, ctypes.c_int(pid), None)

    def unlock(self, pid: int) -> None:
        """LOCKED -> RUNNING: the process's CUDA calls go on."""
        self._call("cuCheckpointProcessUnlock", pid, ctypes.c_int(pid), None)


def library_path() -> str:
    return os.environ.get(LIB_ENV) or DEFAULT_LIB


def load(path: str | None = None) -> Driver:
    """The driver with its checkpoint API, initialised; DriverUnavailable saying why not."""
    path = path or library_path()
    try:
        lib = ctypes.CDLL(path)
    except OSError as exc:
        raise DriverUnavailable(
            f"no NVIDIA driver library ({path}: {exc}): no NVIDIA GPU driver on this machine"
        ) from None
    missing = [s for s in SYMBOLS if not hasattr(lib, s)]
    driver = Driver(lib, path)
    try:
        version = driver.version()
    except (CudaError, AttributeError) as exc:
        raise DriverUnavailable(f"cuDriverGetVersion failed: {exc}") from None
    if missing or version < MIN_DRIVER_API:
        raise DriverUnavailable(
            f"the driver (CUDA API {version // 1000}.{version % 1000 // 10}) has no process "
            f"checkpoint API ({', '.join(missing) or 'too old'}): it needs driver 550 or later "
            f"(CUDA {MIN_DRIVER_API // 1000}.{MIN_DRIVER_API % 1000 // 10})"
        )
    try:
        driver.init()
    except CudaError as exc:
        raise DriverUnavailable(f"cuInit failed: {exc.name} ({exc.code})") from None
    return driver
