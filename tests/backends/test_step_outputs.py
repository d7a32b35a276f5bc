"""What a step reports is typed per op too (``OUTPUTS`` beside ``ARGS`` in each backend's
``step_args``): a ``$STEP.FIELD`` reference is checked when the plan is made, not when the
step that reads it runs (after the workload was stopped), and a step's answer is held to
its op's model (``core.backends.step_models``, ``core.backends.dispatch``)."""

from __future__ import annotations

from typing import Any

import pytest

from core import errors
from core.actions import MoveParams
from core.backends import dispatch
from core.backends.base import PlanDraft
from core.backends.dispatch import PlanEntry
from core.backends.kubernetes import backend as kube_steps
from core.backends.kubernetes import step_args as kube_args
from core.backends.local import step_args as local_args
from core.backends.local import steps as local_steps
from core.backends.local.planning import start_step
from core.backends.local.step_args import CheckpointArgs, step
from core.backends.slurm import backend as slurm_backend_module
from core.backends.slurm import step_args as slurm_args
from core.backends.slurm import steps as slurm_steps
from core.model import Action

TABLES = {
    "local": (local_args, local_steps.STEPS),
    "slurm": (slurm_args, slurm_backend_module.STEPS),
    "kubernetes": (kube_args, kube_steps.STEPS),
}


@pytest.mark.parametrize("backend", sorted(TABLES))
def test_every_step_op_has_an_output_model(backend: str) -> None:
    models, steps = TABLES[backend]
    assert set(models.OUTPUTS) == set(steps) == set(models.ARGS)


def _migrate(restore_from: str) -> PlanDraft:
    """A local migrate as the plans draft it: checkpoint and stop, then start elsewhere."""
    return PlanDraft(
        steps=[
            step("checkpoint", "checkpoint", CheckpointArgs(workload="w", stop=True), "c"),
            start_step("w", "node-b", restore_from, "s"),
        ],
        on_failure=[start_step("w", "node-a", "$checkpoint.checkpoint_id", "back")],
        summary="migrate w",
    )


def _plan(draft: PlanDraft) -> PlanDraft:
    table = {Action.MIGRATE: PlanEntry(lambda ctx, target, params: draft, MoveParams)}
    return dispatch.plan(
        table, None, Action.MIGRATE, "w", {"to": "node-b"}, backend="local",
        args=local_args.ARGS, outputs=local_args.OUTPUTS,
    )  # fmt: skip


def test_a_plan_whose_references_hold_is_made() -> None:
    assert _plan(_migrate("$checkpoint.checkpoint_id")).steps[1].args["restore_from"] == (
        "$checkpoint.checkpoint_id"
    )


@pytest.mark.parametrize(
    ("ref", "said"),
    [
        ("$checkpoint.checkpoint_idd", "the 'checkpoint' step reports no 'checkpoint_idd'"),
        ("$checkpointt.checkpoint_id", "names no earlier step"),
    ],
)
def test_a_reference_to_nothing_fails_the_plan_before_anything_runs(ref: str, said: str) -> None:
    with pytest.raises(errors.OperationFailed, match=said) as refused:
        _plan(_migrate(ref))
    assert "bug in the backend's plan" in refused.value.hint


def test_a_reference_to_a_later_step_fails_the_plan() -> None:
    draft = _migrate("$checkpoint.checkpoint_id")
    draft.steps.reverse()  # the start would read the checkpoint before it is taken
    with pytest.raises(errors.OperationFailed, match="names no earlier step"):
        _plan(draft)


def test_every_reference_the_shipped_plans_make_is_declared() -> None:
    """The references plans write (``$standby.pid``, ``$signal.after_seq``, ...) name fields
    their op's output model declares; references() finds each one."""
    cases = [
        (local_args, "start", start_step("w", "n", "$checkpoint.checkpoint_id", "d", after_standby=True).args, {"checkpoint": "checkpoint", "standby": "standby"}),
        (slurm_args, "wait_checkpoint", {"after_seq": "$signal.after_seq"}, {"signal": "signal"}),
        (kube_args, "wait_restored", {"min_seq": "$checkpoint.seq"}, {"checkpoint": "exec_checkpoint"}),
    ]  # fmt: skip
    from core.backends.step_models import references

    for models, _op, args, ops in cases:
        found = references(args)
        assert found
        for _key, name, field in found:
            assert field in models.OUTPUTS[ops[name]].model_fields


def test_a_step_answer_its_model_refuses_is_an_error_with_the_answer() -> None:
    table: dict[str, Any] = {"checkpoint": lambda ctx, args, progress: {"size_bytes": 1}}
    with pytest.raises(errors.OperationFailed, match="checkpoint_id") as wrong:
        dispatch.run_step(
            table, None, "checkpoint", {}, lambda *a: None, backend="local",
            outputs=local_args.OUTPUTS,
        )  # fmt: skip
    assert wrong.value.details["output"] == {"size_bytes": 1}
    # Fields the model does not declare are kept (informative: timings, reports).
    table["checkpoint"] = lambda ctx, args, progress: {"checkpoint_id": "w@1", "extra": 2}
    out = dispatch.run_step(
        table, None, "checkpoint", {}, lambda *a: None, backend="local",
        outputs=local_args.OUTPUTS,
    )  # fmt: skip
    assert out == {"checkpoint_id": "w@1", "extra": 2}


def test_what_recovery_reports_fits_the_models() -> None:
    """Outputs read back after a crash feed later references too: they fit the same models."""
    from core.backends.local.recovery import _recovered_checkpoint
    from core.model import CheckpointInfo, utcnow

    c = CheckpointInfo(
        id="w@3", backend="local", workload="w", lineage="w", seq=3, created_at=utcnow(),
        size_bytes=10, node="node-a", engine="criu",
    )  # fmt: skip
    got = local_args.CheckpointOutput.model_validate(_recovered_checkpoint(c, handoff="sent"))
    assert (got.checkpoint_id, got.recovered) == ("w@3", True)

    class Slurm:  # what the Slurm signal's recovery reads: the newest checkpoint
        def newest_checkpoint(self, lineage: str, owner: str | None) -> CheckpointInfo:
            return c

    sent = slurm_steps.recover_step(
        Slurm(),  # type: ignore[arg-type]
        "signal", {"job": "7", "signal": "USR1", "lineage": "w"}, c.created_at,
    )  # fmt: skip
    assert sent is not None
    assert slurm_args.SignalOutput.model_validate(sent).after_seq == 2
