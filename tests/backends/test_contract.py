"""The backend contract, for every backend: the parameters an action is given reach its plan.

- ``to`` (migrate, requeue, resume, failover, restore, drain) places the workload on that
  node, and says so in the summary; a node that does not exist, or the node the workload is
  already on, is refused before anything runs.
- ``save`` and ``reason`` (drain) change the plan as they promise; a checkpoint leaves the
  workload running (checkpoint-and-stop is preempt, and ``stop`` is refused naming it).
- Backends take the catalogue's typed parameters (``core.actions``): a parameter the action
  does not take (``to_node``, a typo) is refused with a clear error, never ignored, and a
  backend refuses parameters of another action's model.
- cordon marks a node unschedulable and moves nothing; undrain returns a drained or
  cordoned node to service, and refuses a node that is not drained.
- A backend with pools (``scale_pool``): a shrink of the pool ``running`` is in releases
  only that pool's nodes, saves every live workload on them before their release step, and
  places none on a node it releases; it is disruptive exactly when work moves. A growth
  adds released nodes of the pool only.
- A backend that resizes: a resize onto another node saves the workload (a stop
  checkpoint) before it starts there, and is disruptive; one asking for more than any node
  has is refused naming the nodes (exit 10), nothing planned.
- Every rollback and hint a plan carries names only commands of the installed CLI and tools
  of the live MCP server.
"""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime

import pytest

from core import errors
from core.actions import CATALOGUE, NoParams, params_for, parse, risk_of
from core.backends import capacity
from core.backends.capacity import PoolSource
from core.cli import wording
from core.model import Action, NodeInfo, RiskClass, WorkloadState
from tests.backends.conftest import Subject, execute
from tests.backends.named import NOT_TOOLS, InstalledCli, command_refs, config_keys, tool_like

MOVES = [
    Action.MIGRATE,
    Action.REQUEUE,
    Action.RESUME,
    Action.FAILOVER,
    Action.RESTORE,
    Action.DRAIN_NODE,
    Action.RESIZE,
]
# What a move needs besides ``to`` (a resize to the size a workload has is nothing to do).
EXTRA: dict[Action, dict[str, object]] = {Action.RESIZE: {"cpus": 2}}


def _capable(subject: Subject, action: Action) -> None:
    if action not in subject.backend.capabilities():
        pytest.skip(f"the {subject.name} backend cannot {action.value}")


def test_every_action_taking_to_is_covered() -> None:
    assert {a for a, spec in CATALOGUE.items() if "to" in spec.fields()} == set(MOVES)


@pytest.mark.parametrize("action", MOVES, ids=lambda a: a.value)
def test_to_places_the_workload_on_that_node(subject: Subject, action: Action) -> None:
    _capable(subject, action)
    target = subject.target(action)
    params = params_for(action, to=subject.other, **EXTRA.get(action, {}))
    try:
        draft = subject.backend.plan(action, target, params)
    except errors.NotSupported as exc:  # a Kubernetes Job's pods come from its template
        if action is not Action.RESIZE or subject.name == "local":
            raise
        pytest.skip(f"the {subject.name} subject's workload is not resized: {exc.message}")
    assert subject.placement(draft) == {subject.other}, [s.model_dump() for s in draft.steps]
    assert subject.other in draft.summary


@pytest.mark.parametrize("action", [Action.MIGRATE, Action.RESUME, Action.FAILOVER],
                         ids=lambda a: a.value)  # fmt: skip
def test_to_a_node_that_does_not_exist_is_refused(subject: Subject, action: Action) -> None:
    _capable(subject, action)
    with pytest.raises(errors.NotFound) as info:
        subject.backend.plan(action, subject.target(action), params_for(action, to="nowhere-9"))
    assert "nowhere-9" in info.value.message and info.value.hint


def test_migrate_to_the_node_it_is_on_is_refused(subject: Subject) -> None:
    with pytest.raises(errors.InvalidInput) as info:
        subject.backend.plan(
            Action.MIGRATE, subject.running, params_for(Action.MIGRATE, to=subject.source)
        )
    assert subject.source in info.value.message and info.value.hint


@pytest.mark.parametrize("action", list(Action), ids=lambda a: a.value)
def test_a_parameter_the_action_does_not_take_is_refused(subject: Subject, action: Action) -> None:
    _capable(subject, action)
    takes = set(CATALOGUE[action].fields())
    for params in ({"to_node": subject.other}, {"bogus": 1}, {"replicas": 2, "dry": 1}):
        unknown = sorted(set(params) - takes)
        if not unknown:
            continue
        with pytest.raises(errors.InvalidInput) as info:
            parse(action, params)
        assert all(k in info.value.message for k in unknown), info.value.message
        assert all(f in info.value.hint for f in takes), info.value.hint
    # Another action's model is refused by the backend itself, never half-read.
    wrong = NoParams() if takes else params_for(Action.MIGRATE, to=subject.other)
    with pytest.raises(errors.InvalidInput):
        subject.backend.plan(action, subject.target(action), wrong)


