"""An ordinary user (no sudo, no delegated cgroup) asks for a resize: refused at plan time
with a clear reason and what to do (run as root, or name a delegated cgroup v2 subtree as
``[local] cgroup_root``), and nothing changed: the workload runs on, same process, same
node, no size recorded. ``run --memory`` is refused the same way and leaves nothing running.
Through the installed ``clawpoint`` run as that user (``tests.tenants``).
"""

from __future__ import annotations

import pytest

from tests.tenants.test_unprivileged_local import As, alice  # noqa: F401 (fixture)

pytestmark = [pytest.mark.criu, pytest.mark.timeout(300)]


def test_an_ordinary_user_without_a_cgroup_is_refused_clearly(alice: As) -> None:  # noqa: F811
    name = "tenant-resize"
    alice.start_counter(name, mb=16)
    before = alice.workload(name)

    code, out, err = alice("resize", f"local:{name}", "--memory", "512Mi", "--yes", "--json")
    assert code == 4, (code, out, err)
    assert out["error"] == "no-writable-cgroup", out
    assert "not writable" in out["message"] and "cgroup_root" in out["hint"], out
    after = alice.workload(name)
    assert (after["pid"], after["node"], after["state"]) == (before["pid"], "node-a", "running")
    assert after.get("memory_mb") is None and after.get("memory") is None, after
    alice.wait_step(name, 20)  # it keeps counting

    code, out, err = alice(
        "run", "--name", "sized", "--memory", "256Mi", "--detach", "--json", "--",
        str(alice.who.python), "-m", "core.workloads.counter", "--state-mb", "1",
    )  # fmt: skip
    assert code == 4, (code, out, err)
    assert "cgroup_root" in str(out), out
    assert not [w for w in alice("workloads", "--json")[1] if w["name"] == "sized"
                and w["state"] == "running"]  # fmt: skip
