"""Live moves of bare pods: the copy starts on the target as a standby first and takes the
workload over from the source's wrapper (core/backends/kubernetes/standby.py, handoff.py;
the protocol is core/wrapper/handoff_remote.py, shared with Slurm).

The plans are read against the API emulator (with its server dry run of every request);
the moves run against the emulator and the fake kubelet, whose pods are real processes
under the wrapper: every dump and restore is CRIU's, with the self-checking counter.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from core.backends.kubernetes.backend import KubernetesBackend
from core.backends.kubernetes.config import KubernetesConfig
from core.backends.kubernetes.lineages import READY_GATE, STANDBY_ANNOTATION
from core.model import Action
from core.service.facade import Service
from core.specs import STANDBY_ENV
from tests.k8s.conftest import node, wait_for, wrapped_pod
from tests.k8s.emulator.rbac import Rule
from tests.k8s.test_actions import (  # noqa: F401 - svc is a fixture
    act,
    assert_intact,
    pods,
    running,
    step_of,
    svc,
)

LIVE_OPS = ["create_pod", "wait_standby", "exec_checkpoint", "wait_pod_ended", "takeover",
            "delete_pod"]  # fmt: skip


def plan_backend(emu: Any, checkpoint_dir: Path | None, **cfg: Any) -> KubernetesBackend:
    return KubernetesBackend(
        KubernetesConfig(enabled=True, retry_total_s=1,
                         checkpoint_dir=str(checkpoint_dir) if checkpoint_dir else None, **cfg),
        api_client=emu.api_client(),
    )  # fmt: skip


def running_pod(name: str, on: str, **spec: Any) -> dict[str, Any]:
    p = wrapped_pod(name, name)
    p["spec"].update(nodeName=on, **spec)
    p["status"] = {"phase": "Running"}
    return p


def env_of(body: dict[str, Any]) -> dict[str, Any]:
    (c,) = body["spec"]["containers"]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env") or []}


# ----- plans -------------------------------------------------------------------------------
def test_a_never_pod_moves_live_through_a_marked_standby_copy(emu: Any, tmp_path: Path) -> None:
    emu.seed(node("n1"), node("n2"), running_pod("mover", "n1", restartPolicy="Never"))
    b = plan_backend(emu, tmp_path)
    steps = b.plan(Action.MIGRATE, "k8s:Pod/default/mover", {"to": "n2"}).steps
    assert [s.op for s in steps] == LIVE_OPS
    standby, _, checkpoint, _, takeover, delete = steps
    body = standby.args["body"]
    env = env_of(body)
    token = env["CLAWPOINT_STANDBY"]
    assert env["CLAWPOINT_STANDBY_FOR"] == "mover"
    # the address it announces is its own pod IP, from the downward API
    assert env["CLAWPOINT_STANDBY_HOST"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert float(env["CLAWPOINT_STANDBY_TIMEOUT"]) > 0
    assert body["metadata"]["annotations"][STANDBY_ANNOTATION] == "mover"
    # not Ready (so no Service routes to it) until its gate's condition is set at the takeover
    assert body["spec"]["readinessGates"] == [{"conditionType": READY_GATE}]
    # the source's exec names that standby; the fallback copy is an ordinary one
    assert checkpoint.args["hand_over"] == token and checkpoint.args["stop"] is True
    fallback = takeover.args["body"]
    assert not set(env_of(fallback)) & set(STANDBY_ENV)
    assert STANDBY_ANNOTATION not in fallback["metadata"]["annotations"]
    assert "readinessGates" not in fallback["spec"]  # nobody would ever open it
    assert fallback["metadata"]["name"] != body["metadata"]["name"]
    assert takeover.args["min_seq"] == "$checkpoint.seq"
    assert delete.args["name"] == "mover"  # last: only once the workload runs elsewhere
    b.close()


@pytest.mark.parametrize(
    ("policy", "live", "mounted"),
    [("Always", True, True), ("OnFailure", True, True), ("Never", False, True),
     ("Never", True, False)],
)  # fmt: skip
def test_the_ordinary_move_where_a_standby_could_run_twice_or_is_turned_off(
    emu: Any, tmp_path: Path, policy: str, live: bool, mounted: bool
) -> None:
    emu.seed(node("n1"), node("n2"), running_pod("p", "n1", restartPolicy=policy))
    b = plan_backend(emu, tmp_path if mounted else None, live_handoff=live)
    steps = b.plan(Action.MIGRATE, "k8s:Pod/default/p", {"to": "n2"}).steps
    ops = [s.op for s in steps]
    assert "wait_standby" not in ops and "takeover" not in ops
    if policy == "Never":  # stop, wait, then the copy (which restores), then delete
        assert ops == ["exec_checkpoint", "wait_pod_ended", "create_pod", "wait_restored",
                       "delete_pod"]  # fmt: skip
        create = next(s for s in steps if s.op == "create_pod")
        said = "live_handoff = false" if not live else "checkpoint_dir"
        assert "not a live move" in create.description and said in create.description
    b.close()


def test_a_copy_of_a_former_standby_is_never_a_standby_by_mistake(emu: Any, tmp_path: Path) -> None:
    # A pod that was once a standby (its env says so; say its annotation stayed too): the
    # next move's copies must not wait for an order under the old token.
    was = running_pod("was", "n1", restartPolicy="Never")
    was["metadata"]["annotations"][STANDBY_ANNOTATION] = "older"
    was["spec"]["containers"][0]["env"] += [
        {"name": "CLAWPOINT_STANDBY", "value": "0123456789ab"},
        {"name": "CLAWPOINT_STANDBY_FOR", "value": "older"},
    ]
    # its gate stayed too, beside one of the user's own (a load balancer's, say)
    user_gate = {"conditionType": "example.com/lb-registered"}
    was["spec"]["readinessGates"] = [{"conditionType": READY_GATE}, user_gate]
    emu.seed(node("n1"), node("n2"), was)
    for live in (True, False):
        b = plan_backend(emu, tmp_path, live_handoff=live)
        steps = b.plan(Action.MIGRATE, "k8s:Pod/default/was", {"to": "n2"}).steps
        bodies = [s.args["body"] for s in steps if "body" in s.args]
        assert bodies
        for body in bodies:
            env = env_of(body)
            assert env.get("CLAWPOINT_STANDBY") != "0123456789ab"
            assert env.get("CLAWPOINT_STANDBY_FOR") in (None, "was")
            (c,) = body["spec"]["containers"]
            names = [e["name"] for e in c["env"]]
            assert len(names) == len(set(names)), names
            # the user's gate stays; clawpoint's only on this move's standby, once
            standby = STANDBY_ANNOTATION in body["metadata"]["annotations"]
            ours = [{"conditionType": READY_GATE}] if standby else []
            assert body["spec"]["readinessGates"] == [user_gate, *ours]
        b.close()


def test_listings_hide_a_standby_until_it_took_over(emu: Any, tmp_path: Path) -> None:
    standby = running_pod("mover-cp1", "n2", restartPolicy="Never")
    standby["metadata"]["annotations"][STANDBY_ANNOTATION] = "mover"
    emu.seed(node("n1"), node("n2"), running_pod("mover", "n1", restartPolicy="Never"), standby)
    b = plan_backend(emu, tmp_path)
    listed = {w.id for w in b.workloads()}
    assert "k8s:Pod/default/mover" in listed and "k8s:Pod/default/mover-cp1" not in listed
    # it is still found by its id (a plan that created it reads it back)
    assert b.get_workload("k8s:Pod/default/mover-cp1").id == "k8s:Pod/default/mover-cp1"
    b.close()


# ----- moves with real pods ----------------------------------------------------------------
def leftovers(store_dir: Path) -> list[str]:
    """Rendezvous files a settled move left in the checkpoint volume."""
    return sorted(p.name for p in store_dir.rglob(".handoff/*") if ".job-" not in p.name)


def start_on_n1(
    emu: Any, kubelet: Any, lineage: str, container: dict[str, Any] | None = None, **env: str
) -> int:
    """The wrapped counter ``lineage`` running on n1 (its container's fields updated with
    ``container``, ``env`` added); its step once it has made progress."""
    manifest = wrapped_pod(lineage, lineage)
    manifest["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "n1"}
    manifest["spec"]["containers"][0].update(container or {})
    manifest["spec"]["containers"][0]["env"] += [{"name": k, "value": v} for k, v in env.items()]
    emu.seed(manifest)
    wait_for(f"{lineage} on n1", lambda: running(emu, lineage))
    return int(wait_for("progress", lambda: (s := step_of(kubelet, lineage)) > 20 and s))


def condition(pod: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (pod.get("status") or {}).get("conditions") or []
                 if c.get("type") == kind), {})  # fmt: skip


@contextmanager
def standby_readiness(emu: Any) -> Iterator[set[tuple[str, str]]]:
    """Every (Ready status, reason) a running standby (still marked) was seen with, polled
    from the emulator's store every 20 ms while the block runs."""
    seen: set[tuple[str, str]] = set()
    done = threading.Event()

    def poll() -> None:
        while not done.wait(0.02):
            for p in pods(emu).values():
                marked = STANDBY_ANNOTATION in (p["metadata"].get("annotations") or {})
                if marked and (p.get("status") or {}).get("phase") == "Running":
                    ready = condition(p, "Ready")
                    seen.add((str(ready.get("status")), str(ready.get("reason", ""))))

    watcher = threading.Thread(target=poll, daemon=True)
    watcher.start()
    try:
        yield seen
    finally:
        done.set()
        watcher.join()


