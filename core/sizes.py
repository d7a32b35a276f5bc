"""Parse the memory sizes people and agents type ("512Mi", "4Gi", "2G") and show them back.

A size is written as Kubernetes writes a memory quantity: a whole or decimal number and a
binary (Ki, Mi, Gi, Ti) or decimal (k, M, G, T) unit. A bare number is refused: Kubernetes
reads it as bytes, Slurm's ``--mem`` as megabytes, and guessing wrong by a factor of a
million is not a mistake a resize should be able to make. Sizes are kept in MiB, rounded
up (a limit rounded down could kill a workload that fits the size asked for).

``OptionalMemory`` is that argument as a pydantic field, kept in its shortest exact binary spelling
("4096Mi" and "4Gi" are "4Gi", "1.5Gi" is "1536Mi": ``memory_text``); ``memory_mib`` reads
it back. Pure functions, no I/O. Limits: 1 MiB to 64 TiB.
"""

from __future__ import annotations

import math
import re
from typing import Annotated

from pydantic import AfterValidator
from pydantic_core import PydanticCustomError

# [0-9], not \d: another script's digits must not pass for ASCII ones.
_SIZE_RE = re.compile(r"^\s*([0-9]{1,9}(?:\.[0-9]{1,6})?)\s*(ki|mi|gi|ti|k|m|g|t)\s*$")
_BYTES = {
    "ki": 1024,
    "mi": 1024**2,
    "gi": 1024**3,
    "ti": 1024**4,
    "k": 1000,
    "m": 1000**2,
    "g": 1000**3,
    "t": 1000**4,
}
MIB = 1024**2
MAX_MIB = 64 * 1024 * 1024  # 64 TiB: more is a typo on any machine sold today
MEMORY_HELP = "512Mi, 4Gi, 2G..."


def memory_mib(text: str) -> int:
    """MiB in ``text`` (rounded up); ValueError saying how to write it otherwise."""
    match = _SIZE_RE.match(text.lower())
    if not match:
        hint = " (a bare number has no unit)" if re.fullmatch(r"\s*[0-9.]+\s*", text) else ""
        raise ValueError(f"{text!r} is not a memory size{hint}: write e.g. 512Mi, 4Gi or 2G")
    mib = math.ceil(float(match.group(1)) * _BYTES[match.group(2)] / MIB)
    if not 1 <= mib <= MAX_MIB:
        raise ValueError(f"{text!r} must be at least 1Mi and at most 64Ti")
    return mib


def memory_text(mib: int) -> str:
    """``mib`` as written back: the largest binary unit that divides it exactly."""
    for unit, size in (("Ti", 1024 * 1024), ("Gi", 1024)):
        if mib % size == 0:
            return f"{mib // size}{unit}"
    return f"{mib}Mi"


def _memory(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return memory_text(memory_mib(value))
    except ValueError as exc:
        raise PydanticCustomError("memory_size", "{problem}", {"problem": str(exc)}) from None


# The union inside Annotated, so that the field's annotation reads ``str | None`` (what the
# generated CLI option and tool schema show), not the validator.
OptionalMemory = Annotated[str | None, AfterValidator(_memory)]
