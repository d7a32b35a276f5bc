"""The fake kubelet makes emulated pods real: the wrapped counter runs as a local process,
its status comes back through the API, exec runs in its environment, and deleting the pod
gives it SIGTERM within its grace period (the wrapper checkpoints to the volume)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.stream import stream

from tests.k8s.conftest import wait_for, wrapped_pod


def test_pod_runs_execs_and_checkpoints_on_termination(
    need_criu: None, emu: Any, api: Any, kubelet: Any, store_dir: Path
) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod("default", wrapped_pod("p1", "ctr-p1", grace_s=20))
    pod = wait_for(
        "p1 running",
        lambda: (p := core.read_namespaced_pod("p1", "default")).status.phase == "Running" and p,
    )
    assert pod.spec.node_name in ("n1", "n2", "n3")
    assert pod.status.container_statuses[0].state.running is not None
    resp = stream(
        core.connect_get_namespaced_pod_exec,
        "p1",
        "default",
        command=["python", "-m", "core.backends.kubernetes.incontainer", "checkpoint", "ctr-p1"],
        stderr=True,
        stdin=False,
        stdout=True,
        tty=False,
        _preload_content=False,
    )
    resp.run_forever(timeout=120)
    out = resp.read_stdout()
    assert resp.returncode == 0, (out, resp.read_stderr())
    ckpt = json.loads(out)
    assert ckpt["lineage"] == "ctr-p1"
    assert any((store_dir / "ctr-p1").iterdir())
    core.delete_namespaced_pod("p1", "default")
    wait_for("p1 gone", lambda: not core.list_namespaced_pod("default").items)
