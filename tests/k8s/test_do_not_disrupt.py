"""Consolidation never kills unsaved work: ``karpenter.sh/do-not-disrupt`` on wrapped pods whose
newest checkpoint is stale (core.backends.kubernetes.disruption), set by the watch pass,
cleared by the next one or right after a checkpoint step, audited once per change; against
the API emulator and a model of Karpenter's disruption controller (tests/k8s/karpenter.py),
whose rules are pinned here too. The end-to-end test runs a real wrapped Job under the fake
kubelet (real CRIU checkpoints)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from core.backends.kubernetes.backend import KubernetesBackend
from core.backends.kubernetes.config import KubernetesConfig
from core.backends.kubernetes.disruption import DO_NOT_DISRUPT, SET_BY_CLAWPOINT
from core.config import load_settings
from core.model import Action
from core.service.facade import Service, bootstrap
from core.watch.loop import watch_once
from tests.k8s.conftest import node, pod, wait_for, wrapped_job, wrapped_pod
from tests.k8s.karpenter import Karpenter, Refused, go_duration_s
from tests.k8s.test_actions import (
    act,
    assert_intact,
    k8s_config,
    pods,
    running,
    step_of,
)

OURS = {DO_NOT_DISRUPT: "true", SET_BY_CLAWPOINT: "true"}


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def seeded(body: dict[str, Any], node_name: str, *, age_s: float) -> dict[str, Any]:
    """``body`` bound to ``node_name``, Running for ``age_s`` seconds (as a kubelet reports)."""
    body["spec"]["nodeName"] = node_name
    body["status"] = {
        "phase": "Running",
        "startTime": _stamp(datetime.now(UTC) - timedelta(seconds=age_s)),
        "conditions": [{"type": "Ready", "status": "True"}],
    }
    return body


def notes(emu: Any, name: str, namespace: str = "default") -> dict[str, str]:
    return dict(pods(emu, namespace)[name]["metadata"].get("annotations") or {})


def guard_audit(svc: Service) -> list[Any]:
    return [e for e in svc.audit.entries() if e.kind.startswith("do-not-disrupt.")]


def service(home: Path, monkeypatch: pytest.MonkeyPatch, backend: KubernetesBackend) -> Service:
    monkeypatch.setenv("CLAWPOINT_HOME", str(home))
    svc = bootstrap(load_settings(home))
    svc.backends["k8s"] = backend
    return svc


@pytest.fixture
def svc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kubeconfig: Path, store_dir: Path
) -> Iterator[Service]:
    """A service whose k8s backend calls work unsaved after 60 s stale."""
    backend = KubernetesBackend(k8s_config(kubeconfig, store_dir, unsaved_after_s=60))
    yield service(tmp_path / "home", monkeypatch, backend)
    backend.close()


# ----- the product's rule, against the emulator (no processes) -------------------------------
def test_stale_wrapped_pods_get_the_annotation_once_and_consolidation_refuses_their_node(
    emu: Any, svc: Service
) -> None:
    emu.seed(
        node("n1"),
        node("n2"),
        seeded(wrapped_pod("w", "lin-w"), "n1", age_s=3600),  # never checkpointed, 1 h of work
        seeded(wrapped_pod("young", "lin-y"), "n2", age_s=5),  # started 5 s ago
        seeded(pod("plain"), "n2", age_s=3600),  # not clawpoint's: no lineage annotation
    )
    karpenter = Karpenter(emu)
    karpenter.disrupt("n2")  # nothing there is protected: consolidation goes ahead
    assert "young" not in pods(emu) and "plain" not in pods(emu)
    report = watch_once(svc)
    assert not report.errors, report.errors
    assert notes(emu, "w") == {**wrapped_pod("w", "lin-w")["metadata"]["annotations"], **OURS}
    [change] = report.guarded
    assert (change.change, change.workload, change.pod) == ("set", "k8s:Pod/default/w", "default/w")
    assert change.checkpoint is None and change.unsaved_s is not None and change.unsaved_s > 3000
    with pytest.raises(Refused, match=re.escape('pod default/w has "karpenter.sh/do-not-disrupt"')):
        karpenter.disrupt("n1")
    assert "w" in pods(emu)  # refused: nothing evicted
    # one audit entry per change, none for a pass that changes nothing
    watch_once(svc)
    [entry] = guard_audit(svc)
    assert (entry.kind, entry.principal, entry.subject) == (
        "do-not-disrupt.set",
        "watch",
        "k8s:Pod/default/w",
    )
    assert entry.data["pod"] == "default/w" and entry.data["limit_s"] == 60


def test_a_pod_not_managed_by_clawpoint_is_never_touched(emu: Any, svc: Service) -> None:
    emu.seed(node("n1"), seeded(pod("plain"), "n1", age_s=3600))
    with_theirs = seeded(pod("theirs"), "n1", age_s=3600)
    with_theirs["metadata"]["annotations"] = dict(OURS)  # even one that looks like ours
    emu.seed(with_theirs)
    before = len(emu.requests)
    report = watch_once(svc)
    assert not report.guarded and not report.errors
    assert notes(emu, "plain") == {} and notes(emu, "theirs") == OURS
    assert not [r for r in emu.requests[before:] if r.method == "PATCH"]


def test_a_persons_own_annotation_is_left_alone(emu: Any, svc: Service) -> None:
    mine = seeded(wrapped_pod("mine", "lin-m"), "n1", age_s=1)  # fresh, but a person's "true"
    mine["metadata"]["annotations"][DO_NOT_DISRUPT] = "true"
    timed = seeded(wrapped_pod("timed", "lin-t"), "n1", age_s=3600)  # stale, a person's "30m"
    timed["metadata"]["annotations"][DO_NOT_DISRUPT] = "30m"
    changed = seeded(wrapped_pod("changed", "lin-c"), "n1", age_s=1)  # ours, then a person's
    changed["metadata"]["annotations"].update({**OURS, DO_NOT_DISRUPT: "2h"})
    emu.seed(node("n1"), mine, timed, changed)
    report = watch_once(svc)
    assert notes(emu, "mine")[DO_NOT_DISRUPT] == "true"
    assert notes(emu, "timed")[DO_NOT_DISRUPT] == "30m" and SET_BY_CLAWPOINT not in notes(
        emu, "timed"
    )
    # fresh: clawpoint takes back only its mark; the value a person put there stays
    assert notes(emu, "changed")[DO_NOT_DISRUPT] == "2h"
    assert SET_BY_CLAWPOINT not in notes(emu, "changed")
    assert [(c.pod, c.change) for c in report.guarded] == [("default/changed", "cleared")]


def test_a_restarted_pod_is_fresh_and_what_clawpoint_set_is_cleared(emu: Any, svc: Service) -> None:
    """Unsaved work runs from the newest checkpoint or the container's start, the later: a
    container started again (restored from the volume) has saved everything before it."""
    emu.seed(node("n1"), seeded(wrapped_pod("w", "lin-w"), "n1", age_s=3600))
    watch_once(svc)
    assert notes(emu, "w")[DO_NOT_DISRUPT] == "true"
    current = pods(emu)["w"]
    emu.set_status(
        current,
        {
            **current["status"],
            "containerStatuses": [
                {
                    "name": "main",
                    "image": "ghcr.io/example/clawpoint-job:latest",
                    "imageID": "",
                    "ready": True,
                    "restartCount": 1,
                    "state": {"running": {"startedAt": _stamp(datetime.now(UTC))}},
                }
            ],
        },
    )
    report = watch_once(svc)
    assert DO_NOT_DISRUPT not in notes(emu, "w") and SET_BY_CLAWPOINT not in notes(emu, "w")
    assert [c.change for c in report.guarded] == ["cleared"]
    assert [e.kind for e in guard_audit(svc)] == ["do-not-disrupt.set", "do-not-disrupt.cleared"]
    Karpenter(emu).disrupt("n1")
    assert "w" not in pods(emu)


def test_the_limit_follows_the_pods_checkpoint_interval_when_unset(
    emu: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kubeconfig: Path, store_dir: Path
) -> None:
    every = seeded(wrapped_pod("every", "lin-e"), "n1", age_s=100)  # 100 s > 2 x 30 s
    every["spec"]["containers"][0]["command"][2:2] = ["--checkpoint-every", "30"]
    default = seeded(wrapped_pod("default", "lin-d"), "n1", age_s=100)  # < 900 s
    emu.seed(node("n1"), every, default)
    backend = KubernetesBackend(k8s_config(kubeconfig, store_dir))
    try:
        report = watch_once(service(tmp_path / "home", monkeypatch, backend))
    finally:
        backend.close()
    assert [(c.pod, c.limit_s) for c in report.guarded] == [("default/every", 60.0)]
    assert DO_NOT_DISRUPT not in notes(emu, "default")


def test_the_deployed_role_grants_the_patch_and_nothing_else_is_needed(
    emu: Any, api: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store_dir: Path
) -> None:
    from tests.k8s.test_deploy import NS, documents, rules_from_manifests

    [role] = [d for _, d in documents() if d["kind"] == "Role" and d["metadata"]["name"] ==
              "clawpoint-workloads"]  # fmt: skip
    [pods_rule] = [r for r in role["rules"] if r["resources"] == ["pods"]]
    assert sorted(pods_rule["verbs"]) == ["create", "delete", "get", "list", "patch", "watch"]
    emu.namespace(NS)
    emu.seed(node("n1"), seeded(wrapped_pod("w", "lin-w", NS), "n1", age_s=3600))
    cfg = KubernetesConfig(
        enabled=True, namespaces=[NS], retry_total_s=1, checkpoint_dir=str(store_dir),
        unsaved_after_s=60,
    )  # fmt: skip
    backend = KubernetesBackend(cfg, api_client=api)
    svc = service(tmp_path / "home", monkeypatch, backend)
    # without the patch verb the pass says which rule is missing, and changes nothing
    emu.rules = [
        replace(r, verbs=tuple(v for v in r.verbs if v != "patch"))
        if r.resources == ("pods",) and r.namespaces == (NS,)
        else r
        for r in rules_from_manifests()
    ]
    report = watch_once(svc)
    assert any("RBAC refused to patch pods 'w'" in e for e in report.errors), report.errors
    assert DO_NOT_DISRUPT not in notes(emu, "w", NS) and not guard_audit(svc)
    emu.rules = rules_from_manifests()
    report = watch_once(svc)
    assert not report.errors, report.errors
    assert notes(emu, "w", NS)[DO_NOT_DISRUPT] == "true"


def test_a_moved_pods_copy_does_not_inherit_clawpoints_protection(emu: Any, svc: Service) -> None:
    """The copy restores a fresh checkpoint; a person's annotation travels with it."""
    ours = seeded(wrapped_pod("ours", "lin-o"), "n1", age_s=60)
    ours["metadata"]["annotations"].update(OURS)
    theirs = seeded(wrapped_pod("theirs", "lin-t"), "n1", age_s=60)
    theirs["metadata"]["annotations"][DO_NOT_DISRUPT] = "true"
    emu.seed(node("n1"), node("n2"), ours, theirs)
    backend = svc.backends["k8s"]
    for name, kept in (("ours", {}), ("theirs", {DO_NOT_DISRUPT: "true"})):
        plan = backend.plan(Action.MIGRATE, f"Pod/default/{name}", {"to": "n2"})
        [create] = [s for s in plan.steps if s.op == "create_pod"]
        copied = create.args["body"]["metadata"]["annotations"]
        assert {k: v for k, v in copied.items() if "disrupt" in k} == kept, name


