"""What the API server validates and defaults on the kinds the emulator serves.

Covered: object names (RFC 1123 subdomain or label, by kind), ``generateName``, label keys
and values, and a few kind rules clawpoint can trip over: pods need containers with names
and images, and their readiness gates' condition types are qualified names; Deployments and StatefulSets need a selector that matches their template and
non-negative replicas; Jobs need ``restartPolicy`` Never or OnFailure (and an Indexed Job
``completions``). Defaults: those the
server fills in and code reads back (pod phase Pending, replicas 1, Job parallelism,
completions, backoffLimit and suspend, the namespace name label; the pod spec's and
container's defaults of pkg/apis/core/v1/defaults.go, in pods and templates, limits standing
for unset requests; on create only, a Job's generated selector and template labels and a
pod's DefaultTolerationSeconds tolerations). Jobs' selectors are validated (manual: matches
the template; generated: is the generated one), and securityContexts as
ValidateSecurityContext does (Unmasked /proc, privilege escalation, seccomp fields).
Everything else is stored as sent (no OpenAPI schema validation; no pruning of unknown
fields).
"""

from __future__ import annotations

import json
import re
from typing import Any

from tests.k8s.emulator import status
from tests.k8s.emulator.kinds import Kind
from tests.k8s.emulator.selectors import match_label_selector

_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")

SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
    "'-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
    "regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
    "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)

Cause = tuple[str, str, str]


def name_problems(kind: Kind, name: str) -> list[str]:
    if kind.name_format == "label":
        if len(name) > 63:
            return ["must be no more than 63 characters"]
        return [] if _LABEL.fullmatch(name) else [LABEL_MSG]
    if len(name) > 253:
        return ["must be no more than 253 characters"]
    return [] if _SUBDOMAIN.fullmatch(name) else [SUBDOMAIN_MSG]


def _label_causes(labels: dict[str, Any]) -> list[Cause]:
    causes: list[Cause] = []
    for key, value in labels.items():
        prefix, _, name = key.rpartition("/")
        if (
            (prefix and not _SUBDOMAIN.fullmatch(prefix))
            or not _QUALIFIED_NAME.fullmatch(name)
            or len(name) > 63
        ):
            causes.append(
                (
                    "metadata.labels",
                    "Invalid value",
                    f'"{key}": name part must consist of alphanumeric characters',
                )
            )
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
            causes.append(("metadata.labels", "Invalid value", f'"{value}": {LABEL_VALUE_MSG}'))
    return causes


def _containers(spec: dict[str, Any], path: str) -> list[Cause]:
    containers = spec.get("containers")
    if not containers:
        return [(f"{path}.containers", "Required value", "")]
    causes: list[Cause] = []
    for i, c in enumerate(containers):
        if not c.get("name"):
            causes.append((f"{path}.containers[{i}].name", "Required value", ""))
        elif not _LABEL.fullmatch(str(c["name"])):
            causes.append(
                (f"{path}.containers[{i}].name", "Invalid value", f'"{c["name"]}": {LABEL_MSG}')
            )
        if not c.get("image"):
            causes.append((f"{path}.containers[{i}].image", "Required value", ""))
    host_users = spec.get("hostUsers") is not False
    for key in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(key) or []):
            if isinstance(c, dict) and isinstance(c.get("securityContext"), dict):
                at = f"{path}.{key}[{i}].securityContext"
                causes += _security_context(c["securityContext"], at, host_users)
    pod_sc = spec.get("securityContext")
    if isinstance(pod_sc, dict):
        causes += _seccomp_field(pod_sc.get("seccompProfile"), f"{path}.securityContext")
    return causes


def _seccomp_field(profile: Any, path: str) -> list[Cause]:
    """validation.go validateSeccompProfileField."""
    if not isinstance(profile, dict):
        return []
    at = f"{path}.seccompProfile.localhostProfile"
    if profile.get("type") == "Localhost":
        if not profile.get("localhostProfile"):
            return [(at, "Required value", "must be set when seccomp type is Localhost")]
    elif profile.get("localhostProfile") is not None:
        return [
            (
                at,
                "Invalid value",
                f'"{profile["localhostProfile"]}": can only be set when seccomp type is Localhost',
            )
        ]
    return []


