"""Handing a workload from the wrapper that froze it to one already waiting on the target.

A migration's pause used to include starting a new wrapper (a Python interpreter and its
imports) after the source had stopped. Now the target wrapper is started first, in
*standby*: imported, its pipes made, holding neither the workload's lock nor any process, it
waits on a datagram socket ``<run_dir>/NAME.standby-TOKEN.sock`` for one order. The source
wrapper, once its stop-checkpoint is published and its payload is gone, writes its last
registry row, releases the workload's lock and sends the order (:class:`HandoffOrder`); the
standby takes the lock, restores that checkpoint and runs the workload. Ordering is what
keeps one copy: the order is sent only after the payload is dead and its checkpoint durable,
and the standby restores only once it holds the lock.

Whatever goes wrong falls back to the ordinary path: a standby that gets no order within its
timeout exits by itself (it holds nothing); a source that cannot reach its standby says so
in its answer, and the start step then launches a wrapper as before.

This module is the protocol (the order, the standby's socket); the two sides are
``core.wrapper.handoff_source`` (the stop checkpoint that hands over) and
``core.wrapper.handoff_target`` (the standby's wait and takeover).

Limits: one host (the socket is local); the token names one standby, so a stale standby of
an abandoned migration never takes an order meant for another.
"""

from __future__ import annotations

import os
import secrets
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field

from core import errors
from core.config import Settings
from core.polling import poll_until
from core.schema_base import Model
from core.wrapper.control import short_address

RestoreMode = Literal["post-copy", "stop-and-copy"]
_MAX_ORDER = 4096


class HandoffOrder(Model):
    """What the source tells its standby: restore this checkpoint, this way."""

    model_config = ConfigDict(extra="forbid")

    checkpoint: str
    mode: RestoreMode = "stop-and-copy"
    sent_at: float = Field(default_factory=time.time, description="the source's clock, s")
    # A staged handoff: the images are still being published (their directory, in the
    # store), and the inodes of the payload's pipes at the dump (the manifest's "pipes").
    staged: str | None = None
    pipes: list[int] = Field(default_factory=list)


def new_token() -> str:
    return secrets.token_hex(6)


def standby_path(settings: Settings, name: str, token: str) -> Path:
    return settings.run_dir / f"{name}.standby-{token}.sock"


def standby_paths(settings: Settings, name: str) -> list[Path]:
    """Every standby socket of ``name`` present now (live or left by a killed standby)."""
    return sorted(settings.run_dir.glob(f"{name}.standby-*.sock"))


class Standby:
    """The waiting side: bind, then :meth:`wait` for one order."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        path.unlink(missing_ok=True)
        with short_address(path) as addr:
            self._sock.bind(addr)
        os.chmod(path, 0o600)

    def wait(self, timeout_s: float) -> HandoffOrder | None:
        """The order, or None when none came within ``timeout_s`` (or it was unreadable)."""
        self._sock.settimeout(timeout_s)
        try:
            data = self._sock.recv(_MAX_ORDER)
        except TimeoutError:
            return None
        try:
            return HandoffOrder.model_validate_json(data)
        except ValueError:
            return None

    def close(self) -> None:
        self._sock.close()
        self.path.unlink(missing_ok=True)


def send(path: Path, order: HandoffOrder) -> None:
    """Give ``order`` to the standby at ``path``; Conflict when none listens there."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        with short_address(path) as addr:
            sock.sendto(order.model_dump_json().encode(), addr)
    except (FileNotFoundError, ConnectionRefusedError) as exc:
        raise errors.Conflict(
            f"no standby wrapper listens at {path}",
            hint="the start step launches a wrapper instead; nothing is lost",
        ) from exc
    except OSError as exc:
        raise errors.OperationFailed(
            f"cannot hand the workload over through {path}: {exc}",
            hint="the start step launches a wrapper instead; nothing is lost",
        ) from exc
    finally:
        sock.close()


def wait_ready(path: Path, pid_alive: Callable[[], bool], timeout_s: float) -> bool:
    """Wait until the standby's socket exists (True) or its process ended (False)."""

    def ready_or_gone() -> str | None:
        if path.exists():
            return "ready"
        return None if pid_alive() else "gone"

    return poll_until(ready_or_gone, timeout_s=timeout_s, every_s=0.01) == "ready"
