"""suspend_gpu / resume_gpu through a real MCP client: the tools exist, and for an agent they
are disruptive (approval first), with a plan that says what happens."""

from __future__ import annotations

import pytest

from tests.adversarial.conftest import (  # noqa: F401 (fixtures)
    Lab,
    agent_session,
    anyio_backend,
    lab,
    lab_factory,
)
from tests.service.conftest import need_criu  # noqa: F401 (fixture)

pytestmark = [pytest.mark.anyio, pytest.mark.criu]


async def test_agent_gpu_suspend_needs_approval_and_dry_run_plans_one_step(
    lab: Lab,  # noqa: F811
    need_criu: None,  # noqa: F811
) -> None:
    workload = lab.start("gpujob")
    async with agent_session(lab, "stdio") as agent:
        for tool in ("suspend_gpu", "resume_gpu"):
            plan = await agent.ok(tool, {"workload": workload, "dry_run": True})
            assert plan["status"] == "planned", plan
            text = str(plan)
            assert tool in text and "disruptive" in text, plan
            out = await agent.ok(tool, {"workload": workload, "reason": "urgent job"})
            assert out["status"] == "approval_required", out
