"""Kubernetes pools through a real MCP client (``clawpoint serve --toolsets
default,capacity`` over stdio), as an agent under the default policy, against the API
emulator with the Cluster API model: ``list_pools`` shows the MachineDeployment and the
NodePool; growing the MachineDeployment within the person's cost cap runs at once; growing
the NodePool is denied saying what to do, and a shrink past its disruption budget is refused
naming the budget, neither changing anything.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.adversarial.conftest import (  # noqa: F401 (fixtures)
    Lab,
    agent_session,
    anyio_backend,
    lab_factory,
)
from tests.k8s.test_pools import CONFIG, node_names, objects, replicas, seed_pools

pytestmark = pytest.mark.anyio


async def test_an_agent_lists_and_scales_kubernetes_pools(
    emu: Any,
    kubeconfig: Path,
    lab_factory: Callable[[str], Lab],  # noqa: F811
) -> None:
    capi = seed_pools(emu, budgets=[{"nodes": "0"}])
    lab = lab_factory(CONFIG.format(kubeconfig=kubeconfig))
    with capi:
        async with agent_session(
            lab, "stdio", serve_args=("--toolsets", "default,capacity")
        ) as agent:
            pools = {p["id"]: p for p in (await agent.ok("list_pools", {}))["pools"]}
            assert (pools["k8s:gpu"]["size"], pools["k8s:gpu"]["max_size"]) == (2, 4)
            assert pools["k8s:burst"]["size"] == 2 and pools["k8s:burst"]["spot"], pools

            out = await agent.ok("scale_pool", {"pool": "k8s:gpu", "size": 3})
            assert out["status"] == "executed", out
            assert replicas(emu) == 3

            before = len(emu.requests)
            out = await agent.ok("scale_pool", {"pool": "k8s:burst", "size": 3})
            assert out["status"] == "denied", out
            assert "Karpenter adds nodes itself" in out["message"], out
            assert "pending pods" in out["message"] and "nodes=3" in out["message"], out
            text = await agent.error("scale_pool", {"pool": "k8s:burst", "size": 1})
            assert "budget nodes=0" in text and "spec.disruption.budgets" in text, text
            changed = [r for r in emu.requests[before:] if r.method in ("PATCH", "DELETE")]
            assert not changed, changed
            assert {"b1", "b2"} <= node_names(emu)
            assert set(objects(emu, "karpenter.sh", "nodeclaims")) == {"b1-claim", "b2-claim"}
    assert not capi.errors
