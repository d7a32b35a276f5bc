"""Benchmark: how long a Kubernetes migrate of a bare pod pauses its workload, against the
local handoff's pause of the same workload in the same run.

The self-verifying counter holding ``--mb`` MiB (default 200, a step every 20 ms) runs three
times: twice as a bare pod (``restartPolicy: Never``) under the wrapper, on the API emulator
and the fake kubelet of the test suite (real processes, real CRIU, the documented
securityContext, the checkpoint PVC a host directory), moved between n1 and n3 with
``migrate --to``, once by the live move (the copy started first as a standby takes it over:
``docs/kubernetes.md``, "Live moves") and once the ordinary way (``[k8s] live_handoff =
false``: stop-checkpoint, then the copy created, scheduled, started, restored); and under
the local backend, moved between node-a and node-b with the handoff (stop-and-copy).
Repetitions alternate the three, disk synced before each. The pause is the workload's own
(``bench/migration.py``'s ``Watcher``: the longest gap between two consecutive steps around
the move, less its usual step interval). Issue target: Kubernetes live <= 1.5x local.

Needs root and CRIU (the fake kubelet starts containers as a runtime does). Usage:
``.venv/bin/python bench/k8s_migration.py [--reps 3] [--mb 200] [--no-docs]``. JSON:
``bench/results/k8s_migration.json``; the "Kubernetes migrate" section of
``docs/benchmarks.md`` is rewritten (only that section).

Limits: the emulator and the fake kubelet stand in for the API server, the scheduler and
the kubelet (polling every 50 ms); a real cluster adds its own scheduling and container
start, which the live move keeps out of the pause and the ordinary move does not. One
machine plays every node: no network in the figure.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.migration import Clawpoint, Watcher, command  # noqa: E402
from bench.move_report import Rows, alternate, in_home, pause_table, publish, step_lines, step_times  # noqa: E402
from core.backends.kubernetes.backend import KubernetesBackend  # noqa: E402
from core.backends.kubernetes.config import KubernetesConfig  # noqa: E402
from core.config import load_settings  # noqa: E402
from core.model import Action, Principal, PrincipalKind  # noqa: E402
from core.service.facade import Service, bootstrap  # noqa: E402
from tests.k8s import conftest as k8s  # noqa: E402
from tests.k8s.emulator import Emulator  # noqa: E402
from tests.k8s.emulator.schema import KUBERNETES_VERSION  # noqa: E402
from tests.k8s.kubelet import FakeKubelet  # noqa: E402

PERSON = Principal(id="bench", kind=PrincipalKind.PERSON)
NODES = ("n1", "n3")
TARGET_RATIO = 1.5
LABELS = {"local": "local handoff", "live": "Kubernetes live move", "ordinary": "Kubernetes ordinary move"}  # fmt: skip


class PodCounter:
    """The counter in a bare pod, moved between n1 and n3 by its own service."""

    def __init__(self, emu: Emulator, kubelet: FakeKubelet, home: Path, cfg: KubernetesConfig,
                 mb: int, kind: str) -> None:  # fmt: skip
        self.emu, self.name, self.node = emu, f"bench-{kind}", NODES[0]
        os.environ["CLAWPOINT_HOME"] = str(home)
        self.service: Service = bootstrap(load_settings(home))
        self.backend = KubernetesBackend(cfg)
        self.service.backends["k8s"] = self.backend  # type: ignore[assignment]
        manifest = k8s.wrapped_pod(self.name, self.name, mb=mb)
        manifest["spec"]["nodeSelector"] = {"kubernetes.io/hostname": NODES[0]}
        emu.seed(manifest)
        progress = f"{self.name}.progress.json"
        root = kubelet.root
        self.watch = Watcher(find=lambda: list(root.glob(f"*/volumes/home/home/run/{progress}")))
        self.watch.wait_steps(20, timeout_s=180)

    def move(self) -> dict[str, Any]:
        dest = NODES[1] if self.node == NODES[0] else NODES[0]
        t0 = time.time()
        done = self.service.act(Action.MIGRATE, f"k8s:Pod/default/{self.name}", {"to": f"k8s:{dest}"},
                                principal=PERSON, confirmed=True)  # fmt: skip
        t1 = time.time()
        if done.status != "executed" or done.execution is None:
            raise RuntimeError(f"k8s migrate: {done.message}")
        steps = {s.name: s.output or {} for s in done.execution.steps}
        moved = steps.get("takeover") or steps.get("wait_restored") or {}
        self.name, self.node = str(moved["pod"]), str(moved.get("node") or dest)
        self.watch.wait_steps(20)
        return {**self.watch.freeze(t0, t1), "command_s": t1 - t0, "node": self.node,
                "steps_s": step_times(done.execution), "how": moved.get("how", "restart")}  # fmt: skip

    def close(self) -> None:
        self.watch.stop()
        self.backend.close()


def markdown(rows: Rows, mb: int, machine: dict[str, Any]) -> str:
    table, ratio = pause_table(rows, LABELS)
    handed = sum(r.get("how") == "handoff" for r in rows["live"])
    verdict = "met" if ratio["live"] <= TARGET_RATIO else "not met"
    return "\n".join([
        "## Kubernetes migrate against the local handoff",
        "",
        f"`bench/k8s_migration.py --reps {len(rows['local'])} --mb {mb}` (root; the API "
        "emulator and the fake kubelet of the test suite, real CRIU): the self-verifying "
        f"counter holding {mb} MiB in a bare pod (restartPolicy Never) moved between n1 and n3 "
        "by `migrate --to`, by the live move (its copy started first as a standby takes it "
        "over) and the ordinary way (`[k8s] live_handoff = false`), and between two local "
        "nodes by the handoff (stop-and-copy), alternating, disk synced before each. Pause = "
        "the longest gap between two of its own steps around the move, less its usual step "
        f"interval. Machine: {machine['cpus']} CPUs, kernel {machine['kernel']}, load "
        f"{machine['load_before']:.2f} before, {machine['load_after']:.2f} after.",
        "",
        *table,
        "",
        f"Live move / local, medians: x{ratio['live']:.2f} (target <= {TARGET_RATIO}x: "
        f"{verdict}); {handed} of {len(rows['live'])} live moves were handoffs (the others "
        "fell back to the ordinary copy).",
        "",
        *step_lines(rows, LABELS, ("live", "ordinary")),
    ])  # fmt: skip


def cluster(emu: Emulator, work: Path) -> FakeKubelet:
    """Nodes n1-n3, the wrapper's ConfigMap, the checkpoint and key volumes, the kubelet
    (as ``tests/k8s/conftest.py``'s fixture makes them)."""
    (work / "keys").mkdir(mode=0o700)
    (work / "pvc").mkdir()
    (work / "seccomp" / "profiles").mkdir(parents=True)
    emu.seed(
        k8s.node("n1"), k8s.node("n2"), k8s.node("n3"),
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": k8s.WRAPPER_CONFIG, "namespace": "default"},
         "data": {"config.toml": f'[store]\npath = "/checkpoints"\nkey = "{k8s.KEY_FILE}"\n'}},
    )  # fmt: skip
    return FakeKubelet(
        emu, work / "pods", nodes=["n1", "n2", "n3"], seccomp_root=work / "seccomp",
        volumes={k8s.CHECKPOINT_CLAIM: work / "pvc", k8s.KEY_CLAIM: work / "keys"},
    )  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--no-docs", action="store_true")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root and CRIU (the fake kubelet starts containers as a runtime does)")
        return 2
    work = Path(tempfile.mkdtemp(prefix="k8s-move-bench-"))
    machine = {"cpus": os.cpu_count(), "kernel": platform.release(),
               "load_before": os.getloadavg()[0]}  # fmt: skip
    pods: dict[str, PodCounter] = {}
    with Emulator(schema_version=KUBERNETES_VERSION) as emu:
        emu.namespace("default")
        emu.token = "t0ken"
        kubeconfig = emu.kubeconfig(work / "kubeconfig", context="emulator", token="t0ken")
        local = Clawpoint(work / "local-home", "bench-local-move", command("counter", args.mb))
        with cluster(emu, work) as kubelet:
            try:
                for kind in ("live", "ordinary"):
                    cfg = KubernetesConfig(
                        enabled=True, kubeconfig=str(kubeconfig), context="emulator",
                        checkpoint_dir=str(work / "pvc"), poll_interval_s=0.05,
                        checkpoint_timeout_s=120, start_timeout_s=120,
                        live_handoff=kind == "live",
                    )  # fmt: skip
                    home = work / f"{kind}-home"
                    home.mkdir()
                    pods[kind] = PodCounter(emu, kubelet, home, cfg, args.mb, kind)

                rows = alternate(args.reps, {
                    "local": in_home(work / "local-home", lambda: local.move("stop-and-copy")),
                    "live": in_home(work / "live-home", pods["live"].move),
                    "ordinary": in_home(work / "ordinary-home", pods["ordinary"].move),
                })  # fmt: skip
            finally:
                for p in pods.values():
                    p.close()
                os.environ["CLAWPOINT_HOME"] = str(work / "local-home")
                local.close()
    machine["load_after"] = os.getloadavg()[0]
    publish("k8s-migration", machine, rows, markdown(rows, args.mb, machine), docs=not args.no_docs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
