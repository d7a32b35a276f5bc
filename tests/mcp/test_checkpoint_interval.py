"""``set_checkpoint_interval`` through a real MCP client (``clawpoint serve`` over stdio), as
an agent under the default policy: shortening the interval (or setting one where there was
none) is safe and runs; lengthening it or turning it off is disruptive and waits for a
person's approval, changing nothing meanwhile; a bad value is refused with the argument
named; ``get_workload`` shows the interval in force. ``auto`` is safe where it only adds
checkpoints (none today, or a cap no longer than the interval in force), else disruptive.
"""

from __future__ import annotations

from collections.abc import Callable

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


async def test_auto_is_safe_from_off_and_disruptive_past_the_interval_in_force(lab: Lab) -> None:  # noqa: F811
    """``auto`` may lengthen the interval later without asking, up to ``[economics]
    max_interval_s`` (1 d by default): from none it only adds checkpoints (safe); from 30 s
    it can pass the interval in force (disruptive: a person approves)."""
    off, fixed = _start(lab, "auto-off"), _start(lab, "auto-fixed")
    async with agent_session(lab, "stdio") as agent:
        out = await agent.ok("set_checkpoint_interval", {"workload": off, "every": "auto"})
        assert out["status"] == "executed", out
        seen = await agent.ok("get_workload", {"workload": off})
        assert seen["checkpoint_auto"] is True and seen["checkpoint_every"] == 10.0, seen

        await agent.ok("set_checkpoint_interval", {"workload": fixed, "every": "30s"})
        out = await agent.ok("set_checkpoint_interval", {"workload": fixed, "every": "auto"})
        assert out["status"] == "approval_required" and "disruptive" in str(out), out
        assert "cap 1d" in str(out), out  # the plan shows the cap
    row = lab.service.get_workload(fixed)
    assert (row.checkpoint_every, row.checkpoint_auto) == (30.0, False)  # nothing changed


async def test_auto_under_a_cap_no_longer_than_the_interval_in_force_is_safe(
    lab_factory: Callable[[str], Lab],  # noqa: F811
) -> None:
    capped = lab_factory("[economics]\nmax_interval_s = 20\n")
    ref = _start(capped, "capped")
    async with agent_session(capped, "stdio") as agent:
        await agent.ok("set_checkpoint_interval", {"workload": ref, "every": "30s"})
        out = await agent.ok("set_checkpoint_interval", {"workload": ref, "every": "auto"})
        assert out["status"] == "executed", out
    row = capped.service.get_workload(ref)
    assert row.checkpoint_auto and row.checkpoint_every == 20.0, row  # 30 s within the bounds
