"""``clawpoint demo``: a real stateful workload checkpointed, migrated, killed and failed over.

It runs on the embedded defaults (local backend, two virtual nodes) in a fresh temporary
CLAWPOINT_HOME, through the same service facade the CLI and the MCP server use, with a
person principal who confirmed each step. The workload is ``core.workloads.counter``: it
holds real in-memory state and verifies it every step, so "no progress lost" is checked by
the workload itself, not asserted by the demo. Uses CRIU when it works here, otherwise the
cooperative engine (and says so). Cleans up its processes and home unless asked to keep them.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import Field

from core import errors
from core.checkpoint import engine as engines
from core.config import CheckpointConfig, load_settings
from core.model import Action, Principal, PrincipalKind, WorkloadState
from core.schema_base import Model
from core.service.facade import Service, bootstrap
from core.specs import RunSpec
from core.wrapper.spec import output_files

NAME = "train-demo"
CHECKPOINT_EVERY_S = 5.0


class TimelineEvent(Model):
    t: float
    what: str


class DemoReport(Model):
    ok: bool
    engine: str
    home: str
    state_mb: int
    timeline: list[TimelineEvent] = Field(default_factory=list)
    checkpoint_mb: float = 0.0
    checkpoint_s: float = 0.0
    migration_pause_s: float = 0.0
    migration_steps_lost: int = 0
    failover_steps_lost: int = 0
    failover_bound_steps: int = 0
    state_checks_failed: bool = False
    error: str | None = None

    def summary_rows(self) -> list[tuple[str, str]]:
        return [
            ("engine", self.engine),
            ("workload state", f"{self.state_mb} MiB, verified every step"),
            (
                "checkpoint (leave-running)",
                f"{self.checkpoint_mb:.0f} MiB in {self.checkpoint_s:.2f} s",
            ),
            ("pause during migration", f"{self.migration_pause_s:.2f} s"),
            ("work lost by migration", f"{self.migration_steps_lost} steps"),
            (
                "work lost by failover",
                f"{self.failover_steps_lost} steps "
                f"(bound: one checkpoint interval = {self.failover_bound_steps} steps)",
            ),
            ("state check failures", "yes" if self.state_checks_failed else "none"),
            ("result", "OK" if self.ok else f"FAILED: {self.error}"),
        ]


@contextmanager
def _temporary_home(keep: bool) -> Iterator[Path]:
    previous = os.environ.get("CLAWPOINT_HOME")
    home = Path(tempfile.mkdtemp(prefix="clawpoint-demo-"))
    os.environ["CLAWPOINT_HOME"] = str(home)
    try:
        yield home
    finally:
        if previous is None:
            os.environ.pop("CLAWPOINT_HOME", None)
        else:
            os.environ["CLAWPOINT_HOME"] = previous
        if not keep:
            shutil.rmtree(home, ignore_errors=True)


class _Demo:
    def __init__(self, service: Service, report: DemoReport, say: Callable[[str], None]) -> None:
        self.service = service
        self.report = report
        self.say = say
        self.t0 = time.monotonic()
        self.person = Principal(id="demo", kind=PrincipalKind.PERSON)
        self.progress_file = service.settings.run_dir / f"{NAME}.progress.json"

    def mark(self, what: str) -> None:
        t = time.monotonic() - self.t0
        self.report.timeline.append(TimelineEvent(t=round(t, 2), what=what))
        self.say(f"[{t:6.2f}s] {what}")

    def step(self) -> int:
        try:
            return int(json.loads(self.progress_file.read_text())["step"])
        except (OSError, ValueError, KeyError):
            return -1

    def wait_step(self, above: int, timeout_s: float = 120) -> int:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            s = self.step()
            if s > above:
                return s
            state = self.service.get_workload(f"local:{NAME}")
            if state.state is WorkloadState.FAILED and above >= 0:
                raise errors.OperationFailed(
                    f"the workload died: {state.exit_status} {state.message}",
                    hint="see the workload log under CLAWPOINT_HOME/logs",
                )
            time.sleep(0.05)
        raise errors.OperationFailed(
            f"the workload made no progress past step {above} in {timeout_s:.0f} s",
            hint="see the workload log under CLAWPOINT_HOME/logs",
        )

    def act(self, action: Action, params: dict[str, Any]) -> dict[str, Any]:
        result = self.service.act(
            action, f"local:{NAME}", params, principal=self.person, confirmed=True, reason="demo"
        )
        if result.status != "executed" or result.execution is None:
            raise errors.OperationFailed(
                f"{action.value} did not run: {result.message}", hint="see the audit log"
            )
        return {s.name: s.output for s in result.execution.steps}

    def run(self, state_mb: int) -> None:
        engine = self.report.engine
        spec = RunSpec(
            name=NAME,
            node="node-a",
            engine=engine,
            checkpoint_every=CHECKPOINT_EVERY_S,
            command=[
                sys.executable,
                "-m",
                "core.workloads.counter",
                "--state-mb",
                str(state_mb),
                "--step-seconds",
                "0.05",
            ],
            cwd=str(Path.cwd()),
            home=str(self.service.settings.home),
        )
        self.service.run_workload(spec, detach=True, principal=self.person)
        self.mark(
            f"started local:{NAME} on node-a ({state_mb} MiB of self-verifying state, "
            f"{engine} engine, periodic checkpoint every {CHECKPOINT_EVERY_S:.0f} s)"
        )
        self.wait_step(20)

        out = self.act(Action.CHECKPOINT, {"stop": False})["checkpoint"]
        self.report.checkpoint_mb = out["size_bytes"] / 2**20
        self.report.checkpoint_s = float(out.get("timings", {}).get("total_s") or 0.0)
        self.mark(
            f"checkpoint {out['checkpoint_id']}: {self.report.checkpoint_mb:.0f} MiB, workload kept running"
        )

        before = self.wait_step(self.step())
        t_before = time.monotonic()
        outs = self.act(Action.MIGRATE, {"to": "node-b"})
        saved_step = self._checkpoint_step(outs["checkpoint"]["checkpoint_id"], fallback=before)
        after = self.wait_step(-1)
        # The pause the workload saw (its own clock, around the handoff), not the command's
        # length, which also holds the standby's start and the restore watch.
        gap = (outs.get("start", {}).get("handoff") or {}).get("workload_gap") or {}
        seen = gap.get("seconds")
        self.report.migration_pause_s = round(
            float(seen) if isinstance(seen, int | float) else time.monotonic() - t_before, 2
        )
        self.report.migration_steps_lost = max(0, saved_step - after)
        self.mark(
            f"migrated to node-b: resumed at step {after} (checkpointed at {saved_step}), "
            f"pause {self.report.migration_pause_s:.2f} s"
        )

        self.wait_step(after + 150)
        w = self.service.get_workload(f"local:{NAME}")
        at_kill = self.step()
        assert w.pid is not None
        os.kill(w.pid, signal.SIGKILL)
        self.mark(f"SIGKILL to the workload (pid {w.pid}) at step {at_kill}")
        deadline = time.monotonic() + 30
        while self.service.get_workload(f"local:{NAME}").state is not WorkloadState.FAILED:
            if time.monotonic() > deadline:
                raise errors.OperationFailed(
                    "the wrapper did not record the death", hint="see logs"
                )
            time.sleep(0.05)
        self.mark("clawpoint sees it failed")
        outs = self.act(Action.FAILOVER, {"to": "node-a"})
        resumed = self.wait_step(-1)
        self.report.failover_steps_lost = max(0, at_kill - resumed)
        self.report.failover_bound_steps = int(CHECKPOINT_EVERY_S / 0.05)
        self.mark(
            f"failed over to node-a from {outs['start'].get('restored_from')}: resumed at step {resumed}, "
            f"{self.report.failover_steps_lost} steps redone"
        )
        self.wait_step(resumed + 20)
        self.mark("workload keeps running and its state checks pass")

    def _checkpoint_step(self, checkpoint_id: str, *, fallback: int) -> int:
        info = next(
            (c for c in self.service.checkpoints(f"local:{NAME}") if c.id.endswith(checkpoint_id)),
            None,
        )
        if info and isinstance(info.extra.get("progress"), dict):
            return int(info.extra["progress"].get("step", fallback))
        return fallback

    def cleanup(self) -> None:
        try:
            w = self.service.get_workload(f"local:{NAME}")
            if w.state is WorkloadState.RUNNING:
                self.service.act(
                    Action.KILL,
                    f"local:{NAME}",
                    {},
                    principal=self.person,
                    confirmed=True,
                    reason="demo cleanup",
                )
        except errors.ClawpointError:
            pass


def run_demo(
    *, state_mb: int = 200, keep_home: bool = False, say: Callable[[str], None] = print
) -> DemoReport:
    # The counter runs under these (transparent first); the first that works here is used.
    cfg = CheckpointConfig()  # the demo's home has no config file: the defaults
    found = {name: engines.get(name).status(cfg) for name in ("criu", "cooperative")}
    engine = next((name for name, st in found.items() if st.available), "cooperative")
    for name, st in found.items():
        if name == engine:
            break
        say(f"{name} is not usable here ({st.reason}); running the demo with {engine}")
    with _temporary_home(keep_home) as home:
        service = bootstrap(load_settings(home))
        report = DemoReport(ok=False, engine=engine, home=str(home), state_mb=state_mb)
        demo = _Demo(service, report, say)
        try:
            demo.run(state_mb)
            # The counter's own output is in NAME.out (and its rotated files).
            text = "".join(
                p.read_text(errors="replace") for p in output_files(service.settings, NAME)
            )
            report.state_checks_failed = "STATE CHECK FAILED" in text
            report.ok = (
                not report.state_checks_failed
                and report.migration_steps_lost == 0
                and (report.failover_steps_lost <= report.failover_bound_steps)
            )
        except errors.ClawpointError as exc:
            report.error = str(exc)
        finally:
            demo.cleanup()
        return report
