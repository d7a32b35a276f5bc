"""Holding a moving server's new connections, so no client is refused while it moves.

Between the source's end and the restored socket's first ``listen`` nothing listens on the
workload's ports, and the kernel answers a client's SYN with a reset: a client that retries
10 ms later was refused 2-3 times per move. While a handoff runs, the wrapper now queues
those SYNs instead (an ``NFQUEUE`` rule of iptables' ``raw`` table, one per family, on the
workload's listening ports) and accepts them once the standby has restored: the kernel then
delivers each to the restored socket, and the client sees a slower handshake, not a failure.

Why it is safe for the workload and its clients:
- the rule is inserted only after this process is bound to its queue, and carries
  ``--queue-bypass``: when nothing is bound (this wrapper killed mid-move) the kernel lets
  packets through as if the rule were absent; the queue is also set to fail open (a full
  queue passes packets on instead of dropping them);
- release accepts every queued packet first, then deletes the rules, then keeps accepting
  what was already on its way for a moment before the queue is closed (a closed queue
  drops what it still holds);
- a hold never lasts longer than its caller's bound, and every rule names its workload
  and its home (``clawpoint-hold:NAME.HOMEHASH``, :func:`hold_key`), so the next hold of
  that workload deletes one left by a killed wrapper, and no other's;
- only SYNs are held: packets of established connections pass untouched.

Limits: root with ``CAP_NET_ADMIN`` in the workload's network namespace (the wrapper's own),
the ``iptables-legacy`` commands (Debian's ``iptables`` package) and a kernel with
``NETFILTER_NETLINK_QUEUE`` and ``NETFILTER_XT_TARGET_NFQUEUE``; TCP only. Where any of
these is missing, :func:`start` says why and the move goes on without a hold, as before.
Netlink layouts: ``include/uapi/linux/netfilter/nfnetlink_queue.h`` and
``nfnetlink.h``; verdict batches: ``net/netfilter/nfnetlink_queue.c``
(``nfqnl_recv_verdict_batch`` accepts every queued packet whose id is at most the one given).
"""

from __future__ import annotations

import errno
import hashlib
import os
import shlex
import shutil
import socket
import struct
import subprocess
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from core import logs, processes
from core.checkpoint import files, nsinit

log = logs.get_logger(__name__)

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET = 0
NFQNL_MSG_CONFIG = 2
NFQNL_MSG_VERDICT_BATCH = 3
NFQA_PACKET_HDR = 1
NFQA_VERDICT_HDR = 2
NFQA_CFG_CMD = 1
NFQA_CFG_PARAMS = 2
NFQA_CFG_MASK = 4
NFQA_CFG_FLAGS = 5
NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_META = 1
NFQA_CFG_F_FAIL_OPEN = 1
NF_ACCEPT = 1
NLM_F_REQUEST = 1
NLM_F_ACK = 4
NLMSG_ERROR = 2
NLMSG_HDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
NFGENMSG = struct.Struct("!BBH")  # family, version, queue number (big-endian)
COMMENT_PREFIX = "clawpoint-hold:"
MULTIPORT_MAX = 15
QUEUE_BASE = 0x6300  # our queue numbers: base + a probe from the wrapper's pid
DRAIN_S = 0.05  # after the rules are gone: what was already queued still gets accepted
CAP_NET_ADMIN = 12
IPV4, IPV6 = "iptables-legacy", "ip6tables-legacy"  # the commands, one per family


def listening_ports(pids: Iterable[int]) -> list[int]:
    """The TCP ports the processes ``pids`` listen on: their descriptors' sockets
    (``socket:[INODE]``) found listening in their namespace's ``/proc/net/tcp*``."""
    pids = list(pids)
    inodes = {
        target[len("socket:[") : -1]
        for pid in pids
        for _fd, _source, target in files.open_fds(pid)
        if target.startswith("socket:[")
    }
    if not pids or not inodes:
        return []
    listening = processes.tcp_sockets(pids[0], processes.TCP_LISTEN)
    return sorted({port for inode, port in listening.items() if inode in inodes})


def _attr(kind: int, data: bytes) -> bytes:
    size = 4 + len(data)
    return struct.pack("=HH", size, kind) + data + b"\0" * (-size % 4)


def _message(kind: int, queue: int, attrs: bytes, flags: int = NLM_F_REQUEST) -> bytes:
    body = NFGENMSG.pack(socket.AF_UNSPEC, 0, queue) + attrs
    msg_type = (NFNL_SUBSYS_QUEUE << 8) | kind
    return NLMSG_HDR.pack(NLMSG_HDR.size + len(body), msg_type, flags, 0, 0) + body


