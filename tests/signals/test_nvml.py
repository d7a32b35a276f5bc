"""The NVML adapter against a fake pynvml made from the real module's parts."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path

import pynvml as real
import pytest

from core.signals.model import GpuVerdict, Severity
from core.signals.nvml import NVML_FUNCTIONS_USED, NvmlMonitor, NvmlStatus, decode_reasons, probe
from tests.signals.fake_nvml import FakeGpu, FakeNvml

ROOT = Path(__file__).resolve().parents[2]


def _params(fn: object) -> list[tuple[str, object, object]]:
    sig = inspect.signature(fn)  # type: ignore[arg-type]
    return [(p.name, p.kind, p.default) for p in sig.parameters.values()]


@pytest.mark.parametrize("name", NVML_FUNCTIONS_USED)
def test_fake_matches_real_pynvml(name: str) -> None:
    fake = FakeNvml([])
    assert hasattr(real, name), f"pynvml has no {name}"
    assert _params(getattr(fake, name)) == _params(getattr(real, name))


def test_fake_errors_are_real_pynvml_errors() -> None:
    fake = FakeNvml([])
    with pytest.raises(real.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()
    assert fake.NVMLError is real.NVMLError
    assert real.nvmlExceptionClass(real.NVML_ERROR_GPU_IS_LOST) is real.NVMLError_GpuIsLost


def _two_gpus() -> FakeNvml:
    return FakeNvml([FakeGpu(uuid="GPU-aaaa-0000"), FakeGpu(uuid="GPU-bbbb-1111")])


def test_healthy() -> None:
    report = probe(_two_gpus(), node="slurm:gpu-1")
    assert report.status is NvmlStatus.OK and report.driver_version == "570.86.15"
    assert [g.verdict for g in report.gpus] == [GpuVerdict.HEALTHY, GpuVerdict.HEALTHY]
    gpu = report.gpus[1]
    assert (gpu.uuid, gpu.temperature_c, gpu.power_w) == ("GPU-bbbb-1111", 41, 71.0)
    assert gpu.ecc.volatile_uncorrected == 0 and gpu.row_remap_failed is False
    assert gpu.subject == "slurm:gpu-1/gpu1" and gpu.unknown == [] and gpu.reasons == []
    assert report.verdict is GpuVerdict.HEALTHY


def test_throttled_thermal_is_degraded_power_cap_is_a_note() -> None:
    nv = _two_gpus()
    nv.gpus[0].reasons = (
        real.nvmlClocksEventReasonHwThermalSlowdown | real.nvmlClocksEventReasonSwPowerCap
    )
    nv.gpus[1].reasons = real.nvmlClocksEventReasonSwPowerCap | real.nvmlClocksEventReasonGpuIdle
    report = probe(nv)
    hot, capped = report.gpus
    assert hot.throttle_reasons == ["sw_power_cap", "hw_thermal_slowdown"]
    assert hot.verdict is GpuVerdict.DEGRADED and hot.severity is Severity.WARNING
    assert hot.reasons == ["clocks reduced: hw_thermal_slowdown"]
    assert capped.verdict is GpuVerdict.HEALTHY
    assert capped.notes == ["clocks reduced: gpu_idle", "clocks reduced: sw_power_cap"]


def test_decode_unknown_bits() -> None:
    assert decode_reasons(real, 0x8 | 0x10000) == ["hw_slowdown", "unknown_0x10000"]


def test_ecc_and_pending_remap_are_degraded_failed_remap_is_failed() -> None:
    nv = _two_gpus()
    key = (real.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, real.NVML_VOLATILE_ECC)
    nv.gpus[0].ecc = {key: 2, (real.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, real.NVML_AGGREGATE_ECC): 5}
    nv.gpus[0].remapped = (0, 1, 1, 0)
    nv.gpus[1].remapped = (0, 8, 0, 1)
    report = probe(nv)
    first, second = report.gpus
    assert first.ecc.volatile_uncorrected == 2 and first.ecc.aggregate_uncorrected == 5
    assert first.verdict is GpuVerdict.DEGRADED
    assert "2 uncorrectable ECC errors since reset" in first.reasons
    assert "row remapping pending: reset the GPU to apply it" in first.reasons
    assert second.verdict is GpuVerdict.FAILED and second.row_remap_failed
    assert report.verdict is GpuVerdict.FAILED


def test_xid_79_on_gpu_1_fails_it() -> None:
    nv = _two_gpus()
    with NvmlMonitor(nv, node="kubernetes:n1") as monitor:
        assert monitor.report().verdict is GpuVerdict.HEALTHY
        nv.inject_xid(1, 79)
        report = monitor.report()
        again = monitor.report()  # seen Xids stay until cleared
    ok, bad = report.gpus
    assert ok.verdict is GpuVerdict.HEALTHY
    assert bad.verdict is GpuVerdict.FAILED and bad.severity is Severity.CRITICAL
    assert [x.xid for x in bad.xid_events] == [79]
    assert bad.reasons == ["Xid 79: GPU has fallen off the bus: it is gone until the node is fixed"]
    assert again.gpus[1].verdict is GpuVerdict.FAILED
    assert nv.initialised == 0  # closed cleanly


def test_application_xid_is_a_note_and_48_degrades() -> None:
    nv = _two_gpus()
    with NvmlMonitor(nv) as monitor:
        nv.inject_xid(0, 13)
        nv.inject_xid(1, 48)
        report = monitor.report()
    assert report.gpus[0].verdict is GpuVerdict.HEALTHY
    assert report.gpus[0].notes[0].startswith("Xid 13:")
    assert report.gpus[1].verdict is GpuVerdict.DEGRADED


def test_lost_gpu() -> None:
    nv = _two_gpus()
    with NvmlMonitor(nv) as monitor:
        nv.gpus[0].lost = True
        report = monitor.report()
    lost, fine = report.gpus
    assert lost.lost and lost.verdict is GpuVerdict.FAILED and lost.uuid is None
    assert lost.reasons == ["GPU has fallen off the bus (NVML_ERROR_GPU_IS_LOST)"]
    assert fine.verdict is GpuVerdict.HEALTHY


def test_unsupported_queries_are_unknown_not_failures() -> None:
    nv = FakeNvml(
        [
            FakeGpu(
                uuid="GPU-cccc",
                name="NVIDIA GeForce RTX 4090",
                unsupported={
                    "nvmlDeviceGetTotalEccErrors",
                    "nvmlDeviceGetRetiredPagesPendingStatus",
                    "nvmlDeviceGetRemappedRows",
                    "nvmlDeviceRegisterEvents",
                },
            )
        ]
    )
    [gpu] = probe(nv).gpus
    assert gpu.verdict is GpuVerdict.HEALTHY
    assert gpu.ecc.volatile_uncorrected is None and gpu.row_remap_failed is None
    assert any(u.startswith("xid events:") for u in gpu.unknown)
    assert any("Not Supported" in u for u in gpu.unknown)
    assert len(gpu.unknown) == 7


@pytest.mark.parametrize(
    ("code", "status"),
    [
        (real.NVML_ERROR_LIBRARY_NOT_FOUND, NvmlStatus.NO_NVML),
        (real.NVML_ERROR_DRIVER_NOT_LOADED, NvmlStatus.NO_NVML),
        (real.NVML_ERROR_NO_PERMISSION, NvmlStatus.ERROR),
    ],
)
def test_no_nvml_is_a_status(code: int, status: NvmlStatus) -> None:
    nv = _two_gpus()
    nv.init_error = code
    report = probe(nv)
    assert report.status is status and report.gpus == [] and report.verdict is None
    assert report.message


def test_real_pynvml_without_a_gpu_is_no_nvml() -> None:
    # This machine may or may not have a driver; either way nothing escapes.
    report = probe(real)
    assert report.status in (NvmlStatus.OK, NvmlStatus.NO_NVML)


def test_no_library(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes "import pynvml" fail
    report = probe()
    assert report.status is NvmlStatus.NO_LIBRARY


def test_probe_script_prints_json() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts/nvml-probe.py")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )
    body = json.loads(out.stdout)
    assert body["status"] in ("ok", "no_nvml", "no_library")
    assert out.returncode in (0, 2, 3)