# ----- the model of Karpenter, pinned to its documented rules ------------------------------
def test_karpenter_model_blocks_only_what_karpenter_blocks(emu: Any) -> None:
    made = iter(range(100))

    def cluster(
        annotation: str | None,
        *,
        age_s: float = 60,
        node_note: str | None = None,
        phase: str = "Running",
        tgp: bool = False,
    ) -> tuple[Karpenter, str]:
        """A node with one pod annotated ``annotation``; the model and the node's name."""
        i = next(made)
        n = node(f"n{i}")
        if node_note is not None:
            n["metadata"]["annotations"] = {DO_NOT_DISRUPT: node_note}
        body = seeded(pod(f"p{i}"), f"n{i}", age_s=age_s)
        body["status"]["phase"] = phase
        if annotation is not None:
            body["metadata"]["annotations"] = {DO_NOT_DISRUPT: annotation}
        emu.seed(n, body)
        return Karpenter(emu, termination_grace_period=tgp), f"n{i}"

    def refused(made: tuple[Karpenter, str], reason: str = "Underutilized") -> bool:
        k, name = made
        try:
            k.disrupt(name, reason)
        except Refused:
            return True
        return False

    # the value Karpenter checks is exactly "true" (or a duration not yet elapsed)
    assert refused(cluster("true"))
    assert not refused(cluster("True")) and not refused(cluster("false"))
    assert refused(cluster("5m", age_s=60)) and not refused(cluster("5m", age_s=600))
    assert not refused(cluster("0s")) and not refused(cluster("-5m"))  # not positive: ignored
    assert not refused(cluster("true", phase="Succeeded"))  # only active pods count
    assert refused(cluster(None, node_note="true")) and not refused(cluster(None, node_note="5m"))
    # graceful methods and drift are blocked; drift not when the NodeClaim sets a grace period
    for reason in ("Underutilized", "Empty", "Drifted"):
        assert refused(cluster("true"), reason)
    assert not refused(cluster("true", tgp=True), "Drifted")
    # expiration, spot interruption and a forceful delete are not blocked: the pod goes
    for reason in ("Expired", "Interrupted", "Deleted"):
        k, name = cluster("true")
        done = k.disrupt(name, reason)
        assert len(done.deleted) == 1 and done.deleted[0].split("/")[1] not in pods(emu)
    assert go_duration_s("1h30m") == 5400 and go_duration_s("1.5s") == 1.5
    assert go_duration_s("5") is None and go_duration_s("") is None


