"""A wrapper's warm-up: the engine check it starts early is waited for, never run twice, and
a failure in it changes nothing (``core.wrapper.warm_up``, ``criu_setup.criu_status``)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from core.checkpoint import engine
from core.config import CheckpointConfig
from core.wrapper import warm_up


def _fake_criu(tmp_path: Path) -> tuple[Path, Path]:
    """A criu that notes each run and takes 0.3 s: two checks at once would overlap."""
    calls = tmp_path / "calls"
    fake = tmp_path / "criu"
    fake.write_text(f'#!/bin/sh\necho "$*" >> {calls}\nsleep 0.3\necho "Version: 9.9.9"\n')
    fake.chmod(0o755)
    return fake, calls


def test_a_check_in_flight_is_waited_for_not_run_again(tmp_path: Path) -> None:
    fake, calls = _fake_criu(tmp_path)
    cfg = CheckpointConfig(criu_path=str(fake))
    criu = engine.get("criu")
    thread = warm_up.start(criu, cfg)
    time.sleep(0.05)  # the warm-up's check is running
    t0 = time.monotonic()
    criu.require(cfg)  # waits for it (the fake says CRIU works)
    waited = time.monotonic() - t0
    thread.join(10)
    runs = calls.read_text().splitlines()
    # One check: `criu --version` and `criu check` (or, unprivileged, --version in namespaces).
    assert len(runs) == 2, runs
    assert waited < 0.9, waited  # not a second check of its own after the first


def test_a_failing_engine_check_is_left_to_require(tmp_path: Path) -> None:
    class Broken:
        def status(self, cfg: CheckpointConfig) -> Any:
            raise RuntimeError("no engine here")

    escaped: list[BaseException | None] = []
    before = threading.excepthook
    threading.excepthook = lambda args: escaped.append(args.exc_value)
    try:
        thread = warm_up.start(Broken(), CheckpointConfig())  # type: ignore[arg-type]
        thread.join(10)
    finally:
        threading.excepthook = before
    assert not thread.is_alive() and escaped == []


def test_nothing_is_logged_before_a_restored_tree_runs(tmp_path: Path) -> None:
    """A first log line loads structlog (tens of ms of CPU): never inside the pause. A fresh
    interpreter restores through ``ops`` with an engine that notes, at the resume, whether
    the logger was loaded yet."""
    code = """
import sys
from pathlib import Path
from core.checkpoint import engine, ops
from core.config import CheckpointConfig
from core.model import CheckpointInfo, utcnow
seen = []
class Noting:
    name = "noting"
    def restore(self, req):
        return engine.Restored(pid=12345)
    def resume(self, pid):
        seen.append("structlog" in sys.modules)
info = CheckpointInfo(id="w@1", lineage="w", seq=1, engine="noting", node="n",
                      created_at=utcnow(), size_bytes=0)
here = Path(sys.argv[1])
ops.restore_staged(Noting(), here, work_dir=here, cfg=CheckpointConfig(), info=info)
print(seen, "structlog" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                         text=True, timeout=60, check=True)  # fmt: skip
    last = out.stdout.splitlines()[-1].split()  # (unconfigured, the line went to stdout)
    assert last == ["[False]", "True"], out.stdout + out.stderr  # logged, but after the resume
