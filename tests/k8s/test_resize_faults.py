"""The fault matrix of ``resize`` on Kubernetes: the installed ``clawpoint`` is SIGKILLed
before and after a step of a resize (the test-only hook ``CLAWPOINT_TEST_KILL_AT``, as in
tests/reliability/test_fault_matrix.py) and the next clawpoint command reconciles it.

Two resizes of a wrapped pod counting under real CRIU on the fake kubelet:

- **in place** (512Mi -> 1Gi, ``pods/resize`` then the wait for the kubelet): the execution
  finishes from the step it reached (the patch is read back, ``steps._patched``), the pod has
  the new limits in its spec and its status, and it is the same process, never restarted;
- **moved** (512Mi -> 1Gi on another node, a live move: create the replacement as a standby,
  wait until it listens, stop the pod handing over to it, wait for the pod to end, confirm the
  takeover, delete the old pod): the execution finishes, exactly one pod of the lineage runs,
  on the node asked, with the new limits, and it counts on from its checkpoint with its own
  state check intact.

Each: exactly one recovery entry audited, the audit chain verifies. CI kills after the
in-place patch, after the standby's creation (the two steps whose effect a crash can leave
unrecorded) and after the handover (the takeover is then confirmed, never redone);
``CLAWPOINT_FAULT_MATRIX=full`` kills before and after every step.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import pytest

from core.config import load_settings
from core.model import Action
from core.service.facade import bootstrap
from tests.k8s.conftest import wait_for
from tests.k8s.test_actions import assert_intact, pods, running, step_of
from tests.k8s.test_resize import home as home
from tests.k8s.test_resize import sized_pod
from tests.reliability.test_fault_matrix import env, kill_then_reconcile

FULL = os.environ.get("CLAWPOINT_FAULT_MATRIX") == "full"
TARGET = "k8s:Pod/default/w"
# how -> (the CLI's resize arguments, the plan's step names)
RESIZES: dict[str, tuple[list[str], list[str]]] = {
    "in-place": (["--memory", "1Gi"], ["resize", "wait_resized"]),
    "moved": (
        ["--memory", "1Gi", "--to", "n2"],
        # a bare pod with restartPolicy Never moves live (tests/k8s/test_live_moves.py)
        ["standby", "wait_standby", "checkpoint", "wait_ended", "takeover", "delete_old"],
    ),
}
CASES = (
    [(how, s, when) for how, (_, names) in RESIZES.items() for s in names
     for when in ("before", "after")]
    if FULL else [("in-place", "resize", "after"), ("moved", "standby", "after"),
                  ("moved", "checkpoint", "after")]
)  # fmt: skip


@pytest.mark.parametrize(("how", "at", "when"), CASES)
def test_killed_at_a_resize_step_is_reconciled(
    need_criu: None, emu: Any, kubelet: Any, home: Path, how: str, at: str, when: str
) -> None:
    settings = load_settings(home)
    service = bootstrap(settings)
    emu.seed(sized_pod("w", "n1"))
    wait_for("w runs", lambda: running(emu, "w"))
    before = wait_for("progress", lambda: (s := step_of(kubelet, "w")) > 10 and s)
    container_id = running(emu, "w")["status"]["containerStatuses"][0]["containerID"]  # type: ignore[index]
    args, names = RESIZES[how]
    plan = service.plan(
        Action.RESIZE, TARGET, {"memory": "1Gi", **({"to": "n2"} if how == "moved" else {})}
    )
    assert [s.name for s in plan.steps] == names  # the matrix covers the plan as it is
    after, _ = kill_then_reconcile(
        service, TARGET, ["resize", TARGET, *args, "--yes", "--json"],
        kill_at=f"resize:{at}:{when}", env_of=functools.partial(env, settings),
        again=["workloads", "--backend", "k8s", "--json"],
    )  # fmt: skip
    assert after["status"] == "succeeded", after

    if how == "in-place":
        now = running(emu, "w")
        assert now is not None and set(pods(emu)) == {"w"}
        assert now["spec"]["containers"][0]["resources"]["limits"]["memory"] == "1Gi"
        assert now["status"]["containerStatuses"][0]["resources"]["limits"]["memory"] == "1Gi"
        assert now["status"]["containerStatuses"][0]["containerID"] == container_id
    else:
        wait_for("the old pod removed", lambda: "w" not in pods(emu))
        (name,) = pods(emu)  # exactly one pod of the lineage
        moved = wait_for("the replacement runs", lambda: running(emu, name))
        assert moved["spec"]["nodeName"] == "n2"
        assert moved["spec"]["containers"][0]["resources"]["limits"]["memory"] == "1Gi"
    # It counts on from where it was (never from zero), its own state check intact.
    wait_for("it counts on", lambda: step_of(kubelet, "w") > before + 20)
    assert_intact(kubelet)
