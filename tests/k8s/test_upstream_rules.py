"""Scenarios written from the upstream Kubernetes rules (not from the emulator's code), run
against the emulator and the fake kubelet with the official client, as a user would.

Sources (kubernetes/kubernetes unless named):

- Jobs: pkg/registry/batch/job/strategy.go (selector and labels generated; scheduling
  directives and template metadata mutable only while suspended and never started),
  pkg/apis/batch/validation/validation.go (validatePodTemplateUpdate,
  ValidateJobStatusUpdate ``startTime cannot be removed for unsuspended job``,
  validateCompletions), pkg/apis/batch/v1/defaults.go, pkg/controller/job/job_controller.go
  and indexed_job_utils.go (one pod per index, JOB_COMPLETION_INDEX, the completion-index
  annotation and label, the hostname, ``completedIndexes``).
- Scheduling: pkg/scheduler/framework/plugins/tainttoleration, noderesources (init
  containers: max(max(init), sum(containers))), nodeaffinity (matchFields metadata.name,
  Gt/Lt), nodeunschedulable; a pod no node takes stays Pending with PodScheduled=False,
  reason Unschedulable, ``0/N nodes are available: ...``.
- Pods: pkg/apis/core/v1/defaults.go; the kubelet's restart policy
  (pkg/kubelet/kuberuntime/kuberuntime_manager.go computePodActions, pkg/kubelet/status
  getPhase); readiness gates (pkg/apis/core/validation/validation.go
  validateReadinessGates; pkg/kubelet/status/generate.go GeneratePodReadyCondition;
  pkg/kubelet/kubelet_pods.go generateAPIPodStatus keeps the conditions it does not own).
- Pod Security admission: staging/src/k8s.io/pod-security-admission/policy/check_*.go and
  admission/admission.go (``pods "x" is forbidden: violates PodSecurity "baseline:latest":
  ...``, 403 Forbidden; warn/audit never refuse).
- What the runtime grants a container (containerd/runc as the kubelet drives them): the
  default capability set, a non-root user's empty effective set, no_new_privs from
  allowPrivilegeEscalation=false, seccomp mode 2 for RuntimeDefault.
- Leases: pkg/apis/coordination/validation/validation.go; node heartbeats in
  kube-node-lease (pkg/kubelet/kubelet.go, component-helpers/apimachinery/lease).
- NoExecute: pkg/controller/tainteviction/taint_eviction.go.

Real processes run only where the rule is the kubelet's or a controller's (Jobs, restarts,
scheduling, eviction, what a container is granted); each is a short ``sleep``, ``true`` or
``false``.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import stream

NS = "default"
PSA = "pod-security.kubernetes.io"


# ----- helpers ---------------------------------------------------------------------------
# The official client's API objects, typed loosely: the scenarios send plain manifests.
def core_v1(api: Any) -> Any:
    return client.CoreV1Api(api)


def batch_v1(api: Any) -> Any:
    return client.BatchV1Api(api)


def coordination_v1(api: Any) -> Any:
    return client.CoordinationV1Api(api)


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = 30) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def refused(call: Callable[[], Any]) -> tuple[int, dict[str, Any]]:
    """The status code and Status body of a request the server must refuse."""
    with pytest.raises(ApiException) as info:
        call()
    return int(info.value.status), json.loads(str(info.value.body))


def simple_pod(
    name: str,
    *,
    command: list[str] | None = None,
    restart: str = "Never",
    **spec: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {"name": "main", "image": "busybox:1.36", "command": command or ["sleep", "30"]}
            ],
            **spec,
        },
    }


def sleeper_job(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "metadata": {"labels": {"team": "a"}},
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {"name": "main", "image": "busybox:1.36", "command": ["sleep", "0.3"]}
                    ],
                },
            },
            **spec,
        },
    }


def job_status(emu: Any, name: str) -> dict[str, Any]:
    kind = emu.store.kinds[("batch", "jobs")]
    return dict(emu.store.get(kind, NS, name).get("status") or {})


# ===== Jobs: the API server's rules =======================================================
def test_job_create_generates_selector_labels_and_defaults(api: Any) -> None:
    batch = batch_v1(api)
    job = batch.create_namespaced_job(NS, sleeper_job("gen", suspend=True))
    uid = job.metadata.uid
    labels = job.spec.template.metadata.labels
    assert labels["team"] == "a"
    assert labels["job-name"] == "gen"
    assert labels["batch.kubernetes.io/job-name"] == "gen"
    assert labels["controller-uid"] == uid
    assert labels["batch.kubernetes.io/controller-uid"] == uid
    assert job.spec.selector.match_labels == {"batch.kubernetes.io/controller-uid": uid}
    # pkg/apis/batch/v1/defaults.go: completions and parallelism 1 when both are unset.
    assert job.spec.completions == 1
    assert job.spec.parallelism == 1
    assert job.spec.backoff_limit == 6
    assert job.spec.completion_mode == "NonIndexed"
    assert job.spec.suspend is True
    assert job.status.start_time is None


def test_job_manual_selector(api: Any) -> None:
    """strategy.go: no generated selector or labels with manualSelector; validation.go
    ValidateJobSpec: the selector must match the template's labels."""
    batch = batch_v1(api)
    body = sleeper_job(
        "man", suspend=True, manualSelector=True, selector={"matchLabels": {"team": "a"}}
    )
    job = batch.create_namespaced_job(NS, body)
    assert job.spec.template.metadata.labels == {"team": "a"}
    assert job.spec.selector.match_labels == {"team": "a"}
    bad = sleeper_job(
        "man2", suspend=True, manualSelector=True, selector={"matchLabels": {"team": "b"}}
    )
    code, status = refused(lambda: batch.create_namespaced_job(NS, bad))
    assert code == 422
    assert "spec.template.metadata.labels" in [c["field"] for c in status["details"]["causes"]]
    # Without manualSelector a selector of one's own is refused: not the generated one.
    own = sleeper_job("man3", suspend=True, selector={"matchLabels": {"team": "a"}})
    code, status = refused(lambda: batch.create_namespaced_job(NS, own))
    assert code == 422
    assert "spec.selector" in [c["field"] for c in status["details"]["causes"]]


