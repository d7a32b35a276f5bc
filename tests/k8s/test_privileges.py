"""The fake kubelet runs each container with exactly what its securityContext grants, and the
wrapper works under the documented privilege model (and only there).

The privilege-model evidence (docs/kubernetes.md "securityContext for CRIU") is pinned here:
the old documented securityContext (root, default capabilities + CHECKPOINT_RESTORE +
SYS_PTRACE, RuntimeDefault seccomp) cannot start the payload's namespaces; a masked /proc
stops CRIU's parasite; any seccomp filter stops the dump; the documented model checkpoints
and restores the counter.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.stream import stream

from core.checkpoint import nsinit
from core.errors import EngineUnavailable
from tests.k8s.conftest import (
    CONTAINER_SECURITY_CONTEXT,
    OLD_CONTAINER_SECURITY_CONTEXT,
    RUN_AS,
    wait_for,
    wrapped_pod,
)


def phase(core: Any, name: str) -> str | None:
    return str(core.read_namespaced_pod(name, "default").status.phase)


def run_exec(core: Any, name: str, argv: list[str]) -> tuple[int, str, str]:
    resp = stream(
        core.connect_get_namespaced_pod_exec,
        name,
        "default",
        command=argv,
        stderr=True,
        stdin=False,
        stdout=True,
        tty=False,
        _preload_content=False,
    )
    resp.run_forever(timeout=120)
    return int(resp.returncode), resp.read_stdout() or "", resp.read_stderr() or ""


def log_of(kubelet: Any, name: str) -> str:
    return "".join(
        p.read_text() for p in Path(kubelet.root).glob(f"default_{name}_*/container.log")
    )


def status_fields(text: str) -> dict[str, str]:
    return dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)


NSINIT = str(Path(nsinit.__file__).resolve())


def old_model(manifest: dict[str, Any]) -> dict[str, Any]:
    spec = manifest["spec"]
    spec.pop("hostUsers")
    spec.pop("securityContext")
    spec["containers"][0]["securityContext"] = copy.deepcopy(OLD_CONTAINER_SECURITY_CONTEXT)
    return manifest


def test_the_old_documented_security_context_cannot_start_the_payload(
    need_criu: None, emu: Any, api: Any, kubelet: Any
) -> None:
    """Issue 21, what broke 1: with the runtime's default capabilities plus CHECKPOINT_RESTORE
    and SYS_PTRACE and the runtime's seccomp profile, the payload's namespaces cannot be
    made (the profile refuses unshare without CAP_SYS_ADMIN) and ``clawpoint run`` exits 9.
    The fake refuses what the real runtime refuses; the wrapper says why at once."""
    core = client.CoreV1Api(api)
    core.create_namespaced_pod("default", old_model(wrapped_pod("old", "old")))
    wait_for("the old-model pod to fail", lambda: phase(core, "old") == "Failed")
    log = log_of(kubelet, "old")
    assert "runs under a seccomp filter (Seccomp: 2)" in " ".join(log.split()), log
    status = core.read_namespaced_pod("old", "default").status.container_statuses[0]
    assert status.state.terminated.exit_code == EngineUnavailable.exit_code == 9
    # What nsinit would meet: the same securityContext refuses the namespaces themselves.
    probe = old_model(wrapped_pod("old-unshare", "old-unshare"))
    probe["spec"]["containers"][0]["command"] = ["unshare", "--user", "--mount", "--pid"]
    probe["spec"]["containers"][0]["args"] = ["--fork", "true"]
    core.create_namespaced_pod("default", probe)
    wait_for("the probe to fail", lambda: phase(core, "old-unshare") == "Failed")
    assert "unshare failed: Operation not permitted" in log_of(kubelet, "old-unshare")


def test_the_documented_model_checkpoints_and_restores_the_counter(
    need_criu: None, emu: Any, api: Any, kubelet: Any, store_dir: Path
) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod("default", wrapped_pod("p1", "priv-p1", grace_s=20))
    wait_for("p1 running", lambda: phase(core, "p1") == "Running")
    wait_for("progress", lambda: "step 20 verified" in log_of(kubelet, "p1"))
    # The container holds no capability, runs as the pod's uid with no_new_privs, inside a
    # user namespace; exec gets the same.
    code, out, err = run_exec(core, "p1", ["cat", "/proc/self/status"])
    assert code == 0, err
    fields = status_fields(out)
    assert fields["Uid"].split()[0] == str(RUN_AS)
    assert int(fields["CapBnd"], 16) == 0 and int(fields["CapEff"], 16) == 0
    assert fields["NoNewPrivs"].strip() == "1"
    code, out, _ = run_exec(core, "p1", ["cat", "/proc/self/uid_map"])
    assert out.split() != ["0", "0", "4294967295"], "hostUsers false: not the node's namespace"
    code, out, err = run_exec(
        core,
        "p1",
        ["python", "-m", "core.backends.kubernetes.incontainer", "checkpoint", "priv-p1"],
    )
    assert code == 0, (out, err)
    assert json.loads(out)["lineage"] == "priv-p1"
    core.delete_namespaced_pod("p1", "default")
    wait_for("p1 gone", lambda: not core.list_namespaced_pod("default").items)
    # A new pod of the lineage restores from the newest checkpoint and carries on.
    core.create_namespaced_pod("default", wrapped_pod("p2", "priv-p1"))
    wait_for("p2 restored and stepping", lambda: "verified" in log_of(kubelet, "p2"), 90)
    log = log_of(kubelet, "p2")
    assert "counter started" not in log, f"p2 started afresh instead of restoring:\n{log}"


def test_a_masked_proc_stops_criu(need_criu: None, emu: Any, api: Any, kubelet: Any) -> None:
    """Without ``procMount: Unmasked`` the runtime's masks lock /proc once the payload copies
    the mount namespace into its own user namespace; the kernel then refuses CRIU's parasite a
    procfs of the payload's PID namespace (fs/namespace.c mnt_already_visible)."""
    core = client.CoreV1Api(api)
    manifest = wrapped_pod("masked", "masked")
    del manifest["spec"]["containers"][0]["securityContext"]["procMount"]
    core.create_namespaced_pod("default", manifest)
    wait_for("masked running", lambda: phase(core, "masked") == "Running")
    wait_for("progress", lambda: "counter started" in log_of(kubelet, "masked"))
    code, out, err = run_exec(
        core,
        "masked",
        ["python", "-m", "core.backends.kubernetes.incontainer", "checkpoint", "masked"],
    )
    assert code != 0, out
    assert "proc" in (out + err).lower(), (out, err)


