"""Fakes for GPU tests on machines without a GPU.

- ``fake_libcuda``: ``fake_libcuda.c`` built with gcc into a ``libcuda.so.1`` (and a variant
  without the checkpoint API, as an old driver); ``CLAWPOINT_LIBCUDA`` points the binding at
  it, so the real ctypes path runs. Its CUDA processes live in a state file
  (``FAKE_CUDA_STATE``) that the test writes with ``FakeCuda.add``.
- ``GpuNvml``: the NVML fake of tests/signals with the memory, process and MIG queries the
  GPU code asks; each GPU's memory in use is its base plus the device bytes the fake driver
  holds for the processes on it, so a suspend shows in NVML as it would on a real GPU.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.signals.fake_nvml import FakeGpu, FakeNvml

HERE = Path(__file__).parent
GIB = 2**30
RUNNING, LOCKED, CHECKPOINTED = 0, 1, 2
MANAGED, HANGS = 1, 2


@pytest.fixture(scope="session")
def fake_libs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the fake driver library")
    out = tmp_path_factory.mktemp("fakecuda")
    libs = {"new": out / "libcuda.so.1", "old": out / "old" / "libcuda.so.1"}
    libs["old"].parent.mkdir()
    src = str(HERE / "fake_libcuda.c")
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(libs["new"]), src], check=True)
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-DNO_CHECKPOINT_API", "-o", str(libs["old"]), src], check=True
    )
    return libs


@dataclass
class FakeCuda:
    lib: Path
    state: Path
    env: dict[str, str] = field(default_factory=dict)

    def add(self, pid: int, device_bytes: int, flags: int = 0, state: int = RUNNING) -> None:
        rows = self.rows()
        rows[pid] = (state, device_bytes, 0, flags)
        self.state.write_text("".join(f"{p} {s} {d} {h} {f}\n" for p, (s, d, h, f) in rows.items()))

    def rows(self) -> dict[int, tuple[int, int, int, int]]:
        if not self.state.exists():
            return {}
        out = {}
        for line in self.state.read_text().splitlines():
            p, s, d, h, f = (int(x) for x in line.split())
            out[p] = (s, d, h, f)
        return out

    def device_bytes(self, pid: int) -> int:
        return self.rows().get(pid, (0, 0, 0, 0))[1]


@pytest.fixture
def fake_cuda(
    fake_libs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> FakeCuda:
    fake = FakeCuda(lib=fake_libs["new"], state=tmp_path / "cuda-state")
    fake.env = {"CLAWPOINT_LIBCUDA": str(fake.lib), "FAKE_CUDA_STATE": str(fake.state)}
    for k, v in fake.env.items():
        monkeypatch.setenv(k, v)
    return fake


class GpuNvml(FakeNvml):
    """FakeNvml plus memory, compute processes and MIG mode, fed by the fake driver."""

    def __init__(self, gpus: list[FakeGpu], cuda: FakeCuda, total: int = 141 * GIB) -> None:
        super().__init__(gpus, driver="580.159.03")
        self.cuda = cuda
        self.total = total
        self.base = 600 * 2**20  # the driver's own reservation on each GPU
        self.placement: dict[int, list[int]] = {}  # pid -> GPU indexes
        self.mig: set[int] = set()

    def _index(self, handle: Any, fn: str) -> int:
        return self.gpus.index(self._gpu(handle, fn))

    def _on(self, index: int) -> list[int]:
        return [p for p, idx in self.placement.items() if index in idx]

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:
        i = self._index(handle, "nvmlDeviceGetMemoryInfo")
        used = self.base + sum(self.cuda.device_bytes(p) for p in self._on(i))
        return SimpleNamespace(total=self.total, used=used, free=self.total - used)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        i = self._index(handle, "nvmlDeviceGetComputeRunningProcesses")
        # A suspended process holds no GPU memory and is not listed, as on a real GPU.
        return [
            SimpleNamespace(pid=p, usedGpuMemory=self.cuda.device_bytes(p))
            for p in self._on(i)
            if self.cuda.device_bytes(p)
        ]

    def nvmlDeviceGetMigMode(self, handle: Any) -> tuple[int, int]:
        i = self._index(handle, "nvmlDeviceGetMigMode")
        on = int(i in self.mig)
        return on, on


@pytest.fixture
def nvml(fake_cuda: FakeCuda) -> Iterator[GpuNvml]:
    yield GpuNvml([FakeGpu(uuid="GPU-0", name="NVIDIA H200")], fake_cuda)