@pytest.mark.usefixtures("need_criu")
def test_migrate_hands_the_pod_over_to_its_standby_on_the_target(
    emu: Any,
    kubelet: Any,
    svc: Service,  # noqa: F811
    store_dir: Path,
) -> None:
    before = start_on_n1(emu, kubelet, "live")
    with standby_readiness(emu) as seen:
        result = act(svc, Action.MIGRATE, "k8s:Pod/default/live", to="k8s:n3")
    # while it stood by, the kubelet held it not Ready: no Service sent it anything
    assert ("False", "ReadinessGatesNotReady") in seen, seen
    steps = {s.name: s.output for s in result.execution.steps}
    standby = steps["wait_standby"]["pod"]
    assert standby and steps["wait_standby"]["node"] == "n3"
    assert steps["checkpoint"]["handoff"] == "sent"
    took = steps["takeover"]
    assert (took["how"], took["pod"], took["node"]) == ("handoff", standby, "n3"), took
    assert took["restored_from"] == f"live@{steps['checkpoint']['seq']}"
    # the standby is the workload now: unmarked, listed, the old pod gone
    wait_for("the old pod removed", lambda: "live" not in pods(emu))
    (name,) = pods(emu)
    assert name == standby
    assert STANDBY_ANNOTATION not in pods(emu)[name]["metadata"]["annotations"]
    # and Ready: its gate opened at the takeover, the kubelet's own conditions kept
    gate = condition(pods(emu)[name], READY_GATE)
    assert (gate.get("status"), gate.get("reason")) == ("True", "TookOver"), gate
    wait_for(
        "the moved pod Ready", lambda: condition(pods(emu)[name], "Ready").get("status") == "True"
    )
    assert condition(pods(emu)[name], "ContainersReady").get("status") == "True"
    assert [w.id for w in svc.workloads() if w.id.startswith("k8s:")] == [f"k8s:Pod/default/{name}"]
    assert leftovers(store_dir) == []
    # the move is recorded under the id the workload has now (the SLA projection's)
    assert took["workload"] == f"k8s:Pod/default/{name}"
    assert svc.moves.all()[took["workload"]].node == "n3"
    assert result.message.endswith(f"; it runs as {took['workload']} now"), result.message
    wait_for("progress on n3", lambda: step_of(kubelet, "live") > before + 10)
    assert_intact(kubelet)


