"""The wrapper's control socket protocol (JSON lines over a Unix socket) and its client.

Requests are one JSON object per line: ``{"op": "checkpoint", "stop": bool}`` (a stop may
add ``"handoff": {"socket", "mode"}``: see ``core.wrapper.handoff``; ``"by": "agent"`` marks
a checkpoint an agent asked for, which rotates only among the agents': core.store.retention),
``{"op": "status"}``, ``{"op": "terminate", "timeout_s": float}``, ``{"op": "interval",
"every_s": float | null}`` (periodic checkpoints from now on; null: none; with ``"auto":
{"mtbf_h", "min_s", "max_s"}`` the wrapper re-times them after each checkpoint it makes,
starting from ``every_s``: ``core.wrapper.auto_interval``). The wrapper
answers with zero or more ``{"progress": [done, total, message]}`` lines, then exactly one
``{"result": ...}`` or ``{"error": {code, message, hint, ...}}`` line.

Limits: Unix socket paths are limited to 107 bytes; longer paths are reached through
``/proc/self/fd/DIRFD/NAME`` (Linux only). One request per connection.
"""

from __future__ import annotations

import json
import os
import socket
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

from core import errors, logs
from core.model import CheckpointInfo, ProgressFn

log = logs.get_logger(__name__)

_MAX_SUN_PATH = 107
_ERROR_CLASSES: dict[str, type[errors.ClawpointError]] = {
    cls.default_code: cls
    for cls in (
        errors.InvalidInput,
        errors.NotFound,
        errors.PolicyDenied,
        errors.NotSupported,
        errors.BackendUnavailable,
        errors.CheckpointError,
        errors.CorruptCheckpoint,
        errors.EngineUnavailable,
        errors.Conflict,
        errors.OperationFailed,
    )
}


@contextmanager
def short_address(path: Path) -> Iterator[str]:
    """A socket address for ``path`` that fits in sun_path (via /proc/self/fd if needed)."""
    text = str(path)
    if len(text.encode()) <= _MAX_SUN_PATH:
        yield text
        return
    dirfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{dirfd}/{path.name}"
    finally:
        os.close(dirfd)


