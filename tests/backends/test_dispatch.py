"""The dispatch tables of the Kubernetes, Slurm and local backends, pinned against the catalogue.

A backend's capabilities are its plan table's keys; each entry reads the parameter model the
catalogue gives its action (Kubernetes once kept its own list of what each action takes,
and it had drifted); every step op a plan can emit has a runner in the step table; the plan
and step modules take the backend's context protocol and never import the backend module;
the retry-then-translate helper both transports share retries only transient faults, within
its bound. No cluster is needed: nothing here reaches one.
"""

from __future__ import annotations

import ast
import inspect
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import grimp
import pytest

from core import actions as catalogue
from core import errors
from core.actions import CordonParams, StartParams
from core.backends import dispatch
from core.backends.base import PlanDraft, no_progress
from core.backends.dispatch import PlanEntry
from core.backends.kubernetes import builders as k8s_builders
from core.backends.kubernetes import jobs as k8s_jobs
from core.backends.kubernetes import moves as k8s_moves
from core.backends.kubernetes import mutations as k8s_mutations
from core.backends.kubernetes import node_plans as k8s_node_plans
from core.backends.kubernetes import nodes as k8s_nodes
from core.backends.kubernetes import plans as k8s_plans
from core.backends.kubernetes import steps as k8s_steps
from core.backends.kubernetes.backend import KubernetesBackend
from core.backends.local import node_plans as local_node_plans
from core.backends.local import planning as local_planning
from core.backends.local import plans as local_plans
from core.backends.local import steps as local_steps
from core.backends.local.backend import LocalBackend
from core.backends.retrying import Transient, with_retries
from core.backends.slurm import backend as slurm_backend_module
from core.backends.slurm import plans as slurm_plans
from core.backends.slurm import steps as slurm_steps
from core.backends.slurm.backend import SlurmBackend
from core.config import load_settings
from core.model import Action
from core.service.facade import bootstrap

TABLES: dict[str, tuple[dict[Action, PlanEntry[Any]], dict[str, Any]]] = {
    "k8s": (k8s_plans.PLANS, k8s_steps.STEPS),
    "slurm": (slurm_plans.PLANS, slurm_backend_module.STEPS),
    "local": (local_plans.PLANS, local_steps.STEPS),
}


class _Untouchable:
    """A context that fails the test if a plan reaches it: refusals come first."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the plan reached the backend ({name}) before refusing")


def _backend(name: str, home: Path) -> Any:
    if name == "k8s":
        return KubernetesBackend()
    if name == "slurm":
        return SlurmBackend()
    local = bootstrap(load_settings(home)).backend("local")
    assert isinstance(local, LocalBackend)
    return local


@pytest.mark.parametrize("name", sorted(TABLES))
def test_capabilities_are_the_plan_table(name: str, tmp_path: Path) -> None:
    backend = _backend(name, tmp_path)
    plans, _steps = TABLES[name]
    assert backend.capabilities() == frozenset(plans)
    assert backend.capabilities() == dispatch.capabilities(plans)


@pytest.mark.parametrize("name", sorted(TABLES))
def test_each_plan_reads_the_catalogues_parameter_model(name: str) -> None:
    plans, _steps = TABLES[name]
    assert dispatch.disagreements(plans) == []
    for action, entry in plans.items():
        assert issubclass(catalogue.spec(action).params, entry.params), action


def test_a_drifted_entry_is_named() -> None:
    """What Kubernetes' own list had become: checkpoint read as if it took more than the
    catalogue's model (which sends ``stop`` to preempt)."""

    def nothing(ctx: object, target: str, params: Any) -> PlanDraft:
        raise AssertionError("not planned")

    drifted: dict[Action, PlanEntry[object]] = {
        Action.CHECKPOINT: PlanEntry(nothing, StartParams),
        Action.CORDON_NODE: PlanEntry(nothing, CordonParams),
    }
    (problem,) = dispatch.disagreements(drifted)
    assert problem.startswith("checkpoint: the plan reads StartParams")


def _emitted_ops(module: ModuleType) -> set[str]:
    """The op of every ``step(NAME, OP, ...)`` / ``_step(...)`` call and every
    ``PlanStep(op=OP, ...)`` written in a module."""
    ops: set[str] = set()
    for node in ast.walk(ast.parse(inspect.getsource(module))):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        if called == "PlanStep":
            ops.update(
                str(k.value.value)
                for k in node.keywords
                if k.arg == "op" and isinstance(k.value, ast.Constant)
            )
            continue
        if len(node.args) < 2:
            continue
        op = node.args[1]
        if called in ("step", "_step") and isinstance(op, ast.Constant):
            ops.add(str(op.value))
    return ops


@pytest.mark.parametrize(
    ("name", "modules", "extra"),
    [
        (
            "k8s",
            [k8s_builders, k8s_plans, k8s_node_plans, k8s_moves, k8s_jobs, k8s_nodes],
            {"patch"},  # patch_step
        ),
        ("slurm", [slurm_plans], set()),
        (
            "local",
            [local_plans, local_node_plans, local_planning],
            {"suspend_gpu", "resume_gpu"},  # op=action.value
        ),
    ],
)
def test_every_step_a_plan_emits_has_a_runner(
    name: str, modules: list[ModuleType], extra: set[str]
) -> None:
    _plans, steps = TABLES[name]
    emitted = set(extra).union(*(_emitted_ops(m) for m in modules))
    assert len(emitted) >= 5, emitted  # the scan found the plans' steps
    assert emitted <= set(steps), emitted - set(steps)


def test_every_kubernetes_request_is_a_step() -> None:
    assert set(k8s_mutations.MUTATING) <= set(k8s_steps.STEPS)