@pytest.mark.parametrize(
    ("fault", "why"),
    [("CLAWPOINT_TEST_STANDBY_DEAF", "handed nothing over"),
     ("CLAWPOINT_TEST_DIE_IN_TAKEOVER", "ended during its restore")],
)  # fmt: skip
@pytest.mark.usefixtures("need_criu")
def test_a_standby_that_fails_leaves_the_move_to_an_ordinary_copy_losing_nothing(
    emu: Any, kubelet: Any, svc: Service, store_dir: Path, fault: str, why: str,  # noqa: F811
) -> None:  # fmt: skip
    # DEAF: it announces itself, then nothing listens (the source's connect is refused);
    # DIE_IN_TAKEOVER: it claims the order and dies before its restore.
    before = start_on_n1(emu, kubelet, "fall", **{fault: "1"})
    result = act(svc, Action.MIGRATE, "k8s:Pod/default/fall", to="k8s:n3")
    steps = {s.name: s.output for s in result.execution.steps}
    took = steps["takeover"]
    assert took["how"] == "restart" and why in took["why"], took
    assert took["pod"] != steps["wait_standby"]["pod"] and took["node"] == "n3"
    assert took["restored_from"] == f"fall@{steps['checkpoint']['seq']}"
    wait_for("only the copy left", lambda: set(pods(emu)) == {took["pod"]})
    assert leftovers(store_dir) == []
    wait_for("progress on n3", lambda: step_of(kubelet, "fall") > before + 10)
    assert_intact(kubelet)


