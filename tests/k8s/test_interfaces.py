"""What people and agents run, on ``k8s:`` ids: the installed ``clawpoint`` console script and
the MCP server through a real MCP client, with the backend configured by a ``[k8s]`` section
only (the registry builds it), against the API emulator and the fake kubelet."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from tests.k8s.conftest import wrapped_pod
from tests.k8s.test_actions import pods, running, step_of, wait_for

ROOT = Path(__file__).resolve().parents[2]
CLAWPOINT = str(Path(sys.executable).parent / "clawpoint")


@pytest.fixture
def home(tmp_path: Path, kubeconfig: Path, store_dir: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    (path / "config.toml").write_text(
        "[k8s]\n"
        "enabled = true\n"
        f"kubeconfig = {json.dumps(str(kubeconfig))}\n"
        'context = "emulator"\n'
        f"checkpoint_dir = {json.dumps(str(store_dir))}\n"
        "poll_interval_s = 0.1\n"
        "retry_total_s = 2\n"
        "checkpoint_timeout_s = 60\n"
        "start_timeout_s = 60\n"
        "[policy.defaults]\n"
        'disruptive = "allow"\n'
    )
    return path


def env(home: Path) -> dict[str, str]:
    return {
        **os.environ,
        "CLAWPOINT_HOME": str(home),
        "PYTHONPATH": os.environ.get("PYTHONPATH", str(ROOT)),
    }


def cli(home: Path, *args: str) -> Any:
    done = subprocess.run(
        [CLAWPOINT, *args], env=env(home), capture_output=True, text=True, timeout=300
    )
    if done.returncode != 0:
        print(done.stdout, done.stderr)  # whole: the assertion's own text is cut short
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return json.loads(done.stdout) if "--json" in args else done.stdout


def test_cli_lists_k8s_nodes_and_migrates_a_wrapped_pod(
    need_criu: None, emu: Any, kubelet: Any, home: Path
) -> None:
    nodes = {n["id"]: n for n in cli(home, "nodes", "--backend", "k8s", "--json")}
    assert set(nodes) == {"k8s:n1", "k8s:n2", "k8s:n3"}
    assert nodes["k8s:n2"]["spot"] is True and nodes["k8s:n2"]["gpus"] == 1

    manifest = wrapped_pod("cli-mover", "cli-mover")
    manifest["spec"]["nodeName"] = "n1"
    emu.seed(manifest)
    wait_for("it runs", lambda: running(emu, "cli-mover"))
    before = wait_for("progress", lambda: (s := step_of(kubelet, "cli-mover")) > 10 and s)
    listed = cli(home, "workloads", "--backend", "k8s", "--json")
    assert "k8s:Pod/default/cli-mover" in {w["id"] for w in listed}

    out = cli(home, "migrate", "k8s:Pod/default/cli-mover", "--to", "n3", "--yes", "--json")
    assert out["status"] == "executed", out
    now = pods(emu)
    assert "cli-mover" not in now
    (new,) = now
    assert now[new]["spec"]["nodeName"] == "n3"
    wait_for("progress on n3", lambda: step_of(kubelet, "cli-mover") > before + 10)


@pytest.mark.anyio
async def test_mcp_agent_migrates_a_wrapped_pod(
    need_criu: None, emu: Any, kubelet: Any, home: Path
) -> None:
    manifest = wrapped_pod("mcp-mover", "mcp-mover")
    manifest["spec"]["nodeName"] = "n2"
    emu.seed(manifest)
    wait_for("it runs", lambda: running(emu, "mcp-mover"))
    before = wait_for("progress", lambda: (s := step_of(kubelet, "mcp-mover")) > 10 and s)
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "core.cli", "serve"], env=env(home)
    )
    async with Client(params) as client:
        preview = await client.call_tool(
            "migrate_workload",
            {"workload": "k8s:Pod/default/mcp-mover", "to": "k8s:n1", "dry_run": True},
        )
        assert not preview.is_error, preview.content
        shown = json.dumps(preview.structured_content)
        assert (
            "CREATE Pod default/mcp-mover-cp" in shown and "DELETE Pod default/mcp-mover" in shown
        )
        assert running(emu, "mcp-mover"), "a preview changes nothing"
        result = await client.call_tool(
            "migrate_workload", {"workload": "k8s:Pod/default/mcp-mover", "to": "k8s:n1"}
        )
        assert not result.is_error, result.content
        assert result.structured_content["status"] == "executed", result.structured_content
    now = pods(emu)
    (new,) = now
    assert now[new]["spec"]["nodeName"] == "n1"
    wait_for("progress on n1", lambda: step_of(kubelet, "mcp-mover") > before + 10)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_service_inventory_queue_depth_and_watch_on_k8s(emu: Any, home: Path) -> None:
    """Every workload kind and the GPU/spot nodes through the service built from [k8s],
    queue depth with Kueue objects, and a watch pass over the Kubernetes backend."""
    from core.config import load_settings
    from core.service.facade import bootstrap
    from tests.k8s.test_inventory import seed_every_kind, seed_nodes
    from tests.k8s.test_queue import workload

    seed_nodes(emu)
    seed_every_kind(emu)
    # seed_every_kind installed the operators' CRDs already; add Kueue's queues
    emu.seed(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "ClusterQueue",
            "metadata": {"name": "cq-gpu"},
            "spec": {},
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "LocalQueue",
            "metadata": {"name": "lq-gpu", "namespace": "team-a"},
            "spec": {"clusterQueue": "cq-gpu"},
        },
        workload("waits", "lq-gpu", 30),
    )
    os.environ["CLAWPOINT_HOME"] = str(home)
    try:
        svc = bootstrap(load_settings(home))
    finally:
        os.environ.pop("CLAWPOINT_HOME", None)
    kinds = {w.labels.get("kind") for w in svc.workloads("k8s")}
    assert kinds >= {
        "Pod", "Job", "Deployment", "StatefulSet", "Workload", "PyTorchJob", "RayJob",
        "RayCluster", "InferenceService",
    }  # fmt: skip
    nodes = svc.nodes("k8s")
    assert any(n.spot for n in nodes) and any(n.gpus for n in nodes)
    queues = svc.queue_depth("k8s")
    assert any(q.pending >= 1 and q.backend == "k8s" for q in queues), queues
    done = subprocess.run(
        [CLAWPOINT, "watch", "--once", "--json"], env=env(home), capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr  # 1: something needs a person
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert not report["errors"], report
    # the NotReady node of seed_nodes is seen by the watch loop as evidence on its k8s id
    assert {(e["trigger"], e["subject"]) for e in report["evidence"]} >= {("node-down", "k8s:lost")}
