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
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar


class ClawpointError(Exception):
    """Base error: a stable ``code``, a message for people, and a ``hint`` (what to do next)."""

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
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.code = code or self.default_code
        self.details = details or {}

    def __str__(self) -> str:
        return f"{self.message} Hint: {self.hint}" if self.hint else self.message

    def to_dict(self) -> dict[str, Any]:
        return {
            "error": self.code,
            "message": self.message,
            "hint": self.hint,
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