def deployed_rules(*, pods_status: bool) -> list[Rule]:
    """deploy/kubernetes/rbac.yaml's rules, its Roles bound in ``default`` (where these tests'
    pods run), with or without its ``pods/status`` rule."""
    from tests.k8s.test_deploy import rules_from_manifests

    rules = []
    for r in rules_from_manifests():
        if r.namespaces is not None and r.namespaces != ("kube-node-lease",):
            r = dataclasses.replace(r, namespaces=("default",))
        if pods_status or "pods/status" not in r.resources:
            rules.append(r)
    assert any("pods/status" in r.resources for r in rules_from_manifests())
    return rules


@pytest.mark.usefixtures("need_criu")
def test_a_live_move_needs_pods_status_which_the_deployed_rbac_grants(
    emu: Any,
    kubelet: Any,
    svc: Service,  # noqa: F811
) -> None:
    # Without pods/status the standby's gate could never open: it is dropped before any order
    # and the move goes the ordinary way, losing nothing.
    before = start_on_n1(emu, kubelet, "rbac")
    emu.rules = deployed_rules(pods_status=False)
    result = act(svc, Action.MIGRATE, "k8s:Pod/default/rbac", to="k8s:n3")
    steps = {s.name: s.output for s in result.execution.steps}
    assert "pods/status" in steps["wait_standby"]["why"], steps["wait_standby"]
    took = steps["takeover"]
    assert (took["how"], took["node"]) == ("restart", "n3"), took
    wait_for("only the copy left", lambda: set(pods(emu)) == {took["pod"]})
    assert "readinessGates" not in pods(emu)[took["pod"]]["spec"]
    wait_for("progress on n3", lambda: step_of(kubelet, "rbac") > before + 10)
    # With the deployed rules as they are, the next move is live.
    emu.rules = deployed_rules(pods_status=True)
    moved = step_of(kubelet, "rbac")
    result = act(svc, Action.MIGRATE, took["workload"], to="k8s:n1")
    took = {s.name: s.output for s in result.execution.steps}["takeover"]
    assert (took["how"], took["node"]) == ("handoff", "n1"), took
    wait_for(
        "Ready on n1", lambda: condition(pods(emu)[took["pod"]], "Ready").get("status") == "True"
    )
    wait_for("progress on n1", lambda: step_of(kubelet, "rbac") > moved + 10)
    assert_intact(kubelet)


