"""The wrapper's control socket: a Unix socket speaking JSON lines.

Request (one line): ``{"op": "checkpoint", "stop": false}``, ``{"op": "status"}`` or
``{"op": "terminate"}``. Replies (lines): zero or more ``{"event": "progress", "done", "total",
"message"}``, then exactly one ``{"result": ...}`` or ``{"error": {type, error, message,
hint, ...}}``. The server hands each request to the supervisor's queue, so checkpoints run one
at a time. Limits: local only (a Unix socket, mode 0600); no authentication beyond the
file mode.
"""

from __future__ import annotations

import json
import os
import queue
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog

from core import errors
from core.backends.base import ProgressFn
from core.model import CheckpointInfo

log = structlog.get_logger(__name__)

Submit = Callable[[str, dict[str, Any], "queue.Queue[dict[str, Any]]"], None]


class ControlServer:
    def __init__(self, path: Path, submit: Submit) -> None:
        self.path = path
        self.submit = submit
        self._sock: socket.socket | None = None
        self._closed = threading.Event()

    def start(self) -> None:
        self.path.unlink(missing_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(str(self.path))
        except OSError as exc:
            sock.close()
            raise errors.OperationFailed(
                f"cannot create the control socket {self.path}: {exc}",
                hint="use a shorter CLAWPOINT_HOME (Unix socket paths are limited to 107 bytes)",
            ) from exc
        os.chmod(self.path, 0o600)
        sock.listen(16)
        self._sock = sock
        threading.Thread(target=self._accept, name="control", daemon=True).start()

    def _accept(self) -> None:
        assert self._sock is not None
        while not self._closed.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rwb") as f:
            try:
                line = f.readline(65536)
                req = json.loads(line)
                if not isinstance(req, dict) or not isinstance(req.get("op"), str):
                    raise ValueError("a request is a JSON object with an 'op' string")
            except ValueError as exc:
                err = {"error": "invalid-input", "type": "InvalidInput", "message": str(exc)}
                f.write(json.dumps({"error": err}).encode() + b"\n")
                return
            replies: queue.Queue[dict[str, Any]] = queue.Queue()
            op = req.pop("op")
            self.submit(op, req, replies)
            try:
                while True:
                    msg = replies.get()
                    f.write(json.dumps(msg, default=str).encode() + b"\n")
                    f.flush()
                    if "event" not in msg:
                        return
            except OSError:
                return  # the client went away; the request itself still completes

    def close(self) -> None:
        self._closed.set()
        if self._sock is not None:
            self._sock.close()
        self.path.unlink(missing_ok=True)


_ERRORS: dict[str, type[errors.ClawpointError]] = {
    cls.__name__: cls
    for cls in (
        errors.InvalidInput,
        errors.NotFound,
        errors.Conflict,
        errors.CheckpointError,
        errors.CorruptCheckpoint,
        errors.EngineUnavailable,
        errors.OperationFailed,
    )
}


class ControlClient:
    """Talk to a wrapper through its socket; every failure is a ClawpointError."""

    def __init__(self, socket_path: Path) -> None:
        self.socket_path = Path(socket_path)

    def _call(
        self, request: dict[str, Any], *, timeout_s: float, progress: ProgressFn | None = None
    ) -> Any:
        name = self.socket_path.stem
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout_s)
        try:
            sock.connect(str(self.socket_path))
        except OSError as exc:
            sock.close()
            raise errors.Conflict(
                f"the wrapper of {name} is not running (socket {self.socket_path}: {exc})",
                hint="list workloads to see its state; restart it with 'clawpoint run'",
            ) from exc
        try:
            with sock, sock.makefile("rwb") as f:
                f.write(json.dumps(request).encode() + b"\n")
                f.flush()
                for line in f:
                    msg = json.loads(line)
                    if "event" in msg:
                        if progress is not None:
                            progress(msg.get("done", 0), msg.get("total"), msg.get("message", ""))
                        continue
                    if "error" in msg:
                        err = msg["error"]
                        cls = _ERRORS.get(err.get("type", ""), errors.OperationFailed)
                        raise cls(err.get("message", "wrapper error"), hint=err.get("hint", ""))
                    return msg.get("result")
        except TimeoutError as exc:
            raise errors.OperationFailed(
                f"the wrapper of {name} did not answer {request['op']} within {timeout_s:g} s",
                hint="it may still be working; check its status and log",
            ) from exc
        except (OSError, ValueError) as exc:
            raise errors.Conflict(
                f"lost the connection to the wrapper of {name}: {exc}",
                hint="check whether the workload is still running (list workloads)",
            ) from exc
        raise errors.Conflict(
            f"the wrapper of {name} closed the connection without an answer",
            hint="it probably exited; list workloads to see its state",
        )

    def checkpoint(
        self, *, stop: bool, timeout_s: float = 600, progress: ProgressFn | None = None
    ) -> CheckpointInfo:
        result = self._call(
            {"op": "checkpoint", "stop": stop}, timeout_s=timeout_s, progress=progress
        )
        return CheckpointInfo.model_validate(result)

    def status(self, *, timeout_s: float = 10) -> dict[str, Any]:
        result = self._call({"op": "status"}, timeout_s=timeout_s)
        return dict(result)

    def terminate(self, *, timeout_s: float) -> None:
        """Ask the wrapper to stop its payload and wait until the wrapper has gone."""
        self._call({"op": "terminate"}, timeout_s=timeout_s)
        import time

        deadline = time.monotonic() + timeout_s
        while self.socket_path.exists():
            if time.monotonic() > deadline:
                raise errors.OperationFailed(
                    f"the wrapper of {self.socket_path.stem} did not exit within {timeout_s:g} s",
                    hint="fence it: kill the wrapper, then the payload (see fence)",
                )
            time.sleep(0.05)
