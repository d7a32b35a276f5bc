"""A handoff across nodes: the standby wrapper waits on TCP, found through the shared store.

The local handoff (``core.wrapper.handoff``) passes its order through a unix socket and
orders the two wrappers with the workload's lock; neither reaches another node. Here the
standby (a Slurm job started on the target before the move pauses anything) listens on a
TCP port and announces itself in a *rendezvous* file in the user's own part of the shared
store (``ROOT/.handoff/LINEAGE.TOKEN.STATE.json``, mode 0600 in a 0700 directory, so only
the user reads it): its address, its port, the Slurm job whose wrapper may hand over to it,
and a random key. The source wrapper, stopped by the move's SIGUSR2, finds the rendezvous
of its own job, dumps, connects, ends and reaps its payload, and only then sends the order,
signed with that key (HMAC-SHA256 over the token and the order): an order from anyone else
(another user on the node, anything on the network) is refused, so nothing but the source
can make a standby restore while the workload still runs. The standby answers once its
restore is done (or failed), and the source publishes the checkpoint after that answer.
It reads every connection at once (``core.wrapper.peer_lines``), each for at most
``ORDER_READ_S``: a peer that connects and sends nothing does not hold the source up.

The rendezvous's state is its file name, and every change of it is one ``rename``, atomic
also on a shared filesystem: ``waiting`` -> ``ordered`` (the standby took a signed order)
-> ``taken`` (restored, running) or ``failed``; ``waiting`` -> ``expired`` (no order in
time) or ``cancelled`` (the move gave up on it). The standby claims an order and the move
cancels a standby by renaming the same ``waiting`` file, so exactly one of them wins: a
cancelled standby refuses the order, and a standby that took one is never cancelled.

A Slurm source finds its rendezvous by its job id (a signal carries no data); a pod's is
named to it by the move's exec (``find_named``), and its standby announces the pod's IP.

Limits: the key travels only through the user's store part, whose privacy is the store's
(``docs/slurm.md``, "Many users"; on Kubernetes the checkpoint volume's). One order per
standby.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import re
import secrets
import socket
import stat
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal, get_args

from pydantic import ConfigDict

from core import errors, logs
from core.schema_base import Model
from core.specs import STANDBY_SOURCE, STANDBY_TOKEN
from core.wrapper.faults import fault_on
from core.wrapper.handoff import HandoffOrder
from core.wrapper.peer_lines import MAX_LINE, PeerLines

log = logs.get_logger(__name__)

State = Literal["waiting", "ordered", "taken", "failed", "expired", "cancelled"]
STATES: tuple[State, ...] = get_args(State)
RENDEZVOUS_DIR = ".handoff"
ORDER_READ_S = 5.0
_TOKEN = re.compile(STANDBY_TOKEN)
_SOURCE = re.compile(STANDBY_SOURCE)


class Rendezvous(Model):
    """What a standby tells the source of its move (the file's content never changes)."""

    model_config = ConfigDict(extra="forbid")

    token: str
    lineage: str
    source_job: str  # the Slurm job (or the pod) whose wrapper may give it the workload
    job: str | None = None  # the standby's own job (Slurm)
    node: str | None = None
    host: str
    port: int
    key: str  # hex: signs the order
    created_at: float
    checkpoint: str | None = None  # the order's, written once the standby claimed it


def rendezvous_dir(store_root: Path) -> Path:
    return store_root / RENDEZVOUS_DIR


def _path(store_root: Path, lineage: str, token: str, state: State) -> Path:
    return rendezvous_dir(store_root) / f"{lineage}.{token}.{state}.json"


def state_of(store_root: Path, lineage: str, token: str) -> State | None:
    """Where the standby ``token`` of ``lineage`` stands (None: no rendezvous at all)."""
    for state in STATES:
        if _path(store_root, lineage, token, state).exists():
            return state
    return None


def move(store_root: Path, lineage: str, token: str, old: State, new: State) -> bool:
    """Change a rendezvous's state from ``old`` to ``new``; False when it was not ``old``
    (someone else changed it first: the rename is the lock)."""
    try:
        os.rename(_path(store_root, lineage, token, old), _path(store_root, lineage, token, new))
    except FileNotFoundError:
        return False
    return True


def remove(store_root: Path, lineage: str, token: str) -> None:
    """Forget a settled rendezvous (taken, failed, expired or cancelled)."""
    for state in STATES:
        if state not in ("waiting", "ordered"):
            _path(store_root, lineage, token, state).unlink(missing_ok=True)


def _job_marker(store_root: Path, lineage: str, job: str) -> Path:
    return rendezvous_dir(store_root) / f"{lineage}.job-{job}"


def is_rerun() -> bool:
    """Whether this Slurm job runs again (requeued: a preempt's resume, a move's restart,
    a node failure): its environment still says "standby", from its submission."""
    count = os.environ.get("SLURM_RESTART_COUNT", "0")
    return count.isdigit() and int(count) > 0


def took_over(store_root: Path, lineage: str) -> bool:
    """Whether this Slurm job, submitted as a standby, once took the workload over (so that
    a rerun of it restores the workload like any wrapped job); a standby that never did must
    not run it when Slurm requeues it: its source may still."""
    job = os.environ.get("SLURM_JOB_ID", "")
    return job.isdigit() and _job_marker(store_root, lineage, job).exists()


def read(store_root: Path, lineage: str, token: str, state: State) -> Rendezvous | None:
    try:
        return Rendezvous.model_validate_json(_path(store_root, lineage, token, state).read_bytes())
    except (OSError, ValueError):
        return None


def _ours(store_root: Path, lineage: str, token: str) -> Rendezvous | None:
    """A waiting rendezvous a source may use: a regular file of its own user (its standby
    runs as the same user). Another user who can write the directory (a shared volume's
    other pods) cannot plant one that steers the workload to a listener of theirs."""
    path = _path(store_root, lineage, token, "waiting")
    try:
        st = path.lstat()
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        log.warning("wrapper.rendezvous_not_ours", path=str(path), uid=st.st_uid)
        return None
    return read(store_root, lineage, token, "waiting")


def find_waiting(store_root: Path, lineage: str, source_job: str) -> Rendezvous | None:
    """The newest waiting standby of ``lineage`` that ``source_job`` may hand over to."""
    d = rendezvous_dir(store_root)
    found: list[Rendezvous] = []
    with contextlib.suppress(OSError):
        for p in d.glob(f"{lineage}.*.waiting.json"):
            token = p.name[len(lineage) + 1 :].split(".")[0]
            r = _ours(store_root, lineage, token) if _TOKEN.match(token) else None
            if r is not None and r.source_job == source_job and r.lineage == lineage:
                found.append(r)
    return max(found, key=lambda r: r.created_at) if found else None


def find_named(store_root: Path, lineage: str, token: str) -> Rendezvous | None:
    """The waiting standby ``token`` of ``lineage`` (a move's exec names it), if it waits."""
    if not _TOKEN.match(token):
        return None
    r = _ours(store_root, lineage, token)
    return r if r is not None and r.lineage == lineage and r.token == token else None


def cancel(store_root: Path, lineage: str, token: str, *, alive: Callable[[], bool]) -> bool:
    """A move gives its standby up (both backends): True when the standby holds no claim
    on the workload and its job or pod may be removed. One that claimed the order and whose
    job or pod has died since died in its restore: its claim is void (``failed``). One that
    took the workload, or restores it now, keeps it (False): the rename decides who won."""
    if state_of(store_root, lineage, token) == "ordered" and not alive():
        move(store_root, lineage, token, "ordered", "failed")
    move(store_root, lineage, token, "waiting", "cancelled")
    return state_of(store_root, lineage, token) not in ("taken", "ordered")


# After the source ended, how long a standby still "waiting" is given to claim an order
# the source sent just before it exited (the TCP data in flight), before it is cancelled.
CLAIM_GRACE_S = 2.0


class TakeoverWatch:
    """A move's look at the rendezvous once the source has ended (both backends' takeover
    step): :meth:`settled` says "taken", or why the standby cannot take the workload any
    more (cancelling it, by the rename, if no order reached it), or None (not yet).
    ``alive``: whether the standby's job or pod still runs (asked while it restores);
    ``done_before``: whether an earlier run of the step already confirmed it (its
    rendezvous is then removed)."""

    def __init__(
        self, store_root: Path, lineage: str, token: str, *, alive: Callable[[], bool],
        done_before: Callable[[], bool] = lambda: False, what: str = "the standby",
    ) -> None:  # fmt: skip
        self.root, self.lineage, self.token = store_root, lineage, token
        self.alive, self.done_before, self.what = alive, done_before, what
        self._waiting_since: float | None = None

    def settled(self) -> str | None:
        state = state_of(self.root, self.lineage, self.token)
        if state == "taken":
            return "taken"
        if state == "waiting":  # the source has ended: did its order go out?
            self._waiting_since = self._waiting_since or time.monotonic()
            if time.monotonic() - self._waiting_since < CLAIM_GRACE_S:
                return None
            if move(self.root, self.lineage, self.token, "waiting", "cancelled"):
                return "the source handed nothing over (no order reached the standby)"
            return None  # it claimed an order just now
        if state == "ordered":  # restoring, unless it died meanwhile
            return None if self.alive() else f"{self.what} ended during its restore"
        if state is None and self.done_before():
            return "taken"
        return f"the standby is {state or 'gone'}"


def _sign(key: str, token: str, body: bytes) -> str:
    return hmac.new(bytes.fromhex(key), token.encode() + b"\n" + body, hashlib.sha256).hexdigest()


def node_address(node: str | None) -> str:
    """The address other nodes reach ``node`` at: its NodeAddr as Slurm knows it (the
    controller's ``scontrol`` from the job's environment), else the host's name."""
    if node:
        m = re.search(r"(?:^|\s)NodeAddr=(\S+)", _scontrol(["show", "node", "-o", node]))
        if m:
            return m.group(1)
    return socket.gethostname()


def _scontrol(args: list[str]) -> str:
    """Best effort: ``scontrol`` from the job's environment; "" when it fails."""
    try:
        done = subprocess.run(["scontrol", *args], capture_output=True, text=True,
                              timeout=10, check=False)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout if done.returncode == 0 else ""


def relabel_own_job() -> None:
    """A standby that took over drops ``standby=`` and ``from=`` from its job's comment, so
    listings show it as the workload even if the move that started it died meanwhile (the
    move's ``takeover`` step does the same; whichever comes first)."""
    job = os.environ.get("SLURM_JOB_ID", "")
    m = re.search(r"(?:^|\s)Comment=(\S+)", _scontrol(["show", "job", "-o", job])) if job else None
    if m is None:
        return
    label = workload_comment(m.group(1))
    if label != m.group(1):
        _scontrol(["update", f"jobid={job}", f"comment={label}"])
        log.info("wrapper.standby_relabelled", job=job)


STANDBY_FIELDS = ("standby=", "from=")


def workload_comment(comment: str) -> str:
    """A standby job's comment as the workload's job carries it once it took over: without
    its ``standby=`` and ``from=`` fields (the wrapper and the move's ``takeover`` both)."""
    return ",".join(p for p in comment.split(",") if not p.startswith(STANDBY_FIELDS))


class TcpStandby:
    """The waiting side: listen, announce, then :meth:`wait` for one signed order."""

    def __init__(
        self,
        store_root: Path,
        lineage: str,
        token: str,
        source_job: str,
        node: str | None,
        host: str | None = None,
    ) -> None:
        """``host``: the address to announce (a pod's IP); None: the node's (Slurm's)."""
        if not _TOKEN.match(token) or not _SOURCE.match(source_job):
            raise errors.InvalidInput(f"standby token {token!r} or source {source_job!r}")
        self.root, self.lineage, self.token = store_root, lineage, token
        self.state: State = "waiting"
        self._conn: socket.socket | None = None
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # Every interface: the node's cluster address is Slurm's, not ours to guess; an
        # order that is not signed with the key is refused whoever sends it.
        self._sock.bind(("", 0))
        self._sock.listen(4)
        self.rendezvous = Rendezvous(
            token=token, lineage=lineage, source_job=source_job,
            job=os.environ.get("SLURM_JOB_ID"), node=node, host=host or node_address(node),
            port=self._sock.getsockname()[1], key=secrets.token_hex(32), created_at=time.time(),
        )  # fmt: skip
        rendezvous_dir(store_root).mkdir(mode=0o700, exist_ok=True)
        self._write("waiting")

    def _write(self, state: State) -> None:
        """The rendezvous, written whole (only its standby writes it)."""
        tmp = rendezvous_dir(self.root) / f".{self.lineage}.{self.token}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(self.rendezvous.model_dump_json())
        os.replace(tmp, _path(self.root, self.lineage, self.token, state))

    def wait(self, timeout_s: float) -> HandoffOrder | None:
        """The order, once signed and claimed; None when none came within ``timeout_s``
        (the rendezvous then says ``expired``) or the move cancelled this standby."""
        deadline = time.monotonic() + timeout_s
        if fault_on("CLAWPOINT_TEST_STANDBY_DEAF"):  # announced, then nothing listens (hung)
            self._sock.close()
            time.sleep(timeout_s)
        else:
            order = self._first_order(deadline)
            if order is not None or self.state == "cancelled":
                return order
        if move(self.root, self.lineage, self.token, "waiting", "expired"):
            self.state = "expired"
        else:  # the move cancelled it meanwhile
            self.state = state_of(self.root, self.lineage, self.token) or "cancelled"
        remove(self.root, self.lineage, self.token)  # nobody waits for its word
        return None

    def _first_order(self, deadline: float) -> HandoffOrder | None:
        """The first signed order, claimed (state ``ordered``); None at the deadline, or when
        the move cancelled this standby (state ``cancelled``, the rendezvous removed)."""
        # Every peer is read at once: one that connects and sends nothing (a port scan, a
        # health check) must not hold up the source, whose workload is paused meanwhile.
        peers = PeerLines(self._sock, ORDER_READ_S)
        try:
            while (got := peers.next(deadline)) is not None:
                conn, peer = got.conn, got.address
                order, why = self._verify(got.line) if got.line is not None else (None, got.why)
                if order is not None and move(
                    self.root, self.lineage, self.token, "waiting", "ordered"
                ):
                    self.state, self._conn = "ordered", conn
                    self.rendezvous.checkpoint = order.checkpoint  # for the move's report
                    log.info("wrapper.remote_order", workload=self.lineage, peer=peer)
                    return order
                if order is not None:
                    why = "this standby was cancelled"
                log.warning(
                    "wrapper.remote_order_refused", workload=self.lineage, peer=peer, why=why
                )
                _answer(conn, {"refused": why})
                conn.close()
                if why == "this standby was cancelled":
                    self.state = "cancelled"
                    remove(self.root, self.lineage, self.token)
                    return None
        finally:
            peers.close()
        return None

    def _verify(self, line: bytes) -> tuple[HandoffOrder | None, str]:
        """One line ``{"order": ..., "mac": ...}``: (order, "") when signed with our key,
        else (None, why)."""
        try:
            msg = json.loads(line)
            body = json.dumps(msg["order"], sort_keys=True).encode()
            good = hmac.compare_digest(
                _sign(self.rendezvous.key, self.token, body), str(msg.get("mac", ""))
            )
            if not good:
                return None, "the order is not signed with this standby's key"
            return HandoffOrder.model_validate(msg["order"]), ""
        except (ValueError, KeyError, TypeError) as exc:
            return None, f"unreadable order: {exc}"

    def answer(self, taken: bool, why: str = "") -> None:
        """Tell the source how the restore went (it publishes after this), and say it in
        the rendezvous for the move."""
        self.state = "taken" if taken else "failed"
        with contextlib.suppress(OSError):  # the checkpoint it restored, for the move's report
            self._write("ordered")
        move(self.root, self.lineage, self.token, "ordered", self.state)
        if self._conn is not None:
            _answer(self._conn, {"taken": taken, "why": why})
            self._conn.close()
            self._conn = None
        if taken:  # after the answer: the source publishes meanwhile
            job = os.environ.get("SLURM_JOB_ID", "")
            if job.isdigit():  # this job is the workload's now, also when Slurm reruns it
                with contextlib.suppress(OSError):
                    _job_marker(self.root, self.lineage, job).touch(mode=0o600)
                    # Its source ended, handed over: nothing reruns it (one marker a lineage).
                    _job_marker(self.root, self.lineage, self.rendezvous.source_job).unlink(
                        missing_ok=True
                    )
            threading.Thread(target=relabel_own_job, daemon=True, name="relabel").start()

    def close(self) -> None:
        self._sock.close()
        if self._conn is not None:  # never answered: the restore raised before it
            self.answer(False, "the standby ended before its restore finished")


def _read_line(conn: socket.socket) -> bytes:
    buf = b""
    while b"\n" not in buf:
        chunk = conn.recv(4096)
        if not chunk:
            break
        buf += chunk
        if len(buf) > MAX_LINE:
            raise ValueError("message too long")
    return buf.split(b"\n", 1)[0]


def _answer(conn: socket.socket, msg: dict[str, object]) -> None:
    with contextlib.suppress(OSError):
        conn.sendall(json.dumps(msg).encode() + b"\n")


class RemoteStandby:
    """The source's end: connect (after the dump; refused: no standby), order once the
    payload is gone, then read the standby's answer."""

    def __init__(self, r: Rendezvous, connect_timeout_s: float = 5.0) -> None:
        self.r = r
        try:
            self._conn = socket.create_connection((r.host, r.port), timeout=connect_timeout_s)
        except OSError as exc:
            raise errors.Conflict(
                f"the standby of {r.lineage} at {r.host}:{r.port} does not answer: {exc}",
                hint="the move restarts the job the ordinary way instead; nothing is lost",
            ) from exc

    def send(self, order: HandoffOrder) -> None:
        payload = order.model_dump(mode="json")
        body = json.dumps(payload, sort_keys=True).encode()
        line = json.dumps({"order": payload, "mac": _sign(self.r.key, self.r.token, body)})
        try:
            self._conn.sendall(line.encode() + b"\n")
        except OSError as exc:
            raise errors.OperationFailed(
                f"cannot send the order to the standby at {self.r.host}:{self.r.port}: {exc}",
                hint="the move restarts the job the ordinary way instead; nothing is lost",
            ) from exc

    def answer(self, timeout_s: float) -> tuple[bool, str]:
        """(taken, why not): the standby's word on its restore, or (False, why) without one."""
        self._conn.settimeout(timeout_s)
        try:
            msg = json.loads(_read_line(self._conn) or b"{}")
        except (OSError, ValueError) as exc:
            return False, f"no answer from the standby: {exc}"
        finally:
            self._conn.close()
        if "refused" in msg:
            return False, f"the standby refused the order: {msg['refused']}"
        if not msg:
            return False, "the standby closed the connection without an answer"
        return bool(msg.get("taken")), str(msg.get("why", ""))

    def close(self) -> None:
        self._conn.close()
