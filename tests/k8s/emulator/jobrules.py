"""kube-apiserver's update rules for batch/v1 Jobs: what a write to a Job may change.

Followed (kubernetes/kubernetes, read 2026-12-01):

- ``pkg/registry/batch/job/strategy.go`` (``validationOptionsForJob``): the scheduling
  directives of ``spec.template`` may change only when the Job, **as stored before the
  write**, is suspended (``spec.suspend: true``) **and** has never started
  (``status.startTime`` nil): ``AllowMutableSchedulingDirectives = suspended && notStarted``.
  So a patch that sets ``suspend: false`` together with new affinity passes while the stored
  Job is suspended and unstarted, and a patch that sets ``suspend: true`` with new affinity
  on a running Job does not.
- ``pkg/apis/batch/validation/validation.go`` (``validatePodTemplateUpdate``): with that
  option, the template may differ only in ``spec.affinity.nodeAffinity`` (the rest of
  ``affinity`` stays immutable), ``spec.nodeSelector``, ``spec.tolerations``,
  ``spec.schedulingGates``, ``metadata.labels`` and ``metadata.annotations``; anything
  else, and everything without the option, is ``spec.template: Invalid value: ...: field is
  immutable`` (``ValidateImmutableField``, compared as ``apiequality.Semantic.DeepEqual``:
  an empty map or list equals an absent one). ``spec.selector`` and ``spec.completionMode``
  are immutable too.
- ``ValidateJobStatusUpdate`` (``RejectStartTimeUpdateForUnsuspendedJob``, on when the
  write changes ``startTime`` with the ``JobManagedBy`` gate, default on since 1.32):
  through ``jobs/status`` a set ``status.startTime`` may change (be cleared, as Kueue and
  JobSet do) only while ``spec.suspend`` is true: ``status.startTime: Required value:
  startTime cannot be removed for unsuspended job``. Since kubernetes/kubernetes#134769
  (in 1.34 through #135130) the Job controller's own reset on resume passes: a Job whose
  ``Suspended`` condition is still True is being resumed.

Version note: the emulator is 1.34, where the Job controller keeps ``startTime`` on suspend
and resets it on resume (pkg/controller/job/job_controller.go, ``syncJob``: "Resumed jobs
will always reset StartTime"). KEP-5440 (kubernetes/enhancements#5678) makes later
controllers clear it on suspend themselves; a client that clears it through ``jobs/status``
works on both.

A dry-run write is validated by the same rules (the registry validates before it decides
not to store). ``completions`` is immutable but for the elastic Indexed Job rule (``validateCompletions``).
Not modelled: the other status rules (counters, terminal conditions).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from tests.k8s.emulator import status

Obj = dict[str, Any]


def _semantic(value: Any) -> Any:
    """``apiequality.Semantic`` as JSON sees it: empty maps and lists are absent."""
    if isinstance(value, dict):
        out = {k: _semantic(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v not in (None, {}, [])}
    if isinstance(value, list):
        return [_semantic(v) for v in value]
    return value


def _suspended_and_not_started(old: Obj) -> bool:
    return bool((old.get("spec") or {}).get("suspend")) and not (old.get("status") or {}).get(
        "startTime"
    )


def _template_as_allowed(new_tpl: Obj, old_tpl: Obj) -> Obj:
    """The old template with the scheduling directives taken from the new one (what
    ``validatePodTemplateUpdate`` compares the new template against)."""
    old = copy.deepcopy(old_tpl)
    new_spec = new_tpl.get("spec") or {}
    spec = old.setdefault("spec", {})
    new_aff, old_aff = new_spec.get("affinity"), spec.get("affinity")
    if not new_aff and old_aff:
        # cleared: allowed when nodeAffinity was the only directive in it
        rest = {k: v for k, v in old_aff.items() if k != "nodeAffinity"}
        if _semantic(rest):
            spec["affinity"] = rest
        else:
            spec.pop("affinity", None)
    elif new_aff and not old_aff:
        spec["affinity"] = {"nodeAffinity": new_aff.get("nodeAffinity")}
    elif new_aff and old_aff:
        spec["affinity"] = {**old_aff, "nodeAffinity": new_aff.get("nodeAffinity")}
    for key in ("nodeSelector", "tolerations", "schedulingGates"):
        spec[key] = copy.deepcopy(new_spec.get(key))
    meta = old.setdefault("metadata", {})
    new_meta = new_tpl.get("metadata") or {}
    for key in ("labels", "annotations"):
        meta[key] = copy.deepcopy(new_meta.get(key))
    return old


def _go_value(template: Obj) -> str:
    # The server prints the Go value (core.PodTemplateSpec{...}); a compact JSON rendering
    # stands in for it, with the same field path and detail around it.
    return "core.PodTemplateSpec" + json.dumps(template, sort_keys=True, separators=(",", ":"))


def check_update(name: str, old: Obj, new: Obj) -> None:
    """A write to the Job itself (PUT/PATCH, dry-run or not): 422 when it breaks the rules."""
    causes: list[tuple[str, str, str]] = []
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    new_tpl, old_tpl = new_spec.get("template") or {}, old_spec.get("template") or {}
    compare = _template_as_allowed(new_tpl, old_tpl) if _suspended_and_not_started(old) else old_tpl
    if _semantic(new_tpl) != _semantic(compare):
        causes.append(
            ("spec.template", "Invalid value", f"{_go_value(new_tpl)}: field is immutable")
        )
    for key in ("selector", "completionMode"):
        if key in old_spec and _semantic(new_spec.get(key)) != _semantic(old_spec.get(key)):
            value = json.dumps(new_spec.get(key), sort_keys=True)
            causes.append((f"spec.{key}", "Invalid value", f"{value}: field is immutable"))
    causes += _completions(old_spec, new_spec)
    if causes:
        raise status.invalid("Job", name, "batch", causes)


def _completions(old_spec: Obj, new_spec: Obj) -> list[tuple[str, str, str]]:
    """validation.go ``validateCompletions`` (ElasticIndexedJob, GA in 1.31): ``completions``
    is immutable, except in an Indexed Job where it changes together with an equal
    ``parallelism`` (a nil ``completions`` is reported by the spec's own validation)."""
    new, old = new_spec.get("completions"), old_spec.get("completions")
    if new == old:
        return []
    if new_spec.get("completionMode") != "Indexed":
        return [("spec.completions", "Invalid value", f"{json.dumps(new)}: field is immutable")]
    if new is None or new == new_spec.get("parallelism"):
        return []
    return [
        (
            "spec.completions",
            "Invalid value",
            f"{new}: can only be modified in tandem with spec.parallelism",
        )
    ]


def check_status_update(name: str, old: Obj, new: Obj) -> None:
    """A write to ``jobs/status``: a set startTime changes only while the Job is suspended."""
    old_start = (old.get("status") or {}).get("startTime")
    new_start = (new.get("status") or {}).get("startTime")
    suspended = bool((new.get("spec") or {}).get("suspend"))
    resuming = any(
        c.get("type") == "Suspended" and c.get("status") == "True"
        for c in (old.get("status") or {}).get("conditions") or []
    )
    if old_start and new_start != old_start and not suspended and not resuming:
        raise status.invalid(
            "Job",
            name,
            "batch",
            [
                (
                    "status.startTime",
                    "Required value",
                    "startTime cannot be removed for unsuspended job",
                )
            ],
        )
