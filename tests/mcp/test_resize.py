"""``resize_workload`` through a real MCP client (``clawpoint serve --toolsets
default,capacity`` over stdio), as an agent under the default policy: more memory on the
workload's own node runs at once (safe: its cgroup's limit changes, nothing pauses); a size
that only fits another node is a move, which waits for a person's approval and changes
nothing meanwhile.
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
from tests.cli.test_resize import MIB, memory_limit
from tests.service.conftest import counter, wait_step

pytestmark = pytest.mark.anyio
PERSON = Principal(id="alice", kind=PrincipalKind.PERSON)
CONFIG = """
[local]
nodes = [
  { name = "small", price_per_hour = 1.0, cpus = 2, memory = "1Gi" },
  { name = "big", price_per_hour = 2.0, cpus = 4, memory = "2Gi" },
]
"""


async def test_agent_resizes_in_place_and_asks_before_a_move(
    lab_factory: Callable[[str], Lab],  # noqa: F811
) -> None:
    lab = lab_factory(CONFIG)
    spec = counter(lab.settings, "busy", mb=1, engine="cooperative", node="small")
    spec = spec.model_copy(update={"cpus": 1.0, "memory_mb": 256})
    lab.service.run_workload(spec, detach=True, principal=PERSON)
    wait_step(lab.settings, "busy", 2)
    pid = lab.service.get_workload("local:busy").pid
    assert pid is not None and memory_limit(pid) == 256 * MIB

    async with agent_session(lab, "stdio", serve_args=("--toolsets", "default,capacity")) as agent:
        out = await agent.ok("resize_workload", {"workload": "local:busy", "memory": "512Mi"})
        assert out["status"] == "executed", out
        assert memory_limit(pid) == 512 * MIB
        shown = await agent.ok("get_workload", {"workload": "local:busy"})
        assert shown.get("memory") == "512Mi", shown

        out = await agent.ok("resize_workload", {"workload": "local:busy", "memory": "1536Mi"})
        assert out["status"] == "approval_required", out
        w = lab.service.get_workload("local:busy")
        assert (w.node, w.pid, w.memory_mb) == ("small", pid, 512)  # nothing changed
        assert memory_limit(pid) == 512 * MIB