def test_any_seccomp_filter_stops_the_dump(
    need_criu: None, emu: Any, api: Any, kubelet: Any, tmp_path: Path
) -> None:
    """Why the documented model has no seccomp profile: CRIU suspends the payload's filter
    with PTRACE_O_SUSPEND_SECCOMP, which needs CAP_SYS_ADMIN in the node's user namespace
    (kernel/ptrace.c ptrace_setoptions). Even a profile that refuses nothing stops the dump;
    the wrapper therefore refuses to start under a filter, naming it."""
    profile = tmp_path / "seccomp" / "profiles" / "allow-all.json"
    profile.write_text(json.dumps({"defaultAction": "SCMP_ACT_ALLOW"}))
    localhost = {"type": "Localhost", "localhostProfile": "profiles/allow-all.json"}
    core = client.CoreV1Api(api)
    wrapped = wrapped_pod("filtered", "filtered")
    wrapped["spec"]["securityContext"]["seccompProfile"] = localhost
    core.create_namespaced_pod("default", wrapped)
    wait_for("the wrapper to refuse", lambda: phase(core, "filtered") == "Failed")
    assert "runs under a seccomp filter (Seccomp: 2)" in " ".join(
        log_of(kubelet, "filtered").split()
    )

    # The evidence underneath: the payload started by nsinit itself, and CRIU run the way
    # the wrapper runs it; under the filter the dump fails on it and nothing else, and the
    # same dump without the filter succeeds.
    log = bare_dump(core, "bare-criu", localhost)
    assert "suspending seccomp failed: Operation not permitted" in log, log[-2000:]
    log = bare_dump(core, "bare-criu-unfiltered", None)  # (exit 0, asserted there)
    assert "seccomp" not in log, log[-2000:]


