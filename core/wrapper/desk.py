"""The wrapper's desk: its control socket's requests in, their answers out, and the queue of
jobs its main loop runs (``core.wrapper.supervisor``).

Each connection gets a thread that reads one request (``core.wrapper.control`` has the
protocol) and answers it. A checkpoint becomes a :class:`Job` on :attr:`ControlDesk.jobs`;
its requester waits at most ``[checkpoint] queue_wait_s`` for the main loop to start it (a
checkpoint under way goes first), else the job is withdrawn, never run, and the requester
told it was busy. A new checkpoint interval is set at once and answered; an ``interval``
job only wakes the main loop to re-time its wait. The desk counts the answers it owes, so
the wrapper does not exit before they are written (:meth:`ControlDesk.wait_for_answers`),
and once the main loop is over it refuses what is still queued
(:meth:`ControlDesk.refuse_pending`).

Limits: one request per connection; only this host's processes of the same user are served
(``control.refuse_stranger``).
"""

from __future__ import annotations

import json
import os
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import ValidationError

from core import errors, logs
from core.config import Settings
from core.specs import AutoInterval
from core.wrapper import control
from core.wrapper.faults import fault_on

log = logs.get_logger(__name__)

HANG_UP_WAIT_S = 10.0

Send = Callable[[dict[str, Any]], None]


@dataclass
class Job:
    kind: str  # checkpoint | exit | periodic | term | interval
    stop: bool = False
    reply: queue.SimpleQueue[dict[str, Any]] | None = None
    code: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    # A requested checkpoint: set when the main loop starts it; ``withdrawn`` when its
    # requester stopped waiting first (the loop then skips it: nobody would hear of it).
    started: threading.Event = field(default_factory=threading.Event)
    withdrawn: bool = False


class Served(Protocol):
    """What the desk asks of the wrapper it serves."""

    @property
    def dump_since(self) -> float | None:
        """Monotonic start of the checkpoint under way (None: none)."""
        ...

    def status(self) -> dict[str, Any]: ...

    def set_interval(self, every_s: float | None, auto: AutoInterval | None) -> dict[str, Any]: ...

    def terminate(self, grace_s: float, *, dump_wait_s: float | None = None) -> None: ...


def await_hang_up(conn: socket.socket) -> None:
    """After the answer to a stop checkpoint, before the wrapper may end: wait (bounded) for
    the requester to hang up. In a container the wrapper is PID 1, and its end kills every
    process there, a ``pods/exec`` requester still printing the answer included (it hangs up
    by exiting, so it is gone by then). Local requesters hang up at once."""
    try:
        conn.settimeout(HANG_UP_WAIT_S)
        while conn.recv(4096):
            pass
    except OSError:  # timed out, or the peer reset: either way, no longer waited for
        pass


