"""Multi-pod workloads get one lineage per pod: an Indexed Job's pods checkpoint into
``BASE-INDEX`` and a preempt + resume restores each from its own checkpoint; a resume that
lacks one index's checkpoint does not report success; workloads whose pods have no stable
identity are refused at plan time by name. The wrapper and the backend derive the per-pod
lineage by one rule (``core.lineage``).

One scenario runs real CRIU (two wrapped counters); the others only plan."""

# ruff: noqa: F811 - the fixtures imported from test_actions are parameters here
from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from core import errors
from core.backends.kubernetes import lineages
from core.lineage import pod_index, pod_lineage
from core.model import Action
from core.service.facade import Service
from tests.k8s.conftest import wrapped_job, wrapped_meta, wrapped_spec
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

STEP = re.compile(r"^step (\d+) verified", re.M)


def indexed_job(name: str, lineage: str, *, parallelism: int, completions: int) -> dict[str, Any]:
    manifest = wrapped_job(name, lineage)
    manifest["spec"].update(
        completionMode="Indexed", completions=completions, parallelism=parallelism
    )
    return manifest


def first_step(kubelet: Any, pod_name: str) -> int | None:
    """The first ``step N verified`` line the pod's counter printed."""
    for log in Path(kubelet.root).glob(f"default_{pod_name}_*/container.log"):
        found = STEP.search(log.read_text(errors="replace"))
        if found:
            return int(found.group(1))
    return None


def live_pods_by_index(emu: Any) -> dict[str, str]:
    out = {}
    for name, p in pods(emu).items():
        ix = (p["metadata"].get("annotations") or {}).get(lineages.JOB_INDEX_KEY)
        if ix is not None and running(emu, name) and not p["metadata"].get("deletionTimestamp"):
            out[str(ix)] = name
    return out


def test_the_per_pod_lineage_rule() -> None:
    assert pod_lineage("train", {}) == "train"  # single-pod workloads keep their name
    assert pod_lineage("train", {"JOB_COMPLETION_INDEX": "3"}) == "train-3"
    assert pod_lineage("db", {"CLAWPOINT_POD_INDEX": "1", "JOB_COMPLETION_INDEX": "7"}) == "db-1"
    assert pod_lineage("db", {"CLAWPOINT_POD_INDEX": ""}) == "db"  # a label the pod lacks
    assert pod_index({"JOB_COMPLETION_INDEX": "0"}) == 0
    with pytest.raises(errors.InvalidInput, match="CLAWPOINT_POD_INDEX"):
        pod_index({"CLAWPOINT_POD_INDEX": "db-0"})


def test_the_backend_reads_the_index_the_container_gets() -> None:
    pod = {
        "metadata": {
            "name": "db-2",
            "labels": {"apps.kubernetes.io/pod-index": "2"},
            "annotations": {"clawpoint.io/lineage": "db"},
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "env": [
                        {
                            "name": "CLAWPOINT_POD_INDEX",
                            "valueFrom": {
                                "fieldRef": {
                                    "fieldPath": "metadata.labels['apps.kubernetes.io/pod-index']"
                                }
                            },
                        }
                    ],
                }
            ]
        },
    }
    assert lineages.lineage_of(pod) == "db-2"
    pod["spec"]["containers"][0]["env"] = []
    assert lineages.lineage_of(pod) == "db"


def test_indexed_job_pods_checkpoint_and_resume_from_their_own_lineages(
    need_criu: None, emu: Any, kubelet: Any, svc: Service, store_dir: Path
) -> None:
    # Index 0 starts alone and gets ahead; then parallelism 2 starts index 1, so the two
    # counters are far apart and a swapped restore would show.
    emu.seed(indexed_job("pair", "pair", parallelism=1, completions=2))
    wait_for("index 0 progress", lambda: step_of(kubelet, "pair-0") > 150, timeout_s=30)
    jobs = emu.store.kinds[("batch", "jobs")]
    current = emu.store.get(jobs, "default", "pair")
    current["spec"]["parallelism"] = 2  # as kubectl scale would
    emu.store.update(jobs, "default", "pair", current, api=False)
    wait_for("index 1 progress", lambda: step_of(kubelet, "pair-1") > 20, timeout_s=30)
    assert step_of(kubelet, "pair") < 0, "a pod wrote the shared base lineage"

    act(svc, Action.PREEMPT, "k8s:Job/default/pair")
    saved = {ix: step_of(kubelet, f"pair-{ix}") for ix in "01"}
    assert saved["0"] - saved["1"] > 100, saved
    listed = {c.lineage for c in svc.checkpoints("k8s:Job/default/pair")}
    assert {"pair-0", "pair-1"} <= listed, listed

    resumed = act(svc, Action.RESUME, "k8s:Job/default/pair")
    waits = [s for s in resumed.execution.steps if s.name.endswith("wait_restored")]
    assert len(waits) == 2, [s.name for s in resumed.execution.steps]
    sources = sorted(s.output["restored_from"] for s in waits)
    assert sources[0].startswith("pair-0@") and sources[1].startswith("pair-1@"), sources
    by_index = wait_for("both indexes running", lambda: len(d := live_pods_by_index(emu)) == 2 and d)  # fmt: skip
    for ix, name in by_index.items():
        first = wait_for(f"a step line from index {ix}", lambda n=name: first_step(kubelet, n))
        # each counter went on from its own saved step, not the other's
        assert saved[ix] - 40 < first < saved[ix] + 60, (ix, first, saved)
    assert_intact(kubelet)

    # Without index 1's checkpoints a resume must not report success.
    act(svc, Action.PREEMPT, "k8s:Job/default/pair")
    shutil.rmtree(store_dir / "pair-1")
    try:
        result = svc.act(
            Action.RESUME, "k8s:Job/default/pair", {}, principal=PERSON, confirmed=True
        )
    except errors.ClawpointError as exc:
        assert "pair-1" in exc.message, exc.message
    else:
        assert result.status != "executed", result
        assert "pair-1" in (result.message or ""), result.message


