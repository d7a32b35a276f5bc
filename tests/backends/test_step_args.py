"""The local backend's step arguments are typed per op (core.backends.local.step_args).

Every op the step table runs has an arguments model; a plan whose step carries arguments
its op's model refuses is not made; the JSON a plan records is what it always was.
"""

from __future__ import annotations

import pytest

from core import errors
from core.backends import dispatch
from core.backends.base import PlanDraft
from core.backends.local import step_args, steps
from core.backends.local.planning import start_step
from core.backends.local.step_args import CheckpointArgs, StartArgs
from core.model import PlanStep


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
