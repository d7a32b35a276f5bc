"""The base of clawpoint's pydantic models: schemas built on first use, not at import.

Role: every model in core and the MCP server derives from ``Model`` instead of pydantic's
``BaseModel`` directly. ``defer_build`` makes pydantic build a model's validator and
serializer the first time the model is used rather than when its class is defined. A
``clawpoint`` command imports far more models (the catalogue's parameters, the guardrails,
the signals) than it uses; building them all at import was about a tenth of every command's
start-up CPU (docs/benchmarks.md, "CLI start-up").

Limits: the first use of each model pays its build (a millisecond or so); pydantic merges a
subclass's ``model_config`` with this one, so models keep their own settings.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Model(BaseModel):
    """A pydantic model whose schema is built when first used."""

    model_config = ConfigDict(defer_build=True)
