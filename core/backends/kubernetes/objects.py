"""Small parsers of Kubernetes objects as raw JSON: quantities, timestamps, conditions and
the GPUs a container, a pod spec or a pod template asks for. Pure functions, no I/O; a value
that does not parse reads as absent (None or 0), never as an error.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

Obj = dict[str, Any]
GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")


def quantity(value: Any) -> Decimal | None:
    """A Kubernetes quantity (``"8"``, ``"7910m"``, ``"16Gi"``, ``"1e3"``) as a Decimal."""
    if value is None:
        return None
    from kubernetes.utils import parse_quantity

    parse: Any = parse_quantity  # untyped upstream
    try:
        return Decimal(parse(value))
    except (ValueError, TypeError, InvalidOperation):
        return None


def int_quantity(value: Any) -> int:
    q = quantity(value)
    return int(q) if q is not None else 0


def ts(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def conditions(obj: Obj) -> dict[str, Obj]:
    """status.conditions by type."""
    return {
        str(c.get("type")): c
        for c in (obj.get("status") or {}).get("conditions") or []
        if isinstance(c, dict)
    }


def is_true(conds: dict[str, Obj], kind: str) -> bool:
    return str((conds.get(kind) or {}).get("status")) == "True"


def container_gpus(container: Obj) -> int:
    res = container.get("resources") or {}
    total = 0
    for name in GPU_RESOURCES:
        # Extended resources: requests default to limits and may not differ from them.
        total += int_quantity(
            (res.get("limits") or {}).get(name) or (res.get("requests") or {}).get(name)
        )
    return total


def pod_spec_gpus(spec: Obj | None) -> int:
    """The effective GPU request of a pod spec: max(sum of containers, largest init container)."""
    if not spec:
        return 0
    main = sum(container_gpus(c) for c in spec.get("containers") or [])
    init = max((container_gpus(c) for c in spec.get("initContainers") or []), default=0)
    return max(main, init)


def template_gpus(template: Obj | None) -> int:
    return pod_spec_gpus((template or {}).get("spec"))
