"""``set_checkpoint_interval`` through a real MCP client (``clawpoint serve`` over stdio), as
an agent under the default policy: shortening the interval (or setting one where there was
none) is safe and runs; lengthening it or turning it off is disruptive and waits for a
person's approval, changing nothing meanwhile; a bad value is refused with the argument
named; ``get_workload`` shows the interval in force.
"""

from __future__ import annotations

import pytest

from core.model import Principal, PrincipalKind
from tests.adversarial.conftest import (  # noqa: F401 (fixtures)
    Lab,
    agent_session,
    anyio_backend,
    lab,
    lab_factory,
)
from tests.service.conftest import counter, wait_step

pytestmark = pytest.mark.anyio
PERSON = Principal(id="alice", kind=PrincipalKind.PERSON)


def _start(lab: Lab, name: str) -> str:  # noqa: F811
    """A small cooperative counter (no CRIU needed) with no periodic checkpoints."""
    spec = counter(lab.settings, name, mb=1, engine="cooperative")
    lab.service.run_workload(spec, detach=True, principal=PERSON)
    wait_step(lab.settings, name, 2)
    return f"local:{name}"


async def test_agent_shortens_freely_and_needs_approval_to_lengthen(lab: Lab) -> None:  # noqa: F811
    ref = _start(lab, "agentic")
    async with agent_session(lab, "stdio") as agent:
        tools = {t.name: t for t in (await agent.client.list_tools()).tools}
        schema = tools["set_checkpoint_interval"].input_schema
        assert schema["required"] == ["workload", "every"], schema
        assert "off" in schema["properties"]["every"]["description"]

        out = await agent.ok("set_checkpoint_interval", {"workload": ref, "every": "30s"})
        assert out["status"] == "executed", out  # from none to 30 s: safe
        seen = await agent.ok("get_workload", {"workload": ref})
        assert seen["checkpoint_every"] == 30.0, seen
        out = await agent.ok("set_checkpoint_interval", {"workload": ref, "every": "10s"})
        assert out["status"] == "executed", out  # shorter: safe

        for every in ("1h", "off"):  # longer, or none: disruptive
            out = await agent.ok(
                "set_checkpoint_interval", {"workload": ref, "every": every, "reason": "quiet"}
            )
            assert out["status"] == "approval_required", out
            assert "disruptive" in str(out), out
        assert lab.service.get_workload(ref).checkpoint_every == 10.0  # nothing changed

        text = await agent.error("set_checkpoint_interval", {"workload": ref, "every": "abc"})
        assert "every" in text and "'abc' is not a duration" in text, text
        text = await agent.error("set_checkpoint_interval", {"workload": ref, "every": "1s"})
        assert "shorter than 2s" in text, text
        assert lab.service.get_workload(ref).checkpoint_every == 10.0