def peer_uid(conn: socket.socket) -> int:
    """The uid of the process at the other end of a Unix socket (SO_PEERCRED: the kernel's
    word, which the peer cannot forge)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[1])


def refuse_stranger(conn: socket.socket) -> errors.ClawpointError | None:
    """An error for a peer that is neither our own user nor root, else None.

    The socket is 0600 in a 0700 home, so another user should never get this far; the check
    holds when a deployment loosened those modes (a shared run directory, a group)."""
    uid = peer_uid(conn)
    if uid in (os.geteuid(), 0):
        return None
    log.warning("control.refused_other_user", peer_uid=uid)
    return errors.PolicyDenied(
        f"uid {uid} may not control this workload: it belongs to uid {os.geteuid()}",
        hint="act on your own workloads only; the workload's owner (or root) can run this",
    )


def error_from(data: dict[str, Any]) -> errors.ClawpointError:
    cls = _ERROR_CLASSES.get(str(data.get("error")), errors.OperationFailed)
    return cls(
        str(data.get("message", "the wrapper reported an error")),
        hint=str(data.get("hint", "")),
        details=data.get("details") or None,
    )


class HandOver(NamedTuple):
    """What a stop-checkpoint that hands over answered (``ControlClient.stop_and_hand_over``)."""

    checkpoint: CheckpointInfo
    said: str  # "sent", or why not
    connections_held: int | None  # new connections that waited for the restored server


class ControlClient:
    def __init__(self, socket_path: Path) -> None:
        self.socket_path = Path(socket_path)
        self.name = self.socket_path.name.removesuffix(".sock")

    def _request(
        self,
        request: dict[str, Any],
        *,
        timeout_s: float,
        progress: ProgressFn | None = None,
        on_result: Callable[[Any], None] | None = None,
    ) -> Any:
        """Send ``request``; the result. ``on_result`` runs on it while the connection is still
        open (a wrapper that ends after answering waits for its requester to hang up)."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout_s)
        try:
            with short_address(self.socket_path) as addr:
                sock.connect(addr)
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            sock.close()
            raise errors.Conflict(
                f"the wrapper of {self.name} is not running (no answer on {self.socket_path})",
                hint="list the workloads to see its state; resume it from its newest checkpoint",
            ) from exc
        except OSError as exc:
            sock.close()
            raise errors.OperationFailed(
                f"cannot reach the wrapper of {self.name} at {self.socket_path}: {exc}",
                hint="check the wrapper's log under the clawpoint log directory",
            ) from exc
        try:
            with sock, sock.makefile("rwb") as f:
                f.write(json.dumps(request).encode() + b"\n")
                f.flush()
                for line in f:
                    msg = json.loads(line)
                    if "progress" in msg:
                        if progress is not None:
                            done, total, text = msg["progress"]
                            progress(float(done), None if total is None else float(total), text)
                        continue
                    if "error" in msg:
                        raise error_from(msg["error"])
                    if on_result is not None:
                        on_result(msg.get("result"))
                    return msg.get("result")
        except TimeoutError as exc:
            raise errors.BackendUnavailable(
                f"the wrapper of {self.name} did not answer within {timeout_s:g}s",
                hint="it may still be working (a large checkpoint); check its status, then retry",
                retry_after=5.0,
            ) from exc
        except (OSError, ValueError) as exc:
            raise errors.OperationFailed(
                f"the control connection to {self.name} broke: {exc}",
                hint="check the workload's state and the wrapper's log",
            ) from exc
        raise errors.OperationFailed(
            f"the wrapper of {self.name} closed the connection without an answer",
            hint="it may have exited; check the workload's state and the wrapper's log",
        )

    def checkpoint(
        self,
        *,
        stop: bool,
        timeout_s: float = 600,
        progress: ProgressFn | None = None,
        on_info: Callable[[CheckpointInfo], None] | None = None,
        by_agent: bool = False,
    ) -> CheckpointInfo:
        """``on_info`` runs on the checkpoint before the connection closes: after a stop
        checkpoint the wrapper ends once its requester hangs up, and in a container its end
        (PID 1's) kills every other process there, a requester still printing included.
        ``by_agent``: an agent asked for it (recorded with it)."""
        result = self._request(
            {"op": "checkpoint", "stop": stop, **({"by": "agent"} if by_agent else {})},
            timeout_s=timeout_s,
            progress=progress,
            on_result=None
            if on_info is None
            else (lambda r: on_info(CheckpointInfo.model_validate(r))),
        )
        return CheckpointInfo.model_validate(result)

    def stop_and_hand_over(
        self,
        *,
        standby: str,
        mode: str,
        timeout_s: float = 600,
        progress: ProgressFn | None = None,
    ) -> HandOver:
        """A stop-checkpoint whose workload goes to the standby wrapper listening at
        ``standby`` (``core.wrapper.handoff``): the checkpoint, "sent" or why not, and how
        many new connections waited for the restored server (None: none were held)."""
        request = {"op": "checkpoint", "stop": True, "handoff": {"socket": standby, "mode": mode}}
        result = dict(self._request(request, timeout_s=timeout_s, progress=progress) or {})
        said = str(result.pop("handoff", "not sent: the wrapper did not say"))
        held = result.pop("connections_held", None)
        return HandOver(
            CheckpointInfo.model_validate(result), said, held if isinstance(held, int) else None
        )

    def stop_and_hand_over_remote(
        self,
        *,
        token: str,
        timeout_s: float = 600,
        on_result: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """A stop-checkpoint whose workload goes to the standby on another node that
        announced itself in the store as ``token`` (``core.wrapper.handoff_remote``; none
        waiting: a plain stop). The checkpoint's fields plus ``handoff`` ("sent" or why
        not; absent: no standby was waiting); ``on_result`` as for :meth:`checkpoint`."""
        request = {"op": "checkpoint", "stop": True, "handoff": {"token": token}}
        result = self._request(
            request,
            timeout_s=timeout_s,
            on_result=None if on_result is None else (lambda r: on_result(dict(r or {}))),
        )
        return dict(result or {})

    def status(self) -> dict[str, Any]:
        result = self._request({"op": "status"}, timeout_s=10)
        return dict(result or {})

    def set_interval(
        self, every_s: float | None, auto: dict[str, float] | None = None
    ) -> dict[str, Any]:
        """Periodic checkpoints every ``every_s`` from now on (None: none), re-timed by the
        wrapper with ``auto`` (``AutoInterval``'s fields); the wrapper says
        ``checkpoint_every``, ``next_in_s`` (seconds until the next one is due) and
        ``auto`` (true) if so."""
        request: dict[str, Any] = {"op": "interval", "every_s": every_s}
        if auto is not None:
            request["auto"] = auto
        return dict(self._request(request, timeout_s=10) or {})

    def terminate(self, *, timeout_s: float, dump_wait_s: float | None = None) -> None:
        """End the payload: a checkpoint under way may finish first (``dump_wait_s``, default
        ``timeout_s``), then SIGTERM and, ``timeout_s`` later, SIGKILL."""
        request: dict[str, Any] = {"op": "terminate", "timeout_s": timeout_s}
        if dump_wait_s is not None:
            request["dump_wait_s"] = dump_wait_s
        wait = timeout_s if dump_wait_s is None else dump_wait_s
        self._request(request, timeout_s=timeout_s + wait + 15)