class ControlDesk:
    def __init__(self, settings: Settings, name: str, served: Served) -> None:
        self.settings = settings
        self.name = name
        self.served = served
        self.jobs: queue.SimpleQueue[Job] = queue.SimpleQueue()
        self.sock_path = settings.run_dir / f"{name}.sock"
        self._sock_ino: int | None = None
        self._server: socket.socket | None = None
        self._answers = threading.Condition()
        self._pending_answers = 0
        self._closing = False
        self._turns = threading.Lock()  # a request's start against its withdrawal

    # -- the socket -----------------------------------------------------------------------------

    def serve(self) -> None:
        self.sock_path.unlink(missing_ok=True)  # stale: we hold the name's lock
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with control.short_address(self.sock_path) as addr:
            server.bind(addr)
        os.chmod(self.sock_path, 0o600)
        self._sock_ino = os.stat(self.sock_path).st_ino
        server.listen(8)
        self._server = server
        threading.Thread(target=self._accept, daemon=True, name="control").start()

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
            # Only our own socket: after a handoff the path is the new wrapper's.
            try:
                if os.stat(self.sock_path).st_ino == self._sock_ino:
                    self.sock_path.unlink()
            except OSError:
                pass

    def _accept(self) -> None:
        assert self._server is not None
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rwb") as f:

            def send(msg: dict[str, Any]) -> None:
                f.write(json.dumps(msg, default=str).encode() + b"\n")
                f.flush()

            try:
                line = f.readline()  # first, so that a refused client reads its answer
                refused = control.refuse_stranger(conn)
                if refused is not None:  # another user: whatever the socket's modes allowed
                    send({"error": refused.to_dict()})
                    return
                request = json.loads(line or b"{}")
                with self._answering():
                    self.dispatch(request, send)
                    if request.get("op") == "checkpoint" and request.get("stop"):
                        await_hang_up(conn)
            except (OSError, ValueError) as exc:
                log.warning("control.bad_connection", error=str(exc))

    # -- requests -------------------------------------------------------------------------------

    def dispatch(self, request: dict[str, Any], send: Send) -> None:
        """Answer one request through ``send`` (zero or more progress lines, then one
        result or error)."""
        op = request.get("op")
        if op == "status":
            send({"result": self.served.status()})
        elif op == "checkpoint":
            self._checkpoint(request, send)
        elif op == "terminate":
            dump_wait = request.get("dump_wait_s")
            self.served.terminate(
                float(request.get("timeout_s", 30)),
                dump_wait_s=None if dump_wait is None else float(dump_wait),
            )
            if fault_on("CLAWPOINT_TEST_DROP_REPLY"):
                log.warning("control.test_hook_dropped_reply", op=op)
                return
            send({"result": {"terminated": True}})
        elif op == "interval":
            self._interval(request.get("every_s"), send, auto=request.get("auto"))
        else:
            send({"error": errors.InvalidInput(f"unknown op {op!r}").to_dict()})

    def _checkpoint(self, request: dict[str, Any], send: Send) -> None:
        reply: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
        with self._answers:  # against refuse_pending: queued before it, or refused
            if self._closing:
                send({"error": self._ended_error().to_dict()})
                return
            job = Job("checkpoint", stop=bool(request.get("stop")), reply=reply)
            if request.get("by") == "agent":
                job.extra["by_agent"] = True
            if job.stop and isinstance(request.get("handoff"), dict):
                job.extra["handoff"] = request["handoff"]
            self.jobs.put(job)
        if not self._await_turn(job):
            send({"error": self._busy_error().to_dict()})
            return
        while True:
            msg = reply.get()
            if "progress" not in msg:
                if fault_on("CLAWPOINT_TEST_DROP_REPLY"):
                    log.warning("control.test_hook_dropped_reply", op="checkpoint")
                    return
                fault_on("CLAWPOINT_TEST_REPLY_DELAY_S")
            send(msg)
            if "progress" not in msg:
                break

    def _interval(self, every: Any, send: Send, *, auto: Any = None) -> None:
        """Periodic checkpoints every ``every`` seconds (null: none), re-timed after each
        checkpoint when ``auto`` (``AutoInterval``'s fields) comes with a time to start from.
        The bounds people may ask for are the action's (``core.durations``); here only that
        it is a time."""
        if every is not None and (type(every) not in (int, float) or not 0 < every < 1e9):
            what = f"the checkpoint interval must be a positive number of seconds, not {every!r}"
            send({"error": errors.InvalidInput(what, hint="send null to turn it off").to_dict()})
            return
        how: AutoInterval | None = None
        try:
            how = None if auto is None else AutoInterval.model_validate(auto)
            bad = how is not None and every is None
        except ValidationError:
            bad = True
        if bad:
            what = (
                f"an auto interval needs every_s to start from, mtbf_h, min_s and max_s: {auto!r}"
            )
            send({"error": errors.InvalidInput(what, hint="send what the plan resolved").to_dict()})
            return
        result = self.served.set_interval(None if every is None else float(every), how)
        self.jobs.put(Job("interval"))
        send({"result": result})

    def _await_turn(self, job: Job) -> bool:
        """Wait, at most ``[checkpoint] queue_wait_s``, for the main loop to start ``job``
        (a checkpoint under way goes first); False: withdrawn, it will never run."""
        if job.started.wait(self.settings.checkpoint.queue_wait_s):
            return True
        with self._turns:
            job.withdrawn = not job.started.is_set()
            return not job.withdrawn

    def take(self, job: Job) -> bool:
        """The main loop starts a requested checkpoint unless its requester gave up."""
        with self._turns:
            if job.withdrawn:
                log.info("wrapper.request_withdrawn", workload=self.name, stop=job.stop)
                return False
            job.started.set()
            return True

    def _busy_error(self) -> errors.ClawpointError:
        since = self.served.dump_since
        under_way = f" (under way for {time.monotonic() - since:.0f} s)" if since else ""
        waited = self.settings.checkpoint.queue_wait_s
        return errors.Conflict(
            f"workload {self.name} is busy: a checkpoint already under way{under_way} did not "
            f"finish within {waited:.0f} s, so this request was withdrawn and nothing was done",
            hint="try again once it has finished (a dump is stopped after its timeout, "
            "[checkpoint] dump_timeout_s); a person can kill the workload meanwhile",
            details={"workload": self.name, "waited_s": waited},
        )

    # -- answers owed ---------------------------------------------------------------------------

    @contextmanager
    def _answering(self) -> Iterator[None]:
        """Counts requests being answered: the wrapper does not exit before they are."""
        with self._answers:
            self._pending_answers += 1
        try:
            yield
        finally:
            with self._answers:
                self._pending_answers -= 1
                self._answers.notify_all()

    def _ended_error(self) -> errors.ClawpointError:
        return errors.Conflict(
            f"workload {self.name} ended before the checkpoint could be taken",
            hint="its newest checkpoint and its state are in the workload and checkpoint lists",
        )

    def refuse_pending(self) -> None:
        """The main loop is over: answer every request still queued (it will never run)."""
        with self._answers:
            self._closing = True
        while True:
            try:
                job = self.jobs.get_nowait()
            except queue.Empty:
                return
            if job.reply is not None:
                job.reply.put({"error": self._ended_error().to_dict()})

    def wait_for_answers(self, timeout_s: float = 30.0) -> None:
        """Block until every request read so far has had its answer written.

        A stop-checkpoint ends the payload, which ends the main loop, while the control
        thread may still be writing the result: exiting first would lose an answer that says
        "published", and the caller would report a failure that did not happen."""
        with self._answers:
            if not self._answers.wait_for(lambda: self._pending_answers == 0, timeout_s):
                log.warning("wrapper.unanswered_requests", count=self._pending_answers)