def test_non_indexed_parallel_wrapped_job_is_refused_at_plan_time_by_name(
    emu: Any, svc: Service
) -> None:
    manifest = wrapped_job("wide", "wide")
    manifest["spec"]["parallelism"] = 2
    emu.seed(manifest)
    for action in (Action.PREEMPT, Action.CHECKPOINT, Action.RESUME):
        with pytest.raises(errors.NotSupported) as caught:
            svc.plan(action, "k8s:Job/default/wide")
        assert "Job default/wide" in caught.value.message
        assert "Indexed" in caught.value.hint


def test_scaling_a_wrapped_plain_job_past_one_pod_is_refused(emu: Any, svc: Service) -> None:
    emu.seed(wrapped_job("solo", "solo"))
    with pytest.raises(errors.NotSupported, match="Job default/solo"):
        svc.plan(Action.SCALE, "k8s:Job/default/solo", {"replicas": 2})


@pytest.mark.parametrize(
    ("kind", "index_env", "refused"),
    [("Deployment", False, True), ("StatefulSet", False, True), ("StatefulSet", True, False)],
)
def test_multi_replica_wrapped_sets_need_per_pod_identities(
    emu: Any, svc: Service, kind: str, index_env: bool, refused: bool
) -> None:
    spec = wrapped_spec("web")
    spec["restartPolicy"] = "Always"
    if index_env:
        spec["containers"][0]["env"].append(
            {
                "name": "CLAWPOINT_POD_INDEX",
                "valueFrom": {
                    "fieldRef": {"fieldPath": "metadata.labels['apps.kubernetes.io/pod-index']"}
                },
            }
        )
    meta = wrapped_meta("web", "web")
    emu.seed(
        {
            "apiVersion": "apps/v1",
            "kind": kind,
            "metadata": meta,
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": meta["labels"], "annotations": meta["annotations"]},
                    "spec": spec,
                },
            },
        }
    )
    if refused:
        with pytest.raises(errors.NotSupported, match=f"{kind} default/web"):
            svc.plan(Action.PREEMPT, f"k8s:{kind}/default/web")
    else:
        plan = svc.plan(Action.PREEMPT, f"k8s:{kind}/default/web")
        assert plan.steps


def test_migrate_and_drain_of_an_indexed_job_checkpoint_and_wait_for_every_pod(
    emu: Any, svc: Service
) -> None:
    from tests.k8s.conftest import node

    manifest = indexed_job("duo", "duo", parallelism=2, completions=2)
    job = emu.seed(node("n1"), node("n2"), manifest)[2]
    for ix in (0, 1):
        meta = wrapped_meta(f"duo-{ix}-abcde", "duo", **{"batch.kubernetes.io/job-name": "duo"})
        meta["annotations"][lineages.JOB_INDEX_KEY] = str(ix)
        meta["labels"][lineages.JOB_INDEX_KEY] = str(ix)
        meta["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": "duo",
             "uid": job["metadata"]["uid"], "controller": True}
        ]  # fmt: skip
        spec = wrapped_spec("duo")
        spec["nodeName"] = "n1"
        spec["containers"][0]["env"].append(
            {
                "name": "JOB_COMPLETION_INDEX",
                "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{lineages.JOB_INDEX_KEY}']"}},
            }
        )  # fmt: skip
        emu.seed(
            {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec,
             "status": {"phase": "Running"}}
        )  # fmt: skip
    for plan in (
        svc.plan(Action.MIGRATE, "k8s:Job/default/duo", {"to": "k8s:n2"}),
        svc.plan(Action.DRAIN_NODE, "k8s:n1", {}),
    ):
        ops = [(s.op, s.args.get("lineage")) for s in plan.steps]
        assert sorted(x for x in ops if x[0] == "exec_checkpoint") == [
            ("exec_checkpoint", "duo-0"),
            ("exec_checkpoint", "duo-1"),
        ], ops
        assert sorted(x for x in ops if x[0] == "wait_restored") == [
            ("wait_restored", "duo-0"),
            ("wait_restored", "duo-1"),
        ], ops
        assert (
            len([x for x in ops if x[0] == "patch" and x[1] is None]) >= 2
        )  # one suspend, one place