def _security_context(sc: dict[str, Any], path: str, host_users: bool) -> list[Cause]:
    """kubernetes/kubernetes pkg/apis/core/validation/validation.go ValidateSecurityContext:
    an Unmasked /proc needs ``hostUsers: false``; no privilege escalation cannot go with
    ``privileged`` or an added ``CAP_SYS_ADMIN`` (upstream compares that literal string);
    the seccomp profile's fields. The Go value the server prints is rendered as JSON."""
    causes: list[Cause] = []
    if sc.get("procMount") == "Unmasked" and host_users:
        causes.append(
            (
                f"{path}.procMount",
                "Invalid value",
                '"Unmasked": `hostUsers` must be false to use `Unmasked`',
            )
        )
    causes += _seccomp_field(sc.get("seccompProfile"), path)
    if sc.get("allowPrivilegeEscalation") is False:
        value = "core.SecurityContext" + json.dumps(sc, sort_keys=True, separators=(",", ":"))
        if sc.get("privileged") is True:
            causes.append(
                (
                    path,
                    "Invalid value",
                    f"{value}: cannot set `allowPrivilegeEscalation` to false and "
                    "`privileged` to true",
                )
            )
        if "CAP_SYS_ADMIN" in ((sc.get("capabilities") or {}).get("add") or []):
            causes.append(
                (
                    path,
                    "Invalid value",
                    f"{value}: cannot set `allowPrivilegeEscalation` to false and "
                    "`capabilities.Add` CAP_SYS_ADMIN",
                )
            )
    return causes


QUALIFIED_NAME_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
    "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
    "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)


def _readiness_gates(gates: list[Any]) -> list[Cause]:
    """kubernetes/kubernetes pkg/apis/core/validation/validation.go validateReadinessGates:
    each ``conditionType`` is a qualified name (ValidateQualifiedName: an optional DNS
    subdomain prefix and ``/``, then a name of at most 63 characters)."""
    causes: list[Cause] = []
    for i, gate in enumerate(gates):
        value = str((gate or {}).get("conditionType") or "") if isinstance(gate, dict) else ""
        prefix, slash, name = value.rpartition("/")
        at = f"spec.readinessGates[{i}].conditionType"
        if slash and (not prefix or len(prefix) > 253 or not _SUBDOMAIN.fullmatch(prefix)):
            causes.append((at, "Invalid value", f'"{value}": prefix part {SUBDOMAIN_MSG}'))
        if not name:
            causes.append((at, "Invalid value", f'"{value}": name part must be non-empty'))
        elif len(name) > 63:
            causes.append(
                (at, "Invalid value", f'"{value}": name part must be no more than 63 characters')
            )
        elif not _QUALIFIED_NAME.fullmatch(name):
            causes.append((at, "Invalid value", f'"{value}": {QUALIFIED_NAME_MSG}'))
    return causes


def check(kind: Kind, obj: dict[str, Any]) -> None:
    """Raise 422 Invalid, with every cause, when ``obj`` breaks the rules above."""
    meta = obj.get("metadata") or {}
    name = str(meta.get("name") or "")
    causes: list[Cause] = []
    if not name:
        causes.append(("metadata.name", "Required value", "name or generateName is required"))
    else:
        for problem in name_problems(kind, name):
            causes.append(("metadata.name", "Invalid value", f'"{name}": {problem}'))
    causes += _label_causes(meta.get("labels") or {})
    spec = obj.get("spec") or {}
    if kind.builtin and kind.kind == "Pod":
        causes += _containers(spec, "spec")
        causes += _readiness_gates(spec.get("readinessGates") or [])
    if kind.builtin and kind.kind in ("Deployment", "StatefulSet", "Job"):
        template = spec.get("template") or {}
        causes += _containers(template.get("spec") or {}, "spec.template.spec")
        replicas = spec.get("replicas", spec.get("parallelism", 0))
        if isinstance(replicas, int) and replicas < 0:
            field = "spec.replicas" if "replicas" in spec else "spec.parallelism"
            causes.append(
                (field, "Invalid value", f"{replicas}: must be greater than or equal to 0")
            )
        if kind.kind != "Job":
            selector = spec.get("selector")
            tlabels = (template.get("metadata") or {}).get("labels") or {}
            if not selector:
                causes.append(("spec.selector", "Required value", ""))
            elif not match_label_selector(selector, tlabels):
                causes.append(
                    (
                        "spec.template.metadata.labels",
                        "Invalid value",
                        f"{tlabels}: `selector` does not match template `labels`",
                    )
                )
        else:
            causes += _completion_mode(spec)
            causes += _job_selector(obj)
            policy = (template.get("spec") or {}).get("restartPolicy")
            if policy not in ("Never", "OnFailure"):
                causes.append(
                    (
                        "spec.template.spec.restartPolicy",
                        "Unsupported value",
                        f'"{policy or "Always"}": supported values: "OnFailure", "Never"',
                    )
                )
    if kind.builtin and kind.kind == "Lease":
        # kubernetes/kubernetes pkg/apis/coordination/validation/validation.go ValidateLeaseSpec
        for key, low, msg in (
            ("leaseDurationSeconds", 1, "must be greater than 0"),
            ("leaseTransitions", 0, "must be greater than or equal to 0"),
        ):
            value = spec.get(key)
            if isinstance(value, int) and value < low:
                causes.append((f"spec.{key}", "Invalid value", f"{value}: {msg}"))
    if causes:
        raise status.invalid(kind.kind, name, kind.group, causes)