class _Queue:
    """One bound netfilter queue: packets arrive on a thread that keeps their ids; release
    accepts them all (one verdict batch) and every later one at once."""

    def __init__(self, number: int, frozen: Callable[[], bool]) -> None:
        self.number = number
        self.held = 0
        self._frozen = frozen
        self._holding = False  # set at the first SYN that comes once the tree is frozen
        self._max_id: int | None = None
        self._released = threading.Event()
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        try:
            self._sock.bind((0, 0))
            cmd = struct.pack("!BBH", NFQNL_CFG_CMD_BIND, 0, 0)
            self._request(_attr(NFQA_CFG_CMD, cmd))
            params = struct.pack("!IB", 0, NFQNL_COPY_META)  # ids only, no payload copied
            flags = struct.pack("!I", NFQA_CFG_F_FAIL_OPEN)
            self._request(
                _attr(NFQA_CFG_PARAMS, params)
                + _attr(NFQA_CFG_MASK, flags)
                + _attr(NFQA_CFG_FLAGS, flags)
            )
        except OSError:
            self._sock.close()
            raise
        self._sock.settimeout(0.02)
        self._thread = threading.Thread(target=self._receive, name="connection-hold", daemon=True)
        self._thread.start()

    def _request(self, attrs: bytes) -> None:
        """Send a config message and read its acknowledgement (an error is raised)."""
        self._sock.send(_message(NFQNL_MSG_CONFIG, self.number, attrs, NLM_F_REQUEST | NLM_F_ACK))
        data = self._sock.recv(4096)
        _, kind, _, _, _ = NLMSG_HDR.unpack_from(data)
        if kind == NLMSG_ERROR:
            (code,) = struct.unpack_from("=i", data, NLMSG_HDR.size)
            if code < 0:
                raise OSError(-code, os.strerror(-code))

    def _receive(self) -> None:
        while not self._closing.is_set():
            try:
                data = self._sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:  # closed, or the kernel's queue overflowed (it fails open)
                if self._closing.is_set():
                    return
                continue
            for packet_id in _packet_ids(data):
                with self._lock:
                    # Before the freeze the server still accepts: pass SYNs on, else they
                    # would wait out the dump's start-up too. From the freeze on, hold.
                    passing = self._released.is_set() or (not self._holding and not self._frozen())
                    if not passing:
                        self._holding = True
                        self.held += 1
                        self._max_id = max(packet_id, self._max_id or 0)
                if passing:
                    self._accept_through(packet_id)

    def _accept_through(self, packet_id: int) -> None:
        verdict = _attr(NFQA_VERDICT_HDR, struct.pack("!II", NF_ACCEPT, packet_id))
        try:
            self._sock.send(_message(NFQNL_MSG_VERDICT_BATCH, self.number, verdict))
        except OSError as exc:  # unbound already: the kernel passes or dropped it
            log.warning("wrapper.hold_verdict_failed", queue=self.number, error=str(exc))

    def release(self) -> None:
        with self._lock:
            self._released.set()
            last = self._max_id
        if last is not None:
            self._accept_through(last)

    def close(self) -> None:
        self._closing.set()
        self._thread.join(timeout=1)
        self._sock.close()


def _always() -> bool:
    return True


def _packet_ids(data: bytes) -> list[int]:
    """The packet ids of the NFQNL_MSG_PACKET messages in one netlink read."""
    ids = []
    at = 0
    while at + NLMSG_HDR.size <= len(data):
        size, kind, _, _, _ = NLMSG_HDR.unpack_from(data, at)
        if size < NLMSG_HDR.size:
            break
        if kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
            pos = at + NLMSG_HDR.size + NFGENMSG.size
            while pos + 4 <= at + size:
                length, attr = struct.unpack_from("=HH", data, pos)
                if length < 4:
                    break
                if attr & 0x7FFF == NFQA_PACKET_HDR:
                    ids.append(struct.unpack_from("!I", data, pos + 4)[0])
                pos += (length + 3) & ~3
        at += (size + 3) & ~3
    return ids


def _rules(name: str, queue: int, ports: list[int]) -> list[list[str]]:
    """The rules' matches and target, without the table's verb (``-I``/``-D``): one per 15
    ports, ``multiport``'s limit (``xt_multiport.h`` XT_MULTI_PORTS)."""
    chunks = [ports[at : at + MULTIPORT_MAX] for at in range(0, len(ports), MULTIPORT_MAX)]
    return [_rule(name, queue, chunk) for chunk in chunks]


def _rule(name: str, queue: int, ports: list[int]) -> list[str]:
    return [
        "PREROUTING", "-p", "tcp", "--syn", "-m", "multiport",
        "--dports", ",".join(str(p) for p in ports),
        "-m", "comment", "--comment", f"{COMMENT_PREFIX}{name}",
        "-j", "NFQUEUE", "--queue-num", str(queue), "--queue-bypass",
    ]  # fmt: skip


def _iptables(command: str, args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [command, "-w", "5", "-t", "raw", *args],
        capture_output=True, text=True, timeout=10, check=False,
    )  # fmt: skip