def test_recovery_tables_name_real_steps() -> None:
    assert set(k8s_steps.RECOVER) <= set(k8s_steps.STEPS)
    assert set(slurm_steps.RECOVER) <= set(slurm_backend_module.STEPS)
    assert slurm_steps.RECONCILABLE <= set(slurm_steps.RECOVER)


@pytest.mark.parametrize(
    ("name", "label"), [("k8s", "Kubernetes"), ("slurm", "Slurm"), ("local", "local")]
)
def test_an_unknown_step_runs_nothing(name: str, label: str) -> None:
    _plans, steps = TABLES[name]
    with pytest.raises(errors.InvalidInput, match=f"unknown {label} step 'rm'"):
        dispatch.run_step(steps, _Untouchable(), "rm", {}, no_progress, backend=label)


@pytest.mark.parametrize("name", sorted(TABLES))
def test_refusals_come_before_the_backend_is_asked(name: str) -> None:
    plans, _steps = TABLES[name]
    ctx = _Untouchable()
    # Parameters of another action's model, an unknown parameter, an action not in the table.
    with pytest.raises(errors.InvalidInput):
        dispatch.plan(plans, ctx, Action.CHECKPOINT, "x", StartParams(), backend=name)
    with pytest.raises(errors.InvalidInput, match="unknown argument"):
        dispatch.plan(plans, ctx, Action.PREEMPT, "x", {"bogus": 1}, backend=name)
    missing = next(a for a in (Action.KILL, Action.SCALE) if a not in plans)
    with pytest.raises(errors.NotSupported, match=f"the {name} backend cannot {missing.value}"):
        dispatch.plan(plans, ctx, missing, "x", {}, backend=name)


def test_slurm_says_why_it_does_not_scale() -> None:
    with pytest.raises(errors.NotSupported, match="fixed allocation"):
        SlurmBackend().plan(Action.SCALE, "slurm:1", catalogue.params_for(Action.SCALE, replicas=2))


@pytest.mark.parametrize(
    ("action", "params"),
    [
        (Action.RESUME, {"fresh": True}),
        (Action.SCALE, {"replicas": 1, "down_without_save": True}),
    ],
)
def test_kubernetes_refuses_what_it_does_not_do_before_any_lookup(
    action: Action, params: dict[str, Any]
) -> None:
    with pytest.raises(errors.NotSupported):
        dispatch.plan(k8s_plans.PLANS, _Untouchable(), action, "ns/job/x", params, backend="k8s")


@pytest.mark.parametrize(
    "package", ["core.backends.kubernetes", "core.backends.slurm", "core.backends.local"]
)
def test_plans_and_steps_do_not_import_their_backend(package: str) -> None:
    """The old circles (``actions`` <-> ``backend``) stay gone: only the package's own
    ``__init__`` may import the backend module."""
    graph = grimp.build_graph("core")
    backend = f"{package}.backend"
    importers = {
        m for m in graph.find_modules_that_directly_import(backend) if m.startswith(package)
    }
    assert importers <= {package}, importers


def test_local_says_why_it_does_not_scale(tmp_path: Path) -> None:
    local = _backend("local", tmp_path)
    with pytest.raises(errors.NotSupported, match="single processes; use migrate"):
        local.plan(Action.SCALE, "w", catalogue.params_for(Action.SCALE, replicas=2))


def test_every_local_step_the_backend_runs_is_in_the_table(tmp_path: Path) -> None:
    """The local backend runs steps only through its table: an unknown op runs nothing
    (it used to fall off the end of an if-chain)."""
    local = _backend("local", tmp_path)
    with pytest.raises(errors.InvalidInput, match="unknown local step 'rm'"):
        local.run_step("rm", {}, no_progress)
    assert set(local_steps.STEPS) == {
        "checkpoint", "standby", "start", "fence", "terminate", "set_node",
        "delete_checkpoint", "suspend_gpu", "resume_gpu", "set_interval", "release",
        "set_limits",
    }  # fmt: skip


def test_no_backend_module_grows_past_600_lines() -> None:
    """The rooms the if-chains left stay rooms (the local backend was two of 730+ lines)."""
    root = Path(__file__).resolve().parents[2] / "core" / "backends"
    sizes = {str(p.relative_to(root)): len(p.read_text().splitlines()) for p in root.rglob("*.py")}
    assert max(sizes.values()) <= 600, {k: v for k, v in sizes.items() if v > 600}


# ----- the shared retry helper ------------------------------------------------------------
def _down(last: BaseException | None) -> errors.ClawpointError:
    return errors.BackendUnavailable(f"down: {last}", hint="check it")


def test_transient_faults_are_retried_then_answered() -> None:
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise Transient("refused", retry_after=0.01)
        return "ok"

    assert with_retries(flaky, total_s=5, max_wait_s=0.01, unavailable=_down) == "ok"
    assert len(calls) == 3


def test_a_fault_that_stays_becomes_the_backends_error_within_the_bound() -> None:
    started = time.monotonic()
    with pytest.raises(errors.BackendUnavailable, match="down: refused"):
        with_retries(
            lambda: (_ for _ in ()).throw(Transient("refused")),
            total_s=0.3,
            max_wait_s=0.05,
            unavailable=_down,
        )
    assert time.monotonic() - started < 2.0


def test_other_errors_leave_at_once() -> None:
    calls: list[int] = []

    def missing() -> None:
        calls.append(1)
        raise errors.NotFound("no such pod", hint="list them")

    with pytest.raises(errors.NotFound):
        with_retries(missing, total_s=5, max_wait_s=0.01, unavailable=_down)
    assert calls == [1]