def test_checkpoint_leaves_running_and_stop_names_preempt(subject: Subject) -> None:
    keep = subject.backend.plan(Action.CHECKPOINT, subject.running, NoParams())
    stop = subject.backend.plan(Action.PREEMPT, subject.running, NoParams())
    assert "stop it" not in keep.summary and keep.steps != stop.steps
    with pytest.raises(errors.InvalidInput) as info:
        parse(Action.CHECKPOINT, {"stop": True})
    assert "preempt_workload" in info.value.message + info.value.hint
    assert parse(Action.CHECKPOINT, {"stop": False}) == NoParams()  # asks for nothing else


def test_drain_save_and_reason_reach_the_plan(subject: Subject) -> None:
    reason = "kernel upgrade 6.18"
    params = {"reason": reason, "to": subject.other}
    drain = Action.DRAIN_NODE
    saved = subject.backend.plan(drain, subject.source, params_for(drain, **params, save=True))
    assert subject.placement(saved) == {subject.other}, "a drain that saves moves the workload"
    assert any(s.args.get("reason") == reason for s in saved.steps)
    unsaved = subject.backend.plan(drain, subject.source, params_for(drain, **params, save=False))
    assert not subject.placement(unsaved)
    assert any(s.args.get("reason") == reason for s in unsaved.steps)


def test_undrain_returns_a_drained_node_to_service(subject: Subject) -> None:
    backend, node = subject.backend, subject.other
    assert risk_of(Action.UNDRAIN_NODE, {}) is RiskClass.SAFE
    with pytest.raises(errors.Conflict) as info:
        backend.plan(Action.UNDRAIN_NODE, node, NoParams())  # in service: nothing to undo
    assert info.value.hint
    try:
        # Without save: on a shared cluster, other tests' jobs there are left alone.
        drain = backend.plan(
            Action.DRAIN_NODE, node, params_for(Action.DRAIN_NODE, reason="contract", save=False)
        )
        assert not subject.placement(drain)
        execute(backend, drain)
        assert not _node(subject, node).schedulable
        draft = backend.plan(Action.UNDRAIN_NODE, node, NoParams())
        out = execute(backend, draft)
        assert _node(subject, node).schedulable, out
        # Had clawpoint died after the step, recovery would see that it took effect.
        step = draft.steps[-1]
        assert backend.recover_step(step.op, step.args, datetime.now(UTC)) is not None
    finally:
        if subject.name == "slurm":
            subprocess.run(["scontrol", "update", f"nodename={node}", "state=RESUME"],
                           capture_output=True, check=False)  # fmt: skip


def test_cordon_marks_a_node_unschedulable_and_moves_nothing(subject: Subject) -> None:
    backend, node = subject.backend, subject.source
    cordon = Action.CORDON_NODE
    assert risk_of(cordon, {}) is RiskClass.DISRUPTIVE
    before = {w.id: w.node for w in backend.workloads() if w.node == node}
    try:
        draft = backend.plan(cordon, node, params_for(cordon, reason="contract cordon"))
        assert not subject.placement(draft), "a cordon moves no workload"
        assert all(s.op not in ("checkpoint", "signal", "terminate") for s in draft.steps)
        execute(backend, draft)
        assert not _node(subject, node).schedulable
        after = {w.id: w.node for w in backend.workloads() if w.id in before}
        assert after == before, "its workloads stay where they are"
        with pytest.raises(errors.Conflict):
            backend.plan(cordon, node, params_for(cordon))  # already cordoned
        execute(backend, backend.plan(Action.UNDRAIN_NODE, node, NoParams()))
        assert _node(subject, node).schedulable
    finally:
        if subject.name == "slurm":
            subprocess.run(["scontrol", "update", f"nodename={node}", "state=RESUME"],
                           capture_output=True, check=False)  # fmt: skip


def test_pool_shrink_saves_work_before_release(subject: Subject) -> None:
    if Action.SCALE_POOL not in subject.backend.capabilities():
        pytest.skip(f"the {subject.name} backend has no pools")
    backend = subject.backend
    assert isinstance(backend, PoolSource), "a backend that scales pools lists them"
    pool = capacity.find_pool(backend.pools(), subject.target(Action.SCALE_POOL),
                              backend=subject.name)  # fmt: skip
    assert subject.source in pool.nodes, pool
    assert set(pool.nodes) <= {n.name for n in backend.nodes()}, "a pool's nodes are nodes"
    draft = backend.plan(Action.SCALE_POOL, pool.name, params_for(Action.SCALE_POOL, size=0))
    ops = [subject.pool_step(s) for s in draft.steps]
    released = [what for op in ops if op is not None for kind, what in [op] if kind == "release"]
    assert released and set(released) <= set(pool.nodes), draft.steps
    live = [w for w in backend.workloads()
            if w.node in released and w.state in (WorkloadState.RUNNING,
                                                  WorkloadState.CHECKPOINTING)]  # fmt: skip
    assert live, "the subject's running workload is on the pool's node"
    for w in live:
        saved = ops.index(("save", subject.saved_as(w)))
        assert saved < ops.index(("release", str(w.node))), ops
    assert not subject.placement(draft) & set(released), draft.steps
    assert draft.risk is RiskClass.DISRUPTIVE, "work moves: a person's call"
    with pytest.raises(errors.InvalidInput):
        backend.plan(Action.SCALE_POOL, pool.name,
                     params_for(Action.SCALE_POOL, size=pool.max_size + 1))  # fmt: skip