def _job_selector(job: dict[str, Any]) -> list[Cause]:
    """pkg/apis/batch/validation/validation.go: a manual selector is required and must match
    the template's labels (validateJobSpec); a generated one must be exactly what
    strategy.go generated (validateGeneratedSelector: "`selector` not auto-generated")."""
    spec, meta = job.get("spec") or {}, job.get("metadata") or {}
    selector = spec.get("selector")
    labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    if spec.get("manualSelector"):
        if not selector:
            return [("spec.selector", "Required value", "")]
    elif not selector:
        return []  # a seeded Job without one (the server always generates it)
    causes: list[Cause] = []
    if not match_label_selector(selector, labels):
        causes.append(
            (
                "spec.template.metadata.labels",
                "Invalid value",
                f"{json.dumps(labels, sort_keys=True)}: `selector` does not match template `labels`",
            )
        )
    uid = meta.get("uid")
    if not spec.get("manualSelector") and uid:
        expected = {"batch.kubernetes.io/controller-uid": uid}
        if not match_label_selector(selector, expected):
            value = json.dumps(selector, sort_keys=True)
            causes.append(
                ("spec.selector", "Invalid value", f"{value}: `selector` not auto-generated")
            )
    return causes


def _completion_mode(spec: dict[str, Any]) -> list[tuple[str, str, str]]:
    """A Job's completion mode (kubernetes/kubernetes pkg/apis/batch/validation/validation.go
    validateJobSpec): NonIndexed or Indexed; Indexed needs ``completions`` (after defaulting)
    and at most 100000 ``parallelism``."""
    mode = spec.get("completionMode")
    if mode is not None and mode not in ("NonIndexed", "Indexed"):
        return [("spec.completionMode", "Unsupported value", f'"{mode}": supported values: "NonIndexed", "Indexed"')]  # fmt: skip
    if mode != "Indexed":
        return []
    if spec.get("completions") is None:
        return [("spec.completions", "Required value", "when completion mode is Indexed")]
    parallelism = spec.get("parallelism")
    if isinstance(parallelism, int) and parallelism > 100000:
        return [("spec.parallelism", "Invalid value", f"{parallelism}: must be less than or equal to 100000 when completion mode is Indexed")]  # fmt: skip
    return []


def defaults(kind: Kind, obj: dict[str, Any]) -> None:
    """Fill in the server-side defaults named in the module docstring (in place)."""
    if not kind.builtin:
        return
    spec = obj.setdefault("spec", {}) if kind.kind not in ("Namespace",) else obj.get("spec")
    if kind.kind == "Namespace":
        labels = obj["metadata"].setdefault("labels", {})
        labels["kubernetes.io/metadata.name"] = obj["metadata"]["name"]
    elif kind.kind == "Pod" and spec is not None:
        pod_spec_defaults(spec)
    elif kind.kind in ("Deployment", "StatefulSet") and spec is not None:
        spec.setdefault("replicas", 1)
    if kind.kind in ("Deployment", "StatefulSet", "Job") and spec is not None:
        template_spec = (spec.get("template") or {}).get("spec")
        if isinstance(template_spec, dict):
            pod_spec_defaults(template_spec)
    if kind.kind == "Job" and spec is not None:
        if "completions" not in spec and "parallelism" not in spec:
            spec["completions"] = 1
        spec.setdefault("parallelism", 1)
        spec.setdefault("backoffLimit", 6)
        spec.setdefault("suspend", False)
        spec.setdefault("completionMode", "NonIndexed")


