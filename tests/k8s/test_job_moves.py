"""Moving Jobs the way a real API server accepts, and Kueue-admitted Jobs through Kueue.

Against the emulator (which refuses a template change on a started Job, as kube-apiserver
does) and the fake kubelet (real processes under the wrapper, real CRIU): migrate and
resume ``--to`` of a wrapped Job suspend it, wait for its pod to end, clear ``startTime``
through ``jobs/status``, then set the node affinity and unsuspend; the dry-run preview of
such a plan on a running Job does not send the patches the server would refuse now. A Job
admitted by Kueue is preempted and resumed through its Workload's ``spec.active``, never by
writing the Job's ``spec.suspend``, and a move Kueue cannot make is refused at plan time.
"""

# The svc fixture comes from test_actions; tests name it as a parameter.
# ruff: noqa: F811

from __future__ import annotations

import json
from typing import Any

import pytest

from core import errors
from core.model import Action
from core.service.facade import Service
from tests.k8s.conftest import node, wrapped_job
from tests.k8s.emulator import crds
from tests.k8s.test_actions import (  # noqa: F401 - fixtures
    PERSON,
    act,
    assert_intact,
    pods,
    running,
    step_of,
    svc,
    wait_for,
)

JOB_SEL = "batch.kubernetes.io/job-name"


def job_pods(emu: Any, job: str) -> list[dict[str, Any]]:
    return [
        p for p in pods(emu).values() if (p["metadata"].get("labels") or {}).get(JOB_SEL) == job
    ]


def running_on(emu: Any, job: str) -> str | None:
    live = [p for p in job_pods(emu, job) if running(emu, p["metadata"]["name"])]
    return live[0]["spec"].get("nodeName") if live else None


def writes(emu: Any, since: int) -> list[Any]:
    return [r for r in emu.requests[since:] if r.method in ("POST", "PATCH", "PUT", "DELETE")]


