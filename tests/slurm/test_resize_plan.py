"""The Slurm resize plan from Slurm's records alone (no cluster): which node, why not.

A fake ``SlurmContext`` serves node and job records in the 22.05 shapes; the plan must
count what other jobs hold (the job's own share is free on its own node), take only nodes
of the job's partition, pick by GPU model, and state a pause even when the job stays.
"""

from __future__ import annotations

from typing import Any

import pytest

from core import errors
from core.action_params import ResizeParams
from core.backends.slurm.config import SlurmConfig
from core.backends.slurm.inventory import to_node, to_workload
from core.backends.slurm.resize import plan_resize
from core.model import CheckpointInfo, NodeInfo, RiskClass, WorkloadInfo


def _raw_node(name: str, *, alloc_cpus: int = 0, gres: str = "", used: str = "gpu:0",
              partitions: tuple[str, ...] = ("debug",)) -> dict[str, Any]:  # fmt: skip
    return {"name": name, "state": "idle", "cpus": 2, "real_memory": 2000, "gres": gres,
            "alloc_cpus": alloc_cpus, "alloc_memory": 0, "gres_used": used,
            "partitions": list(partitions)}  # fmt: skip


JOB = {"job_id": 5, "job_state": "RUNNING", "nodes": "n1", "partition": "debug", "cpus": 1,
       "memory_per_node": 300, "comment": "clawpoint:train", "user_name": "root"}  # fmt: skip


class Fake:
    """What ``plan_resize`` reads of the backend."""

    def __init__(self, raw_nodes: list[dict[str, Any]], job: dict[str, Any] = JOB) -> None:
        self.cfg = SlurmConfig(enabled=True)
        self._raw = raw_nodes
        self.job = to_workload(job, "clawpoint")

    def raw_nodes(self) -> list[dict[str, Any]]:
        return self._raw

    def nodes(self) -> list[NodeInfo]:
        return [to_node(r, [self.job]) for r in self._raw]

    def node_name(self, name: str) -> str:
        return name.removeprefix("slurm:")

    def lineage(self, w: WorkloadInfo) -> str:
        return w.labels["lineage"]

    def owner(self, w: WorkloadInfo) -> str | None:
        return "root"

    def newest_checkpoint(self, lineage: str, owner: str | None = None) -> CheckpointInfo | None:
        return None


def _plan(fake: Fake, **params: Any) -> Any:
    return plan_resize(fake, fake.job, ResizeParams(**params))  # type: ignore[arg-type]


def test_in_place_counts_its_own_share_as_free_and_still_pauses() -> None:
    # n1 holds 1 CPU: the job's own. 2 CPUs fit there once it stops.
    draft = _plan(Fake([_raw_node("n1", alloc_cpus=1), _raw_node("n2")]), cpus=2)
    assert "on n1" in draft.summary and draft.risk is RiskClass.DISRUPTIVE
    assert (draft.expected_pause_s or 0) > 0 and "checkpointed" in draft.saves
    fields = {s.name: s.args.get("fields") for s in draft.steps}
    assert fields["allocate"] == {"NumCPUs": "2", "CPUsPerTask": "2", "MinMemoryNode": "300"}
    assert fields["place"] == {"ExcNodeList": "", "NodeList": "n1"}
    back = draft.on_failure[0].args["fields"]
    assert back["NumCPUs"] == "1" and back["NodeList"] == "n1"


def test_other_jobs_holdings_send_it_elsewhere() -> None:
    # n1 holds 2 CPUs: 1 the job's, 1 another job's; only n2 has 2 free.
    draft = _plan(Fake([_raw_node("n1", alloc_cpus=2), _raw_node("n2")]), cpus=2)
    assert "from n1 to n2" in draft.summary
    with pytest.raises(errors.Conflict) as no_fit:
        _plan(Fake([_raw_node("n1", alloc_cpus=2), _raw_node("n2", alloc_cpus=1)]), cpus=2)
    assert no_fit.value.code == "no-node-fits"
    assert no_fit.value.details["nodes"] == {"n1": "1 of 2 CPUs free", "n2": "1 of 2 CPUs free"}


def test_gpu_model_and_partition() -> None:
    nodes = [_raw_node("n1"), _raw_node("g1", gres="gpu:a100:2", used="gpu:a100:1(IDX:0)"),
             _raw_node("g2", gres="gpu:h100:2"),
             _raw_node("x1", gres="gpu:h100:4", partitions=("other",))]  # fmt: skip
    draft = _plan(Fake(nodes), gpus=1, gpu_class="h100")
    assert "to g2" in draft.summary
    assert {s.name: s.args.get("fields") for s in draft.steps}["allocate"]["TresPerNode"] == (
        "gres:gpu:h100:1"
    )
    with pytest.raises(errors.Conflict) as elsewhere:
        _plan(Fake(nodes), gpus=1, to="x1")
    assert "not in partition debug" in elsewhere.value.message
    with pytest.raises(errors.Conflict) as no_fit:
        _plan(Fake(nodes), gpus=2, gpu_class="a100")
    assert no_fit.value.details["nodes"]["g1"] == "1 of 2 GPUs free"