def test_job_template_restart_policy_always_is_invalid(api: Any) -> None:
    body = sleeper_job("always")
    body["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    code, status = refused(lambda: batch_v1(api).create_namespaced_job(NS, body))
    assert code == 422
    assert status["reason"] == "Invalid"
    fields = [c["field"] for c in status["details"]["causes"]]
    assert "spec.template.spec.restartPolicy" in fields


def test_indexed_job_requires_completions(api: Any) -> None:
    # With neither set, both default to 1 (pkg/apis/batch/v1/defaults.go); with parallelism
    # set, an Indexed Job has no completions and is invalid.
    ok = sleeper_job("idx-default", completionMode="Indexed", suspend=True)
    assert batch_v1(api).create_namespaced_job(NS, ok).spec.completions == 1
    body = sleeper_job("idx-nocompl", completionMode="Indexed", suspend=True, parallelism=2)
    code, status = refused(lambda: batch_v1(api).create_namespaced_job(NS, body))
    assert code == 422
    assert "spec.completions" in [c["field"] for c in status["details"]["causes"]]


def test_suspended_job_image_change_is_refused(api: Any) -> None:
    batch = batch_v1(api)
    batch.create_namespaced_job(NS, sleeper_job("img", suspend=True))
    patch = {
        "spec": {"template": {"spec": {"containers": [{"name": "main", "image": "busybox:1.37"}]}}}
    }
    code, status = refused(lambda: batch.patch_namespaced_job("img", NS, patch))
    assert code == 422
    assert status["reason"] == "Invalid"
    causes = status["details"]["causes"]
    assert any(c["field"] == "spec.template" and "immutable" in c["message"] for c in causes)


def test_suspended_never_started_job_template_labels_and_scheduling_mutable(api: Any) -> None:
    batch = batch_v1(api)
    batch.create_namespaced_job(NS, sleeper_job("mut", suspend=True))
    patch = {
        "spec": {
            "template": {
                "metadata": {"labels": {"team": "b"}, "annotations": {"note": "x"}},
                "spec": {
                    "nodeSelector": {"disk": "ssd"},
                    "tolerations": [{"key": "k", "operator": "Exists"}],
                },
            }
        }
    }
    job = batch.patch_namespaced_job("mut", NS, patch)
    assert job.spec.template.metadata.labels["team"] == "b"
    assert job.spec.template.spec.node_selector == {"disk": "ssd"}


def test_running_job_template_labels_are_immutable(emu: Any, api: Any) -> None:
    batch = batch_v1(api)
    batch.create_namespaced_job(NS, sleeper_job("run"))
    emu.set_status(_job_obj(emu, "run"), {"startTime": "2026-01-01T00:00:00Z", "active": 1})
    patch = {"spec": {"template": {"metadata": {"labels": {"team": "b"}}}}}
    code, _ = refused(lambda: batch.patch_namespaced_job("run", NS, patch))
    assert code == 422


def _job_obj(emu: Any, name: str) -> dict[str, Any]:
    return dict(emu.store.get(emu.store.kinds[("batch", "jobs")], NS, name))


def test_suspended_job_that_started_keeps_its_template(emu: Any, api: Any) -> None:
    """strategy.go: AllowMutableSchedulingDirectives = suspended && startTime == nil."""
    batch = batch_v1(api)
    batch.create_namespaced_job(NS, sleeper_job("started", suspend=True))
    emu.set_status(_job_obj(emu, "started"), {"startTime": "2026-01-01T00:00:00Z"})
    patch = {"spec": {"template": {"spec": {"nodeSelector": {"disk": "ssd"}}}}}
    code, _ = refused(lambda: batch.patch_namespaced_job("started", NS, patch))
    assert code == 422


def test_job_status_start_time_clearing(emu: Any, api: Any) -> None:
    batch = batch_v1(api)
    batch.create_namespaced_job(NS, sleeper_job("sus", suspend=True))
    emu.set_status(_job_obj(emu, "sus"), {"startTime": "2026-01-01T00:00:00Z"})
    # Suspended: the status subresource may clear startTime (as Kueue does).
    got = batch.patch_namespaced_job_status("sus", NS, {"status": {"startTime": None}})
    assert got.status.start_time is None

    batch.create_namespaced_job(NS, sleeper_job("live"))
    emu.set_status(_job_obj(emu, "live"), {"startTime": "2026-01-01T00:00:00Z", "active": 1})
    code, status = refused(
        lambda: batch.patch_namespaced_job_status("live", NS, {"status": {"startTime": None}})
    )
    assert code == 422
    cause = status["details"]["causes"][0]
    assert cause["field"] == "status.startTime"
    assert "startTime cannot be removed for unsuspended job" in cause["message"]
    # Changing it (not only removing it) is refused too while not suspended.
    code, _ = refused(
        lambda: batch.patch_namespaced_job_status(
            "live", NS, {"status": {"startTime": "2026-01-01T00:05:00Z"}}
        )
    )
    assert code == 422


def test_job_status_update_ignores_spec(emu: Any, api: Any) -> None:
    """jobStatusStrategy.PrepareForUpdate: newJob.Spec = oldJob.Spec."""
    batch = batch_v1(api)
    batch.create_namespaced_job(NS, sleeper_job("ign", suspend=True))
    got = batch.patch_namespaced_job_status("ign", NS, {"spec": {"parallelism": 5}})
    assert got.spec.parallelism == 1


def test_completions_immutable_parallelism_mutable(api: Any) -> None:
    batch = batch_v1(api)
    batch.create_namespaced_job(NS, sleeper_job("cp", suspend=True, completions=2, parallelism=1))
    job = batch.patch_namespaced_job("cp", NS, {"spec": {"parallelism": 2}})
    assert job.spec.parallelism == 2
    code, status = refused(
        lambda: batch.patch_namespaced_job("cp", NS, {"spec": {"completions": 3}})
    )
    assert code == 422
    assert "spec.completions" in [c["field"] for c in status["details"]["causes"]]


# ===== Jobs: the controller (real processes) ==============================================
def completed(batch: Any, name: str) -> Any:
    job = batch.read_namespaced_job(name, NS)
    done = any(c.type == "Complete" and c.status == "True" for c in job.status.conditions or [])
    return job if done else None


def test_indexed_job_three_completions_two_parallel(api: Any, kubelet: Any) -> None:
    batch, core = batch_v1(api), core_v1(api)
    body = sleeper_job("ix", completionMode="Indexed", completions=3, parallelism=2)
    body["spec"]["template"]["spec"]["containers"][0]["command"] = ["sleep", "0.6"]
    batch.create_namespaced_job(NS, body)
    seen: dict[str, Any] = {}
    most_running = 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        # The Job is read before its Pods: the controller counts a Pod only once it has
        # Succeeded, so a Job seen Complete guarantees the listing after it shows every Pod
        # finished. Read the other way round, a Pod can finish between the two reads.
        job = batch.read_namespaced_job("ix", NS)
        pods = core.list_namespaced_pod(NS, label_selector="batch.kubernetes.io/job-name=ix").items
        for p in pods:
            seen[p.metadata.name] = p
        active = [p for p in pods if p.status.phase in (None, "Pending", "Running")]
        active = [p for p in active if p.metadata.deletion_timestamp is None]
        most_running = max(most_running, len(active))
        if any(c.type == "Complete" and c.status == "True" for c in job.status.conditions or []):
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the Indexed Job did not complete")
    assert most_running <= 2
    assert job.status.succeeded == 3
    assert job.status.completed_indexes == "0-2"
    assert job.status.completion_time is not None
    assert job.status.start_time is not None
    by_index: dict[str, list[Any]] = {}
    for p in seen.values():
        ann = p.metadata.annotations or {}
        index = ann["batch.kubernetes.io/job-completion-index"]
        assert p.metadata.labels["batch.kubernetes.io/job-completion-index"] == index
        assert p.spec.hostname == f"ix-{index}"
        assert p.metadata.name.startswith(f"ix-{index}-")
        env = {e.name: e for e in p.spec.containers[0].env or []}
        ref = env["JOB_COMPLETION_INDEX"].value_from.field_ref.field_path
        # PodIndexLabel (GA in 1.32): the variable reads the label (indexed_job_utils.go
        # addCompletionIndexEnvVariable).
        assert ref == "metadata.labels['batch.kubernetes.io/job-completion-index']"
        by_index.setdefault(index, []).append(p)
    assert sorted(by_index) == ["0", "1", "2"]
    for pods in by_index.values():
        assert [p.status.phase for p in pods].count("Succeeded") == 1


def test_non_indexed_job_two_completions_two_parallel(api: Any, kubelet: Any) -> None:
    batch, core = batch_v1(api), core_v1(api)
    batch.create_namespaced_job(NS, sleeper_job("nx", completions=2, parallelism=2))
    job = wait_for("the Job to complete", lambda: completed(batch, "nx"), 60)
    assert job.status.succeeded == 2
    assert job.status.completed_indexes is None
    pods = core.list_namespaced_pod(NS, label_selector="job-name=nx").items
    assert len(pods) == 2
    for p in pods:
        assert "batch.kubernetes.io/job-completion-index" not in (p.metadata.annotations or {})
        assert p.metadata.owner_references[0].kind == "Job"
        assert p.metadata.owner_references[0].controller is True


def condition(job: Any, kind: str) -> Any:
    return next((c for c in job.status.conditions or [] if c.type == kind), None)


def test_suspend_resume_start_time_and_conditions(api: Any, kubelet: Any) -> None:
    """job_controller.go syncJob (1.34): startTime is set when the Job first runs, kept when
    it is suspended (its pods are deleted), reset when it is resumed; the Suspended
    condition turns True (JobSuspended) and then False (JobResumed)."""
    batch, core = batch_v1(api), core_v1(api)
    body = sleeper_job("sr", suspend=True)
    body["spec"]["template"]["spec"]["containers"][0]["command"] = ["sleep", "30"]
    batch.create_namespaced_job(NS, body)
    job = wait_for(
        "Suspended=True",
        lambda: (
            (j := batch.read_namespaced_job("sr", NS))
            and (c := condition(j, "Suspended"))
            and c.status == "True"
            and j
        ),
    )
    assert condition(job, "Suspended").reason == "JobSuspended"
    assert job.status.start_time is None
    assert core.list_namespaced_pod(NS, label_selector="job-name=sr").items == []

    batch.patch_namespaced_job("sr", NS, {"spec": {"suspend": False}})
    job = wait_for(
        "a start time", lambda: (j := batch.read_namespaced_job("sr", NS)).status.start_time and j
    )
    first = job.status.start_time
    wait_for(
        "a running pod",
        lambda: any(
            p.status.phase == "Running"
            for p in core.list_namespaced_pod(NS, label_selector="job-name=sr").items
        ),
    )
    # status.ready (JobReadyPods) and status.terminating (JobPodReplacementPolicy).
    job = wait_for(
        "ready 1", lambda: (j := batch.read_namespaced_job("sr", NS)).status.ready == 1 and j
    )
    assert (job.status.active, job.status.terminating) == (1, 0)
    resumed = condition(batch.read_namespaced_job("sr", NS), "Suspended")
    assert resumed is not None and (resumed.status, resumed.reason) == ("False", "JobResumed")

    batch.patch_namespaced_job("sr", NS, {"spec": {"suspend": True}})
    wait_for(
        "the pods gone",
        lambda: not core.list_namespaced_pod(NS, label_selector="job-name=sr").items,
    )
    job = batch.read_namespaced_job("sr", NS)
    assert condition(job, "Suspended").status == "True"
    assert job.status.start_time == first  # kept on suspend (1.34)
    # Started, so the template stays immutable until a client clears startTime (Kueue does).
    patch = {"spec": {"template": {"spec": {"nodeSelector": {"kubernetes.io/hostname": "n3"}}}}}
    code, _ = refused(lambda: batch.patch_namespaced_job("sr", NS, patch))
    assert code == 422
    batch.patch_namespaced_job_status("sr", NS, {"status": {"startTime": None}})
    batch.patch_namespaced_job("sr", NS, patch)
    time.sleep(1.1)  # the reset start time is a later second
    batch.patch_namespaced_job("sr", NS, {"spec": {"suspend": False}})
    job = wait_for(
        "a new start time",
        lambda: (j := batch.read_namespaced_job("sr", NS)).status.start_time and j,
    )
    assert job.status.start_time > first
    pods = wait_for(
        "the pod on n3",
        lambda: [
            p
            for p in core.list_namespaced_pod(NS, label_selector="job-name=sr").items
            if p.spec.node_name
        ],
    )
    assert pods[0].spec.node_name == "n3"
    batch.delete_namespaced_job("sr", NS, propagation_policy="Background")


def test_job_failure_and_success_conditions(api: Any, kubelet: Any) -> None:
    """1.34: FailureTarget before Failed (BackoffLimitExceeded), SuccessCriteriaMet before
    Complete (CompletionsReached)."""
    batch = batch_v1(api)
    failing = sleeper_job("fl", backoffLimit=0)
    failing["spec"]["template"]["spec"]["containers"][0]["command"] = ["false"]
    batch.create_namespaced_job(NS, failing)
    batch.create_namespaced_job(NS, sleeper_job("ok"))
    job = wait_for(
        "Failed",
        lambda: (j := batch.read_namespaced_job("fl", NS)) and condition(j, "Failed") and j,
    )
    for kind in ("FailureTarget", "Failed"):
        c = condition(job, kind)
        assert (c.status, c.reason) == ("True", "BackoffLimitExceeded"), kind
    assert job.status.failed == 1
    job = wait_for("ok complete", lambda: completed(batch, "ok"))
    for kind in ("SuccessCriteriaMet", "Complete"):
        c = condition(job, kind)
        assert (c.status, c.reason) == ("True", "CompletionsReached"), kind
    assert condition(job, "Failed") is None


def test_on_failure_job_restarts_count_against_backoff_limit(api: Any, kubelet: Any) -> None:
    """pastBackoffLimitOnFailure: restarts in place, then BackoffLimitExceeded once the
    restarts reach backoffLimit; the pod itself never failed."""
    batch, core = batch_v1(api), core_v1(api)
    body = sleeper_job("of", backoffLimit=2)
    body["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"
    body["spec"]["template"]["spec"]["containers"][0]["command"] = ["false"]
    batch.create_namespaced_job(NS, body)
    job = wait_for(
        "Failed",
        lambda: (j := batch.read_namespaced_job("of", NS)) and condition(j, "Failed") and j,
        30,
    )
    assert condition(job, "Failed").reason == "BackoffLimitExceeded"
    pods = core.list_namespaced_pod(NS, label_selector="job-name=of").items
    assert len(pods) <= 1  # restarted in place, never replaced


# ===== Pods: defaults ======================================================================
def test_pod_defaults(api: Any) -> None:
    core = core_v1(api)
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "d"},
        "spec": {
            "containers": [
                {"name": "a", "image": "busybox"},
                {"name": "b", "image": "busybox:1.36"},
            ]
        },
    }
    p = core.create_namespaced_pod(NS, body)
    assert p.spec.restart_policy == "Always"
    assert p.spec.dns_policy == "ClusterFirst"
    assert p.spec.termination_grace_period_seconds == 30
    assert p.spec.scheduler_name == "default-scheduler"
    assert p.spec.enable_service_links is True
    a, b = p.spec.containers
    assert a.image_pull_policy == "Always"  # no tag: latest
    assert b.image_pull_policy == "IfNotPresent"
    assert a.termination_message_path == "/dev/termination-log"
    assert a.termination_message_policy == "File"
    assert p.status.phase == "Pending"
    # DefaultTolerationSeconds admission: not-ready and unreachable for 300 s.
    tol = {(t.key, t.effect, t.toleration_seconds) for t in p.spec.tolerations or []}
    assert ("node.kubernetes.io/not-ready", "NoExecute", 300) in tol
    assert ("node.kubernetes.io/unreachable", "NoExecute", 300) in tol