def test_a_resize_that_moves_saves_the_workload_first(subject: Subject) -> None:
    if subject.name != "local":  # the local backend resizes; the others once they declare it
        _capable(subject, Action.RESIZE)
    backend, running = subject.backend, subject.target(Action.RESIZE)
    params = params_for(Action.RESIZE, memory="256Mi", to=subject.other)
    try:
        draft = backend.plan(Action.RESIZE, running, params)
    except errors.NotSupported as exc:  # e.g. Kubernetes: a Job's pods come from its template
        if subject.name == "local":
            raise
        pytest.skip(f"the {subject.name} subject's workload is not resized: {exc.message}")
    moves = [subject.move_step(s) for s in draft.steps]
    name = running.split(":")[-1]
    saved = moves.index(("save", name))
    starts = [i for i, m in enumerate(moves) if m and m[0] == "start"]
    assert starts and saved < starts[0], moves
    assert subject.placement(draft) == {subject.other}, draft.steps
    assert draft.risk is RiskClass.DISRUPTIVE and (draft.expected_pause_s or 0) > 0, draft
    with pytest.raises(errors.Conflict) as no_fit:
        backend.plan(Action.RESIZE, running, params_for(Action.RESIZE, memory="60Ti"))
    assert no_fit.value.code == "no-node-fits" and subject.other in no_fit.value.message


def _node(subject: Subject, name: str) -> NodeInfo:
    return next(n for n in subject.backend.nodes() if n.name == name)


def test_rollbacks_and_hints_name_real_commands_and_tools(
    subject: Subject, cli: InstalledCli, live_tools: set[str]
) -> None:
    """Plan every action (as it is, and with ``to``): each rollback, and the hint of each
    refusal, names only commands the installed CLI parses and tools the server lists."""
    texts: list[tuple[str, str]] = []
    for action in Action:
        for params in ({}, {"to": subject.other}):
            if set(params) - set(CATALOGUE[action].fields()):
                continue
            if action is Action.SCALE:
                params = {**params, "replicas": 2}
            if action is Action.SET_CHECKPOINT_INTERVAL:
                params = {**params, "every": "1h"}
            if action is Action.SCALE_POOL:
                params = {**params, "size": 0}
            if action is Action.RESIZE:
                params = {**params, "memory": "256Mi"}
            target = subject.target_of(action)
            if target is None or action not in subject.backend.capabilities():
                continue  # the service refuses it with the backend's not_supported hint
            what = f"{subject.name} {action.value} {params}"
            try:
                draft = subject.backend.plan(action, target, params_for(action, **params))
            except errors.ClawpointError as exc:
                texts.append((f"{what} hint", exc.hint))
                continue
            # Recorded neutrally (core.errors.step): never in one interface's words.
            assert not command_refs(draft.rollback), f"{what}: {draft.rollback!r}"
            texts.append((f"{what} rollback", errors.render(draft.rollback, wording.cli)))
            texts.append((f"{what} rollback", errors.render(draft.rollback)))
    rollbacks = [t for w, t in texts if w.endswith("rollback")]
    assert any("clawpoint " in t for t in rollbacks), texts
    assert any("nodes undrain" in t for t in rollbacks), "a drain names its undo"
    assert any("undrain_node(" in t for t in rollbacks), "and an agent reads its tool call"
    keys = config_keys() | NOT_TOOLS
    problems = []
    for where, text in texts:
        for ref in command_refs(text):
            problem = cli.problem(ref)
            if problem:
                problems.append(f"{where}: {text!r}: {problem}")
        for name in tool_like(text, not_tools=keys) - live_tools:
            problems.append(f"{where}: {text!r}: no MCP tool {name}")
    assert not problems, "\n".join(problems)


def test_outputs_give_full_ids(subject: Subject) -> None:
    """Every id a backend reports is ``BACKEND:...``: workloads, their last checkpoint, nodes
    and the workloads on them, checkpoints and their parents."""
    prefix = f"{subject.name}:"
    workloads = subject.backend.workloads()
    checkpoints = subject.backend.checkpoints(None)
    # The local subject's preempted workload was checkpointed. The Slurm subject's jobs are
    # not wrapped: its store holds what other tests left (maybe nothing, in another order).
    if subject.name == "local":
        assert checkpoints, "the subject has checkpoints"
    if subject.name == "local":  # the wrapper records it; Slurm reports no last checkpoint
        assert any(w.last_checkpoint for w in workloads), "some workload was checkpointed"
    ids: list[str] = []
    for w in workloads:
        ids += [w.id, *([w.last_checkpoint] if w.last_checkpoint else [])]
    for n in subject.backend.nodes():
        ids += [n.id, *n.workloads]
    for c in checkpoints:
        ids += [c.id, *([c.parent] if c.parent else [])]
    assert [i for i in ids if not i.startswith(prefix)] == [], ids
