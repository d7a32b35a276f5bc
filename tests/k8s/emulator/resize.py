"""The ``pods/resize`` subresource: in-place pod resize as kube-apiserver serves it (1.33+).

Read from kubernetes/kubernetes:

- pkg/registry/core/pod/storage/storage.go ``ResizeREST`` and pkg/registry/core/pod/strategy.go
  ``podResizeStrategy``: GET, PATCH and PUT of the whole Pod; only the containers'
  ``resources`` and ``resizePolicy`` are taken from the request (everything else is kept
  as it was), then validated by ``ValidatePodResize``.
- pkg/apis/core/validation/validation.go ``ValidatePodResize`` (each refusal with its
  message): "pods with pod-level resources cannot be resized"; "Pod QOS Class may not
  change as a result of resizing"; "Pod running on node without support for resize" (a
  running container whose status has no ``resources``, ``isPodResizeRequestSupported``);
  ``validateContainerResize``: "resource requests cannot be removed", "resource limits
  cannot be removed", "memory limits cannot be decreased unless resizePolicy is
  RestartContainer" (and "... cannot be added ..."); "only cpu and memory resources are
  mutable".
- A plain pod update may not change ``resources`` (1.33+: "Resource fields remain immutable
  via pod update", KEP-1287): ``check_pod_update`` answers it as ``ValidatePodUpdate`` does.
- Served from 1.33 (InPlacePodVerticalScaling on by default): an emulator whose
  ``version`` is older answers 404 and leaves ``pods/resize`` out of discovery
  (``served``).

Limits: no ``observedGeneration``; restartable init containers (sidecars) are not resized.
"""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from tests.k8s import scheduler
from tests.k8s.emulator import status

if TYPE_CHECKING:
    from tests.k8s.emulator.server import Emulator

Obj = dict[str, Any]
SINCE = (1, 33)
QOS = ("cpu", "memory")


def served(emu: Emulator) -> bool:
    v = emu.version
    try:
        have = (int(str(v["major"]).rstrip("+")), int(str(v["minor"]).rstrip("+")))
    except (KeyError, ValueError):
        return False
    return have >= SINCE


def _q(value: Any) -> Decimal:
    try:
        return scheduler.quantity(value)
    except ValueError:
        return Decimal(-1)


def _qos(spec: Obj) -> str:
    """pkg/apis/core/helper/qos/qos.go ``ComputePodQOS`` (cpu and memory only)."""
    any_set, guaranteed = False, True
    for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        res = c.get("resources") or {}
        limits = {k: _q(v) for k, v in (res.get("limits") or {}).items() if k in QOS}
        requests = {
            **limits,
            **{k: _q(v) for k, v in (res.get("requests") or {}).items() if k in QOS},
        }
        if any(limits.values()) or any(requests.values()):
            any_set = True
        if set(limits) != set(QOS) or any(requests[k] != limits[k] for k in limits):
            guaranteed = False
    return "BestEffort" if not any_set else "Guaranteed" if guaranteed else "Burstable"


def _forbidden(name: str, causes: list[tuple[str, str]]) -> status.ApiError:
    return status.invalid("Pod", name, "", [(f, "Forbidden", m) for f, m in causes])


def _merged(current: Obj, sent: Obj) -> Obj:
    """``podResizeStrategy.PrepareForUpdate``: the stored pod with only each container's
    ``resources`` and ``resizePolicy`` taken from ``sent``."""
    new = copy.deepcopy(current)
    by_name = {c.get("name"): c for c in (sent.get("spec") or {}).get("containers") or []}
    for c in (new.get("spec") or {}).get("containers") or []:
        got = by_name.get(c.get("name"))
        if got is None:
            continue
        for key in ("resources", "resizePolicy"):
            if key in got:
                c[key] = copy.deepcopy(got[key])
            else:
                c.pop(key, None)
    return new


def validate(current: Obj, sent: Obj) -> Obj:
    """The pod a resize request makes of ``current`` (422 with upstream's words if refused)."""
    name = str(current["metadata"]["name"])
    old_spec, sent_spec = current.get("spec") or {}, sent.get("spec") or {}
    for spec in (old_spec, sent_spec):
        level = spec.get("resources") or {}
        if level.get("requests") or level.get("limits"):
            raise _forbidden(name, [("", "pods with pod-level resources cannot be resized")])
    causes: list[tuple[str, str]] = []
    # Anything but cpu and memory changed in a container ("only cpu and memory resources are
    # mutable"): compare each container with its cpu/memory values put back.
    old_by_name = {c.get("name"): c for c in old_spec.get("containers") or []}
    for c in sent_spec.get("containers") or []:
        old = old_by_name.get(c.get("name"))
        if old is None:
            causes.append(("spec", "only cpu and memory resources are mutable"))
            continue
        for part in ("limits", "requests"):
            a = {
                k: v
                for k, v in ((c.get("resources") or {}).get(part) or {}).items()
                if k not in QOS
            }
            b = {
                k: v
                for k, v in ((old.get("resources") or {}).get(part) or {}).items()
                if k not in QOS
            }
            if a != b:
                causes.append(("spec", "only cpu and memory resources are mutable"))
                break
    new = _merged(current, sent)
    if _qos(new["spec"]) != _qos(old_spec):
        causes.insert(0, ("spec", "Pod QOS Class may not change as a result of resizing"))
    for s in (current.get("status") or {}).get("containerStatuses") or []:
        if "running" in (s.get("state") or {}):
            if s.get("resources") is None:
                causes.append(("spec", "Pod running on node without support for resize"))
            break
    for i, c in enumerate(new["spec"].get("containers") or []):
        old = old_by_name.get(c.get("name")) or {}
        path = f"spec.containers[{i}].resources"
        res, old_res = c.get("resources") or {}, old.get("resources") or {}
        for part in ("requests", "limits"):
            if set(old_res.get(part) or {}) - set(res.get(part) or {}):
                causes.append((f"{path}.{part}", f"resource {part} cannot be removed"))
        mem_policy = next(
            (p.get("restartPolicy") for p in c.get("resizePolicy") or [] if p.get("resourceName") == "memory"),
            "NotRequired",
        )  # fmt: skip
        if mem_policy in ("NotRequired", "PreferNoRestart", ""):
            new_mem, old_mem = (
                (res.get("limits") or {}).get("memory"),
                (old_res.get("limits") or {}).get("memory"),
            )
            if new_mem is not None and old_mem is not None and _q(new_mem) < _q(old_mem):
                causes.append((f"{path}.limits[memory]", "memory limits cannot be decreased unless resizePolicy is RestartContainer"))  # fmt: skip
            elif new_mem is not None and old_mem is None:
                causes.append((f"{path}.limits[memory]", "memory limits cannot be added unless resizePolicy is RestartContainer"))  # fmt: skip
    if causes:
        raise _forbidden(name, causes)
    return new


def check_pod_update(current: Obj, new: Obj) -> None:
    """A plain pod update that changes a container's resources: refused (1.33+)."""
    old = [c.get("resources") for c in (current.get("spec") or {}).get("containers") or []]
    now = [c.get("resources") for c in (new.get("spec") or {}).get("containers") or []]
    if old != now:
        raise _forbidden(
            str(current["metadata"]["name"]),
            [("spec", "pod updates may not change fields other than `spec.containers[*].image`,"
              "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,"
              "`spec.tolerations` (only additions to existing tolerations),"
              "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was "
              "previously negative); resources change through the resize subresource")],
        )  # fmt: skip
