"""The checkpoint engines' names: the one list every layer checks an engine name against.

``ENGINES`` maps each engine's name to the module of ``core.checkpoint`` that defines it;
``core.checkpoint.engine.get`` imports that module on first use. The names live here, below
every layer, so the configuration (``[checkpoint] default_engine``), run specs and the
command line can check a name without importing the engines (``core.checkpoint`` itself
reads ``core.config``). Adding an engine is its module plus one entry here.

Limits: a name is checked, not probed: whether the engine works on this machine is
``core.checkpoint.engine.statuses`` (``clawpoint config check``).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, WithJsonSchema

from core import errors

# name -> module defining ENGINE. The first is the default engine.
ENGINES: dict[str, str] = {
    "criu": "core.checkpoint.criu",
    "cooperative": "core.checkpoint.cooperative",
    "cuda": "core.checkpoint.cuda",
}
DEFAULT_ENGINE = "criu"


def check(name: str) -> str:
    """``name`` when it names an engine; InvalidInput naming the known ones otherwise."""
    if name not in ENGINES:
        raise errors.InvalidInput(
            f"unknown engine {name!r}",
            hint=f"use one of: {', '.join(ENGINES)}",
            details={"engines": list(ENGINES)},
        )
    return name


def validate_name(value: str) -> str:
    """For pydantic fields holding an engine name (config, run specs)."""
    if value not in ENGINES:
        raise ValueError(f"unknown engine {value!r}: use one of {', '.join(ENGINES)}")
    return value


# An engine's name as a pydantic field type, checked against ``ENGINES``.
EngineName = Annotated[
    str,
    AfterValidator(validate_name),
    WithJsonSchema({"type": "string", "enum": list(ENGINES)}),
]
