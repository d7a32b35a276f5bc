"""The local backend's step arguments are typed per op (core.backends.local.step_args).

Every op the step table runs has an arguments model; a plan whose step carries arguments
its op's model refuses is not made; the JSON a plan records is what it always was.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from core import errors
from core.actions import NoParams
from core.backends import dispatch
from core.backends.base import PlanDraft
from core.backends.kubernetes import backend as kube_steps
from core.backends.kubernetes import builders
from core.backends.kubernetes import step_args as kube_args
from core.backends.local import step_args, steps
from core.backends.local.planning import start_step
from core.backends.local.step_args import CheckpointArgs, StartArgs
from core.backends.slurm import backend as slurm_backend_module
from core.backends.slurm import plans as slurm_plans
from core.backends.slurm import step_args as slurm_args
from core.model import NodeHealth, NodeInfo, PlanStep, WorkloadInfo, WorkloadState


def test_every_step_op_has_an_arguments_model() -> None:
    assert set(step_args.ARGS) == set(steps.STEPS)


def test_a_step_with_arguments_its_op_refuses_fails_the_plan() -> None:
    bad = PlanDraft(
        steps=[
            PlanStep(
                name="checkpoint",
                op="checkpoint",
                description="checkpoint w",
                args={"workload": "w", "stopp": True},
            )
        ],
        summary="checkpoint w",
    )
    with pytest.raises(errors.OperationFailed, match="stopp"):
        dispatch.check_args(step_args.ARGS, bad, backend="local")
    unknown = PlanDraft(steps=[PlanStep(name="x", op="frobnicate", description="x")], summary="x")
    with pytest.raises(errors.OperationFailed, match="frobnicate"):
        dispatch.check_args(step_args.ARGS, unknown, backend="local")
    with pytest.raises(TypeError):
        step_args.step("start", "start", CheckpointArgs(workload="w", stop=True), "start w")


def test_the_recorded_arguments_are_unchanged() -> None:
    assert start_step("w", "n2", None, "d").args == {
        "workload": "w",
        "node": "n2",
        "restore_from": None,
    }
    assert start_step("w", "n2", None, "d", fresh=True).args["fresh"] is True
    handed = start_step("w", "n2", "$checkpoint.checkpoint_id", "d", after_standby=True)
    assert handed.args == {
        "workload": "w",
        "node": "n2",
        "restore_from": "$checkpoint.checkpoint_id",
        "standby_pid": "$standby.pid",
        "standby": "$standby.socket",
    }
    # Resolved by the executor before the step reads them: a pid, then a path.
    resolved = StartArgs.model_validate({**handed.args, "standby_pid": 42, "standby": "/s"})
    assert resolved.standby_pid == 42
    assert CheckpointArgs(workload="w", stop=False).as_args() == {"workload": "w", "stop": False}


# ----- Slurm -------------------------------------------------------------------------------
class _SlurmStub:
    """What the Slurm plans read of their context: a lineage, an owner, two timeouts."""

    cfg = SimpleNamespace(checkpoint_timeout_s=300.0, start_timeout_s=120.0)

    def lineage(self, w: WorkloadInfo) -> str:
        return "lin"

    def owner(self, w: WorkloadInfo) -> str | None:
        return "alice"


def test_slurm_every_step_op_has_an_arguments_model() -> None:
    assert set(slurm_args.ARGS) == set(slurm_backend_module.STEPS)


def test_slurm_recorded_arguments_are_unchanged() -> None:
    """The args each Slurm plan step records (and so every plan hash) are what they were."""
    b: Any = _SlurmStub()
    w = WorkloadInfo(id="slurm:7", backend="slurm", name="7", state=WorkloadState.RUNNING)
    got = [
        (s.name, s.op, s.args)
        for s in slurm_plans._save_and_stop(b, w, prefix="job")
        + slurm_plans._failover_steps(b, "7", "n1", "n2", prefix="job")
        + slurm_plans._restart(b, "7", {})
    ]
    assert got == [
        ("job7-signal", "signal", {"job": "7", "signal": "USR2", "lineage": "lin", "owner": "alice"}),
        ("job7-wait_checkpoint", "wait_checkpoint", {"lineage": "lin", "owner": "alice", "after_seq": "$job7-signal.after_seq", "timeout_s": 300.0}),
        ("job7-wait_ended", "wait_ended", {"job": "7", "timeout_s": 300.0}),
        ("job7-requeue", "requeue", {"job": "7", "hold": True}),
        ("job7-node_down", "node_down", {"node": "n1", "reason": "clawpoint failover"}),
        ("job7-requeue", "requeue", {"job": "7", "hold": True}),
        ("job7-place", "update_job", {"job": "7", "fields": {"ExcNodeList": "", "NodeList": "n2"}}),
        ("job7-release", "release", {"job": "7"}),
        ("job7-start_now", "update_job", {"job": "7", "fields": {"StartTime": "now"}}),
        ("job7-wait_running", "wait_running", {"job": "7", "timeout_s": 120.0}),
        ("release", "release", {"job": "7"}),
        ("start_now", "update_job", {"job": "7", "fields": {"StartTime": "now"}}),
        ("wait_running", "wait_running", {"job": "7", "timeout_s": 120.0}),
    ]  # fmt: skip
    node = NodeInfo(
        id="slurm:n1",
        backend="slurm",
        name="n1",
        state="drain",
        schedulable=False,
        health=NodeHealth.DOWN,
    )
    undrain = slurm_plans.plan_undrain(b, node, NoParams())
    assert [s.args for s in undrain.steps] == [{"node": "n1", "timeout_s": 30.0}]
    ckpt = slurm_plans.plan_checkpoint(b, w, NoParams())
    assert [s.args for s in ckpt.steps] == [
        {"job": "7", "signal": "USR1", "lineage": "lin", "owner": "alice"},
        {"lineage": "lin", "owner": "alice", "after_seq": "$signal.after_seq", "timeout_s": 300.0},
    ]
    for s in [*undrain.steps, *ckpt.steps]:  # and every step fits its model
        slurm_args.ARGS[s.op].model_validate(s.args)


def test_slurm_steps_refuse_arguments_that_do_not_fit() -> None:
    b: Any = _SlurmStub()
    with pytest.raises(errors.InvalidInput):
        slurm_backend_module.STEPS["requeue"](b, {"job": "7", "hld": True}, lambda *a: None)
    with pytest.raises(errors.InvalidInput):
        slurm_backend_module.STEPS["release"](b, {}, lambda *a: None)


# ----- Kubernetes --------------------------------------------------------------------------
def test_kubernetes_every_step_op_has_an_arguments_model() -> None:
    assert set(kube_args.ARGS) == set(kube_steps.STEPS)


def test_kubernetes_recorded_arguments_are_unchanged() -> None:
    """The args the Kubernetes step builders record (and so plan hashes) are what they were."""
    b: Any = SimpleNamespace(cfg=SimpleNamespace(checkpoint_timeout_s=300.0, start_timeout_s=120))
    built = [
        builders.patch_step("p", "Job", "ns", "j", {"spec": {"suspend": True}}, "d"),
        builders.wait_pods_gone_step(b, "g", "ns", "app=x", "Job ns/j"),
        builders.wait_restored_step(b, "r", "ns", "metadata.name=p2", "lin", "$checkpoint.seq"),
        builders.step("e", "evict", "d", namespace="ns", name="p", wait_s=30),
        builders.step("x", "delete_pod", "d", namespace="ns", name="p", grace_s=None),
    ]
    assert [s.args for s in built] == [
        {"kind": "Job", "namespace": "ns", "name": "j", "patch": {"spec": {"suspend": True}}, "subresource": ""},
        {"namespace": "ns", "selector": "app=x", "timeout_s": 300.0},
        {"namespace": "ns", "selector": "metadata.name=p2", "lineage": "lin", "min_seq": "$checkpoint.seq", "timeout_s": 120},
        {"namespace": "ns", "name": "p", "wait_s": 30},
        {"namespace": "ns", "name": "p", "grace_s": None},
    ]  # fmt: skip
    assert type(built[2].args["timeout_s"]) is int  # an int stays an int: same JSON, same hash
    with pytest.raises(ValueError, match="nme"):
        builders.step("e", "evict", "d", namespace="ns", nme="p")