def test_pod_validation_names_and_required_image(api: Any) -> None:
    core = core_v1(api)
    bad = simple_pod("v1")
    bad["spec"]["containers"][0]["name"] = "Main_1"
    code, status = refused(lambda: core.create_namespaced_pod(NS, bad))
    assert code == 422
    assert "spec.containers[0].name" in [c["field"] for c in status["details"]["causes"]]
    noimg = simple_pod("v2")
    del noimg["spec"]["containers"][0]["image"]
    code, status = refused(lambda: core.create_namespaced_pod(NS, noimg))
    assert code == 422
    assert "spec.containers[0].image" in [c["field"] for c in status["details"]["causes"]]


def test_security_context_validation(api: Any) -> None:
    """pkg/apis/core/validation/validation.go ValidateSecurityContext: no privilege
    escalation is incompatible with privileged; an Unmasked /proc needs hostUsers: false."""
    core = core_v1(api)
    both = with_container_sc("sc1", {"allowPrivilegeEscalation": False, "privileged": True})
    code, status = refused(lambda: core.create_namespaced_pod(NS, both))
    assert code == 422
    cause = status["details"]["causes"][0]
    assert cause["field"] == "spec.containers[0].securityContext"
    assert (
        "cannot set `allowPrivilegeEscalation` to false and `privileged` to true"
        in (cause["message"])
    )
    unmasked = with_container_sc("sc2", {"procMount": "Unmasked"})
    code, status = refused(lambda: core.create_namespaced_pod(NS, unmasked))
    assert code == 422
    assert status["details"]["causes"][0]["field"] == "spec.containers[0].securityContext.procMount"
    core.create_namespaced_pod(
        NS, with_container_sc("sc3", {"procMount": "Unmasked"}, hostUsers=False)
    )


