"""The fault matrix of Kubernetes pools: the installed ``clawpoint`` is SIGKILLed before and
after a step of ``scale_pool`` (the test-only hook ``CLAWPOINT_TEST_KILL_AT``, as in
tests/reliability/test_fault_matrix.py), and the next clawpoint command reconciles: the
execution is finished from the step it reached (every pool step is idempotent or read back:
``pools.recover_*``), exactly one recovery entry is audited, the audit chain verifies, and the
pool ends at the size asked with no node of it left cordoned.

Operations: a Cluster API pool grown 2 -> 3 and shrunk 2 -> 1, a Karpenter NodePool shrunk
2 -> 1 (idle nodes: the drain's own steps are the drain's, under the local matrix; the steps
here are the autoscalers'). CI kills around each operation's release step (the scale, the
Machine's mark, the NodeClaim's deletion); ``CLAWPOINT_FAULT_MATRIX=full`` kills before and
after every step.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

import pytest

from core.config import load_settings
from core.model import Action
from core.service.facade import bootstrap
from tests.k8s.karpenter import Termination
from tests.k8s.test_pools import CONFIG, node_names, objects, replicas, seed_pools
from tests.reliability.test_fault_matrix import env, kill_then_reconcile

FULL = os.environ.get("CLAWPOINT_FAULT_MATRIX") == "full"

# operation -> (pool, size, how many steps its plan has)
OPERATIONS: dict[str, tuple[str, int, int]] = {
    "capi-grow": ("gpu", 3, 2),
    "capi-shrink": ("gpu", 1, 5),
    "karpenter-shrink": ("burst", 1, 4),
}
# CI: around each release step (a step named by its suffix); full: every step, both sides.
REPRESENTATIVE: list[tuple[str, int | str, str]] = [
    ("capi-grow", "scale", "after"),
    ("capi-shrink", "-mark_machine", "after"),
    ("capi-shrink", "-scale", "before"),
    ("karpenter-shrink", "-delete_nodeclaim", "before"),
    ("karpenter-shrink", "-delete_nodeclaim", "after"),
]
CASES = (
    [(op, i, when) for op, (_, _, count) in OPERATIONS.items() for i in range(count)
     for when in ("before", "after")]
    if FULL else REPRESENTATIVE
)  # fmt: skip


def _step(service: Any, pool: str, size: int, at: int | str) -> str:
    """The name of the live plan's step ``at`` (an index, or the one ending so)."""
    plan = service.plan(Action.SCALE_POOL, f"k8s:{pool}", {"size": size})
    names: list[str] = [str(s.name) for s in plan.steps]
    if isinstance(at, int):
        return names[at]
    (name,) = [n for n in names if n.endswith(str(at))]
    return name


@pytest.mark.parametrize(("op", "at", "when"), CASES)
def test_killed_at_a_pool_step_is_reconciled(
    emu: Any, kubeconfig: Path, tmp_path: Path, op: str, at: int | str, when: str
) -> None:
    pool, size, _ = OPERATIONS[op]
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(CONFIG.format(kubeconfig=kubeconfig))
    settings = load_settings(home)
    with seed_pools(emu) as capi, Termination(emu) as karpenter:
        service = bootstrap(settings)
        target = f"k8s:{pool}"
        step_name = _step(service, pool, size, at)
        after, printed = kill_then_reconcile(
            service, target, ["pools", "scale", target, "--size", str(size), "--yes", "--json"],
            kill_at=f"scale_pool:{step_name}:{when}", env_of=functools.partial(env, settings),
            again=["pools", "--backend", "k8s", "--json"],
        )  # fmt: skip
        assert after["status"] == "succeeded", after
        listed = {p["id"]: p for p in json.loads(printed)}
        # what `pools` listed right after the restart may predate the finish: read again
        final = {p.id: p for p in service.pools("k8s")}[target]
        assert final.size == size, (listed.get(target), final)
        nodes = objects(emu, "", "nodes")
        assert not [n for n in final.nodes if nodes[n]["spec"].get("unschedulable")]
        if pool == "gpu":
            assert replicas(emu) == size and len(final.nodes) == size
        else:
            assert len(karpenter.terminated) == 1 and len(node_names(emu) & {"b1", "b2"}) == 1
        assert not capi.errors and not karpenter.errors
