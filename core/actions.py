"""The action catalogue: every action clawpoint can take, described once.

Each ``ActionSpec`` says what an action acts on (a workload, a node or a checkpoint), the
typed parameters it takes (a pydantic model with extra fields forbidden), its risk class
(which may depend on the parameters), a short description, and the names it has in each
interface: the MCP tool, the CLI command and the runbook call. The service validates
parameters here (``parse``) and hands backends the typed object; the MCP action tools,
the CLI action commands and the runbook calls are generated from this table, and a parity
test (tests/agent_layer/test_action_parity.py) checks the live tool list, the installed
CLI's ``--help`` and the runbook calls against it.

Adding an action (for example ``suspend_gpu``):

1. add a member to ``core.model.Action``;
2. if it takes parameters, add a parameter model in ``core.action_params`` (subclass
   ``ActionParams``; every field with a type, a default when optional, and a
   ``description``: the description is what MCP clients and ``--help`` show);
3. add one ``ActionSpec`` to ``CATALOGUE`` (target kind, model, risk, description, MCP tool
   name, CLI words, runbook call name);
4. teach the backends that can do it: one plan function in their plan table and a runner
   per new step in their step table (``core.backends.dispatch``; ``capabilities()`` is
   the plan table's keys); a backend without tables lists it in ``capabilities()`` and
   drafts it in ``plan()`` (and runs its steps in ``run_step``).

Nothing else changes: the MCP tool, the CLI command and the runbook call appear by
themselves, and an action a backend does not list is refused as not supported there.

Conventions: ``reason`` is every action's common argument (why; audited); a model that
declares a ``reason`` field receives it from the service. ``to`` is a node; interfaces
accept ``NAME`` or ``BACKEND:NAME`` and backends receive the bare name. ``redirects``
name arguments people reach for that belong to another action (``checkpoint`` with
``stop``: checkpoint-and-stop is ``preempt``): a true value is refused with an error that
names the right action; a false one asks for nothing and is dropped.

Limits: pure data and validation (no I/O). Whether a backend can do an action is the
backend's ``capabilities()``, not this table.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

from pydantic import ValidationError
from pydantic.fields import FieldInfo

from core import errors
from core.action_params import (
    ActionParams,
    CordonParams,
    DrainParams,
    FailoverParams,
    IntervalParams,
    MoveParams,
    NoParams,
    PoolSizeParams,
    ResizeParams,
    ScaleParams,
    StartParams,
)
from core.durations import OFF
from core.model import Action, RiskClass

__all__ = [
    "CATALOGUE",
    "TARGET_HELP",
    "ActionParams",
    "ActionSpec",
    "Argument",
    "CordonParams",
    "DrainParams",
    "FailoverParams",
    "Interface",
    "IntervalParams",
    "MoveParams",
    "NoParams",
    "PoolSizeParams",
    "ResizeParams",
    "ScaleParams",
    "StartParams",
    "Target",
    "args_of",
    "by_tool",
    "command",
    "expect",
    "params_for",
    "parse",
    "person_claims",
    "risk_of",
    "signed",
    "spec",
]


class Target(StrEnum):
    """What an action acts on; also the name of the argument that names it."""

    WORKLOAD = "workload"
    NODE = "node"
    CHECKPOINT = "checkpoint"
    POOL = "pool"


class Interface(StrEnum):
    """Where a call comes from: errors and hints name the next step in that interface."""

    MCP = "mcp"
    CLI = "cli"
    RUNBOOK = "runbook"


# How each kind of target is written (every interface's help for the target argument).
TARGET_HELP: dict[Target, str] = {
    Target.WORKLOAD: "e.g. local:train-1",
    Target.NODE: "NAME or BACKEND:NAME, e.g. node-a or slurm:n1",
    Target.CHECKPOINT: "Checkpoint id BACKEND:WORKLOAD@SEQ, e.g. local:train-1@3",
    Target.POOL: "BACKEND:POOL, e.g. local:spot",
}

# --------------------------------------------------------------------------- risk


def _fixed(risk: RiskClass) -> Callable[[Mapping[str, Any]], RiskClass]:
    return lambda _params: risk


def _checkpoint_risk(params: Mapping[str, Any]) -> RiskClass:
    # ``stop`` is no checkpoint parameter any more (see redirects); a plan stored before
    # that change may still carry it and must not read as safe.
    return RiskClass.DISRUPTIVE if params.get("stop") else RiskClass.SAFE


def _start_risk(params: Mapping[str, Any]) -> RiskClass:
    # Starting from scratch drops every bit of progress.
    return RiskClass.DESTRUCTIVE if params.get("fresh") else RiskClass.DISRUPTIVE


def _failover_risk(params: Mapping[str, Any]) -> RiskClass:
    # A wrong "the node is fenced" lets two copies write one lineage: as bad as losing it.
    return RiskClass.DESTRUCTIVE if params.get("fenced") else _start_risk(params)


def _drain_risk(params: Mapping[str, Any]) -> RiskClass:
    # ``force`` evicts pods nothing recreates (kubectl drain --force): their work is gone.
    if params.get("force") or not params.get("save", True):
        return RiskClass.DESTRUCTIVE
    return RiskClass.DISRUPTIVE


def _scale_risk(params: Mapping[str, Any]) -> RiskClass:
    return RiskClass.DESTRUCTIVE if params.get("down_without_save") else RiskClass.DISRUPTIVE


def _interval_risk(params: Mapping[str, Any]) -> RiskClass:
    # Longer than the interval in force is disruptive too, and auto unless its cap is not
    # longer: the backend's plan says so (it reads the interval in force).
    return RiskClass.DISRUPTIVE if params.get("every") == OFF else RiskClass.SAFE


# --------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class ActionSpec:
    """One action, as every interface names it."""

    action: Action
    target: Target
    params: type[ActionParams]
    risk: Callable[[Mapping[str, Any]], RiskClass]
    title: str
    description: str
    mcp_tool: str
    cli: tuple[str, ...]  # command words: ("drain",) or ("nodes", "cordon")
    runbook_call: str
    redirects: Mapping[str, Action] = field(default_factory=dict)
    # Parameters that state a fact only a person can vouch for (``fenced``): a true value
    # makes the plan need a person's out-of-band approval, whatever rules or grants say
    # (``core.guardrails.policy``); an agent cannot carry it by itself.
    person_only: frozenset[str] = frozenset()

    @property
    def cli_command(self) -> str:
        return "clawpoint " + " ".join(self.cli)

    def fields(self) -> list[str]:
        """The parameters an interface offers (``reason`` is common to every action)."""
        return [name for name in self.params.model_fields if name != "reason"]

    def arguments(self) -> list[Argument]:
        """The parameters an interface offers, as its generated signature needs them."""
        found = []
        for name in self.fields():
            info = self.params.model_fields[name]
            found.append(Argument(name, info.annotation, info.is_required(), info.default, info))
        return found


@dataclass(frozen=True)
class Argument:
    """One parameter of an action as an interface offers it (the MCP tool's argument, the
    CLI command's option): each interface wraps ``annotation`` in its own metadata and
    writes "required" its own way (``...`` for typer, no default for the MCP SDK)."""

    name: str
    annotation: Any
    required: bool
    default: Any
    info: FieldInfo


def signed(
    fn: Callable[..., Any],
    *,
    name: str,
    doc: str,
    params: list[inspect.Parameter],
    returns: Any = inspect.Signature.empty,
) -> Callable[..., Any]:
    """``fn`` (a ``**kwargs`` function) presented with the signature ``params``: the MCP SDK
    and typer both read ``__signature__`` and ``__annotations__`` to build a tool's schema
    or a command's options, so a catalogue entry becomes a tool or a command this way."""
    fn.__name__ = name
    fn.__doc__ = doc
    fn.__signature__ = inspect.Signature(params, return_annotation=returns)  # type: ignore[attr-defined]
    fn.__annotations__ = {
        p.name: p.annotation for p in params if p.annotation is not inspect.Parameter.empty
    }
    if returns is not inspect.Signature.empty:
        fn.__annotations__["return"] = returns
    return fn


def _spec(
    action: Action,
    target: Target,
    params: type[ActionParams],
    risk: Callable[[Mapping[str, Any]], RiskClass],
    title: str,
    description: str,
    tool: str,
    cli: tuple[str, ...],
    redirects: Mapping[str, Action] | None = None,
    person_only: frozenset[str] = frozenset(),
) -> ActionSpec:
    # Runbooks name MCP tools: the runbook call of an action is its MCP tool name.
    return ActionSpec(action, target, params, risk, title, description, tool, cli, tool,
                      dict(redirects or {}), person_only)  # fmt: skip


CATALOGUE: dict[Action, ActionSpec] = {
    s.action: s
    for s in (
        _spec(
            Action.CHECKPOINT,
            Target.WORKLOAD,
            NoParams,
            _checkpoint_risk,
            "Checkpoint a workload",
            "Save a workload's full state and leave it running (safe: loses nothing).",
            "checkpoint_workload",
            ("checkpoint",),
            redirects={"stop": Action.PREEMPT},
        ),
        _spec(
            Action.PREEMPT,
            Target.WORKLOAD,
            NoParams,
            _fixed(RiskClass.DISRUPTIVE),
            "Preempt a workload",
            "Checkpoint and stop a workload, freeing its node; resume it later (disruptive).",
            "preempt_workload",
            ("preempt",),
        ),
        _spec(
            Action.MIGRATE,
            Target.WORKLOAD,
            MoveParams,
            _fixed(RiskClass.DISRUPTIVE),
            "Migrate a workload",
            "Checkpoint a running workload, stop it, restore it on another node (disruptive).",
            "migrate_workload",
            ("migrate",),
        ),
        _spec(
            Action.RESUME,
            Target.WORKLOAD,
            StartParams,
            _start_risk,
            "Resume a workload",
            "Resume a preempted workload from its newest good checkpoint (disruptive).",
            "resume_workload",
            ("resume",),
        ),
        _spec(
            Action.FAILOVER,
            Target.WORKLOAD,
            FailoverParams,
            _failover_risk,
            "Fail over a workload",
            "A workload died: restore its newest good checkpoint on another node (disruptive).",
            "failover_workload",
            ("failover",),
            person_only=frozenset({"fenced"}),
        ),
        _spec(
            Action.REQUEUE,
            Target.WORKLOAD,
            MoveParams,
            _fixed(RiskClass.DISRUPTIVE),
            "Requeue a batch job",
            "Checkpoint a batch job and requeue it, optionally onto another node (disruptive).",
            "requeue_workload",
            ("requeue",),
        ),
        _spec(
            Action.SCALE,
            Target.WORKLOAD,
            ScaleParams,
            _scale_risk,
            "Scale a workload",
            "Change a workload's replica count (backends that support it; others: denied).",
            "scale_workload",
            ("scale",),
        ),
        _spec(
            Action.KILL,
            Target.WORKLOAD,
            NoParams,
            _fixed(RiskClass.DESTRUCTIVE),
            "Kill a workload",
            "Stop a workload without saving: work since its last checkpoint is lost (destructive).",
            "kill_workload",
            ("kill",),
        ),
        _spec(
            Action.RESTORE,
            Target.CHECKPOINT,
            MoveParams,
            _fixed(RiskClass.DISRUPTIVE),
            "Restore a checkpoint",
            "Restore a stopped or failed workload from a given checkpoint (disruptive).",
            "restore_checkpoint",
            ("restore",),
        ),
        _spec(
            Action.DELETE_CHECKPOINT,
            Target.CHECKPOINT,
            NoParams,
            _fixed(RiskClass.DESTRUCTIVE),
            "Delete a checkpoint",
            "Delete a checkpoint image for good (destructive; the newest good one of a "
            "live workload is protected).",
            "delete_checkpoint",
            ("delete-checkpoint",),
        ),
        _spec(
            Action.DRAIN_NODE,
            Target.NODE,
            DrainParams,
            _drain_risk,
            "Drain a node",
            "Save and move every workload off a node, then mark it unschedulable (disruptive).",
            "drain_node",
            ("drain",),
        ),
        _spec(
            Action.CORDON_NODE,
            Target.NODE,
            CordonParams,
            _fixed(RiskClass.DISRUPTIVE),
            "Cordon a node",
            "Mark a node unschedulable: nothing new lands there; its workloads keep "
            "running (disruptive: capacity goes away).",
            "cordon_node",
            ("nodes", "cordon"),
        ),
        _spec(
            Action.UNDRAIN_NODE,
            Target.NODE,
            NoParams,
            _fixed(RiskClass.SAFE),
            "Undrain a node",
            "Return a drained, cordoned or down node to service so work may land there "
            "again (safe).",
            "undrain_node",
            ("nodes", "undrain"),
        ),
        _spec(
            Action.SUSPEND_GPU,
            Target.WORKLOAD,
            NoParams,
            _fixed(RiskClass.DISRUPTIVE),
            "Suspend a workload's GPU",
            "Move a workload's GPU memory to host memory and free its GPU; it stays alive, "
            f"its GPU calls wait until {errors.step('resume_gpu')} (disruptive).",
            "suspend_gpu",
            ("suspend-gpu",),
        ),
        _spec(
            Action.RESUME_GPU,
            Target.WORKLOAD,
            NoParams,
            _fixed(RiskClass.DISRUPTIVE),
            "Resume a workload's GPU",
            "Put a GPU-suspended workload's memory back on its GPU and let it go on "
            "(disruptive: takes the GPU back).",
            "resume_gpu",
            ("resume-gpu",),
        ),
        _spec(
            Action.SET_CHECKPOINT_INTERVAL,
            Target.WORKLOAD,
            IntervalParams,
            _interval_risk,
            "Set a workload's checkpoint interval",
            "Change how often a workload is checkpointed (longer or off: disruptive).",
            "set_checkpoint_interval",
            ("checkpoint-interval",),
        ),
        # Safe by its parameters: growing within the person's cost cap and releasing idle
        # nodes lose nothing; the backend's plan raises it where work must move or the
        # added cost passes the cap (``core.capacity``).
        _spec(
            Action.SCALE_POOL,
            Target.POOL,
            PoolSizeParams,
            _fixed(RiskClass.SAFE),
            "Scale a node pool",
            "Grow or shrink a node pool; shrinking saves and moves the work on the nodes it "
            "releases (then disruptive).",
            "scale_pool",
            ("pools", "scale"),
        ),
        # Safe by its parameters: a change in place that gives the workload more loses
        # nothing; the backend's plan raises it when the workload must move (checkpoint and
        # restore: a pause) or is given less than it has (``core.backends.sizing``).
        _spec(
            Action.RESIZE,
            Target.WORKLOAD,
            ResizeParams,
            _fixed(RiskClass.SAFE),
            "Resize a workload",
            "New CPUs, memory or GPUs for a workload: in place if its node has room, else "
            "moved to a node that fits (disruptive).",
            "resize_workload",
            ("resize",),
        ),
    )
}


# --------------------------------------------------------------------------- look-ups


def spec(action: Action) -> ActionSpec:
    return CATALOGUE[action]


def by_tool(name: str) -> ActionSpec | None:
    """The action whose MCP tool (or runbook call) is ``name``; None for other tools."""
    return next((s for s in CATALOGUE.values() if name in (s.mcp_tool, s.runbook_call)), None)


def command(action: Action, interface: Interface) -> str:
    """How a caller in ``interface`` invokes ``action``: the next step to name in a hint."""
    s = CATALOGUE[action]
    if interface is Interface.CLI:
        return f"'{s.cli_command}'"
    return s.runbook_call if interface is Interface.RUNBOOK else s.mcp_tool


def undo_step(action: Action, target: object, **args: Any) -> str:
    """A plan's way back, ``action`` on ``target``, as a neutral next step
    (``core.errors.step``): an agent reads the tool call, a person the command."""
    s = CATALOGUE[action]
    return errors.step(s.mcp_tool, **{s.target.value: str(target)}, **args)


def _arg(name: str, interface: Interface) -> str:
    return "--" + name.replace("_", "-") if interface is Interface.CLI else name


def args_of(action: Action, interface: Interface = Interface.MCP) -> list[str]:
    """The arguments ``action`` takes in ``interface``, target first (for error messages)."""
    s = CATALOGUE[action]
    common = ["reason", "dry_run"]
    if interface is Interface.CLI:
        return [s.target.value.upper(), *(_arg(n, interface) for n in s.fields()),
                "--reason", "--dry-run", "--yes", "--json"]  # fmt: skip
    return [s.target.value, *s.fields(), *common]


def person_claims(action: Action, params: Mapping[str, Any] | ActionParams) -> list[str]:
    """The person-only parameters ``params`` sets to a true value (see ``ActionSpec``)."""
    raw = params.model_dump() if isinstance(params, ActionParams) else params
    return sorted(n for n in CATALOGUE[action].person_only if raw.get(n))


def risk_of(action: Action, params: Mapping[str, Any] | ActionParams) -> RiskClass:
    """The risk class of ``action`` with these parameters (see DESIGN: risk classes)."""
    raw = params.model_dump() if isinstance(params, ActionParams) else params
    return CATALOGUE[action].risk(raw)


P = TypeVar("P", bound=ActionParams)


def expect(params: ActionParams, model: type[P]) -> P:
    """``params`` as ``model`` (a backend reading its action's fields); a mismatch is a bug
    in the caller, reported as InvalidInput rather than an AttributeError."""
    if not isinstance(params, model):
        raise errors.InvalidInput(
            f"expected {model.__name__} parameters, got {type(params).__name__}",
            hint="build parameters with core.actions.parse for the action being planned",
        )
    return params


def params_for(action: Action, **values: Any) -> ActionParams:
    """Typed parameters for ``action`` (tests, the planner and the watch loop)."""
    return parse(action, values)


def parse(
    action: Action,
    raw: Mapping[str, Any] | ActionParams | None,
    *,
    interface: Interface = Interface.MCP,
) -> ActionParams:
    """Validate ``raw`` against ``action``'s parameter model; ``InvalidInput`` otherwise.

    ``None`` values mean "not given" (interfaces pass every optional argument). The error
    names each offending argument, lists the valid ones and, for a redirected argument,
    the action that does what it asks, in the words of ``interface``."""
    s = CATALOGUE[action]
    if isinstance(raw, ActionParams):
        if not isinstance(raw, s.params):
            raise errors.InvalidInput(
                f"{s.mcp_tool} takes {s.params.__name__}, not {type(raw).__name__}",
                hint=f"its arguments are: {', '.join(args_of(action, interface))}",
            )
        return raw
    given = {k: v for k, v in (raw or {}).items() if v is not None}
    name = command(action, interface).strip("'")
    for arg, other in s.redirects.items():
        if arg not in given:
            continue
        if given[arg] in (False, 0, "false", "False", ""):
            given.pop(arg)  # asks for nothing this action does not do already
            continue
        what = CATALOGUE[other].description.split(" (")[0].rstrip(".")
        raise errors.InvalidInput(
            f"{name} takes no {_arg(arg, interface)}: that is {command(other, interface)} ({what})",
            hint=f"call {command(other, interface)} instead; {name} takes: "
            + ", ".join(args_of(action, interface)),
            details={"action": action.value, "use": CATALOGUE[other].mcp_tool},
        )
    try:
        return s.params.model_validate(given)
    except ValidationError as exc:
        raise errors.argument_error(
            name, exc.errors(), args_of(action, interface),
            arg=lambda where: _arg(where, interface), details={"action": action.value},
        ) from None  # fmt: skip
