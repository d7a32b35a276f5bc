"""The fault matrix on the local backend: the installed ``clawpoint`` is SIGKILLed before and
after every journal step of every operation, and a restarted clawpoint reconciles.

The kill is the test-only hook ``CLAWPOINT_TEST_KILL_AT=ACTION:STEP:before|after`` (see
``core.service.executor``); the steps are those of the live plan, so a step added to a plan
is interrupted too. For every (operation, step, before/after) the test checks, after the
next clawpoint command (which reconciles at start):

- the journal no longer says "running", and the audit log has exactly one recovery entry for
  the execution with the same status (and no other outcome for it); the audit chain verifies;
- the workload exists exactly once: one record, and one live payload process when it runs,
  none otherwise;
- if it does not run, it is restorable: ``resume`` (stopped) or ``failover`` (failed)
  brings it back from a verified checkpoint;
- it then makes progress, and its own state check (the self-verifying counter) never failed.

An MCP server (stdio, asked by a real SDK client) and ``clawpoint watch --every 1s`` run beside
the kills of each operation (``bystanders``); both reconcile, so either may finish the
interrupted execution first; afterwards both must still answer and never have listed a
workload twice.

CI runs one representative kill per operation (``CLAWPOINT_FAULT_MATRIX=full`` runs every
pair; ``make bench`` does, and rewrites the table in docs/reliability.md).
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from core import errors
from core.config import Settings
from core.model import Action, ExecutionStatus, Principal, PrincipalKind, WorkloadState
from core.service.facade import Service
from tests.reliability.conftest import Record
from tests.service.conftest import counter, log_text, step, wait_step

pytestmark = [pytest.mark.criu]

ROOT = Path(__file__).resolve().parents[2]
INSTALLED = ROOT / ".venv" / "bin" / "clawpoint"
PERSON = Principal(id="tester", kind=PrincipalKind.PERSON)
FULL = os.environ.get("CLAWPOINT_FAULT_MATRIX") == "full"
LIVE = (WorkloadState.RUNNING, WorkloadState.CHECKPOINTING)


def clawpoint() -> list[str]:
    return [str(INSTALLED)] if INSTALLED.exists() else [sys.executable, "-m", "core.cli"]


@dataclass(frozen=True)
class Operation:
    action: Action
    argv: Callable[[str], list[str]]  # the CLI command, given the workload id
    params: dict[str, Any]
    before: str = "running"  # running | stopped | dead: the workload's state first
    # The target when it is not the workload: its node (drain), its node's pool (scale_pool).
    target: str | None = None


OPERATIONS: dict[str, Operation] = {
    "checkpoint": Operation(Action.CHECKPOINT, lambda w: ["checkpoint", w], {"stop": False}),
    "migrate": Operation(Action.MIGRATE, lambda w: ["migrate", w, "--yes"], {}),
    "preempt": Operation(Action.PREEMPT, lambda w: ["preempt", w, "--yes"], {}),
    "resume": Operation(Action.RESUME, lambda w: ["resume", w, "--yes"], {}, before="stopped"),
    "failover": Operation(Action.FAILOVER, lambda w: ["failover", w, "--yes"], {}, before="dead"),
    "drain": Operation(
        Action.DRAIN_NODE, lambda _: ["drain", "local:node-a", "--yes"], {},
        target="local:node-a",
    ),
    # node-a is the "on-demand" pool's one node: releasing it moves the workload to node-b.
    "scale_pool": Operation(
        Action.SCALE_POOL, lambda _: ["pools", "scale", "local:on-demand", "--size", "0", "--yes"],
        {"size": 0}, target="local:on-demand",
    ),
    # More memory than it had, on another node: the migrate path, restored with the limit.
    "resize": Operation(
        Action.RESIZE, lambda w: ["resize", w, "--memory", "512Mi", "--to", "node-b", "--yes"],
        {"memory": "512Mi", "to": "node-b"},
    ),
}  # fmt: skip


def payload_pids(settings: Settings, name: str) -> list[int]:
    """Live counter processes of workload ``name`` (found by the progress file in their
    environment, which a CRIU restore keeps), wherever they run."""
    progress = settings.run_dir / f"{name}.progress.json"
    return counter_pids(f"CLAWPOINT_PROGRESS_FILE={progress}".encode())


def counter_pids(marker: bytes) -> list[int]:
    """Live ``core.workloads.counter`` processes whose environment holds ``marker``
    (``NAME=VALUE``): the payloads themselves, not the namespace starter carrying their argv."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            if argv[1:3] != [b"-m", b"core.workloads.counter"]:
                continue
            stat = (proc / "stat").read_text().rpartition(")")[2].split()
            if stat[0] == "Z" or marker not in (proc / "environ").read_bytes().split(b"\0"):
                continue
        except OSError:
            continue
        found.append(int(proc.name))
    return found