# ===== Scheduling ==========================================================================
@contextlib.contextmanager
def pods_cleanup(core: Any, *names: str) -> Iterator[None]:
    try:
        yield
    finally:
        for n in names:
            with contextlib.suppress(ApiException):
                core.delete_namespaced_pod(n, NS, grace_period_seconds=0)


def bound_node(core: Any, name: str) -> str:
    return str(
        wait_for(f"{name} bound", lambda: core.read_namespaced_pod(name, NS).spec.node_name, 20)
    )


def unschedulable(core: Any, name: str) -> str:
    def check() -> str | None:
        p = core.read_namespaced_pod(name, NS)
        for c in p.status.conditions or []:
            if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable":
                return str(c.message)
        return None

    msg = wait_for(f"{name} Unschedulable", check, 20)
    p = core.read_namespaced_pod(name, NS)
    assert p.status.phase == "Pending"
    assert p.spec.node_name is None
    return str(msg)


def taint(core: Any, node: str, *taints: dict[str, Any]) -> None:
    core.patch_node(node, {"spec": {"taints": list(taints)}})


def test_gpu_request_lands_on_gpu_node_and_too_many_stay_pending(api: Any, kubelet: Any) -> None:
    core = core_v1(api)
    gpu = simple_pod("g1")
    gpu["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    two = simple_pod("g2")
    two["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "2"}}
    with pods_cleanup(core, "g1", "g2"):
        core.create_namespaced_pod(NS, gpu)
        assert bound_node(core, "g1") == "n2"
        # Extended resources: limits default the requests (pkg/apis/core/v1/defaults.go).
        got = core.read_namespaced_pod("g1", NS).spec.containers[0].resources.requests
        assert got == {"nvidia.com/gpu": "1"}
        core.create_namespaced_pod(NS, two)
        msg = unschedulable(core, "g2")
        assert msg == (
            "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: "
            "0/3 nodes are available: 3 No preemption victims found for incoming pod.."
        )


def test_each_node_counts_only_its_first_failing_filter(api: Any, kubelet: Any) -> None:
    """The framework stops at a node's first failing filter plugin: a cordoned node that also
    lacks the GPU counts as unschedulable only."""
    core = core_v1(api)
    core.patch_node("n1", {"spec": {"unschedulable": True}})
    taint(core, "n2", {"key": "dedicated", "value": "x", "effect": "NoSchedule"})
    two = simple_pod("f1", preemptionPolicy="Never")
    two["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    with pods_cleanup(core, "f1"):
        core.create_namespaced_pod(NS, two)
        assert unschedulable(core, "f1") == (
            "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, "
            "1 node(s) had untolerated taint {dedicated: x}, 1 node(s) were unschedulable. "
            "preemption: not eligible due to preemptionPolicy=Never.."
        )


def test_init_container_requests_count_by_max(api: Any, kubelet: Any) -> None:
    core = core_v1(api)
    # Effective request = max(max(init), sum(containers)): 7 CPUs fit a node of 8.
    fits = simple_pod("i1")
    fits["spec"]["initContainers"] = [
        {
            "name": "init",
            "image": "busybox",
            "command": ["true"],
            "resources": {"requests": {"cpu": "7"}},
        }
    ]
    fits["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    big_init = simple_pod("i2")
    big_init["spec"]["initContainers"] = [
        {
            "name": "init",
            "image": "busybox",
            "command": ["true"],
            "resources": {"requests": {"cpu": "9"}},
        }
    ]
    with pods_cleanup(core, "i1", "i2"):
        core.create_namespaced_pod(NS, fits)
        bound_node(core, "i1")
        core.create_namespaced_pod(NS, big_init)
        assert "Insufficient cpu" in unschedulable(core, "i2")


def test_taints_and_tolerations(api: Any, kubelet: Any) -> None:
    core = core_v1(api)
    no_sched = {"key": "dedicated", "value": "x", "effect": "NoSchedule"}
    taint(core, "n1", no_sched)
    taint(core, "n2", {"key": "dedicated", "value": "", "effect": "NoExecute"})
    taint(core, "n3", {"key": "soft", "value": "y", "effect": "PreferNoSchedule"})
    with pods_cleanup(core, "t1", "t2", "t3", "t4", "t5"):
        # PreferNoSchedule does not filter: only n3 is left.
        core.create_namespaced_pod(NS, simple_pod("t1"))
        assert bound_node(core, "t1") == "n3"
        taint(core, "n3", {"key": "hard", "value": "y", "effect": "NoSchedule"})
        core.create_namespaced_pod(NS, simple_pod("t2"))
        msg = unschedulable(core, "t2")
        assert msg.startswith("0/3 nodes are available:")
        assert "untolerated taint" in msg
        # Exists with an empty key tolerates every taint.
        core.create_namespaced_pod(NS, simple_pod("t3", tolerations=[{"operator": "Exists"}]))
        bound_node(core, "t3")
        # Equal with an empty value matches the taint whose value is empty (n2, NoExecute,
        # for a while: tolerationSeconds).
        tol = [
            {
                "key": "dedicated",
                "operator": "Equal",
                "value": "",
                "effect": "NoExecute",
                "tolerationSeconds": 3600,
            }
        ]
        core.create_namespaced_pod(NS, simple_pod("t4", tolerations=tol))
        assert bound_node(core, "t4") == "n2"
        # A toleration of a different value does not match.
        wrong = [{"key": "dedicated", "operator": "Equal", "value": "z", "effect": "NoSchedule"}]
        core.create_namespaced_pod(NS, simple_pod("t5", tolerations=wrong))
        unschedulable(core, "t5")


def test_no_execute_taint_evicts_by_toleration_seconds(api: Any, kubelet: Any) -> None:
    """taint_eviction.go: untolerated NoExecute deletes at once (DisruptionTarget,
    DeletionByTaintManager); tolerationSeconds delays it; a toleration without it keeps the
    pod."""
    core = core_v1(api)
    on_n1 = {"kubernetes.io/hostname": "n1"}
    tol = {"key": "maint", "operator": "Exists", "effect": "NoExecute"}
    with pods_cleanup(core, "e1", "e2", "e3"):
        core.create_namespaced_pod(NS, simple_pod("e1", nodeSelector=on_n1))
        core.create_namespaced_pod(
            NS, simple_pod("e2", nodeSelector=on_n1, tolerations=[{**tol, "tolerationSeconds": 2}])
        )
        core.create_namespaced_pod(NS, simple_pod("e3", nodeSelector=on_n1, tolerations=[tol]))
        for name in ("e1", "e2", "e3"):
            assert bound_node(core, name) == "n1"
        tainted_at = time.monotonic()
        taint(core, "n1", {"key": "maint", "value": "now", "effect": "NoExecute"})

        def marked(name: str) -> Any:
            try:
                p = core.read_namespaced_pod(name, NS)
            except ApiException as exc:
                return "gone" if exc.status == 404 else None
            conds = {c.type: c for c in p.status.conditions or []}
            c = conds.get("DisruptionTarget")
            return c if p.metadata.deletion_timestamp and c else None

        first = wait_for("e1 evicted", lambda: marked("e1"), 10)
        assert time.monotonic() - tainted_at < 1.5
        if first != "gone":
            assert (first.reason, first.status) == ("DeletionByTaintManager", "True")
        assert marked("e2") is None
        wait_for("e2 evicted after its 2 s", lambda: marked("e2"), 10)
        assert time.monotonic() - tainted_at >= 2
        time.sleep(0.5)
        assert marked("e3") is None
        assert core.read_namespaced_pod("e3", NS).metadata.deletion_timestamp is None


def test_cordoned_nodes(api: Any, kubelet: Any) -> None:
    core = core_v1(api)
    for n in ("n1", "n2", "n3"):
        core.patch_node(n, {"spec": {"unschedulable": True}})
    tol = [
        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}
    ]
    with pods_cleanup(core, "c1", "c2"):
        core.create_namespaced_pod(NS, simple_pod("c1"))
        msg = unschedulable(core, "c1")
        assert "3 node(s) were unschedulable" in msg
        core.create_namespaced_pod(NS, simple_pod("c2", tolerations=tol))
        bound_node(core, "c2")


def test_node_affinity_match_fields_and_gt(api: Any, kubelet: Any) -> None:
    core = core_v1(api)
    core.patch_node("n1", {"metadata": {"labels": {"gen": "3"}}})
    core.patch_node("n3", {"metadata": {"labels": {"gen": "5"}}})

    def affinity(term: dict[str, Any]) -> dict[str, Any]:
        return {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
            }
        }

    fields = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
    gt = {"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["4"]}]}
    lt = {"matchExpressions": [{"key": "gen", "operator": "Lt", "values": ["3"]}]}
    with pods_cleanup(core, "a1", "a2", "a3", "a4"):
        core.create_namespaced_pod(NS, simple_pod("a1", affinity=affinity(fields)))
        assert bound_node(core, "a1") == "n1"
        core.create_namespaced_pod(NS, simple_pod("a2", affinity=affinity(gt)))
        assert bound_node(core, "a2") == "n3"
        core.create_namespaced_pod(NS, simple_pod("a3", affinity=affinity(lt)))
        assert "didn't match Pod's node affinity/selector" in unschedulable(core, "a3")
        core.create_namespaced_pod(NS, simple_pod("a4", nodeSelector={"gen": "3"}))
        assert bound_node(core, "a4") == "n1"


# ===== Restart policy ======================================================================
def test_readiness_gate_condition_types_are_qualified_names(api: Any) -> None:
    core = core_v1(api)
    for bad in ("Bad Gate", "example.com/", "-x", "UPPER.example.com/ok", "x" * 64):
        body = simple_pod("gated", readinessGates=[{"conditionType": bad}])
        code, status = refused(lambda b=body: core.create_namespaced_pod(NS, b))
        assert code == 422, bad
        fields = [c["field"] for c in status["details"]["causes"]]
        assert "spec.readinessGates[0].conditionType" in fields, (bad, status)
    for good in ("example.com/ready", "Ready2", "a.b_c-d"):
        body = simple_pod("gated", readinessGates=[{"conditionType": good}])
        core.create_namespaced_pod(NS, body, dry_run="All")


def ready_condition(core: Any, name: str) -> Any:
    conds = core.read_namespaced_pod(name, NS).status.conditions or []
    return next((c for c in conds if c.type == "Ready"), None)


def test_a_pod_is_ready_only_once_each_readiness_gate_is_true(api: Any, kubelet: Any) -> None:
    core = core_v1(api)
    gates = [{"conditionType": "example.com/one"}, {"conditionType": "example.com/two"}]
    with pods_cleanup(core, "g1"):
        core.create_namespaced_pod(NS, simple_pod("g1", readinessGates=gates))
        wait_for("g1 running", lambda: core.read_namespaced_pod("g1", NS).status.phase == "Running")
        ready = wait_for("g1's Ready condition", lambda: ready_condition(core, "g1"))
        assert (ready.status, ready.reason) == ("False", "ReadinessGatesNotReady")
        assert ready.message == (
            'corresponding condition of pod readiness gate "example.com/one" does not exist., '
            'corresponding condition of pod readiness gate "example.com/two" does not exist.'
        )

        def set_gate(kind: str, value: str) -> None:
            patch = {"status": {"conditions": [{"type": kind, "status": value}]}}
            # a strategic merge patch: the list merges by type, the kubelet's stay
            core.patch_namespaced_pod_status("g1", NS, patch, _content_type=(
                "application/strategic-merge-patch+json"))  # fmt: skip

        set_gate("example.com/one", "True")
        set_gate("example.com/two", "False")
        wait_for("the kubelet to see the gates", lambda: "two" in (
            ready_condition(core, "g1").message or ""))  # fmt: skip
        ready = ready_condition(core, "g1")
        assert (ready.status, ready.message) == (
            "False",
            'the status of pod readiness gate "example.com/two" is not "True", but False',
        )
        set_gate("example.com/two", "True")
        wait_for("Ready", lambda: ready_condition(core, "g1").status == "True")
        types = {c.type for c in core.read_namespaced_pod("g1", NS).status.conditions}
        assert {"PodScheduled", "ContainersReady", "example.com/one", "example.com/two"} <= types


def container_status(core: Any, name: str) -> Any:
    statuses = core.read_namespaced_pod(name, NS).status.container_statuses or []
    return statuses[0] if statuses else None


def test_restart_policies(api: Any, kubelet: Any) -> None:
    core = core_v1(api)
    with pods_cleanup(core, "r1", "r2", "r3", "r4"):
        core.create_namespaced_pod(NS, simple_pod("r1", command=["true"], restart="OnFailure"))
        core.create_namespaced_pod(NS, simple_pod("r2", command=["false"], restart="OnFailure"))
        core.create_namespaced_pod(NS, simple_pod("r3", command=["false"], restart="Never"))
        core.create_namespaced_pod(NS, simple_pod("r4", command=["true"], restart="Always"))
        wait_for(
            "r1 Succeeded", lambda: core.read_namespaced_pod("r1", NS).status.phase == "Succeeded"
        )
        st = container_status(core, "r1")
        assert st.restart_count == 0
        assert st.state.terminated.exit_code == 0
        assert st.state.terminated.reason == "Completed"
        wait_for("r3 Failed", lambda: core.read_namespaced_pod("r3", NS).status.phase == "Failed")
        st = container_status(core, "r3")
        assert st.restart_count == 0
        assert st.state.terminated.exit_code == 1
        assert st.state.terminated.reason == "Error"
        for name in ("r2", "r4"):

            def restarted_twice(n: str = name) -> bool:
                s = container_status(core, n)
                return s is not None and s.restart_count >= 2

            wait_for(f"{name} restarted", restarted_twice)
            p = core.read_namespaced_pod(name, NS)
            assert p.status.phase == "Running"
            assert p.status.container_statuses[0].last_state.terminated is not None
        last = container_status(core, "r2").last_state.terminated
        assert last.exit_code == 1


# ===== Pod Security admission ==============================================================
def labelled_namespace(api: Any, name: str, labels: dict[str, str]) -> None:
    core_v1(api).create_namespace(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}
    )


def psa_refusal(api: Any, ns: str, body: dict[str, Any]) -> str:
    core = core_v1(api)
    code, status = refused(lambda: core.create_namespaced_pod(ns, body))
    assert code == 403
    assert status["reason"] == "Forbidden"
    assert status["details"]["kind"] == "pods"
    return str(status["message"])


def with_container_sc(name: str, sc: dict[str, Any], **spec: Any) -> dict[str, Any]:
    body = simple_pod(name, **spec)
    body["spec"]["containers"][0]["securityContext"] = sc
    return body


def test_baseline_refusals(api: Any) -> None:
    labelled_namespace(api, "base", {f"{PSA}/enforce": "baseline"})
    prefix = 'violates PodSecurity "baseline:latest": '
    msg = psa_refusal(api, "base", simple_pod("h1", hostNetwork=True))
    assert msg == f'pods "h1" is forbidden: {prefix}host namespaces (hostNetwork=true)'
    msg = psa_refusal(api, "base", simple_pod("h2", hostPID=True))
    assert msg == f'pods "h2" is forbidden: {prefix}host namespaces (hostPID=true)'
    msg = psa_refusal(api, "base", with_container_sc("h3", {"privileged": True}))
    assert msg == (
        f'pods "h3" is forbidden: {prefix}privileged '
        '(container "main" must not set securityContext.privileged=true)'
    )
    vol = simple_pod("h4", volumes=[{"name": "h", "hostPath": {"path": "/etc"}}])
    msg = psa_refusal(api, "base", vol)
    assert msg == f'pods "h4" is forbidden: {prefix}hostPath volumes (volume "h")'
    msg = psa_refusal(
        api, "base", with_container_sc("h5", {"capabilities": {"add": ["NET_ADMIN"]}})
    )
    assert msg == (
        f'pods "h5" is forbidden: {prefix}non-default capabilities '
        '(container "main" must not include "NET_ADMIN" in securityContext.capabilities.add)'
    )
    # Several violations, joined by ", ".
    both = with_container_sc("h6", {"privileged": True}, hostNetwork=True)
    msg = psa_refusal(api, "base", both)
    assert "host namespaces (hostNetwork=true)" in msg
    assert 'privileged (container "main"' in msg
    assert ", " in msg.removeprefix(f'pods "h6" is forbidden: {prefix}')


def test_baseline_allows_default_capabilities_and_root(api: Any) -> None:
    labelled_namespace(api, "base2", {f"{PSA}/enforce": "baseline"})
    core = core_v1(api)
    caps = {"capabilities": {"add": ["NET_BIND_SERVICE", "AUDIT_WRITE", "CHOWN"]}}
    core.create_namespaced_pod("base2", with_container_sc("ok1", caps))
    core.create_namespaced_pod("base2", simple_pod("ok2"))  # root, no securityContext


def test_version_label_in_message(api: Any) -> None:
    labelled_namespace(
        api, "basev", {f"{PSA}/enforce": "baseline", f"{PSA}/enforce-version": "v1.30"}
    )
    msg = psa_refusal(api, "basev", simple_pod("hv", hostIPC=True))
    assert (
        msg
        == 'pods "hv" is forbidden: violates PodSecurity "baseline:v1.30": host namespaces (hostIPC=true)'
    )


def restricted_ok(name: str) -> dict[str, Any]:
    return with_container_sc(
        name,
        {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        securityContext={"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
    )


def test_restricted(api: Any) -> None:
    labelled_namespace(api, "rest", {f"{PSA}/enforce": "restricted"})
    core = core_v1(api)
    core.create_namespaced_pod("rest", restricted_ok("ok"))
    nbs = restricted_ok("ok2")
    nbs["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] = ["NET_BIND_SERVICE"]
    core.create_namespaced_pod("rest", nbs)

    msg = psa_refusal(api, "rest", simple_pod("bare"))
    assert msg == (
        'pods "bare" is forbidden: violates PodSecurity "restricted:latest": '
        'allowPrivilegeEscalation != false (container "main" must set '
        "securityContext.allowPrivilegeEscalation=false), "
        'unrestricted capabilities (container "main" must set securityContext.capabilities.drop=["ALL"]), '
        'runAsNonRoot != true (pod or container "main" must set securityContext.runAsNonRoot=true), '
        'seccompProfile (pod or container "main" must set securityContext.seccompProfile.type '
        'to "RuntimeDefault" or "Localhost")'
    )
    for field_path, expect in [
        (("spec", "securityContext", "runAsNonRoot"), "runAsNonRoot != true"),
        (("spec", "securityContext", "seccompProfile"), "seccompProfile"),
        (
            ("spec", "containers", 0, "securityContext", "allowPrivilegeEscalation"),
            "allowPrivilegeEscalation != false",
        ),
        (
            ("spec", "containers", 0, "securityContext", "capabilities"),
            "unrestricted capabilities",
        ),
    ]:
        body = restricted_ok("one")
        parent: Any = body
        for key in field_path[:-1]:
            parent = parent[key]
        del parent[field_path[-1]]
        msg = psa_refusal(api, "rest", body)
        rest = msg.removeprefix(
            'pods "one" is forbidden: violates PodSecurity "restricted:latest": '
        )
        assert rest.startswith(expect), msg
        assert ", " not in rest.replace('", "', ""), msg  # exactly one violation
    ptrace = restricted_ok("pt")
    ptrace["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] = ["SYS_PTRACE"]
    msg = psa_refusal(api, "rest", ptrace)
    # capabilities_restricted overrides capabilities_baseline: one reason, not two.
    assert msg == (
        'pods "pt" is forbidden: violates PodSecurity "restricted:latest": '
        'unrestricted capabilities (container "main" must not include "SYS_PTRACE" in '
        "securityContext.capabilities.add)"
    )
    # runAsUser 0 is refused even with runAsNonRoot.
    root = restricted_ok("r0")
    root["spec"]["securityContext"]["runAsUser"] = 0
    assert "runAsUser=0" in psa_refusal(api, "rest", root)


def test_restricted_volume_types_replace_the_host_path_check(api: Any) -> None:
    """restrictedVolumes overrides baseline's hostPathVolumes: one reason, not two."""
    labelled_namespace(api, "restv", {f"{PSA}/enforce": "restricted"})
    body = restricted_ok("v")
    body["spec"]["volumes"] = [{"name": "h", "hostPath": {"path": "/etc"}}]
    assert psa_refusal(api, "restv", body) == (
        'pods "v" is forbidden: violates PodSecurity "restricted:latest": restricted volume '
        'types (volume "h" uses restricted volume type "hostPath")'
    )


def test_warn_and_audit_do_not_refuse(api: Any) -> None:
    labelled_namespace(api, "soft", {f"{PSA}/warn": "restricted", f"{PSA}/audit": "restricted"})
    core = core_v1(api)
    core.create_namespaced_pod("soft", simple_pod("p", hostNetwork=True))
    labelled_namespace(api, "priv", {f"{PSA}/enforce": "privileged"})
    core.create_namespaced_pod("priv", with_container_sc("p", {"privileged": True}))


def test_invalid_pod_security_labels(emu: Any, api: Any) -> None:
    """admission.go ValidateNamespace refuses invalid labels (422); a namespace that has them
    from before is evaluated as restricted:latest (api/helpers.go PolicyToEvaluate)."""
    core = core_v1(api)
    code, status = refused(lambda: labelled_namespace(api, "bogus", {f"{PSA}/enforce": "strict"}))
    assert code == 422
    assert status["details"]["causes"][0]["field"] == f"metadata.labels[{PSA}/enforce]"
    code, _ = refused(
        lambda: labelled_namespace(
            api, "bogus2", {f"{PSA}/enforce": "baseline", f"{PSA}/enforce-version": "1.30"}
        )
    )
    assert code == 422
    labelled_namespace(api, "later", {})
    code, _ = refused(
        lambda: core.patch_namespace("later", {"metadata": {"labels": {f"{PSA}/warn": "x"}}})
    )
    assert code == 422
    emu.seed(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": "old", "labels": {f"{PSA}/enforce": "strict"}},
            "status": {"phase": "Active"},
        }
    )
    msg = psa_refusal(api, "old", simple_pod("x"))
    assert msg.startswith('pods "x" is forbidden: violates PodSecurity "restricted:latest": ')


def test_job_pods_refused_by_pod_security_but_job_admitted(api: Any, kubelet: Any) -> None:
    """Pod Security refuses pods, not workloads: the Job is created (with a warning) and the
    controller's pods are refused, so none appears."""
    labelled_namespace(api, "strictns", {f"{PSA}/enforce": "baseline"})
    body = sleeper_job("hostnet")
    body["spec"]["template"]["spec"]["hostNetwork"] = True
    batch_v1(api).create_namespaced_job("strictns", body)
    wait_for("a refused pod creation", lambda: kubelet.refused_pods)
    assert "host namespaces (hostNetwork=true)" in kubelet.refused_pods[0]
    assert core_v1(api).list_namespaced_pod("strictns").items == []


# ===== What the kubelet grants a container =================================================
def proc_status(api: Any, name: str) -> dict[str, str]:
    core = core_v1(api)
    wait_for(
        f"{name} running", lambda: core.read_namespaced_pod(name, NS).status.phase == "Running"
    )
    out = stream(
        core.connect_get_namespaced_pod_exec,
        name,
        NS,
        command=["cat", "/proc/1/status"],
        stderr=True,
        stdin=False,
        stdout=True,
        tty=False,
    )
    fields: dict[str, str] = {}
    for line in str(out).splitlines():
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return fields


def proc_self() -> dict[str, str]:
    with open("/proc/self/status", encoding="ascii") as f:
        return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in f)}


# The container runtimes' default capability set (containerd/CRI-O, as the kubelet uses them):
# CHOWN DAC_OVERRIDE FSETID FOWNER MKNOD NET_RAW SETGID SETUID SETFCAP SETPCAP
# NET_BIND_SERVICE SYS_CHROOT KILL AUDIT_WRITE.
DEFAULT_CAPS = 0x00000000A80425FB


def test_kubelet_grants_exactly_the_security_context(api: Any, kubelet: Any) -> None:
    core = core_v1(api)
    with pods_cleanup(core, "k1", "k2", "k3", "k4"):
        core.create_namespaced_pod(NS, simple_pod("k1"))
        nonroot = with_container_sc(
            "k2",
            {
                "runAsUser": 1000,
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
                "seccompProfile": {"type": "RuntimeDefault"},
            },
        )
        core.create_namespaced_pod(NS, nonroot)
        root_one_cap = with_container_sc(
            "k3", {"capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}
        )
        core.create_namespaced_pod(NS, root_one_cap)
        core.create_namespaced_pod(NS, with_container_sc("k4", {"privileged": True}))

        k1 = proc_status(api, "k1")
        assert k1["Uid"].split()[0] == "0"
        assert int(k1["CapEff"], 16) == DEFAULT_CAPS
        assert int(k1["CapBnd"], 16) == DEFAULT_CAPS
        assert k1["NoNewPrivs"] == "0"
        assert k1["Seccomp"] == "0"  # Unconfined: the kubelet's default without SeccompDefault

        k2 = proc_status(api, "k2")
        assert k2["Uid"].split() == ["1000"] * 4
        # A non-root process holds no effective capability; the bounding set is the grant.
        assert int(k2["CapEff"], 16) == 0
        assert int(k2["CapBnd"], 16) == 1 << 10
        assert k2["NoNewPrivs"] == "1"
        assert k2["Seccomp"] == "2"

        k4 = proc_status(api, "k4")
        # privileged: every capability the kernel has (the test runs as root with all).
        everything = int(proc_self()["CapBnd"], 16)
        assert int(k4["CapEff"], 16) == everything
        assert int(k4["CapBnd"], 16) == everything
        assert k4["Seccomp"] == "0"

        k3 = proc_status(api, "k3")
        assert int(k3["CapEff"], 16) == 1 << 10
        assert int(k3["CapBnd"], 16) == 1 << 10
        assert k3["NoNewPrivs"] == "0"


# ===== Leases ==============================================================================
def test_node_heartbeat_leases(api: Any, kubelet: Any) -> None:
    coord = coordination_v1(api)
    lease = wait_for(
        "n1's lease",
        lambda: next(
            (
                item
                for item in coord.list_namespaced_lease("kube-node-lease").items
                if item.metadata.name == "n1"
            ),
            None,
        ),
    )
    assert lease.spec.holder_identity == "n1"
    assert lease.spec.lease_duration_seconds > 0
    owner = lease.metadata.owner_references[0]
    assert (owner.kind, owner.name, owner.api_version) == ("Node", "n1", "v1")
    first = lease.spec.renew_time
    wait_for(
        "a renewal",
        lambda: coord.read_namespaced_lease("n1", "kube-node-lease").spec.renew_time > first,
    )


def test_lease_validation(api: Any) -> None:
    coord = coordination_v1(api)

    def lease(name: str, **spec: Any) -> dict[str, Any]:
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name},
            "spec": {"holderIdentity": "me", **spec},
        }

    got = coord.create_namespaced_lease(
        NS, lease("ok", leaseDurationSeconds=15, renewTime="2026-01-01T00:00:00.123456Z")
    )
    assert got.spec.renew_time.microsecond == 123456
    code, status = refused(
        lambda: coord.create_namespaced_lease(NS, lease("zero", leaseDurationSeconds=0))
    )
    assert code == 422
    assert [c["field"] for c in status["details"]["causes"]] == ["spec.leaseDurationSeconds"]
    code, status = refused(
        lambda: coord.create_namespaced_lease(NS, lease("neg", leaseTransitions=-1))
    )
    assert code == 422
    assert [c["field"] for c in status["details"]["causes"]] == ["spec.leaseTransitions"]