def test_migrate_wrapped_job_to_another_node_keeps_its_state(
    need_criu: None, emu: Any, kubelet: Any, svc: Service
) -> None:
    manifest = wrapped_job("train", "train-job")
    manifest["spec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "n1"}
    emu.seed(manifest)
    wait_for("the job's pod on n1", lambda: running_on(emu, "train") == "n1")
    before = wait_for("progress", lambda: (s := step_of(kubelet, "train-job")) > 20 and s)

    result = act(svc, Action.MIGRATE, "k8s:Job/default/train", to="k8s:n3")

    steps = {s.name: s for s in result.execution.steps}
    assert list(steps) == [
        "checkpoint",
        "suspend",
        "wait_stopped",
        "clear_start_time",
        "place",
        "unsuspend",
        "wait_restored",
    ]
    assert steps["wait_restored"].output["node"] == "n3"
    assert running_on(emu, "train") == "n3"
    job = emu.store.get(emu.store.kinds[("batch", "jobs")], "default", "train")
    tpl = job["spec"]["template"]["spec"]
    assert "nodeSelector" not in tpl, "the hostname pin to n1 would contradict the move"
    assert not job["spec"]["suspend"]
    # the startTime was cleared through the status subresource, not the Job itself
    status_writes = [r for r in emu.requests if r.path.endswith("/jobs/train/status")]
    assert status_writes and status_writes[0].body == {"status": {"startTime": None}}
    assert status_writes[0].content_type == "application/merge-patch+json"
    wait_for("progress on n3", lambda: step_of(kubelet, "train-job") > before + 10)
    assert_intact(kubelet)


def test_dry_run_preview_of_a_job_migrate_passes_while_the_job_runs(
    need_criu: None, emu: Any, kubelet: Any, svc: Service
) -> None:
    emu.seed(wrapped_job("train", "train-job"))
    wait_for("the job's pod", lambda: running_on(emu, "train"))
    source = running_on(emu, "train")
    target = next(n for n in ("n1", "n3") if n != source)
    since = len(emu.requests)

    preview = svc.act(
        Action.MIGRATE,
        "k8s:Job/default/train",
        {"to": f"k8s:{target}"},
        principal=PERSON,
        confirmed=True,
        dry_run=True,
    )

    assert preview.status == "planned" and preview.plan, preview.message
    shown = {e["step"]: e for e in preview.plan.scope.dry_run}
    assert shown["suspend"]["object"]["spec"]["suspend"] is True
    for later in ("clear_start_time", "place"):
        assert "object" not in shown[later] and "when reached" in shown[later]["deferred"]
    sent = writes(emu, since)
    assert sent and all(r.query.get("dryRun") == "All" for r in sent)
    assert not [r for r in sent if r.path.endswith("/status")], "no status write in a preview"
    assert not [r for r in sent if "template" in json.dumps(r.body)], (
        "a template patch the server refuses while the Job runs"
    )
    described = {s.name: s.description for s in preview.plan.steps}
    assert "validated when reached" in described["place"]
    assert running_on(emu, "train") == source


def test_resume_to_another_node_of_a_preempted_job(
    need_criu: None, emu: Any, kubelet: Any, svc: Service
) -> None:
    manifest = wrapped_job("train", "train-job")
    manifest["spec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "n1"}
    emu.seed(manifest)
    wait_for("the job's pod on n1", lambda: running_on(emu, "train") == "n1")
    wait_for("progress", lambda: step_of(kubelet, "train-job") > 20)
    act(svc, Action.PREEMPT, "k8s:Job/default/train")
    saved = step_of(kubelet, "train-job")

    preview = svc.act(
        Action.RESUME,
        "k8s:Job/default/train",
        {"to": "k8s:n3"},
        principal=PERSON,
        confirmed=True,
        dry_run=True,
    )
    assert preview.status == "planned", preview.message
    result = act(svc, Action.RESUME, "k8s:Job/default/train", to="k8s:n3")

    assert [s.name for s in result.execution.steps] == [
        "clear_start_time",
        "place",
        "resume",
        "wait_restored",
    ]
    assert result.execution.steps[-1].output["node"] == "n3"
    wait_for("progress on n3", lambda: step_of(kubelet, "train-job") > saved + 10)
    assert_intact(kubelet)


def test_resume_to_of_a_running_job_is_refused(emu: Any, svc: Service) -> None:
    emu.seed(node("n3"), wrapped_job("train", "train-job"))
    with pytest.raises(errors.Conflict, match="migrate"):
        svc.plan(Action.RESUME, "k8s:Job/default/train", {"to": "k8s:n3"})


# ----- Kueue ------------------------------------------------------------------------------
def kueue_job(emu: Any) -> tuple[dict[str, Any], Any]:
    """A Job admitted by Kueue (queue-name label) and the Workload Kueue made for it."""
    emu.seed(*crds.all_operators(), node("n3"))
    manifest = wrapped_job("train", "train-job")
    manifest["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "lq-gpu"
    # not wrapped here (no pod runs in these tests, so no restore to wait for)
    manifest["metadata"].pop("annotations")
    manifest["spec"]["template"]["metadata"].pop("annotations")
    manifest["status"] = {"startTime": "2026-12-01T10:00:00Z", "active": 0}
    (job,) = emu.seed(manifest)
    workload = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {
            "name": "job-train-3f9a1",
            "namespace": "default",
            "labels": {"kueue.x-k8s.io/job-uid": job["metadata"]["uid"]},
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": "train",
                    "uid": job["metadata"]["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": {"queueName": "lq-gpu", "active": True, "podSets": []},
        "status": {"conditions": [{"type": "Admitted", "status": "True", "reason": "Admitted"}]},
    }
    emu.seed(workload)
    wl_kind = next(k for k in emu.store.kinds.values() if k.kind == "Workload")
    return job, wl_kind


def test_kueue_job_is_preempted_and_resumed_through_its_workload(emu: Any, svc: Service) -> None:
    _job, wl_kind = kueue_job(emu)
    since = len(emu.requests)

    preview = svc.act(Action.PREEMPT, "k8s:Job/default/train", {}, principal=PERSON, dry_run=True)
    assert preview.plan is not None
    (entry,) = preview.plan.scope.dry_run
    assert entry["object"]["kind"] == "Workload" and entry["object"]["spec"]["active"] is False
    act(svc, Action.PREEMPT, "k8s:Job/default/train")
    assert emu.store.get(wl_kind, "default", "job-train-3f9a1")["spec"]["active"] is False
    act(svc, Action.RESUME, "k8s:Job/default/train")
    assert emu.store.get(wl_kind, "default", "job-train-3f9a1")["spec"]["active"] is True

    sent = writes(emu, since)
    to_workload = [r for r in sent if r.path.endswith("/workloads/job-train-3f9a1")]
    real = [r.body for r in to_workload if not r.query.get("dryRun")]
    assert real == [{"spec": {"active": False}}, {"spec": {"active": True}}]
    assert all(r.method == "PATCH" for r in to_workload)
    assert not [r for r in sent if "/jobs/" in r.path], "Kueue owns the Job's spec.suspend"
    jobs = emu.store.kinds[("batch", "jobs")]
    assert emu.store.get(jobs, "default", "train")["spec"]["suspend"] is False


def test_kueue_job_moves_kueue_cannot_make_are_refused_by_name(emu: Any, svc: Service) -> None:
    kueue_job(emu)
    with pytest.raises(errors.NotSupported, match="Kueue") as info:
        svc.plan(Action.RESUME, "k8s:Job/default/train", {"to": "k8s:n3"})
    assert "default/train" in info.value.message and "job-train-3f9a1" in info.value.message
    assert info.value.hint


def test_kueue_job_without_its_workload_is_refused(emu: Any, svc: Service) -> None:
    emu.seed(*crds.all_operators())
    manifest = wrapped_job("train", "train-job")
    manifest["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "lq-gpu"
    emu.seed(manifest)
    with pytest.raises(errors.Conflict, match="Workload"):
        svc.plan(Action.PREEMPT, "k8s:Job/default/train", {})


def test_drain_moves_a_kueue_jobs_pod_through_its_workload(emu: Any, svc: Service) -> None:
    job, _wl_kind = kueue_job(emu)
    worker = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "train-x1y2z",
            "namespace": "default",
            "labels": {JOB_SEL: "train"},
            "annotations": {"clawpoint.io/lineage": "train-job"},
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": "train",
                 "uid": job["metadata"]["uid"], "controller": True}
            ],
        },
        "spec": {"nodeName": "n1", "containers": [{"name": "main", "image": "x"}]},
        "status": {"phase": "Running"},
    }  # fmt: skip
    emu.seed(node("n1"), worker)
    since = len(emu.requests)

    plan = svc.plan(Action.DRAIN_NODE, "k8s:n1", {})

    names = [s.name for s in plan.steps]
    prefix = "default-train-x1y2z-"
    assert names == ["cordon"] + [
        prefix + n
        for n in ("checkpoint", "deactivate", "wait_stopped", "reactivate", "wait_restored")
    ] + ["check_drained"]
    assert not [r for r in writes(emu, since) if "/jobs/" in r.path]
    with pytest.raises(errors.NotSupported, match="Kueue"):
        svc.plan(Action.DRAIN_NODE, "k8s:n1", {"to": "k8s:n3"})


def test_a_cleared_start_time_is_recovered_from_the_cluster(emu: Any, svc: Service) -> None:
    manifest = wrapped_job("train", "train-job")
    manifest["spec"]["suspend"] = True
    manifest["status"] = {"startTime": "2026-12-01T10:00:00Z"}
    emu.seed(manifest)
    backend = svc.backends["k8s"]
    args = {"kind": "Job", "namespace": "default", "name": "train",
            "patch": {"status": {"startTime": None}}, "subresource": "status"}  # fmt: skip
    assert backend.recover_step("patch", args, None) is None  # type: ignore[arg-type]
    jobs_kind = emu.store.kinds[("batch", "jobs")]
    emu.store.set_status(jobs_kind, "default", "train", {})
    assert backend.recover_step("patch", args, None) == {  # type: ignore[arg-type]
        "name": "train",
        "already_applied": True,
    }


def test_the_deployed_rbac_lets_a_job_be_moved(emu: Any, api: Any) -> None:
    """jobs/status (patch) is in deploy/kubernetes/rbac.yaml: the preview of resume --to on a
    suspended, started Job sends the startTime clear with dryRun=All under exactly those rules."""
    from core.backends.kubernetes.backend import KubernetesBackend
    from core.backends.kubernetes.config import KubernetesConfig
    from tests.k8s.test_deploy import NS, rules_from_manifests

    emu.namespace(NS)
    manifest = wrapped_job("train", "train-job", NS)
    manifest["spec"]["suspend"] = True
    manifest["status"] = {"startTime": "2026-12-01T10:00:00Z"}
    emu.seed(node("n2"), manifest)
    emu.rules = rules_from_manifests()
    backend = KubernetesBackend(KubernetesConfig(namespaces=[NS], retry_total_s=1), api_client=api)
    plan = backend.plan(Action.RESUME, f"Job/{NS}/train", {"to": "n2"})
    shown = {e["step"]: e for e in plan.scope.dry_run}
    assert "startTime" not in shown["clear_start_time"]["object"]["status"]
    assert shown["place"]["deferred"]