def env(settings: Settings, **extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    return {**base, "CLAWPOINT_HOME": str(settings.home), "PYTHONPATH": str(ROOT), **extra}


def prepare(service: Service, settings: Settings, name: str, op: Operation) -> str:
    service.run_workload(counter(settings, name, mb=8), detach=True, principal=PERSON)
    wait_step(settings, name, 2)
    workload = f"local:{name}"
    if op.before == "stopped":
        done = service.act(Action.PREEMPT, workload, {}, principal=PERSON, confirmed=True)
        assert done.status == "executed", done.message
    elif op.before == "dead":
        # Not a checkpoint that froze the counter with its progress file open after the
        # engine's look found nothing open: it cannot be restored (the xfail test in
        # test_races), which is not what the matrix measures.
        for _ in range(10):
            done = service.act(Action.CHECKPOINT, workload, {"stop": False}, principal=PERSON)
            assert done.status == "executed", done.message
            newest = by_seq(c.id for c in service.checkpoints(workload))[-1]
            if not uncopied_open_file(settings, [newest], b".progress.json.tmp"):
                break
        kill_payload(service, workload)
    return workload


def kill_payload(service: Service, workload: str) -> None:
    """SIGKILL the workload's payload and wait until its wrapper records it failed."""
    pid = service.get_workload(workload).pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while service.get_workload(workload).state is not WorkloadState.FAILED:
        assert time.monotonic() < deadline, "the wrapper did not record the death"
        time.sleep(0.05)


def by_seq(checkpoint_ids: Iterable[str]) -> list[str]:
    """Checkpoint ids (``BACKEND:NAME@SEQ``), oldest first."""
    return sorted(checkpoint_ids, key=lambda i: int(i.rpartition("@")[2]))


def uncopied_open_file(settings: Settings, checkpoint_ids: list[str], part: bytes) -> bool:
    """Whether one of these local checkpoints froze a file whose name holds ``part`` open
    (CRIU's image names it) without copying it into the checkpoint."""
    for checkpoint_id in checkpoint_ids:
        name, _, seq = checkpoint_id.removeprefix("local:").rpartition("@")
        where = settings.checkpoint_dir / name / f"{int(seq):08d}"
        manifest = json.loads((where / "manifest.json").read_text())
        copied = [f["path"] for f in manifest["extra"]["file_state"].get("saved", [])]
        if part in (where / "images" / "files.img").read_bytes() and not any(
            part.decode() in p for p in copied
        ):
            return True
    return False


def kill_points(service: Service, target: str, op: Operation) -> list[tuple[int, str]]:
    """(step index, before/after) for every step of the live plan (drain's step names hold
    the workload's name, so a point is an index, named again for each fresh workload)."""
    plan = service.plan(op.action, target, op.params)
    return [(i, when) for i in range(len(plan.steps)) for when in ("before", "after")]


def audit_of(service: Service, execution_id: str) -> list[tuple[str, str]]:
    return [
        (e.kind, str(e.data.get("status")))
        for e in service.audit.entries()
        if e.data.get("execution") == execution_id
    ]


def latest_execution(service: Service, target: str) -> dict[str, Any]:
    with service.db.read() as conn:
        row = conn.execute(
            "SELECT * FROM executions WHERE target=? ORDER BY started_at DESC LIMIT 1", (target,)
        ).fetchone()
    assert row is not None, f"no execution for {target}"
    return dict(row)


def settled(service: Service, target: str, timeout_s: float = 600) -> dict[str, Any]:
    """The latest execution on ``target`` once nobody drives it any more: the MCP server or
    the watch loop may have claimed the orphan first and still be finishing it."""
    deadline = time.monotonic() + timeout_s
    while True:
        row = latest_execution(service, target)
        if row["status"] != "running" or time.monotonic() > deadline:
            return row
        time.sleep(0.1)


def kill_then_reconcile(
    service: Service,
    target: str,
    argv: list[str],
    *,
    kill_at: str,
    env_of: Callable[..., dict[str, str]],
    again: list[str],
    timeout_s: float = 300,
) -> tuple[dict[str, Any], str]:
    """Run the installed ``clawpoint argv`` until it is SIGKILLed at ``kill_at``
    (``ACTION:STEP:before|after``), then ``clawpoint again`` (every command reconciles
    first); the execution once settled, and what ``again`` printed. Checked here, for every
    backend's matrix: the kill came with the execution left running; the restart finished
    it (the same execution, no longer running), audited it exactly once as a recovery with
    its own status, and the audit chain verifies."""
    proc = subprocess.run(
        [*clawpoint(), *argv], env=env_of(CLAWPOINT_TEST_KILL_AT=kill_at),
        capture_output=True, text=True, timeout=timeout_s,
    )  # fmt: skip
    assert proc.returncode == -signal.SIGKILL, (
        f"never reached {kill_at}: exit {proc.returncode} {proc.stdout} {proc.stderr}"
    )
    killed = latest_execution(service, target)
    assert killed["status"] == "running"
    restart = subprocess.run(
        [*clawpoint(), *again], env=env_of(), capture_output=True, text=True, timeout=timeout_s
    )
    assert restart.returncode == 0, restart.stderr
    after = settled(service, target)
    assert after["id"] == killed["id"]
    status = after["status"]
    assert status != "running", "the restarted clawpoint left the execution running"
    assert audit_of(service, after["id"]) == [("recovery", status)], audit_of(service, after["id"])
    assert service.audit.verify().ok
    return after, restart.stdout


def bring_back(service: Service, workload: str) -> str:
    """Make a workload that does not run run again, the way a person would; what was done."""
    state = service.get_workload(workload).state
    if state in LIVE:
        return "running"
    action = Action.RESUME if state is WorkloadState.STOPPED else Action.FAILOVER
    done = service.act(action, workload, {}, principal=PERSON, confirmed=True)
    assert done.status == "executed", f"{state.value} workload not restorable: {done.message}"
    return f"{state.value}, then {action.value} restored it"


def cleanup(service: Service, workload: str) -> None:
    try:
        if service.get_workload(workload).state in LIVE:
            service.act(Action.KILL, workload, {}, principal=PERSON, confirmed=True)
    except errors.ClawpointError:
        pass
    local = service.backend("local")
    if "node-a" in local.released_nodes():  # type: ignore[attr-defined]  # scale_pool's
        local.set_released("node-a", False)  # type: ignore[attr-defined]
    node = next(n for n in service.nodes("local") if n.name == "node-a")
    if not node.schedulable:
        service.act(Action.UNDRAIN_NODE, "local:node-a", {}, principal=PERSON, confirmed=True)


@dataclass
class Bystanders:
    """What ran beside the kills: an MCP server over stdio, asked ``list_workloads`` by a real
    SDK client every half second, and ``clawpoint watch --every 1s``; both reconcile (the
    server every second, the watch loop every pass), so either may finish an interrupted
    execution before the next clawpoint command does."""

    answers: list[list[str]] = field(default_factory=list)  # workload ids per answer
    failures: list[str] = field(default_factory=list)
    passes: list[dict[str, Any]] = field(default_factory=list)
    watch_code: int | None = None


def _ask_server(environ: dict[str, str], seen: Bystanders, stop: threading.Event) -> None:
    params = StdioServerParameters(
        command=clawpoint()[0], args=[*clawpoint()[1:], "serve"], env=environ
    )

    async def ask(client: Client) -> None:
        try:
            out = await client.call_tool("list_workloads", {})
        except Exception as exc:  # recorded, then asserted on by the test
            seen.failures.append(repr(exc))
            return
        if out.is_error:
            seen.failures.append(str(out.content)[:200])
        else:
            seen.answers.append([w["id"] for w in out.structured_content["workloads"]])

    async def main() -> None:
        async with Client(params) as client:
            while not stop.is_set():
                await ask(client)
                await anyio.sleep(0.5)
            await ask(client)  # still answering after the last kill

    try:
        anyio.run(main)
    except Exception as exc:
        seen.failures.append(f"the MCP session ended: {exc!r}")


@contextmanager
def bystanders(settings: Settings, environ: dict[str, str] | None = None) -> Iterator[None]:
    """Run the MCP server and the watch loop in the test's home (``environ``: their
    environment, default ``env(settings)``) while the body runs; then check they were still
    there, answered, and never listed a workload twice."""
    environ = environ or env(settings)
    config = settings.home / "config.toml"
    with config.open("a") as f:
        f.write("\n[recovery]\nevery_s = 1\n")
    seen = Bystanders()
    stop = threading.Event()
    server = threading.Thread(target=_ask_server, args=(environ, seen, stop), daemon=True)
    server.start()
    log = settings.home / "watch.jsonl"
    with log.open("w") as out:
        watch = subprocess.Popen([*clawpoint(), "watch", "--every", "1s", "--json"],
                                 env=environ, stdout=out, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        # Both serving before the first kill: a first answer, a first pass.
        deadline = time.monotonic() + 120
        while not (seen.answers and log.read_text()):
            assert time.monotonic() < deadline, f"not serving: {seen.failures}, {watch.poll()}"
            assert watch.poll() is None and server.is_alive(), seen.failures
            time.sleep(0.1)
        yield
    finally:
        stop.set()
        server.join(timeout=120)
        alive = watch.poll() is None
        watch.send_signal(signal.SIGTERM)
        try:
            seen.watch_code = watch.wait(timeout=120)
        except subprocess.TimeoutExpired:
            watch.kill()
            watch.wait()
        seen.passes = [json.loads(line) for line in log.read_text().splitlines() if line]
    assert alive, "the watch loop died during the kills"
    assert seen.watch_code == 0, f"the watch loop ended with {seen.watch_code} on SIGTERM"
    assert seen.passes, "the watch loop made no pass"
    errors_seen = [e for p in seen.passes for e in p.get("errors", [])]
    assert not errors_seen, errors_seen
    assert not server.is_alive(), "the MCP client did not finish"
    assert not seen.failures, seen.failures
    assert seen.answers, "the MCP server never answered"
    twice = [ids for ids in seen.answers if len(ids) != len(set(ids))]
    assert not twice, f"the MCP server listed a workload twice: {twice[0]}"


def one_kill(
    service: Service, settings: Settings, name: str, op: Operation, point: tuple[int, str]
) -> tuple[str, str, str]:
    """Kill clawpoint at ``point`` of ``op`` on a fresh workload, restart, check; the step's
    name, the outcome and what was checked."""
    workload = prepare(service, settings, name, op)
    target = op.target or workload
    index, when = point
    step_name = service.plan(op.action, target, op.params).steps[index].name
    after, _ = kill_then_reconcile(
        service, target, [*op.argv(workload), "--json"],
        kill_at=f"{op.action.value}:{step_name}:{when}",
        env_of=functools.partial(env, settings), again=["workloads", "--json"],
    )  # fmt: skip
    status = after["status"]

    records = [w for w in service.workloads("local") if w.id == workload]
    assert len(records) == 1, records
    seen = records[0]
    pids = payload_pids(settings, name)
    assert len(pids) == (1 if seen.state in LIVE else 0), (seen.state, pids)

    how = bring_back(service, workload)
    assert len(payload_pids(settings, name)) == 1
    wait_step(settings, name, step(settings, name) + 5)
    assert "STATE CHECK FAILED" not in log_text(settings, name)
    outcome = (
        f"{ExecutionStatus(status).value}; workload {how} on {service.get_workload(workload).node}"
    )
    return step_name, outcome, "once; progress; state check; journal = audit"


def representative(points: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """CI's fast variant: after the first step (work done, nothing finished)."""
    return [p for p in points if p[1] == "after"][:1]


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_killed_at_every_step_is_reconciled(
    service: Service, settings: Settings, need_criu: None, record: Record, operation: str
) -> None:
    op = OPERATIONS[operation]
    probe = prepare(service, settings, f"{operation[:6]}-probe", op)
    points = kill_points(service, op.target or probe, op)
    cleanup(service, probe)
    with bystanders(settings):
        failures: list[str] = []
        for i, point in enumerate(points if FULL else representative(points)):
            name = f"{operation[:6]}-{i}-{point[1]}"
            label = f"step {point[0] + 1}"
            try:
                label, outcome, checked = one_kill(service, settings, name, op, point)
            except AssertionError as exc:
                failures.append(f"{point}: {exc}")
                record(operation, label, point[1], "FAILED", str(exc).splitlines()[0][:120])
            else:
                record(operation, label.replace(name, "W"), point[1], outcome, checked)
            finally:
                cleanup(service, f"local:{name}")
    assert not failures, "\n".join(failures)
    record(operation, "", "MCP server + watch loop throughout the kills",
           "both alive and answering after the last kill; the workload listed once",
           "no error; watch exit 0 on SIGTERM")  # fmt: skip


def test_operations_the_local_backend_does_not_plan(
    service: Service, settings: Settings, need_criu: None, record: Record
) -> None:
    """Scale has no meaning for a local process: the matrix says so instead of skipping it."""
    workload = prepare(service, settings, "scale-probe", OPERATIONS["checkpoint"])
    try:
        with pytest.raises(errors.ClawpointError) as refused:
            service.plan(Action.SCALE, workload, {"replicas": 2})
        record("scale", "", "plan", f"refused: {refused.value.code}", refused.value.message[:100])
    finally:
        cleanup(service, workload)
