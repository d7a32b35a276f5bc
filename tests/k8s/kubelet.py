"""A fake kubelet (plus the controllers pods need) that makes emulated pods real.

``FakeKubelet(emu, root, nodes=[...])`` runs one background thread that, every ``poll_s``:

- **Job controller**: a Job not suspended and not finished gets its pods from its template
  (labels ``job-name`` / ``batch.kubernetes.io/job-name``, an ownerReference) by the rules of
  ``controllers.sync_job``: ``parallelism``, ``completions``, Indexed Jobs, ``backoffLimit``;
  a suspended Job's pods are deleted (gracefully, so the container gets SIGTERM) and its
  ``startTime`` kept, reset when it is resumed, as the real controller does.
- **StatefulSet controller**: pods ``NAME-ORDINAL`` in order (``controllers.sync_statefulset``).
- **Scheduler**: binds a pod without ``nodeName`` to a node that passes kube-scheduler's
  filters (``tests/k8s/scheduler.py``: taints and tolerations, cordon, resource requests
  including ``nvidia.com/gpu`` against allocatable, ``nodeSelector`` and required node
  affinity; a node not Ready or not run here counts as tainted), fewest pods first; a pod
  no node takes stays Pending with ``PodScheduled=False``, reason ``Unschedulable`` and the
  scheduler's message.
- **Taint eviction**: a pod on a node with a ``NoExecute`` taint it does not tolerate is
  deleted (after its ``tolerationSeconds`` when it tolerates it for a while), with the
  ``DisruptionTarget`` condition (``scheduler.eviction_delay``).
- **Kubelet**: a pod bound to a managed node runs its first container's ``command + args`` as
  a real local process (its own session), with the container's ``env`` (values and the
  downward API's ``fieldRef``), and reports
  ``phase``, ``conditions`` (Ready, ContainersReady, PodScheduled; conditions it does not own
  are kept, and Ready waits for every ``readinessGates`` condition: ``merged_pod_status``)
  and ``containerStatuses`` (running, then terminated with the exit code; the container's cpu/memory ``resources``,
  resized in place by ``resizer``). ``restartPolicy`` is honoured: Always
  restarts the container after any exit, OnFailure after a non-zero one (``restartCount``,
  ``lastState``; the pod stays Running), with a short back-off (``restart_backoff_s``). A pod being deleted gets SIGTERM, then
  SIGKILL after ``deletionGracePeriodSeconds`` (the wrapper checkpoints inside that budget),
  and is removed once its process is gone. ``pods/exec`` runs in the container's
  environment (``Emulator.exec_handler``).

Each container runs with exactly what its securityContext grants (capabilities, uid/gid,
no_new_privs, seccomp, PID and mount namespaces with a masked or unmasked ``/proc``, a user
namespace for ``hostUsers: false``): tests/k8s/container.py and container_init.py. Each
volume is a host directory (``persistentVolumeClaim`` claims map to ``volumes[claimName]``,
shared by every pod like a ReadWriteMany volume; ``emptyDir`` is per pod, mode 0777;
``configMap`` files are written per pod; ``fsGroup`` applied), bind-mounted in the
container's mount namespace at ``/tmp/.volumes<mountPath>`` (the same in every pod, so a
process restored elsewhere finds its files), and every path under a volume's ``mountPath`` in
the command, args, env values and configMap files is rewritten to that path. ``PATH`` puts
this checkout's ``.venv/bin`` first, so a container command ``clawpoint run ...`` runs the
installed wrapper and ``python`` the project's interpreter.

State is read and written through the emulator's store directly (as its seeding does for
controllers and kubelets), so the request recorder and RBAC rules see only the code under
test. ``crash_node(name)`` simulates a node dying: its processes are SIGKILLed, its Ready
condition becomes Unknown, its heartbeat Lease is no longer renewed and nothing on it is
managed any more.

**Node leases**: each managed node's ``kube-node-lease/<node>`` Lease (coordination.k8s.io/v1)
is created and renewed every quarter of ``lease_s`` (``renewTime``, a MicroTime), as the
kubelet's node lease controller does (kubernetes/kubernetes pkg/kubelet/kubelet.go,
``nodeLeaseRenewIntervalFraction = 0.25``; the lease is named after the node, held by it
and owned by the Node: staging/src/k8s.io/component-helpers/apimachinery/lease).
``lease_s`` defaults to 2 s rather than the kubelet's 40 s so that tests see a lease expire.

Limits: one container per pod (init containers and sidecars are ignored); requests only
schedule (no cgroups enforce them); the restart back-off is 0.2 s doubling to 1.6 s, not
the kubelet's 10 s to 5 min; no image pulls or probes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.k8s import container as ctr
from tests.k8s import controllers, resizer, scheduler
from tests.k8s.emulator import Emulator, status
from tests.k8s.emulator.store import Obj

ROOT = Path(__file__).resolve().parents[2]
LEASE_NAMESPACE = "kube-node-lease"
VENV_BIN = Path(sys.executable).parent


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class _Proc:
    popen: subprocess.Popen[bytes]
    node: str
    env: dict[str, str]
    cwd: str
    mounts: list[tuple[str, str]]
    term_at: float | None = None
    kill_at: float | None = None
    reported_exit: bool = False
    log: Path | None = None
    spec: ctr.ContainerSpec | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class FakeKubelet:
    def __init__(
        self,
        emu: Emulator,
        root: Path,
        *,
        nodes: list[str],
        volumes: dict[str, Path] | None = None,
        poll_s: float = 0.05,
        lease_s: int = 2,
        restart_backoff_s: float = 0.2,
        seccomp_root: Path | None = None,
    ) -> None:
        self.emu, self.store = emu, emu.store
        self.root = root
        self.nodes = set(nodes)
        self.volumes = dict(volumes or {})
        self.poll_s = poll_s
        self.restart_backoff_s = restart_backoff_s
        # The node's seccomp directory (the kubelet's <root-dir>/seccomp): Localhost
        # profiles are read from it.
        self.seccomp_root = seccomp_root
        self.procs: dict[tuple[str, str, str], _Proc] = {}  # (ns, name, uid)
        self._create_failed: set[tuple[str, str, str]] = set()
        self.refused_pods: list[str] = []  # pod creations admission refused (FailedCreate)
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.RLock()
        self.pods_kind = self.store.kinds[("", "pods")]
        self.nodes_kind = self.store.kinds[("", "nodes")]
        self.jobs_kind = self.store.kinds[("batch", "jobs")]
        self.sts_kind = self.store.kinds[("apps", "statefulsets")]
        self.leases_kind = self.store.kinds[("coordination.k8s.io", "leases")]
        self.lease_s = lease_s
        self._renewed: dict[str, float] = {}  # node -> monotonic time of its last renewal
        self._evict_at: dict[str, float] = {}  # pod uid -> when the taint eviction deletes it

    # ----- lifecycle --------------------------------------------------------------------
    def start(self) -> FakeKubelet:
        self.store.graceful_pod_deletion = True
        self.emu.exec_handler = self.exec
        self._thread = threading.Thread(target=self._run, daemon=True, name="fake-kubelet")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.emu.exec_handler = None
        with self._lock:
            for proc in self.procs.values():
                self._kill(proc, signal.SIGKILL)
            for proc in self.procs.values():
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.popen.wait(timeout=10)

    def __enter__(self) -> FakeKubelet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with self._lock:
                    self._leases()
                    self._jobs()
                    self._statefulsets()
                    self._schedule()
                    self._taint_eviction()
                    self._pods()
                    resizer.sync(self)
            except status.ApiError as exc:
                # An object deleted (or replaced) between this pass's list and its write: the
                # real controllers and kubelet requeue and see the new state next time
                # (client-go's workqueue); anything else is a fault the test reads.
                if exc.code not in (404, 409):
                    self.errors.append(repr(exc))
            except Exception as exc:  # keep running; the test reads .errors
                self.errors.append(repr(exc))
            self._stop.wait(self.poll_s)

    # ----- nodes ------------------------------------------------------------------------
    def _leases(self) -> None:
        """Renew the Lease of every managed node (a crashed node is no longer managed)."""
        now = time.monotonic()
        for name in sorted(self.nodes):
            if now - self._renewed.get(name, -1e9) < self.lease_s * 0.25:
                continue
            self._renewed[name] = now
            stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            try:
                lease = self.store.get(self.leases_kind, LEASE_NAMESPACE, name)
            except status.ApiError:
                self._create_lease(name, stamp)
                continue
            lease["spec"]["renewTime"] = stamp
            self.store.update(self.leases_kind, LEASE_NAMESPACE, name, lease, api=False)

    def _create_lease(self, name: str, stamp: str) -> None:
        if ("", LEASE_NAMESPACE) not in self.store.objects[("", "namespaces")]:
            self.emu.namespace(LEASE_NAMESPACE)
        node = self.store.get(self.nodes_kind, "", name)
        owner = {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node["metadata"]["uid"]}
        self.store.create(
            self.leases_kind,
            LEASE_NAMESPACE,
            {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": name, "namespace": LEASE_NAMESPACE, "ownerReferences": [owner]},
                "spec": {"holderIdentity": name, "leaseDurationSeconds": self.lease_s, "renewTime": stamp},
            },
            api=False,
        )  # fmt: skip

    def crash_node(self, name: str) -> None:
        """The node dies: processes killed, Ready Unknown, nothing on it managed any more."""
        with self._lock:
            self.nodes.discard(name)
            for key, proc in list(self.procs.items()):
                if proc.node == name:
                    self._kill(proc, signal.SIGKILL)
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.popen.wait(timeout=10)
                    del self.procs[key]
            node = self.store.get(self.nodes_kind, "", name)
            conds = [
                c
                for c in (node.get("status") or {}).get("conditions") or []
                if c["type"] != "Ready"
            ]
            conds.append(
                {
                    "type": "Ready",
                    "status": "Unknown",
                    "reason": "NodeStatusUnknown",
                    "message": "Kubelet stopped posting node status.",
                    "lastTransitionTime": _now(),
                }
            )
            self.store.set_status(
                self.nodes_kind, "", name, {**(node.get("status") or {}), "conditions": conds}
            )

    # ----- taint eviction (NoExecute) -----------------------------------------------------
    def _taint_eviction(self) -> None:
        """The taint eviction controller (pkg/controller/tainteviction/taint_eviction.go): a
        pod on a node with a ``NoExecute`` taint it does not tolerate is deleted at once; one
        tolerating it for ``tolerationSeconds`` is deleted that long after the controller
        first saw it so (cancelled if the taint goes). Before the delete the pod gets the
        ``DisruptionTarget`` condition, reason ``DeletionByTaintManager`` (PodDisruption
        Conditions, GA in 1.31). Only the taints in ``spec.taints`` count (no node lifecycle
        controller adds NoExecute taints here)."""
        nodes = {
            n["metadata"]["name"]: n
            for n in self.store.list(self.nodes_kind, None, lambda o: True)[0]
        }
        pods, _ = self.store.list(
            self.pods_kind, None, lambda p: bool((p.get("spec") or {}).get("nodeName"))
        )
        now = time.monotonic()
        pending: dict[str, float] = {}
        for pod in pods:
            meta, spec = pod["metadata"], pod.get("spec") or {}
            node = nodes.get(spec["nodeName"])
            if node is None or meta.get("deletionTimestamp"):
                continue
            delay = scheduler.eviction_delay(spec, (node.get("spec") or {}).get("taints") or [])
            if delay is None:
                continue
            due = self._evict_at.get(meta["uid"], now + delay)
            if now < due:
                pending[meta["uid"]] = due
                continue
            st = dict(pod.get("status") or {})
            conds = [c for c in st.get("conditions") or [] if c.get("type") != "DisruptionTarget"]
            conds.append(
                {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
                 "message": "Taint manager: deleting due to NoExecute taint", "lastTransitionTime": _now()}
            )  # fmt: skip
            with contextlib.suppress(status.ApiError):
                self._set_pod_status(meta["namespace"], meta["name"], {**st, "conditions": conds})
                self.store.delete(self.pods_kind, meta["namespace"], meta["name"])
        self._evict_at = pending

    # ----- scheduler (filter rules in tests/k8s/scheduler.py) ------------------------------
    def _schedule(self) -> None:
        pods, _ = self.store.list(self.pods_kind, None, lambda o: True)
        nodes, _ = self.store.list(self.nodes_kind, None, lambda o: True)
        bound: dict[str, list[Obj]] = {}
        for p in pods:
            n = (p.get("spec") or {}).get("nodeName")
            if n:
                bound.setdefault(n, []).append(p)
        for pod in pods:
            spec, meta = pod.get("spec") or {}, pod["metadata"]
            if spec.get("nodeName") or meta.get("deletionTimestamp"):
                continue
            why = {
                n["metadata"]["name"]: scheduler.unschedulable_reasons(
                    pod,
                    n,
                    bound.get(n["metadata"]["name"], []),
                    n["metadata"]["name"] in self.nodes,
                )
                for n in nodes
            }
            fits = [n for n, reasons in why.items() if not reasons]
            if not fits:
                self._unschedulable(pod, scheduler.fit_error(len(nodes), why, pod))
                continue
            target = min(fits, key=lambda n: (len(bound.get(n, [])), n))
            bound.setdefault(target, []).append(pod)
            current = self.store.get(self.pods_kind, meta["namespace"], meta["name"])
            current["spec"]["nodeName"] = target
            self.store.update(self.pods_kind, meta["namespace"], meta["name"], current, api=False)

    def _unschedulable(self, pod: Obj, message: str) -> None:
        """The pod stays Pending with the scheduler's condition (as kube-scheduler's
        failure handler records it: PodScheduled=False, reason Unschedulable)."""
        st = dict(pod.get("status") or {})
        old: Obj = next(
            (c for c in st.get("conditions") or [] if c.get("type") == "PodScheduled"), {}
        )
        if old.get("reason") == "Unschedulable" and old.get("message") == message:
            return
        conds = [c for c in st.get("conditions") or [] if c.get("type") != "PodScheduled"]
        conds.append(
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
                "lastTransitionTime": _now(),
            }
        )
        st.update(phase=st.get("phase") or "Pending", conditions=conds)
        meta = pod["metadata"]
        with contextlib.suppress(status.ApiError):
            self._set_pod_status(meta["namespace"], meta["name"], st)

    # ----- Job controller ---------------------------------------------------------------
    def _jobs(self) -> None:
        jobs, _ = self.store.list(self.jobs_kind, None, lambda o: True)
        for job in jobs:
            meta, spec = job["metadata"], job.get("spec") or {}
            st = dict(job.get("status") or {})
            conds = [c for c in st.get("conditions") or []]
            if any(c["type"] in ("Complete", "Failed") and c["status"] == "True" for c in conds):
                continue
            ns, name = meta["namespace"], meta["name"]
            pods, _ = self.store.list(
                self.pods_kind,
                ns,
                lambda p, uid=meta["uid"]: any(
                    o.get("uid") == uid for o in p["metadata"].get("ownerReferences") or []
                ),
            )
            live = [
                p
                for p in pods
                if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            ]
            new_st = dict(st)
            if spec.get("suspend"):
                for p in live:
                    if not p["metadata"].get("deletionTimestamp"):
                        with contextlib.suppress(status.ApiError):
                            self.store.delete(self.pods_kind, ns, p["metadata"]["name"])
                # startTime is kept on suspend (a 1.34 controller; 1.35's KEP-5440 clears it):
                # a client that changes the template clears it through jobs/status.
                # Pods being deleted are no longer active (TerminatingOrFailed).
                new_st["active"] = len(
                    [p for p in live if not p["metadata"].get("deletionTimestamp")]
                )
                new_st.update(controllers.pod_counts(pods))
                if not any(c["type"] == "Suspended" and c["status"] == "True" for c in conds):
                    conds = [c for c in conds if c["type"] != "Suspended"]
                    conds.append(
                        {"type": "Suspended", "status": "True", "reason": "JobSuspended",
                         "message": "Job suspended", "lastTransitionTime": _now()}
                    )  # fmt: skip
            else:
                resumed = any(c["type"] == "Suspended" and c["status"] == "True" for c in conds)
                if resumed:
                    # ensureJobConditionStatus(Suspended, False, "JobResumed", "Job resumed"):
                    # the condition stays, turned False.
                    conds = [c for c in conds if c["type"] != "Suspended"]
                    conds.append(
                        {"type": "Suspended", "status": "False", "reason": "JobResumed",
                         "message": "Job resumed", "lastTransitionTime": _now()}
                    )  # fmt: skip
                    # pkg/controller/job/job_controller.go, syncJob: "Resumed jobs will always
                    # reset StartTime to current time" (the ActiveDeadlineSeconds clock).
                    new_st["startTime"] = _now()
                try:
                    counts, ended = controllers.sync_job(self.store, job, pods, st)
                except status.ApiError as exc:
                    # Admission refused a pod (Pod Security): the real controller records a
                    # FailedCreate event and tries again later; the Job gets no pod.
                    self._refused(exc)
                    continue
                new_st.update(counts)
                conds += ended
                if any(c["type"] == "Complete" for c in ended):
                    new_st["completionTime"] = _now()
                new_st.setdefault("startTime", _now())
            new_st["conditions"] = conds
            if new_st != st:
                # Guarded by the resourceVersion read, as the real controller's update: a
                # stale pass gets a Conflict and retries, so it never undoes a client's
                # jobs/status write made in between (a cleared startTime).
                with contextlib.suppress(status.ApiError):
                    self.store.update(
                        self.jobs_kind, ns, name, {**job, "status": new_st},
                        subresource="status", api=False,
                    )  # fmt: skip

    def _refused(self, exc: status.ApiError) -> None:
        if exc.message not in self.refused_pods:
            self.refused_pods.append(exc.message)

    # ----- StatefulSet controller -------------------------------------------------------
    def _statefulsets(self) -> None:
        for sts in self.store.list(self.sts_kind, None, lambda o: True)[0]:
            meta = sts["metadata"]
            pods, _ = self.store.list(
                self.pods_kind,
                meta["namespace"],
                lambda p, uid=meta["uid"]: any(
                    o.get("uid") == uid for o in p["metadata"].get("ownerReferences") or []
                ),
            )
            try:
                st = controllers.sync_statefulset(self.store, sts, pods)
            except status.ApiError as exc:  # a pod refused at admission, as for Jobs
                self._refused(exc)
                continue
            if {k: (sts.get("status") or {}).get(k) for k in st} != st:
                new = {**(sts.get("status") or {}), **st}
                self.store.set_status(self.sts_kind, meta["namespace"], meta["name"], new)

    # ----- kubelet ----------------------------------------------------------------------
    def _pods(self) -> None:
        pods, _ = self.store.list(
            self.pods_kind, None, lambda p: (p.get("spec") or {}).get("nodeName") in self.nodes
        )
        seen = set()
        for pod in pods:
            meta = pod["metadata"]
            key = (meta["namespace"], meta["name"], meta["uid"])
            seen.add(key)
            proc = self.procs.get(key)
            phase = (pod.get("status") or {}).get("phase")
            if meta.get("deletionTimestamp"):
                self._terminate(pod, key, proc)
                continue
            if proc is None:
                if phase in ("Succeeded", "Failed") or key in self._create_failed:
                    continue
                self._start(pod, key)
                continue
            code = proc.popen.poll()
            if code is None and (pod.get("spec") or {}).get("readinessGates"):
                self._sync_ready(pod)
            if code is not None and not proc.reported_exit:
                proc.reported_exit = True
                if _restarts(pod, code):
                    self._report_restarting(pod, proc, code)
                else:
                    self._report_exit(pod, code)
            elif code is not None and "restart_at" in proc.extra:
                if time.monotonic() >= proc.extra["restart_at"]:
                    self._restart(pod, key, proc)
        for key in [k for k in self.procs if k not in seen]:
            proc = self.procs.pop(key)
            self._kill(proc, signal.SIGKILL)

    # ----- pod status: the kubelet's conditions, and everyone else's -------------------------
    def _set_pod_status(self, namespace: str, name: str, new_status: Obj) -> None:
        """Write a pod's status as the kubelet does: the conditions it does not own (a
        readiness gate's, set through pods/status by someone else) are kept from the API's
        current copy, not from the possibly older one it read, and Ready follows the gates."""
        with self.store.lock:
            current = self.store.get(self.pods_kind, namespace, name)
            self.store.set_status(
                self.pods_kind, namespace, name, merged_pod_status(current, new_status)
            )

    def _sync_ready(self, pod: Obj) -> None:
        """A gate's condition changed (the kubelet syncs the pod on every update it sees):
        Ready again from the API's current copy, written only when it changes."""
        meta = pod["metadata"]
        with self.store.lock, contextlib.suppress(status.ApiError):
            current = self.store.get(self.pods_kind, meta["namespace"], meta["name"])
            st = current.get("status") or {}
            if merged_pod_status(current, st) != st:
                self._set_pod_status(meta["namespace"], meta["name"], st)

    def _terminate(self, pod: Obj, key: tuple[str, str, str], proc: _Proc | None) -> None:
        meta = pod["metadata"]
        now = time.monotonic()
        if proc is not None and proc.popen.poll() is None:
            if proc.term_at is None:
                proc.term_at = now
                proc.kill_at = now + float(meta.get("deletionGracePeriodSeconds") or 0)
                self._signal(proc, signal.SIGTERM)
            elif proc.kill_at is not None and now >= proc.kill_at:
                self._kill(proc, signal.SIGKILL)
            return
        self.procs.pop(key, None)
        with contextlib.suppress(status.ApiError):
            self.store.delete(self.pods_kind, meta["namespace"], meta["name"], grace_seconds=0)

    def _mounts(self, pod: Obj, home: Path) -> list[tuple[str, str]]:
        spec = pod.get("spec") or {}
        container = (spec.get("containers") or [{}])[0]
        volumes = {v.get("name"): v for v in spec.get("volumes") or []}
        mounts: list[tuple[str, str]] = []
        for m in container.get("volumeMounts") or []:
            vol = volumes.get(m.get("name")) or {}
            if "persistentVolumeClaim" in vol:
                claim = vol["persistentVolumeClaim"].get("claimName", "")
                if claim not in self.volumes:
                    raise RuntimeError(f"no host directory for the claim {claim!r}")
                host = self.volumes[claim]
            else:
                host = home / "volumes" / str(m.get("name"))
            host.mkdir(parents=True, exist_ok=True)
            psc = spec.get("securityContext") or {}
            ctr.prepare_volume(
                host,
                fs_group=None if psc.get("fsGroup") is None else int(psc["fsGroup"]),
                empty_dir="emptyDir" in vol,
                policy=psc.get("fsGroupChangePolicy"),
            )
            mounts.append((str(m["mountPath"]).rstrip("/"), str(host)))
        # longest mount path first, so /a/b wins over /a
        mounts.sort(key=lambda pair: len(pair[0]), reverse=True)
        for mpath, host in mounts:
            m = next(
                x
                for x in container.get("volumeMounts") or []
                if x["mountPath"].rstrip("/") == mpath
            )
            vol = volumes.get(m.get("name")) or {}
            if "configMap" in vol:
                cm = self.store.get(
                    self.store.kinds[("", "configmaps")],
                    pod["metadata"]["namespace"],
                    vol["configMap"]["name"],
                )
                for fname, text in (cm.get("data") or {}).items():
                    (Path(host) / fname).write_text(_rewrite(str(text), _view(mounts)))
        return mounts

    def _container_env(self, pod: Obj, mounts: list[tuple[str, str]]) -> dict[str, str]:
        container = ((pod.get("spec") or {}).get("containers") or [{}])[0]
        env = {
            "PATH": f"{VENV_BIN}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            # The pod's hostname is spec.hostname when set (Indexed Jobs, StatefulSets), else
            # its name (pkg/kubelet/util GetPodHostnameAndDomain).
            "HOSTNAME": (pod.get("spec") or {}).get("hostname") or pod["metadata"]["name"],
            "LANG": "C.UTF-8",
        }
        if os.environ.get("PYTHONPATH"):  # a test run against another checkout
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        for e in container.get("env") or []:
            if "value" in e:
                env[str(e["name"])] = _rewrite(str(e["value"]), mounts)
            elif "fieldRef" in (e.get("valueFrom") or {}):
                path = str(e["valueFrom"]["fieldRef"].get("fieldPath", ""))
                env[str(e["name"])] = _field_ref(pod, path)
        return env

    def _argv(
        self, argv: list[str], env: dict[str, str], mounts: list[tuple[str, str]]
    ) -> list[str]:
        out = [_rewrite(a, mounts) for a in argv]
        if out and "/" not in out[0]:
            for d in env["PATH"].split(":"):
                cand = Path(d) / out[0]
                if cand.is_file() and os.access(cand, os.X_OK):
                    out[0] = str(cand)
                    break
        return out

    def _start(self, pod: Obj, key: tuple[str, str, str]) -> None:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        container = (spec.get("containers") or [{}])[0]
        home = self.root / f"{meta['namespace']}_{meta['name']}_{meta['uid'][:8]}"
        home.mkdir(parents=True, exist_ok=True)
        # Each volume's host directory is bind-mounted in the container's mount namespace at
        # the same path in every pod (VOLUME_VIEW + mountPath), and paths under a mountPath
        # are rewritten to that view: a process restored in another pod finds its files.
        binds = self._mounts(pod, home)
        mounts = _view(binds)
        env = self._container_env(pod, mounts)
        argv = self._argv(
            [*(container.get("command") or []), *(container.get("args") or [])], env, mounts
        )
        cwd = _rewrite(str(container.get("workingDir") or ROOT), mounts)
        log = home / "container.log"
        # The container process gets exactly what its securityContext grants
        # (tests/k8s/container.py); one it cannot be given fails the pod as CreateContainerError.
        try:
            cspec = ctr.ContainerSpec.from_pod(
                pod,
                argv=argv,
                env=env,
                cwd=cwd,
                binds=[(view, host) for (_m, view), (_m2, host) in zip(mounts, binds, strict=True)],
                seccomp_root=self.seccomp_root,
                pidfile=home / "container.pid",
            )
        except ctr.SecurityContextError as exc:
            self._create_error(pod, key, str(exc))
            return
        Path(cspec.pidfile).unlink(missing_ok=True)  # a restart's: the old one is gone
        with log.open("ab") as out:
            popen = subprocess.Popen(
                ctr.launch_argv(cspec),
                env=env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.procs[key] = _Proc(popen, spec["nodeName"], env, cwd, mounts, log=log, spec=cspec)
        # Running means the runtime has started the container's process (its namespaces
        # exist, pods/exec can join them).
        deadline = time.monotonic() + 10
        while ctr.init_pid(cspec) is None and popen.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        started = _now()
        cname = container.get("name", "main")
        self._set_pod_status(
            meta["namespace"],
            meta["name"],
            {
                "phase": "Running",
                "hostIP": "127.0.0.1",
                "podIP": "127.0.0.1",
                "startTime": started,
                "conditions": [
                    {"type": "PodScheduled", "status": "True"},
                    {"type": "Initialized", "status": "True"},
                    {"type": "ContainersReady", "status": "True"},
                    {"type": "Ready", "status": "True"},
                ],
                "containerStatuses": [
                    {
                        "name": cname,
                        "ready": True,
                        "started": True,
                        "restartCount": 0,
                        "image": container.get("image", ""),
                        "imageID": "",
                        "containerID": f"fake://{popen.pid}",
                        "state": {"running": {"startedAt": started}},
                        # What it runs with, as kubelets report since 1.33 (``resizer``).
                        "resources": resizer.applied(container),
                        "allocatedResources": resizer.applied(container).get("requests") or {},
                    }
                ],
            },
        )

    def _create_error(self, pod: Obj, key: tuple[str, str, str], message: str) -> None:
        """The container cannot be created: the pod stays Pending, its container waiting
        with ``CreateContainerConfigError`` (pkg/kubelet/kuberuntime/kuberuntime_container.go
        startContainer), and the kubelet does not try again with the same spec."""
        if key in self._create_failed:
            return
        self._create_failed.add(key)
        meta = pod["metadata"]
        container = ((pod.get("spec") or {}).get("containers") or [{}])[0]
        reason = {"reason": "CreateContainerConfigError", "message": message}
        with contextlib.suppress(status.ApiError):
            self._set_pod_status(
                meta["namespace"],
                meta["name"],
                {
                    "phase": "Pending",
                    "conditions": [{"type": "PodScheduled", "status": "True"}],
                    "containerStatuses": [
                        {
                            "name": container.get("name", "main"),
                            "ready": False,
                            "started": False,
                            "restartCount": 0,
                            "image": container.get("image", ""),
                            "imageID": "",
                            "state": {"waiting": reason},
                        }
                    ],
                },
            )

    # ----- restartPolicy ----------------------------------------------------------------
    def _report_restarting(self, pod: Obj, proc: _Proc, code: int) -> None:
        """The container exited and will be started again: the pod stays Running, the
        container waits in CrashLoopBackOff with its last state terminated (kubelet
        pkg/kubelet/kuberuntime; the pod phase only ends when no container will restart,
        pkg/kubelet/kubelet_pods.go getPhase). The real back-off starts at 10 s and doubles
        up to 5 min (pkg/kubelet/kubelet.go); the fake's starts at ``restart_backoff_s``
        and doubles up to 8 times that, so tests do not wait minutes."""
        restarts = int(proc.extra.get("restarts", 0))
        proc.extra["restart_at"] = time.monotonic() + self.restart_backoff_s * min(2**restarts, 8)
        meta = pod["metadata"]
        st = dict(pod.get("status") or {})
        exit_code = code if code >= 0 else 128 - code
        cs = [dict(c) for c in st.get("containerStatuses") or []]
        for c in cs:
            c.update(ready=False, started=False)
            c["lastState"] = {
                "terminated": {
                    "exitCode": exit_code,
                    "reason": "Completed" if code == 0 else "Error",
                    "finishedAt": _now(),
                }
            }
            c["state"] = {"waiting": {"reason": "CrashLoopBackOff"}}
        st["containerStatuses"] = cs
        with contextlib.suppress(status.ApiError):
            self._set_pod_status(meta["namespace"], meta["name"], st)

    def _restart(self, pod: Obj, key: tuple[str, str, str], proc: _Proc) -> None:
        """Start the container again in the same pod (same home, volumes and name);
        ``restartCount`` goes up by one."""
        restarts = int(proc.extra.get("restarts", 0)) + 1
        last = [
            dict(c).get("lastState")
            for c in (pod.get("status") or {}).get("containerStatuses") or []
        ]
        del self.procs[key]
        self._start(pod, key)
        new = self.procs.get(key)
        if new is not None:
            new.extra["restarts"] = restarts
        meta = pod["metadata"]
        with contextlib.suppress(status.ApiError):
            current = self.store.get(self.pods_kind, meta["namespace"], meta["name"])
            st = dict(current.get("status") or {})
            cs = [dict(c) for c in st.get("containerStatuses") or []]
            for i, c in enumerate(cs):
                c["restartCount"] = restarts
                if i < len(last) and last[i]:
                    c["lastState"] = last[i]
            st["containerStatuses"] = cs
            self._set_pod_status(meta["namespace"], meta["name"], st)

    def _report_exit(self, pod: Obj, code: int) -> None:
        meta = pod["metadata"]
        st = dict(pod.get("status") or {})
        exit_code = code if code >= 0 else 128 - code
        st["phase"] = "Succeeded" if code == 0 else "Failed"
        st["conditions"] = [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Initialized", "status": "True"},
            {"type": "ContainersReady", "status": "False", "reason": "PodCompleted"},
            {"type": "Ready", "status": "False", "reason": "PodCompleted"},
        ]
        cs = [dict(c) for c in st.get("containerStatuses") or []]
        for c in cs:
            c["ready"] = False
            c["started"] = False
            c["state"] = {
                "terminated": {
                    "exitCode": exit_code,
                    "reason": "Completed" if code == 0 else "Error",
                    "finishedAt": _now(),
                }
            }
        st["containerStatuses"] = cs
        with contextlib.suppress(status.ApiError):
            self._set_pod_status(meta["namespace"], meta["name"], st)

    # ----- signals and exec -------------------------------------------------------------
    @staticmethod
    def _signal(proc: _Proc, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            proc.popen.send_signal(sig)

    @staticmethod
    def _kill(proc: _Proc, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.popen.pid, sig)
        with contextlib.suppress(ProcessLookupError):
            proc.popen.send_signal(sig)

    def exec(
        self, namespace: str, name: str, container: str, argv: list[str]
    ) -> tuple[int, bytes, bytes]:
        """``pods/exec``: run ``argv`` in the container's environment; (code, stdout, stderr)."""
        with self._lock:
            proc = next(
                (p for (ns, n, _u), p in self.procs.items() if (ns, n) == (namespace, name)),
                None,
            )
        if proc is None or proc.popen.poll() is not None:
            return 1, b"", f"container not running in pod {namespace}/{name}\n".encode()
        if not argv:
            return 1, b"", b"no command given\n"
        full = self._argv(argv, proc.env, proc.mounts)
        pid = ctr.init_pid(proc.spec) if proc.spec is not None else None
        if proc.spec is None or pid is None:
            return 1, b"", f"container not running in pod {namespace}/{name}\n".encode()
        try:
            done = subprocess.run(  # noqa: S603 - argv list from the test's own exec call
                ctr.exec_argv(proc.spec, pid, full),
                env=proc.env,
                cwd=proc.cwd,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=300,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return 126, b"", f"exec failed: {exc}\n".encode()
        return done.returncode, done.stdout, done.stderr


# Where the container sees its volumes: inside its private /tmp (tests/k8s/container_init.py).
VOLUME_VIEW = "/tmp/.volumes"


def _view(mounts: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(mpath, VOLUME_VIEW + mpath) for mpath, _host in mounts]


def _rewrite(text: str, mounts: list[tuple[str, str]]) -> str:
    """Paths under a mountPath -> the host directory standing in for the volume."""
    for mpath, host in mounts:
        if text == mpath or text.startswith(mpath + "/"):
            return host + text[len(mpath) :]
        text = text.replace(f'"{mpath}/', f'"{host}/').replace(f'"{mpath}"', f'"{host}"')
        text = text.replace(f"={mpath}/", f"={host}/").replace(f"={mpath}\n", f"={host}\n")
    return text


def _field_ref(pod: Obj, path: str) -> str:
    """The downward API value of ``fieldPath`` (pkg/fieldpath ExtractFieldPathAsString): a
    missing label or annotation is the empty string; a path the API server would have refused
    is an error here (validation's validEnvDownwardAPIFieldPathExpressions)."""
    meta, spec = pod["metadata"], pod.get("spec") or {}
    for prefix, source in (("metadata.labels", "labels"), ("metadata.annotations", "annotations")):
        if path.startswith(f"{prefix}['") and path.endswith("']"):
            return str((meta.get(source) or {}).get(path[len(prefix) + 2 : -2], ""))
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.hostIP": "127.0.0.1",
        "status.podIP": "127.0.0.1",
    }
    if path not in simple:
        raise RuntimeError(f"unsupported downward API fieldPath {path!r}")
    return str(simple[path] or "")


# The pod conditions the kubelet owns (pkg/kubelet/types/pod_status.go
# PodConditionsByKubelet); DisruptionTarget is shared with the controllers that evict.
KUBELET_CONDITIONS = frozenset({
    "PodScheduled", "Ready", "Initialized", "ContainersReady", "PodReadyToStartContainers",
    "PodResizePending", "PodResizeInProgress",
})  # fmt: skip


def merged_pod_status(current: Obj, new_status: Obj) -> Obj:
    """``new_status`` as the kubelet writes it over ``current`` (the API's copy).

    pkg/kubelet/kubelet_pods.go generateAPIPodStatus: conditions not owned by the kubelet
    are preserved from the API's copy (here: unless ``new_status`` sets that type itself, as
    the taint eviction's DisruptionTarget does). pkg/kubelet/status/generate.go
    GeneratePodReadyCondition: with every container ready, Ready is True only if each of
    ``spec.readinessGates`` has its condition, status True; else False, reason
    ReadinessGatesNotReady, a message per gate joined by ", "."""
    st = dict(new_status)
    conds = [dict(c) for c in st.get("conditions") or []]
    mine = {c.get("type") for c in conds}
    conds += [
        dict(c) for c in (current.get("status") or {}).get("conditions") or []
        if c.get("type") not in KUBELET_CONDITIONS and c.get("type") not in mine
    ]  # fmt: skip
    gates = (current.get("spec") or {}).get("readinessGates") or []
    by_type = {c.get("type"): c for c in conds}
    if gates and (by_type.get("ContainersReady") or {}).get("status") == "True":
        unready = []
        for gate in gates:
            kind = str(gate.get("conditionType"))
            found = by_type.get(kind)
            if found is None:
                unready.append(
                    f'corresponding condition of pod readiness gate "{kind}" does not exist.'
                )
            elif found.get("status") != "True":
                unready.append(
                    f'the status of pod readiness gate "{kind}" is not "True", but {found.get("status")}'
                )
        ready: Obj = {"type": "Ready", "status": "True"}
        if unready:
            ready = {"type": "Ready", "status": "False", "reason": "ReadinessGatesNotReady",
                     "message": ", ".join(unready)}  # fmt: skip
        conds = [ready if c.get("type") == "Ready" else c for c in conds]
        if "Ready" not in mine:
            conds.append(ready)
    if conds or "conditions" in st:
        st["conditions"] = conds
    return st


def _restarts(pod: Obj, code: int) -> bool:
    """Whether the kubelet starts an exited container again (pod restartPolicy: Always after
    any exit, OnFailure after a non-zero one, Never not at all; pkg/kubelet/container
    ShouldContainerBeRestarted). A pod being deleted is never restarted."""
    policy = (pod.get("spec") or {}).get("restartPolicy") or "Always"
    if pod["metadata"].get("deletionTimestamp"):
        return False
    return policy == "Always" or (policy == "OnFailure" and code != 0)
