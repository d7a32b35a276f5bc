"""What the common critical Xid codes mean, and what each says about the GPU.

Xids are error reports of the NVIDIA driver (kernel log ``NVRM: Xid (PCI:...): N``; NVML
delivers them as ``nvmlEventTypeXidCriticalError`` events with the code in ``eventData``).
Meanings follow NVIDIA's Xid catalog and its GPU memory error management and dynamic page
retirement guides. ``effect``:

- ``FAILED``: the GPU lost its work or needs a reset/replacement before it can be trusted;
  fail the workload over to another GPU/node.
- ``DEGRADED``: the GPU still runs but needs attention (reset to apply a retirement or
  remap, or an interconnect fault); checkpoint and plan a move.
- ``None``: usually an application fault (bad memory access, killed context); it does not
  judge the GPU on its own. Repeated occurrences are worth a look, which is not tracked here.

Codes not listed are reported with meaning "unclassified Xid" and effect ``DEGRADED``: an
unknown critical error is not ignored, but is not called a failure either.
"""

from __future__ import annotations

from typing import NamedTuple

from core.signals.model import GpuVerdict


class XidInfo(NamedTuple):
    meaning: str
    effect: GpuVerdict | None


XIDS: dict[int, XidInfo] = {
    13: XidInfo("graphics engine exception (usually an application fault)", None),
    31: XidInfo("GPU memory page fault (usually an application's invalid access)", None),
    43: XidInfo("GPU stopped processing: a channel was reset (usually application)", None),
    45: XidInfo("preemptive cleanup after an earlier error or a killed process", None),
    48: XidInfo(
        "double-bit ECC error (uncorrectable); the affected context is lost, reset the GPU",
        GpuVerdict.DEGRADED,
    ),
    61: XidInfo("internal micro-controller breakpoint/warning", GpuVerdict.DEGRADED),
    62: XidInfo("internal micro-controller halt: reset the GPU", GpuVerdict.FAILED),
    63: XidInfo(
        "ECC page retirement or row remapping recorded: reset the GPU to activate it",
        GpuVerdict.DEGRADED,
    ),
    64: XidInfo(
        "ECC page retirement or row remapping failed: the GPU needs service",
        GpuVerdict.FAILED,
    ),
    74: XidInfo("NVLink error: check the link; a GPU reset is often needed", GpuVerdict.DEGRADED),
    79: XidInfo(
        "GPU has fallen off the bus: it is gone until the node is fixed", GpuVerdict.FAILED
    ),
    92: XidInfo("high single-bit ECC error rate", GpuVerdict.DEGRADED),
    94: XidInfo(
        "contained ECC error: the affected application was stopped, reset the GPU to remap",
        GpuVerdict.DEGRADED,
    ),
    95: XidInfo(
        "uncontained ECC error: every application on the GPU is affected, reset required",
        GpuVerdict.FAILED,
    ),
    119: XidInfo(
        "GSP RPC timeout: the GPU firmware stopped answering, reset required", GpuVerdict.FAILED
    ),
    120: XidInfo("GSP firmware error: reset required", GpuVerdict.FAILED),
}


def classify_xid(xid: int) -> XidInfo:
    return XIDS.get(xid, XidInfo(f"unclassified Xid {xid}", GpuVerdict.DEGRADED))
