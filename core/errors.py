"""Every error clawpoint raises, in one place.

The tree (grouped by what the caller can do about it)::

    ClawpointError                      code, message, hint; exit code for the CLI
    ├── InvalidInput                    fix the argument (exit 2)
    ├── NotFound                        check the id / list what exists (exit 3)
    ├── NotSupported                    the backend cannot do this (exit 4)
    ├── PolicyDenied                    the policy forbids it (exit 5)
    ├── ApprovalRequired                a person must approve the plan first (exit 6)
    ├── BackendUnavailable              transient: retry later (exit 7)
    ├── CheckpointError                 a checkpoint/restore failed (exit 8)
    │   └── CorruptCheckpoint           an image failed verification (exit 8)
    │       └── UntrustedCheckpoint     its manifest is not authentic (exit 8)
    ├── EngineUnavailable               the engine cannot run here, e.g. CRIU (exit 9)
    ├── Conflict                        state changed under us / already running (exit 10)
    └── OperationFailed                 anything else that went wrong (exit 1)

Adapters translate library errors (CalledProcessError, sqlite3.Error, httpx2 errors)
into these at their boundary; entrypoints catch ``ClawpointError`` once.

Arguments that fail validation (an MCP tool's, an action's parameters) are reported in one
shape by ``argument_error``: ``WHERE: PROBLEM; PROBLEM`` with the hint ``WHERE takes: A, B,
C``, each problem in plain words ("unknown argument approved", "dry_run must be true or
false (got 'yes')", "state must be one of running, stopped (got 'runing')"), never a
validation library's own text. Each interface passes how it spells an argument (``--to``
on the command line, ``to`` over MCP).

Next steps in messages and hints are written in an interface-neutral form, so that an agent
is told the tool to call and a person the command to type, from one text: ``step(NAME,
**ARGS)`` names an operation by its MCP tool name (which is also its runbook call) and
``arg(NAME)`` an argument. An error keeps that text (``neutral``); ``message`` and ``hint``
are rendered for tools (``list_checkpoints(workload=local:a)``, ``to``), which is what MCP
and runbooks show; the command line renders the neutral text its own way
(``core.cli.wording``: ``'clawpoint checkpoints local:a'``, ``--to``) with ``rendered``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

# A step: ⟦NAME KEY=VALUE ...⟧; an argument: ⟦-NAME⟧. Values are ids: no spaces, no ⟧.
_STEP = re.compile(r"⟦(-?[a-z_]+)((?: [a-z_]+=[^\s⟧]+)*)⟧")

# (name, args) -> words; a name starting with "-" is an argument (``arg``).
StepRenderer = Callable[[str, dict[str, str]], str]


def step(name: str, **args: Any) -> str:
    """A next step in the neutral form: ``name`` is an MCP tool (``list_checkpoints``,
    ``migrate_workload``); ``args`` its arguments (None: left out; booleans as true/false)."""
    said = [name]
    for key, value in args.items():
        if value is None:
            continue
        text = str(value).lower() if isinstance(value, bool) else str(value)
        said.append(f"{key}=" + re.sub(r"[\s⟧]", "_", text))
    return "⟦" + " ".join(said) + "⟧"


def arg(name: str) -> str:
    """An argument in the neutral form: ``to`` for tools, ``--to`` on the command line."""
    return f"⟦-{name}⟧"


def as_tool_call(name: str, args: dict[str, str]) -> str:
    """The rendering for tools (MCP, runbooks): ``tool(key=value, ...)``, ``to``."""
    if name.startswith("-"):
        return name[1:]
    return f"{name}({', '.join(f'{k}={v}' for k, v in args.items())})" if args else name


def render(text: str, renderer: StepRenderer = as_tool_call) -> str:
    """``text`` with every neutral step and argument rendered by ``renderer``."""

    def one(match: re.Match[str]) -> str:
        pairs = (kv.split("=", 1) for kv in match.group(2).split())
        return renderer(match.group(1), {k: v for k, v in pairs})

    return _STEP.sub(one, text) if "⟦" in text else text


class ClawpointError(Exception):
    """Base error: a stable ``code``, a message for people, and a ``hint`` (what to do next).

    ``message`` and ``hint`` are rendered for tools; ``neutral`` keeps them as written, for
    an interface that names next steps its own way (``rendered``)."""

    exit_code: ClassVar[int] = 1
    default_code: ClassVar[str] = "clawpoint-error"

    def __init__(
        self,
        message: str,
        *,
        hint: str = "",
        code: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        self.neutral = (message, hint)
        self.message = render(message)
        self.hint = render(hint)
        super().__init__(self.message)
        self.code = code or self.default_code
        self.details = details or {}

    def rendered(self, renderer: StepRenderer) -> tuple[str, str]:
        """(message, hint) with next steps named by ``renderer``."""
        return render(self.neutral[0], renderer), render(self.neutral[1], renderer)

    def __str__(self) -> str:
        return f"{self.message} Hint: {self.hint}" if self.hint else self.message

    def neutral_text(self) -> str:
        """``str(self)`` with next steps left in the neutral form, for a record that each
        interface renders its own way when it shows it (an execution's error)."""
        message, hint = self.neutral
        return f"{message} Hint: {hint}" if hint else message

    def to_dict(
        self, renderer: StepRenderer | None = None, *, neutral: bool = False
    ) -> dict[str, Any]:
        """The error as data; ``neutral``: next steps left neutral, for a record rendered
        when it is shown (``core.service.journal``)."""
        if neutral:
            message, hint = self.neutral
        else:
            message, hint = self.rendered(renderer) if renderer else (self.message, self.hint)
        return {
            "error": self.code,
            "message": message,
            "hint": hint,
            "exit_code": self.exit_code,
            **({"details": self.details} if self.details else {}),
        }


class InvalidInput(ClawpointError):
    exit_code = 2
    default_code = "invalid-input"


class NotFound(ClawpointError):
    exit_code = 3
    default_code = "not-found"


class NotSupported(ClawpointError):
    exit_code = 4
    default_code = "not-supported-by-backend"


class PolicyDenied(ClawpointError):
    exit_code = 5
    default_code = "policy-denied"


class ApprovalRequired(ClawpointError):
    exit_code = 6
    default_code = "approval-required"


class BackendUnavailable(ClawpointError):
    exit_code = 7
    default_code = "backend-unavailable"

    def __init__(self, message: str, *, retry_after: float | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.retry_after = retry_after


class CheckpointError(ClawpointError):
    exit_code = 8
    default_code = "checkpoint-failed"


class CorruptCheckpoint(CheckpointError):
    default_code = "checkpoint-corrupt"


class UntrustedCheckpoint(CorruptCheckpoint):
    """The checkpoint cannot be shown to be its owner's (unsigned, signed with another key,
    altered, or in a directory someone else owns): restoring it is refused like a corrupt
    one, but nothing marks or deletes it."""

    default_code = "checkpoint-untrusted"


class EngineUnavailable(ClawpointError):
    exit_code = 9
    default_code = "engine-unavailable"


class Conflict(ClawpointError):
    exit_code = 10
    default_code = "conflict"


class OperationFailed(ClawpointError):
    exit_code = 1
    default_code = "operation-failed"


EXIT_CODES: dict[str, int] = {
    cls.__name__: cls.exit_code
    for cls in (
        InvalidInput,
        NotFound,
        NotSupported,
        PolicyDenied,
        ApprovalRequired,
        BackendUnavailable,
        CheckpointError,
        EngineUnavailable,
        Conflict,
        OperationFailed,
    )
}


def _shown(value: Any) -> str:
    """A caller's value quoted in a message: short, one line."""
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def describe_problem(problem: Mapping[str, Any], arg: Callable[[str], str] = str) -> str:
    """One validation problem (a pydantic error dict: ``loc``, ``type``, ``msg``, ``input``,
    ``ctx``) in plain words, the argument spelled by ``arg``."""
    where = arg(".".join(str(p) for p in problem.get("loc", ())) or "arguments")
    kind = str(problem.get("type", ""))
    got = problem.get("input")
    ctx = problem.get("ctx") or {}
    if kind == "extra_forbidden":
        return f"unknown argument {where}"
    if kind == "missing":
        return f"{where} is required"
    if kind.startswith("bool"):
        return f"{where} must be true or false (got {_shown(got)})"
    if kind in ("literal_error", "enum"):
        expected = str(ctx.get("expected", "")).replace("'", "").replace(" or ", ", ")
        return f"{where} must be one of {expected} (got {_shown(got)})"
    if kind == "string_pattern_mismatch":
        return f"{where} must match {ctx.get('pattern')} (got {_shown(got)})"
    if kind == "string_too_long":
        return f"{where} is too long (at most {ctx.get('max_length')} characters)"
    if kind.startswith(("int_", "float_", "greater_than", "less_than")) or kind in (
        "string_type",
        "dict_type",
        "list_type",
    ):
        return f"{where}: {str(problem.get('msg', 'invalid')).lower()} (got {_shown(got)})"
    return f"{where}: {problem.get('msg', 'invalid')}"


def argument_error(
    where: str,
    problems: Iterable[Mapping[str, Any]],
    valid: Sequence[str],
    *,
    arg: Callable[[str], str] = str,
    details: dict[str, Any] | None = None,
) -> InvalidInput:
    """The one message for arguments that fail validation (see the module docstring)."""
    said = [describe_problem(p, arg) for p in problems] or ["invalid arguments"]
    return InvalidInput(
        f"{where}: {'; '.join(said)}",
        hint=f"{where} takes: {', '.join(valid) or 'no arguments'}",
        details={**(details or {}), "problems": said, "valid": list(valid)},
    )
