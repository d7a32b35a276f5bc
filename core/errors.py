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
"""

from __future__ import annotations

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
