"""Fixtures for the agent-layer tests: the adversarial suite's lab (a fresh CLAWPOINT_HOME
with its own config and a service on it) and the CRIU check."""

from __future__ import annotations

from tests.adversarial.conftest import lab_factory  # noqa: F401
from tests.service.conftest import need_criu  # noqa: F401