def bare_dump(core: Any, name: str, seccomp: dict[str, Any] | None) -> str:
    """Start ``sleep`` under nsinit in a documented-model pod, ``criu dump`` it through
    ``nsinit --join`` over pods/exec, and return CRIU's log."""
    manifest = wrapped_pod(name, name)
    if seccomp is not None:
        manifest["spec"]["securityContext"]["seccompProfile"] = seccomp
    c = manifest["spec"]["containers"][0]
    # (under a shell: exec joins the namespaces of the container's PID 1, which must not be
    # nsinit's own)
    c["command"] = ["sh", "-c", f"python -I -S {NSINIT} sleep 600 2>&1 | cat; true"]
    c["args"] = []
    core.create_namespaced_pod("default", manifest)
    wait_for(f"{name} running", lambda: phase(core, name) == "Running")
    _, out, _ = run_exec(core, name, ["grep", "^Seccomp:", "/proc/self/status"])
    assert out.split() == ["Seccomp:", "2" if seccomp else "0"]
    pid = wait_for("the payload", lambda: run_exec(core, name, ["pgrep", "-x", "sleep"])[1])
    pid = pid.split()[0]
    argv = ["python", "-I", "-S", NSINIT, "--join", pid]
    argv += ["criu", "dump", "-t", pid, "-D", "/tmp", "-o", "dump.log", "--unprivileged"]
    argv += ["--leave-running", "--shell-job"]
    code, _, _ = run_exec(core, name, argv)
    _, log, _ = run_exec(core, name, ["cat", "/tmp/dump.log"])
    assert (code == 0) == (seccomp is None), log[-2000:]
    return log


@pytest.mark.parametrize(
    ("security_context", "bounding", "uid"),
    [
        ({}, {0, 1, 3, 4, 5, 6, 7, 8, 10, 13, 18, 27, 29, 31}, 0),
        ({"capabilities": {"add": ["SYS_PTRACE"], "drop": ["NET_RAW"]}}, None, 0),
        (CONTAINER_SECURITY_CONTEXT, set(), 0),
        ({"privileged": True}, None, 0),
        ({"runAsUser": 4242, "capabilities": {"drop": ["ALL"], "add": ["KILL"]}}, None, 4242),
    ],
    ids=["runtime-default", "add-drop", "drop-all", "privileged", "non-root"],
)
def test_a_container_gets_exactly_its_capabilities_and_uid(
    emu: Any,
    api: Any,
    kubelet: Any,
    security_context: dict[str, Any],
    bounding: set[int] | None,
    uid: int,
) -> None:
    """containerd's default capability set, plus add, minus drop (ALL first), in the bounding
    set; a non-root uid keeps none effective after exec (no ambient set)."""
    core = client.CoreV1Api(api)
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "caps", "namespace": "default"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "command": ["cat", "/proc/self/status"],
                    "securityContext": security_context,
                }
            ],
        },
    }
    if security_context.get("procMount") == "Unmasked":
        # The API server refuses an Unmasked /proc outside a pod user namespace
        # (pkg/apis/core/validation/validation.go ValidateSecurityContext).
        body["spec"]["hostUsers"] = False
    core.create_namespaced_pod("default", body)
    wait_for("caps done", lambda: phase(core, "caps") == "Succeeded")
    fields = status_fields(log_of(kubelet, "caps"))
    bnd = int(fields["CapBnd"], 16)
    got = {i for i in range(64) if bnd >> i & 1}
    if security_context.get("privileged"):
        assert (21 in got and 40 in got) or 21 in got  # every capability the node has
    elif bounding is not None:
        assert got == bounding
    else:
        caps = security_context["capabilities"]
        if "SYS_PTRACE" in caps.get("add", []):
            assert 19 in got and 13 not in got and 21 not in got
        if caps.get("drop") == ["ALL"]:
            assert got == {5}
    assert fields["Uid"].split()[0] == str(uid)
    if uid:
        assert int(fields["CapEff"], 16) == 0
    else:
        assert int(fields["CapEff"], 16) == bnd


def test_run_as_non_root_with_uid_0_is_a_create_container_config_error(
    emu: Any, api: Any, kubelet: Any
) -> None:
    core = client.CoreV1Api(api)
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "rootish", "namespace": "default"},
        "spec": {
            "restartPolicy": "Never",
            "securityContext": {"runAsNonRoot": True},
            "containers": [{"name": "main", "image": "busybox", "command": ["true"]}],
        },
    }
    core.create_namespaced_pod("default", body)
    waiting = wait_for(
        "the config error",
        lambda: (
            (cs := core.read_namespaced_pod("rootish", "default").status.container_statuses)
            and cs[0].state.waiting
        ),
    )
    assert waiting.reason == "CreateContainerConfigError"
    assert "runAsNonRoot" in waiting.message
    assert phase(core, "rootish") == "Pending"
