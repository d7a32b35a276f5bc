"""The first line of each peer of a listening socket, read from all of them at once.

A live move's standby (``core.wrapper.handoff_remote``) listens on a TCP port that anything
on the network can reach. Read one connection at a time, a peer that connects and sends
nothing (a port scan, a stray health check, another user) would hold the standby up for
its whole read allowance while the real source, its order ready and its workload frozen,
waits in the listen backlog: the workload's pause would grow by that much per such peer.
Here every accepted connection is read concurrently (one ``selectors`` loop, no threads),
each with its own allowance, and whichever completes a line first is handed to the caller.

Limits: at most ``max_pending`` connections are read at once; one more is closed as soon
as it is accepted (a flood can then keep the source out until its peers time out, and the
move goes the ordinary way: nothing is lost). A line is at most ``MAX_LINE`` bytes.
"""

from __future__ import annotations

import selectors
import socket
import time
from dataclasses import dataclass

MAX_LINE = 16384


@dataclass
class _Peer:
    address: str
    until: float  # monotonic time by which its line must be complete
    buf: bytes = b""


@dataclass(frozen=True)
class PeerLine:
    """A peer done: its connection (blocking again, for an answer; the caller closes it),
    its address, and its first line, or ``line`` None and ``why`` says why not."""

    conn: socket.socket
    address: str
    line: bytes | None
    why: str = ""


class PeerLines:
    """Accept on ``sock`` and read every peer's first line within ``read_s`` of its accept."""

    def __init__(self, sock: socket.socket, read_s: float, max_pending: int = 32) -> None:
        self._sock, self._read_s, self._max = sock, read_s, max_pending
        sock.setblocking(False)
        self._sel = selectors.DefaultSelector()
        self._sel.register(sock, selectors.EVENT_READ)
        self._pending: dict[socket.socket, _Peer] = {}

    def next(self, deadline: float) -> PeerLine | None:
        """The next peer that sent its line, failed, or ran out of time; None once the
        monotonic ``deadline`` has passed with none."""
        while True:
            now = time.monotonic()
            for conn, peer in list(self._pending.items()):
                if peer.until <= now:
                    return self._done(conn, None, f"it sent no order within {self._read_s:g} s")
            left = deadline - now
            if left <= 0:
                return None
            wake = min([left, *(p.until - now for p in self._pending.values())])
            for key, _ in self._sel.select(max(wake, 0.0)):
                if key.fileobj is self._sock:
                    self._accept()
                    continue
                done = self._read(key.fileobj)  # type: ignore[arg-type]
                if done is not None:
                    return done

    def _accept(self) -> None:
        try:
            conn, addr = self._sock.accept()
        except (BlockingIOError, InterruptedError):
            return  # another event took it, or it went away before we got to it
        if len(self._pending) >= self._max:
            conn.close()
            return
        conn.setblocking(False)
        self._pending[conn] = _Peer(str(addr[0]), time.monotonic() + self._read_s)
        self._sel.register(conn, selectors.EVENT_READ)

    def _read(self, conn: socket.socket) -> PeerLine | None:
        peer = self._pending[conn]
        try:
            chunk = conn.recv(4096)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError as exc:
            return self._done(conn, None, f"unreadable order: {exc}")
        if not chunk:
            if peer.buf:  # what it sent before it closed may still be the whole line
                return self._done(conn, peer.buf, "")
            return self._done(conn, None, "unreadable order: it closed the connection without one")
        peer.buf += chunk
        if b"\n" in peer.buf:
            return self._done(conn, peer.buf.split(b"\n", 1)[0], "")
        if len(peer.buf) > MAX_LINE:
            return self._done(conn, None, "unreadable order: message too long")
        return None

    def _done(self, conn: socket.socket, line: bytes | None, why: str) -> PeerLine:
        peer = self._pending.pop(conn)
        self._sel.unregister(conn)
        conn.setblocking(True)
        conn.settimeout(self._read_s)  # the caller's answer must not hang on a dead peer
        return PeerLine(conn, peer.address, line, why)

    def close(self) -> None:
        """Close every connection still being read (not those already handed out)."""
        for conn in list(self._pending):
            self._sel.unregister(conn)
            conn.close()
        self._pending.clear()
        self._sel.close()