@pytest.mark.usefixtures("need_criu")
def test_the_files_a_workload_writes_go_with_it_to_the_standby(
    emu: Any,
    kubelet: Any,
    svc: Service,  # noqa: F811
) -> None:
    # Its output goes to a file in the pod's own emptyDir, open for writing: the standby's
    # emptyDir has no such file, so CRIU could not restore the staged images there. The
    # source publishes first and the standby's restore puts the file back (files.put_back).
    output = [
        "sh", "-c", "exec python -m core.workloads.counter --state-mb 8 --step-seconds 0.02 "
        "--print-every 5 > \"$CLAWPOINT_HOME/out.log\"",
    ]  # fmt: skip
    before = start_on_n1(emu, kubelet, "writer", {"args": output})
    result = act(svc, Action.MIGRATE, "k8s:Pod/default/writer", to="k8s:n3")
    took = {s.name: s.output for s in result.execution.steps}["takeover"]
    assert (took["how"], took["node"]) == ("handoff", "n3"), took
    wait_for("progress on n3", lambda: step_of(kubelet, "writer") > before + 10)

    def log_of(pod: str) -> str:
        (path,) = Path(kubelet.root).glob(f"default_{pod}_*/volumes/home/home/out.log")
        return path.read_text()

    # the copy's file began as the source's did at the dump, and the program writes on in it
    wait_for("lines after the move", lambda: f"step {before + 10}" in log_of(took["pod"]))
    moved = log_of(took["pod"])
    assert "step 5 verified" in moved and "STATE CHECK FAILED" not in moved, moved[-500:]
    assert running(emu, took["pod"])


@pytest.mark.usefixtures("need_criu")
def test_a_standby_that_cannot_fit_beside_its_source_gives_way_at_once(
    emu: Any,
    kubelet: Any,
    svc: Service,  # noqa: F811
) -> None:
    # A resize that must restart the container moves the pod on its own node: 6 CPUs beside
    # the source's 5 do not fit on an 8-CPU node until the source has ended. The standby is
    # dropped as soon as the scheduler says so, and the ordinary copy takes the room after.
    size = {"cpu": "5", "memory": "512Mi"}
    before = start_on_n1(emu, kubelet, "big", {
        "resources": {"limits": size, "requests": dict(size)},
        "resizePolicy": [{"resourceName": "cpu", "restartPolicy": "RestartContainer"}],
    })  # fmt: skip
    result = act(svc, Action.RESIZE, "k8s:Pod/default/big", cpus=6)
    steps = {s.name: s for s in result.execution.steps}
    assert "does not fit" in steps["wait_standby"].output["why"], steps["wait_standby"].output
    took = steps["takeover"].output
    assert (took["how"], took["node"]) == ("restart", "n1"), took
    wait_for("only the copy left", lambda: set(pods(emu)) == {took["pod"]})
    assert pods(emu)[took["pod"]]["spec"]["containers"][0]["resources"]["limits"]["cpu"] == "6"
    wait_for("progress again", lambda: step_of(kubelet, "big") > before + 10)
    assert_intact(kubelet)


@pytest.mark.parametrize(
    "extra",
    [["--hand-over", "0123456789ab"], ["--stop", "--hand-over"],
     ["--stop", "--hand-over", "not-hex!"], ["--stop", "--hand-over", "0123456789ab", "x"]],
)  # fmt: skip
def test_the_exec_refuses_a_malformed_hand_over_before_it_asks_any_wrapper(
    extra: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    from core.backends.kubernetes import incontainer

    monkeypatch.setenv("CLAWPOINT_HOME", str(tmp_path))  # no wrapper, no socket there
    code = incontainer.main(["checkpoint", "lin", *extra])
    err = capsys.readouterr().err
    assert code != 0 and '"invalid-input"' in err, (code, err)