def pod_spec_defaults(spec: dict[str, Any]) -> None:
    """kubernetes/kubernetes pkg/apis/core/v1/defaults.go, for a pod's spec or a template's:
    SetDefaults_PodSpec (restartPolicy, terminationGracePeriodSeconds, dnsPolicy,
    schedulerName, enableServiceLinks), SetDefaults_Container (imagePullPolicy: Always for
    an image without a tag or tagged ``:latest``, else IfNotPresent; an image by digest is
    IfNotPresent; terminationMessagePath and terminationMessagePolicy) and SetDefaults_Pod
    (a container's limits stand for the requests it leaves unset)."""
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("enableServiceLinks", True)
    for key in ("initContainers", "containers"):
        for c in spec.get(key) or []:
            if not isinstance(c, dict):
                continue
            image = str(c.get("image") or "")
            if image and "imagePullPolicy" not in c:
                tag = "" if "@" in image else image.rpartition("/")[2].partition(":")[2]
                c["imagePullPolicy"] = (
                    "Always" if "@" not in image and tag in ("", "latest") else "IfNotPresent"
                )
            c.setdefault("terminationMessagePath", "/dev/termination-log")
            c.setdefault("terminationMessagePolicy", "File")
            res = c.get("resources")
            if isinstance(res, dict) and isinstance(res.get("limits"), dict):
                requests = res.setdefault("requests", {})
                for name, value in res["limits"].items():
                    requests.setdefault(name, value)


# The DefaultTolerationSeconds admission plugin (on by default in kube-apiserver;
# plugin/pkg/admission/defaulttolerationseconds): a pod created without them tolerates the
# not-ready and unreachable NoExecute taints for 300 s.
_DEFAULT_TOLERATIONS = (
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
)


def create_defaults(kind: Kind, obj: dict[str, Any]) -> None:
    """What the server adds on create only, once the object has its uid: a Job's generated
    selector and template labels (pkg/registry/batch/job/strategy.go generateSelector, run
    by Validate unless ``manualSelector``), a pod's default tolerations (above)."""
    if not kind.builtin:
        return
    meta, spec = obj["metadata"], obj.get("spec")
    if kind.kind == "Job" and isinstance(spec, dict) and not spec.get("manualSelector"):
        template = spec.setdefault("template", {})
        labels = template.setdefault("metadata", {}).setdefault("labels", {})
        for key in ("job-name", "batch.kubernetes.io/job-name"):
            labels.setdefault(key, meta["name"])
        for key in ("controller-uid", "batch.kubernetes.io/controller-uid"):
            labels.setdefault(key, meta["uid"])
        selector = spec.get("selector") or {}
        spec["selector"] = selector
        selector.setdefault("matchLabels", {}).setdefault(
            "batch.kubernetes.io/controller-uid", meta["uid"]
        )
    if kind.kind == "Pod" and isinstance(spec, dict):
        tolerations = spec.setdefault("tolerations", [])
        for key in _DEFAULT_TOLERATIONS:
            if not any(
                t.get("key") == key and t.get("effect") in ("NoExecute", None, "")
                for t in tolerations
            ):
                tolerations.append(
                    {
                        "key": key,
                        "operator": "Exists",
                        "effect": "NoExecute",
                        "tolerationSeconds": 300,
                    }
                )


def initial_status(kind: Kind, obj: dict[str, Any]) -> dict[str, Any] | None:
    """The status a create through the API starts with (None: keep what was sent)."""
    if kind.kind == "Namespace" and kind.builtin:
        return {"phase": "Active"}
    if kind.kind == "Pod" and kind.builtin:
        return {"phase": "Pending"}
    if kind.kind == "CustomResourceDefinition":
        names = (obj.get("spec") or {}).get("names") or {}
        versions = (obj.get("spec") or {}).get("versions") or []
        return {
            "conditions": [
                {
                    "type": "NamesAccepted",
                    "status": "True",
                    "reason": "NoConflicts",
                    "message": "no conflicts found",
                },
                {
                    "type": "Established",
                    "status": "True",
                    "reason": "InitialNamesAccepted",
                    "message": "the initial names have been accepted",
                },
            ],
            "acceptedNames": names,
            "storedVersions": [v["name"] for v in versions if v.get("storage")],
        }
    if kind.kind == "StatefulSet" and kind.builtin:
        return {"replicas": 0, "availableReplicas": 0}  # not omitempty in the Go type
    if kind.kind == "PodDisruptionBudget" and kind.builtin:
        return {
            "disruptionsAllowed": 0,
            "currentHealthy": 0,
            "desiredHealthy": 0,
            "expectedPods": 0,
        }
    if kind.has_status:
        return {}
    return None
