"""The emulator as tests use it: a real HTTP server on 127.0.0.1 in a background thread.

``Emulator`` owns the state (``store``), the knobs a test turns (RBAC ``rules`` and
``user``, a bearer ``token``, injected ``faults``, the kubelet checkpoint answer per node,
``graceful_pod_deletion``, schema validation of what clients send) and the request recorder. The official ``kubernetes`` client
talks to ``url`` unchanged (``api_client()``, or a kubeconfig file from ``kubeconfig()``).

Seeding (``seed``, ``set_status``) writes state directly, as a controller or the kubelet
would, bypassing RBAC and the recorder; everything under test goes through HTTP.
``refuse_requests()`` makes any request during its block fail the test: the way to prove
that bad input sends nothing.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn
import yaml

from tests.k8s.emulator import status
from tests.k8s.emulator.app import VERSION, App
from tests.k8s.emulator.kinds import Kind
from tests.k8s.emulator.rbac import Rule
from tests.k8s.emulator.store import Obj, Store


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    content_type: str | None
    body: Any


@dataclass
class Fault:
    """Answer the next ``times`` matching requests with ``code`` instead of serving them."""

    code: int
    times: int = 1
    method: str | None = None
    path_prefix: str = ""
    retry_after: int = 0


def _fault_error(f: Fault) -> status.ApiError:
    if f.code == 429:
        return status.too_many_requests(
            "Too many requests, please try again later.", retry_after=f.retry_after or 1
        )
    if f.code == 503:
        return status.service_unavailable()
    if f.code == 504:
        return status.ApiError(
            504, "Timeout", "the server was unable to return a response in the time allotted"
        )
    return status.internal("etcdserver: request timed out")


class Emulator:
    def __init__(
        self,
        *,
        user: str = "system:serviceaccount:clawpoint:clawpoint",
        schema_version: str | None = None,
    ) -> None:
        self.store = Store()
        self.user = user
        # Schema validation (``schema``): with a Kubernetes version, every object a client
        # creates, replaces or patches is checked against that version's schema; a violation
        # is answered 422 and kept here, "METHOD path: field: message".
        self.schema_version = schema_version
        self.schema_violations: list[str] = []
        self.rules: list[Rule] | None = None
        self.token: str | None = None
        self.requests: list[Recorded] = []
        self.refusing = False
        self.faults: list[Fault] = []
        self.checkpoint_default = 404
        self.checkpoint_by_node: dict[str, int] = {}
        self.checkpoint_calls: list[tuple[str, str]] = []
        # pods/exec: (namespace, pod, container, argv) -> (exit code, stdout, stderr); the
        # fake kubelet sets it (tests/k8s/kubelet.py). None: every exec fails.
        self.exec_handler: Callable[[str, str, str, list[str]], tuple[int, bytes, bytes]] | None = (
            None
        )
        # What /version answers (a test sets an older one: pods/resize is served from 1.33).
        self.version: dict[str, str] = dict(VERSION)
        self.crashes: list[str] = []  # unexpected exceptions inside the emulator (its bugs)
        self._lock = threading.Lock()
        self._app = App(self)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.url = ""

    # ----- lifecycle --------------------------------------------------------------------
    def start(self) -> Emulator:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        config = uvicorn.Config(
            self._app.starlette,
            log_level="warning",
            lifespan="off",
            access_log=False,
            timeout_graceful_shutdown=2,
        )
        self._server = uvicorn.Server(config)
        self._sock = sock
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the Kubernetes API emulator did not start")
            time.sleep(0.01)
        self.url = f"http://127.0.0.1:{port}"
        return self

    def stop(self) -> None:
        if self._server is None or self._thread is None:
            return
        self._app.close_streams()
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()
        self._server = None

    def __enter__(self) -> Emulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----- recorder and faults ----------------------------------------------------------
    def record(
        self, method: str, path: str, query: dict[str, str], ctype: str | None, body: Any
    ) -> None:
        with self._lock:
            self.requests.append(Recorded(method, path, query, ctype, body))

    @contextmanager
    def refuse_requests(self) -> Iterator[None]:
        """Any request inside the block is answered 500 and fails the test at the end."""
        before = len(self.requests)
        self.refusing = True
        try:
            yield
        finally:
            self.refusing = False
        sent = self.requests[before:]
        assert not sent, f"requests were sent: {[(r.method, r.path) for r in sent]}"

    def take_fault(self, method: str, path: str) -> status.ApiError | None:
        with self._lock:
            for f in self.faults:
                if f.times > 0 and (f.method in (None, method)) and path.startswith(f.path_prefix):
                    f.times -= 1
                    return _fault_error(f)
        return None

    def fail_next(
        self, code: int, *, times: int = 1, method: str | None = None, path_prefix: str = ""
    ) -> Fault:
        fault = Fault(code, times, method, path_prefix)
        with self._lock:
            self.faults.append(fault)
        return fault

    # ----- kubelet checkpoint -----------------------------------------------------------
    def checkpoint_answer(self, node: str) -> int:
        return self.checkpoint_by_node.get(node, self.checkpoint_default)

    # ----- clients ----------------------------------------------------------------------
    def api_client(self, *, token: str | None = None) -> Any:
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = self.url
        if token is not None:
            cfg.api_key = {"BearerToken": token}
            cfg.api_key_prefix = {"BearerToken": "Bearer"}
        return client.ApiClient(cfg)

    def kubeconfig(
        self,
        path: Path,
        *,
        context: str = "emulator",
        token: str = "t0ken",
        namespace: str = "default",
    ) -> Path:
        """Write a kubeconfig whose ``context`` points here with ``token``; return its path."""
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "emu", "cluster": {"server": self.url}}],
            "users": [{"name": "emu-user", "user": {"token": token}}],
            "contexts": [
                {
                    "name": context,
                    "context": {"cluster": "emu", "user": "emu-user", "namespace": namespace},
                }
            ],
            "current-context": context,
        }
        path.write_text(yaml.safe_dump(doc))
        return path

    # ----- seeding ----------------------------------------------------------------------
    def kind_of(self, obj: Obj) -> Kind:
        api_version = str(obj.get("apiVersion", "v1"))
        group = api_version.rpartition("/")[0]
        kind = self.store.kind_named(group, str(obj.get("kind", "")))
        if kind is None:
            raise KeyError(f"the emulator serves no {api_version} {obj.get('kind')}")
        return kind

    def seed(self, *objs: Obj) -> list[Obj]:
        """Create objects as a controller or kubelet would (status kept, no RBAC, unrecorded)."""
        return [self.store.seed(self.kind_of(o), o) for o in objs]

    def set_status(self, obj: Obj, new_status: Obj) -> Obj:
        kind = self.kind_of(obj)
        meta = obj["metadata"]
        return self.store.set_status(
            kind, meta.get("namespace", "") if kind.namespaced else "", meta["name"], new_status
        )

    def namespace(self, *names: str) -> None:
        for name in names:
            self.seed(
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": name},
                    "status": {"phase": "Active"},
                }
            )
