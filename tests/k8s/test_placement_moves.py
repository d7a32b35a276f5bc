"""Moves that the pre-flight decides, run for real (fake kubelet, CRIU): a refused target
stops nothing, a move without ``--to`` lands where the pod fits, and a bare pod with
``restartPolicy: Always`` (the default) is moved instead of waited on forever."""

from __future__ import annotations

from typing import Any

import pytest

from core import errors
from core.model import Action
from core.service.facade import Service
from tests.k8s.conftest import node, wrapped_pod
from tests.k8s.test_actions import (  # noqa: F401 - svc is a fixture
    PERSON,
    act,
    assert_intact,
    pods,
    running,
    step_of,
    svc,
    wait_for,
)

pytestmark = pytest.mark.usefixtures("need_criu")


def _set_node(emu: Any, name: str, **spec: Any) -> None:
    kind = emu.store.kinds[("", "nodes")]
    obj = emu.store.get(kind, "", name)
    obj["spec"].update(spec)
    emu.store.update(kind, "", name, obj, api=False)


def test_migrate_to_a_tainted_node_is_refused_and_the_pod_keeps_running(
    emu: Any,
    kubelet: Any,
    svc: Service,  # noqa: F811
) -> None:
    manifest = wrapped_pod("stay", "stay")
    manifest["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "n1"}
    emu.seed(manifest)
    wait_for("stay on n1", lambda: running(emu, "stay"))
    _set_node(emu, "n3", taints=[{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}])  # fmt: skip
    before = wait_for("progress", lambda: (s := step_of(kubelet, "stay")) > 10 and s)
    sent = len(emu.requests)
    with pytest.raises(errors.Conflict) as info:
        svc.act(Action.MIGRATE, "k8s:Pod/default/stay", {"to": "k8s:n3"}, principal=PERSON, confirmed=True)  # fmt: skip
    assert "n3" in info.value.message
    assert "node-role.kubernetes.io/control-plane:NoSchedule" in info.value.message
    assert not [r for r in emu.requests[sent:] if "/exec" in r.path or r.method == "DELETE"]
    assert running(emu, "stay") and set(pods(emu)) == {"stay"}
    wait_for("it keeps working", lambda: step_of(kubelet, "stay") > before + 10)


def test_migrate_without_to_lands_on_a_node_with_a_free_gpu(
    emu: Any,
    kubelet: Any,
    svc: Service,  # noqa: F811
) -> None:
    emu.seed(node("n4", gpus=1))
    kubelet.nodes.add("n4")
    manifest = wrapped_pod("trainer", "trainer")
    manifest["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    manifest["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "n2"}
    emu.seed(manifest)
    wait_for("trainer on n2", lambda: running(emu, "trainer"))
    wait_for("progress", lambda: step_of(kubelet, "trainer") > 10)
    result = act(svc, Action.MIGRATE, "k8s:Pod/default/trainer")
    assert result.plan.scope.fits == ["n4"]
    wait_for("the old pod removed", lambda: "trainer" not in pods(emu))
    (name,) = pods(emu)
    assert pods(emu)[name]["spec"]["nodeName"] == "n4"
    assert_intact(kubelet)


def test_migrate_of_a_bare_pod_that_restarts_completes(
    emu: Any,
    kubelet: Any,
    svc: Service,  # noqa: F811
) -> None:
    manifest = wrapped_pod("phoenix", "phoenix")
    manifest["spec"]["restartPolicy"] = "Always"
    manifest["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "n1"}
    emu.seed(manifest)
    wait_for("phoenix on n1", lambda: running(emu, "phoenix"))
    before = wait_for("progress", lambda: (s := step_of(kubelet, "phoenix")) > 20 and s)
    result = act(svc, Action.MIGRATE, "k8s:Pod/default/phoenix", to="k8s:n3")
    steps = {s.name: s for s in result.execution.steps}
    assert steps["wait_restored"].output["node"] == "n3"
    taken = steps["checkpoint"].output["seq"]
    restored = steps["wait_restored"].output["restored_from"]
    assert int(restored.rpartition("@")[2]) >= taken  # the SIGTERM checkpoint or the first
    now = pods(emu)
    assert "phoenix" not in now
    (new_name,) = now
    assert now[new_name]["spec"]["nodeName"] == "n3"
    statuses = (now[new_name].get("status") or {}).get("containerStatuses") or [{}]
    assert statuses[0].get("restartCount", 0) == 0
    wait_for("progress on n3", lambda: step_of(kubelet, "phoenix") > before + 10)
    assert_intact(kubelet)
