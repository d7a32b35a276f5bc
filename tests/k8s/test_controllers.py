"""The fake Job and StatefulSet controllers follow the upstream rules (tests/k8s/controllers.py
cites them): Indexed Jobs get one pod per index with its annotation, label, env var and
hostname, parallelism caps the pods at once, the work-queue mode completes on the first
success, a failed pod is replaced within backoffLimit, StatefulSets create ordinals in order.

Most tests drive one sync at a time on the emulator's store (no processes); one runs an
Indexed Job's pods as real processes to see what a container gets."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.k8s import controllers
from tests.k8s.emulator import Emulator, status

Obj = dict[str, Any]


def job(name: str, **spec: Any) -> Obj:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            **spec,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox", "env": []}],
                },
            },
        },
    }


def job_pods(emu: Emulator, name: str) -> list[Obj]:
    pods, _ = emu.store.list(
        emu.store.kinds[("", "pods")],
        "default",
        lambda p: (p["metadata"].get("labels") or {}).get("batch.kubernetes.io/job-name") == name,
    )
    return sorted(pods, key=lambda p: p["metadata"]["name"])


def sync(emu: Emulator, name: str) -> tuple[Obj, list[Obj]]:
    """One controller sync; the status is written back as the fake kubelet does."""
    jobs_kind = emu.store.kinds[("batch", "jobs")]
    current = emu.store.get(jobs_kind, "default", name)
    st = dict(current.get("status") or {})
    counts, conds = controllers.sync_job(emu.store, current, job_pods(emu, name), st)
    emu.store.set_status(jobs_kind, "default", name, {**st, **counts})
    return counts, conds


def finish(emu: Emulator, pod: Obj, phase: str) -> None:
    emu.set_status(pod, {"phase": phase})


def index_of(pod: Obj) -> str:
    return str(pod["metadata"]["annotations"][controllers.JOB_INDEX_KEY])


def test_indexed_job_gets_one_pod_per_index_with_its_identity(emu: Emulator) -> None:
    emu.seed(job("idx", completionMode="Indexed", completions=3, parallelism=2))
    counts, _ = sync(emu, "idx")
    pods = job_pods(emu, "idx")
    assert counts["active"] == 2 and len(pods) == 2  # parallelism caps the pods at once
    assert sorted(index_of(p) for p in pods) == ["0", "1"]  # the lowest pending indexes
    for p in pods:
        ix = index_of(p)
        assert p["metadata"]["labels"][controllers.JOB_INDEX_KEY] == ix
        assert p["metadata"]["name"].startswith(f"idx-{ix}-")
        assert len(p["metadata"]["name"]) == len(f"idx-{ix}-") + 5
        assert p["spec"]["hostname"] == f"idx-{ix}"
        env = p["spec"]["containers"][0]["env"]
        assert {
            "name": "JOB_COMPLETION_INDEX",
            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{controllers.JOB_INDEX_KEY}']"}},
        } in env  # fmt: skip
    # a second sync adds nothing while both run
    sync(emu, "idx")
    assert len(job_pods(emu, "idx")) == 2
    # index 1 succeeds: index 2 starts; completedIndexes lists 1
    finish(emu, next(p for p in pods if index_of(p) == "1"), "Succeeded")
    counts, _ = sync(emu, "idx")
    assert counts["completedIndexes"] == "1" and counts["succeeded"] == 1
    assert sorted(index_of(p) for p in job_pods(emu, "idx")) == ["0", "1", "2"]
    for p in job_pods(emu, "idx"):
        if index_of(p) != "1":
            finish(emu, p, "Succeeded")
    counts, conds = sync(emu, "idx")
    assert counts["completedIndexes"] == "0-2" and counts["succeeded"] == 3
    assert [c["type"] for c in conds] == ["SuccessCriteriaMet", "Complete"]


def test_a_failed_indexed_pod_is_replaced_with_the_same_index_until_the_backoff_limit(
    emu: Emulator,
) -> None:
    emu.seed(job("bk", completionMode="Indexed", completions=2, parallelism=2, backoffLimit=1))
    sync(emu, "bk")
    first = next(p for p in job_pods(emu, "bk") if index_of(p) == "1")
    finish(emu, first, "Failed")
    counts, conds = sync(emu, "bk")
    assert counts["failed"] == 1 and not conds
    again = [p for p in job_pods(emu, "bk") if index_of(p) == "1"]
    assert len(again) == 2  # the failed one and its replacement, same index
    replacement = next(p for p in again if p["metadata"]["name"] != first["metadata"]["name"])
    finish(emu, replacement, "Failed")
    counts, conds = sync(emu, "bk")
    assert counts["failed"] == 2
    assert [(c["type"], c["reason"]) for c in conds] == [
        ("FailureTarget", "BackoffLimitExceeded"),
        ("Failed", "BackoffLimitExceeded"),
    ]


def test_work_queue_job_completes_when_one_pod_succeeded_and_the_rest_ended(
    emu: Emulator,
) -> None:
    emu.seed(job("wq", parallelism=2))  # completions unset: the work-queue mode
    assert "completions" not in emu.store.get(emu.store.kinds[("batch", "jobs")], "default", "wq")["spec"]  # fmt: skip
    sync(emu, "wq")
    a, b = job_pods(emu, "wq")
    assert controllers.JOB_INDEX_KEY not in (a["metadata"].get("annotations") or {})
    assert "hostname" not in a["spec"]
    finish(emu, a, "Succeeded")
    counts, conds = sync(emu, "wq")
    assert not conds and len(job_pods(emu, "wq")) == 2  # no new pod once one succeeded
    finish(emu, b, "Succeeded")
    counts, conds = sync(emu, "wq")
    assert [c["type"] for c in conds] == ["SuccessCriteriaMet", "Complete"]
    assert counts["succeeded"] == 2


def test_non_indexed_job_wants_min_of_parallelism_and_remaining_completions(
    emu: Emulator,
) -> None:
    emu.seed(job("nc", parallelism=3, completions=2))
    counts, _ = sync(emu, "nc")
    assert counts["active"] == 2 and len(job_pods(emu, "nc")) == 2


def test_an_indexed_job_needs_completions(emu: Emulator) -> None:
    with pytest.raises(status.ApiError) as caught:
        emu.seed(job("nocomp", completionMode="Indexed", parallelism=2))
    assert caught.value.code == 422 and "spec.completions" in str(caught.value), caught.value
    with pytest.raises(status.ApiError):
        emu.seed(job("badmode", completionMode="Sometimes"))
    emu.seed(job("defaulted", completionMode="Indexed"))  # both unset: completions defaults to 1


def test_completed_indexes_intervals() -> None:
    assert controllers.format_indexes({0, 1, 2, 5, 7, 8}) == "0-2,5,7,8"
    assert controllers.parse_indexes("0-2,5,7,8", 8) == {0, 1, 2, 5, 7}


def test_statefulset_creates_ordinals_in_order_and_recreates_a_deleted_one(
    emu: Emulator,
) -> None:
    emu.seed(
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "db", "namespace": "default"},
            "spec": {
                "replicas": 2,
                "serviceName": "db",
                "selector": {"matchLabels": {"app": "db"}},
                "template": {
                    "metadata": {"labels": {"app": "db"}},
                    "spec": {"containers": [{"name": "main", "image": "busybox"}]},
                },
            },
        }
    )
    sts_kind, pods_kind = emu.store.kinds[("apps", "statefulsets")], emu.store.kinds[("", "pods")]

    def step() -> list[str]:
        sts = emu.store.get(sts_kind, "default", "db")
        pods, _ = emu.store.list(pods_kind, "default", lambda p: True)
        controllers.sync_statefulset(emu.store, sts, pods)
        return sorted(p["metadata"]["name"] for p in emu.store.list(pods_kind, "default", lambda p: True)[0])  # fmt: skip

    assert step() == ["db-0"]
    assert step() == ["db-0"]  # db-1 waits until db-0 is Running and Ready
    pod0 = emu.store.get(pods_kind, "default", "db-0")
    assert pod0["metadata"]["labels"][controllers.STS_INDEX_LABEL] == "0"
    assert pod0["spec"]["hostname"] == "db-0" and pod0["spec"]["subdomain"] == "db"
    emu.set_status(pod0, {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]})
    assert step() == ["db-0", "db-1"]
    emu.store.delete(pods_kind, "default", "db-0")
    assert step() == ["db-0", "db-1"]  # recreated with the same name
    assert emu.store.get(pods_kind, "default", "db-0")["metadata"]["uid"] != pod0["metadata"]["uid"]


def test_indexed_job_pods_see_their_index_and_hostname(emu: Emulator, kubelet: Any) -> None:
    manifest = job("show", completionMode="Indexed", completions=2, parallelism=2)
    manifest["spec"]["template"]["spec"]["containers"][0]["command"] = [
        "python", "-c", "import os; print('INDEX', os.environ['JOB_COMPLETION_INDEX'], os.environ['HOSTNAME'])",
    ]  # fmt: skip
    emu.seed(manifest)
    jobs_kind = emu.store.kinds[("batch", "jobs")]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        st = emu.store.get(jobs_kind, "default", "show").get("status") or {}
        if any(c["type"] == "Complete" for c in st.get("conditions") or []):
            break
        time.sleep(0.05)
    assert st.get("completedIndexes") == "0,1", st
    logs = sorted(p.read_text() for p in Path(kubelet.root).glob("default_show-*/container.log"))
    assert logs == ["INDEX 0 show-0\n", "INDEX 1 show-1\n"]