# ----- end to end: a real wrapped Job, the watch pass, a checkpoint, a consolidation ---------
@pytest.fixture
def live_svc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kubeconfig: Path, store_dir: Path
) -> Iterator[Service]:
    backend = KubernetesBackend(k8s_config(kubeconfig, store_dir, unsaved_after_s=1))
    yield service(tmp_path / "home", monkeypatch, backend)
    backend.close()


def test_consolidation_waits_for_a_checkpoint_then_evicts_a_saved_job(
    need_criu: None, emu: Any, kubelet: Any, live_svc: Service
) -> None:
    svc = live_svc
    emu.seed(wrapped_job("train", "train-dnd"))
    name = wait_for("the job's pod to run", lambda: [p for p in pods(emu) if running(emu, p)])[0]
    wait_for("progress", lambda: step_of(kubelet, "train-dnd") > 10)
    where = pods(emu)[name]["spec"]["nodeName"]
    karpenter = Karpenter(emu, on_node_gone=kubelet.nodes.discard)

    report = wait_for("the watch pass to protect it", lambda: watch_once(svc).guarded)
    assert [(c.change, c.workload) for c in report] == [("set", "k8s:Job/default/train")]
    assert notes(emu, name)[DO_NOT_DISRUPT] == "true"
    with pytest.raises(Refused):
        karpenter.disrupt(where)
    assert running(emu, name), "a refused consolidation touched the pod"

    done = act(svc, Action.CHECKPOINT, "k8s:Job/default/train")
    [step] = [s for s in done.execution.steps if "seq" in s.output]  # exec_checkpoint
    assert step.output["do_not_disrupt"] == "cleared"  # right after the checkpoint, no pass
    assert DO_NOT_DISRUPT not in notes(emu, name) and SET_BY_CLAWPOINT not in notes(emu, name)
    saved_step = step_of(kubelet, "train-dnd")

    evicted = karpenter.disrupt(where)
    assert evicted.evicted == [f"default/{name}"] and not evicted.deleted
    # the Job's next pod runs elsewhere (the node is gone), restored from its checkpoint
    new = wait_for(
        "the Job's next pod", lambda: [p for p in pods(emu) if p != name and running(emu, p)]
    )[0]
    assert pods(emu)[new]["spec"]["nodeName"] != where

    def first_step() -> int | None:
        logs = Path(kubelet.root).glob(f"default_{new}_*/container.log")
        found = [re.search(r"^step (\d+) verified", p.read_text(), re.M) for p in logs]
        return next((int(m.group(1)) for m in found if m), None)

    # the counter went on from its saved state (it prints a line every 20 steps), intact
    assert wait_for("a step line from the new pod", first_step) > saved_step - 40
    assert_intact(kubelet)
