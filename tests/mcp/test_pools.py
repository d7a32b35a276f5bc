"""Pools through a real MCP client (``clawpoint serve --toolsets default,capacity`` over
stdio), as an agent under the default policy: ``list_pools`` shows sizes and idle nodes;
releasing an idle node runs at once (nothing moves); a shrink that must move a workload
waits for a person's approval and changes nothing meanwhile; a size outside the bounds is
refused naming them. Without the capacity toolset neither tool is listed.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from core.model import Principal, PrincipalKind
from tests.adversarial.conftest import (  # noqa: F401 (fixtures)
    Lab,
    agent_session,
    anyio_backend,
    lab_factory,
)
from tests.service.conftest import counter, wait_step

pytestmark = pytest.mark.anyio
PERSON = Principal(id="alice", kind=PrincipalKind.PERSON)
CONFIG = """
[local]
nodes = [
  { name = "node-a", price_per_hour = 3.06, labels = { pool = "on-demand" } },
  { name = "node-b", price_per_hour = 0.92, spot = true, labels = { pool = "spot" } },
  { name = "node-c", price_per_hour = 0.95, spot = true, labels = { pool = "spot" } },
]
"""


async def test_agent_releases_idle_nodes_and_asks_before_moving_work(
    lab_factory: Callable[[str], Lab],  # noqa: F811
) -> None:
    lab = lab_factory(CONFIG)
    spec = counter(lab.settings, "busy", mb=1, engine="cooperative", node="node-b")
    lab.service.run_workload(spec, detach=True, principal=PERSON)
    wait_step(lab.settings, "busy", 2)

    async with agent_session(lab, "stdio") as agent:
        names = {t.name for t in (await agent.client.list_tools()).tools}
        assert not names & {"list_pools", "scale_pool"}, "capacity is off by default"

    async with agent_session(lab, "stdio", serve_args=("--toolsets", "default,capacity")) as agent:
        pools = (await agent.ok("list_pools", {}))["pools"]
        spot = next(p for p in pools if p["id"] == "local:spot")
        assert (spot["size"], spot["max_size"], spot["idle"]) == (2, 2, ["node-c"]), spot

        out = await agent.ok("scale_pool", {"pool": "local:spot", "size": 1})
        assert out["status"] == "executed", out
        assert {n.name for n in lab.service.nodes("local")} == {"node-a", "node-b"}

        out = await agent.ok("scale_pool", {"pool": "local:spot", "size": 0, "reason": "quiet"})
        assert out["status"] == "approval_required", out
        assert "disruptive" in str(out), out
        assert {n.name for n in lab.service.nodes("local")} == {"node-a", "node-b"}
        assert lab.service.get_workload("local:busy").node == "node-b"  # nothing moved

        text = await agent.error("scale_pool", {"pool": "local:spot", "size": 5})
        assert "0 to 2 nodes, not 5" in text, text
        text = await agent.error("scale_pool", {"pool": "local:gpu", "size": 1})
        assert "local:spot" in text and "list_pools" in text, text
