"""Validation of every Slurm value that reaches an argv: job ids, node names, field values
and reasons. A value that does not match is InvalidInput before anything runs, so a hostile
id or a journal edited by hand runs nothing. No I/O.
"""

from __future__ import annotations

import re

from core import errors
from core.model import validate_name

JOB_ID_RE = re.compile(r"^[0-9]{1,10}(_[0-9]{1,10})?$")
# ':' for a GRES (gres:gpu:a100:1); no '=' or space, so a value never adds another field.
_VALUE_RE = re.compile(r"^[A-Za-z0-9_.,:\[\]-]{1,200}$")
_REASON_RE = re.compile(r"^[A-Za-z0-9 _.,:/()@+-]{1,200}$")


def job_id(value: str) -> str:
    """``1234`` or ``slurm:1234`` -> ``1234``; anything else is InvalidInput (runs nothing)."""
    raw = value.removeprefix("slurm:") if isinstance(value, str) else ""
    if not JOB_ID_RE.fullmatch(raw):
        raise errors.InvalidInput(
            f"invalid Slurm job id {value!r}: expected digits such as 1234 or slurm:1234",
            hint=f"list the jobs ({errors.step('list_workloads', backend='slurm')}) and pass one of "
            "their ids",
        )
    return raw


def is_job_id(value: str) -> bool:
    """Whether ``value`` names a job (else a node is meant: failover takes either)."""
    return bool(JOB_ID_RE.fullmatch(value.removeprefix("slurm:")))


def node_name(value: str) -> str:
    return validate_name(value.removeprefix("slurm:"), what="Slurm node name")


def check_value(value: str) -> str:
    """A job field value (a node list such as ``n[1-2]``, a count, ``gres:gpu:a100:1``)."""
    if not _VALUE_RE.fullmatch(value):
        raise errors.InvalidInput(
            f"invalid Slurm value {value!r}", hint="use node names such as n1 or n[1-2]"
        )
    return value


def check_reason(value: str) -> str:
    """A node's drain/down reason."""
    if not _REASON_RE.fullmatch(value):
        raise errors.InvalidInput(
            f"invalid reason {value!r}", hint="letters, digits, spaces and _.,:/()@+- only"
        )
    return value