def hold_key(name: str, home: Path) -> str:
    """What a workload's rules are named after: its name and its clawpoint home (two homes
    on one host may each have a workload of that name; neither may drop the other's rule)."""
    return f"{name}.{hashlib.sha256(str(home).encode()).hexdigest()[:8]}"


def drop_stale_rules(name: str) -> int:
    """Delete the hold rules of ``name`` a killed wrapper left (harmless while nothing is
    bound to their queue, but they would send SYNs to whoever binds it next)."""
    dropped = 0
    for command in (IPV4, IPV6):
        if shutil.which(command) is None:
            continue
        listed = _iptables(command, ["-S", "PREROUTING"])
        for line in listed.stdout.splitlines():
            words = shlex.split(line)  # the comment is printed quoted
            if words[:2] == ["-A", "PREROUTING"] and f"{COMMENT_PREFIX}{name}" in words:
                _iptables(command, ["-D", *words[1:]])
                dropped += 1
    return dropped


class Hold:
    """SYNs to a workload's listening ports, queued until :meth:`release`."""

    def __init__(self, name: str, queue: _Queue, rules: list[tuple[str, list[str]]]) -> None:
        self.name = name
        self._queue = queue
        self._rules = rules
        self._done = False

    @property
    def held(self) -> int:
        """How many SYNs were queued (the clients that would have been refused or waited)."""
        return self._queue.held

    def release(self) -> int:
        """Accept every queued SYN (the restored socket gets them), remove the rules, close
        the queue; idempotent. Returns how many were held."""
        if self._done:
            return self.held
        self._done = True
        self._queue.release()
        for command, rule in self._rules:
            result = _iptables(command, ["-D", *rule])
            if result.returncode != 0:
                log.warning("wrapper.hold_rule_left", workload=self.name, error=result.stderr)
        threading.Event().wait(DRAIN_S)
        self._queue.close()
        log.info("wrapper.connections_released", workload=self.name, held=self.held)
        return self.held


def unavailable() -> str | None:
    """Why no hold can be made here, or None."""
    if os.geteuid() != 0:
        return "holding connections needs root (CAP_NET_ADMIN)"
    if not nsinit.effective_caps() >> CAP_NET_ADMIN & 1:  # a container's bounding set
        return "holding connections needs CAP_NET_ADMIN, which this root lacks"
    if shutil.which(IPV4) is None:
        return "iptables-legacy is not installed (Debian: apt-get install iptables)"
    return None


def stopped(pid: int) -> bool:
    """Is ``pid`` stopped (CRIU seizes a tree with ptrace: state ``t``) or gone?"""
    return (processes.state(pid) or "X") in "tTZX"


def start(
    name: str, pids: Iterable[int], frozen: Callable[[], bool] | None = None
) -> tuple[Hold | None, str]:
    """Hold new connections to the ports the processes ``pids`` listen on, from the first
    one that comes once ``frozen()`` is true (always, when None) until released. Returns
    the hold (None when there is nothing to hold or it cannot be made) and what happened."""
    pids = list(pids)
    if any(os.readlink(f"/proc/{p}/ns/net") != os.readlink("/proc/self/ns/net") for p in pids):
        return None, "not held: the workload has its own network namespace"
    ports = listening_ports(pids)
    if not ports:
        return None, "nothing to hold: the workload listens on no TCP port"
    why = unavailable()
    if why is not None:
        return None, f"not held: {why}"
    drop_stale_rules(name)
    queue = None
    for probe in range(16):
        try:
            queue = _Queue(QUEUE_BASE + (os.getpid() + probe) % 0x1000, frozen or _always)
            break
        except OSError as exc:
            # A queue bound by another socket answers EPERM, one bound by ours EBUSY
            # (net/netfilter/nfnetlink_queue.c nfqnl_recv_config): another hold has it.
            if exc.errno not in (errno.EPERM, errno.EBUSY):
                return None, f"not held: cannot bind a netfilter queue ({exc.strerror})"
    if queue is None:
        return None, "not held: 16 netfilter queues tried, each bound by another process"
    rules: list[tuple[str, list[str]]] = []
    hold = Hold(name, queue, rules)
    # Both families whatever the sockets' own: an IPv6 socket bound to :: also takes IPv4
    # clients, whose SYNs only iptables (not ip6tables) sees.
    for command in (IPV4, IPV6):
        for rule in _rules(name, queue.number, ports):
            result = _iptables(command, ["-I", *rule]) if shutil.which(command) else None
            if result is not None and result.returncode == 0:
                rules.append((command, rule))
            elif command == IPV4:
                hold.release()
                why = result.stderr.strip() if result is not None else "not installed"
                return None, f"not held: {command} refused the rule: {why}"
            else:  # no IPv6 here (or no ip6tables): IPv4 clients are still held
                log.info("wrapper.hold_ipv6_skipped", workload=name)
                break
    return hold, f"holding new connections to port {', '.join(map(str, ports))}"
