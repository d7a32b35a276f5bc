"""The emulator's Job update rules and the fake Job controller's ``startTime``, pinned.

Each rule follows kube-apiserver or the Job controller (sources cited in
``tests/k8s/emulator/jobrules.py`` and ``tests/k8s/kubelet.py``): the template's scheduling
directives change only while the stored Job is suspended and has never started; a dry run is
judged the same way; ``jobs/status`` clears ``startTime`` only while suspended; the
subresource is its own RBAC resource; the controller keeps ``startTime`` on suspend.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.k8s.emulator.rbac import Rule

AFFINITY = {
    "spec": {
        "template": {
            "spec": {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {
                                            "key": "kubernetes.io/hostname",
                                            "operator": "In",
                                            "values": ["n3"],
                                        }
                                    ]
                                }
                            ]
                        }
                    }
                }
            }
        }
    }
}


def job(name: str, *, suspend: bool = False, started: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "suspend": suspend,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "restartPolicy": "Never",
                    # A container's PID 1 ignores a SIGTERM it has no handler for (the
                    # kernel shields a PID namespace's init): trap it, so a suspend ends it.
                    "containers": [
                        {
                            "name": "c",
                            "image": "busybox",
                            "command": ["sh", "-c", "trap 'exit 0' TERM; sleep 600 & wait"],
                        }
                    ],
                },
            },
        },
        "status": {"startTime": "2026-12-01T10:00:00Z", "active": 1} if started else {},
    }
    return body


def stored(emu: Any, name: str) -> dict[str, Any]:
    result: dict[str, Any] = emu.store.get(emu.store.kinds[("batch", "jobs")], "default", name)
    return result


def refused(call: Any) -> str:
    with pytest.raises(ApiException) as info:
        call()
    assert info.value.status == 422, info.value.body
    return str(info.value.body)


def test_template_affinity_is_refused_on_a_started_job_also_in_a_dry_run(
    emu: Any, api: Any
) -> None:
    emu.seed(job("train"))
    batch = client.BatchV1Api(api)
    body = refused(lambda: batch.patch_namespaced_job("train", "default", AFFINITY))
    assert "spec.template: Invalid value: " in body and "field is immutable" in body
    assert 'Job.batch \\"train\\" is invalid' in body or 'Job.batch "train" is invalid' in body
    refused(lambda: batch.patch_namespaced_job("train", "default", AFFINITY, dry_run="All"))
    # suspending in the same write does not help: the rule reads the Job as stored
    both = {"spec": {"suspend": True, **AFFINITY["spec"]}}
    refused(lambda: batch.patch_namespaced_job("train", "default", both))
    batch.patch_namespaced_job("train", "default", {"spec": {"suspend": True}})
    # suspended, but it ran: startTime is still set, so still refused
    refused(lambda: batch.patch_namespaced_job("train", "default", AFFINITY, dry_run="All"))
    assert "affinity" not in stored(emu, "train")["spec"]["template"]["spec"]


def test_affinity_is_accepted_once_suspended_and_start_time_cleared_through_status(
    emu: Any, api: Any
) -> None:
    emu.seed(job("train"))
    batch = client.BatchV1Api(api)
    clear = {"status": {"startTime": None}}
    # not while it runs: the server refuses to drop startTime of an unsuspended Job
    body = refused(lambda: batch.patch_namespaced_job_status("train", "default", clear))
    assert "status.startTime: Required value" in body
    batch.patch_namespaced_job("train", "default", {"spec": {"suspend": True}})
    batch.patch_namespaced_job_status("train", "default", clear)
    assert "startTime" not in stored(emu, "train")["status"]
    preview = api.sanitize_for_serialization(
        batch.patch_namespaced_job("train", "default", AFFINITY, dry_run="All")
    )
    assert preview["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    assert "affinity" not in stored(emu, "train")["spec"]["template"]["spec"], "dry run stored"
    batch.patch_namespaced_job("train", "default", AFFINITY)
    got = stored(emu, "train")["spec"]["template"]["spec"]
    assert got["affinity"]["nodeAffinity"]
    # only the scheduling directives: the image stays immutable even now
    image = {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "alpine"}]}}}}
    refused(lambda: batch.patch_namespaced_job("train", "default", image))
    # and the same write that unsuspends may still carry directives (the stored Job is
    # suspended and unstarted)
    resume = {"spec": {"suspend": False, "template": {"spec": {"nodeSelector": {"disk": "ssd"}}}}}
    batch.patch_namespaced_job("train", "default", resume)
    assert stored(emu, "train")["spec"]["template"]["spec"]["nodeSelector"] == {"disk": "ssd"}


def test_job_status_subresource_reads_and_writes_only_its_half(emu: Any, api: Any) -> None:
    emu.seed(job("train", suspend=True))
    batch = client.BatchV1Api(api)
    read = api.sanitize_for_serialization(batch.read_namespaced_job_status("train", "default"))
    assert read["status"]["active"] == 1
    # a status write ignores spec; a main write ignores status
    batch.patch_namespaced_job_status(
        "train", "default", {"spec": {"parallelism": 5}, "status": {"active": 0}}
    )
    got = stored(emu, "train")
    assert got["spec"]["parallelism"] == 1 and got["status"]["active"] == 0
    batch.patch_namespaced_job("train", "default", {"status": {"active": 7}})
    assert stored(emu, "train")["status"]["active"] == 0
    whole = api.sanitize_for_serialization(batch.read_namespaced_job_status("train", "default"))
    del whole["status"]["startTime"]
    batch.replace_namespaced_job_status("train", "default", whole)
    assert "startTime" not in stored(emu, "train")["status"]


def test_jobs_status_is_its_own_rbac_resource(emu: Any, api: Any) -> None:
    emu.seed(job("train", suspend=True))
    batch = client.BatchV1Api(api)
    emu.rules = [Rule(verbs=("get", "patch"), resources=("jobs",), api_groups=("batch",))]
    with pytest.raises(ApiException) as info:
        batch.patch_namespaced_job_status("train", "default", {"status": {"startTime": None}})
    assert info.value.status == 403 and "jobs/status" in str(info.value.body)
    emu.rules.append(Rule(verbs=("patch",), resources=("jobs/status",), api_groups=("batch",)))
    batch.patch_namespaced_job_status("train", "default", {"status": {"startTime": None}})
    assert "startTime" not in stored(emu, "train")["status"]


def test_fake_job_controller_keeps_start_time_on_suspend_and_resets_it_on_resume(
    emu: Any, kubelet: Any
) -> None:
    emu.seed(job("train", started=False))
    kind = emu.store.kinds[("batch", "jobs")]

    def wait(what: str, check: Any) -> Any:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            got = check()
            if got:
                return got
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}")

    first = wait("startTime", lambda: stored(emu, "train")["status"].get("startTime"))
    current = stored(emu, "train")
    current["spec"]["suspend"] = True
    emu.store.update(kind, "default", "train", current)
    wait("the pod gone", lambda: not stored(emu, "train")["status"].get("active"))
    time.sleep(0.3)  # a few controller passes
    assert stored(emu, "train")["status"].get("startTime") == first, "cleared on suspend"
    time.sleep(1.1)  # startTime has a one-second resolution
    current = stored(emu, "train")
    current["spec"]["suspend"] = False
    emu.store.update(kind, "default", "train", current)
    wait(
        "a new startTime on resume",
        lambda: stored(emu, "train")["status"].get("startTime") not in (None, first),
    )
