"""A restore stopped mid-way (its images failed verification) never hangs the wrapper
(``core.checkpoint.criu_restore._end_half_restored``): tasks CRIU left may hold its output pipes.
A restore CRIU itself failed ends the tasks it left (our children by ``--restore-sibling``), and
the next fence ends those a wrapper killed mid-restore left (``fence.half_restored``)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core import errors
from core.checkpoint import criu_restore
from core.config import load_settings
from core.state.workloads import WorkloadRecord
from core.wrapper import fence

# A stand-in for a killed CRIU: it leaves a task behind that holds its stdout and is not our
# child (so it cannot be found and killed as one), as a half-restored task forked after our
# look at /proc would.
_LEAVES_A_HOLDER = (
    "import subprocess, sys, time\n"
    "h = subprocess.Popen(['sleep', '120'], stdout=sys.stdout, stderr=sys.stderr)\n"
    "print(h.pid, flush=True)\n"
    "time.sleep(120)\n"
)


def test_leftovers_holding_the_pipes_are_not_waited_for_ever(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(criu_restore, "REAP_S", 1.0)
    before = criu_restore._children()
    proc = subprocess.Popen(
        [sys.executable, "-c", _LEAVES_A_HOLDER],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    holder = int(proc.stdout.readline())
    proc.kill()
    t0 = time.monotonic()
    criu_restore._end_half_restored(proc, before)
    assert time.monotonic() - t0 < 10
    assert proc.returncode is not None
    os.kill(holder, signal.SIGKILL)


# A stand-in for CRIU whose restore fails after it made the tree's root task: with
# --restore-sibling that task is the caller's child (CLONE_PARENT, as CRIU's own fork of the
# root task does), in a session of its own, and this CRIU exits 1 without ending it.
_FAILS_AFTER_ITS_ROOT_TASK = """#!{python}
import ctypes, os, sys, time
SYS_CLONE = {{"x86_64": 56, "aarch64": 220}}[os.uname().machine]
CLONE_PARENT, SIGCHLD = 0x8000, 17
work = sys.argv[sys.argv.index("-W") + 1]
pid = ctypes.CDLL(None, use_errno=True).syscall(SYS_CLONE, CLONE_PARENT | SIGCHLD, 0, 0, 0, 0)
if pid == 0:  # its descriptors already the restored ones, not CRIU's output pipes
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    time.sleep(120)
    os._exit(0)
open(os.path.join(work, "leftover.pid"), "w").write(str(pid))
sys.exit(1)
"""


def test_a_failed_restore_ends_the_tasks_it_left(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Left alone, such a task would outlive the wrapper, reparented to init and beyond the
    reach of any job's or pod's end, holding its memory."""
    if os.uname().machine not in ("x86_64", "aarch64"):
        pytest.skip("the stand-in's clone call is written for x86_64 and aarch64")
    fake = tmp_path / "criu"
    fake.write_text(_FAILS_AFTER_ITS_ROOT_TASK.format(python=sys.executable))
    fake.chmod(0o755)
    monkeypatch.setattr(criu_restore, "require", lambda path: path)
    monkeypatch.setattr(criu_restore, "in_namespaces", lambda argv, pid, everyone=False: argv)
    images, work = tmp_path / "images", tmp_path / "work"
    images.mkdir()
    t0 = time.monotonic()
    with pytest.raises(errors.CheckpointError, match=r"failed \(exit 1\)"):
        criu_restore.restore(images, work_dir=work, criu_path=str(fake), timeout_s=60)
    assert time.monotonic() - t0 < 30  # CRIU's exit, not the timeout, ended the restore
    leftover = int((work / "leftover.pid").read_text())
    assert not Path(f"/proc/{leftover}").exists(), "the half-restored task was left running"


_HOLDS_THE_LOG = (
    "import sys, time\nlog = open(sys.argv[1], 'a')\nprint('ready', flush=True)\ntime.sleep(120)\n"
)


def _holding(log: Path, *, own_pid_namespace: bool) -> subprocess.Popen[str]:
    """A process holding ``log`` open: in a PID namespace of its own, as a task CRIU made
    is (unshare, as an ordinary user may), or in ours, as a person's ``tail -f`` is."""
    prefix = (
        ["unshare", "--user", "--map-root-user", "--pid", "--fork"] if own_pid_namespace else []
    )
    proc = subprocess.Popen(  # noqa: S603 (argv list)
        [*prefix, sys.executable, "-c", _HOLDS_THE_LOG, str(log)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    return proc


def test_a_fence_ends_what_a_killed_wrappers_restore_left(tmp_path: Path) -> None:
    """A wrapper killed in the middle of a restore leaves CRIU's half-made tasks, reparented
    to init: the next fence of the workload ends them (they hold the restore's log, in a PID
    namespace of their own), and nothing else: not a reader of the log in ours, not another
    workload's restore."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is needed to make a PID namespace")
    settings = load_settings(tmp_path / "home")
    logs = {}
    for name in ("w", "other"):
        logs[name] = fence.restore_dir(settings, name) / criu_restore.RESTORE_LOG
        logs[name].parent.mkdir(parents=True)
    left = _holding(logs["w"], own_pid_namespace=True)
    reader = _holding(logs["w"], own_pid_namespace=False)
    elsewhere = _holding(logs["other"], own_pid_namespace=True)
    try:
        assert fence.fence(settings, WorkloadRecord(name="w"))
        assert left.wait(timeout=10) != 0  # its task was killed, so unshare ended
        assert reader.poll() is None and elsewhere.poll() is None
        assert fence.half_restored(settings, "w") == []
    finally:
        for proc in (left, reader, elsewhere):
            proc.kill()
            proc.wait()
