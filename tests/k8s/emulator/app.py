"""The HTTP face of the emulator: kube-apiserver's REST paths over a Starlette app.

Paths served: ``/version``, ``/api``, ``/apis``, ``/api/v1``, ``/apis/GROUP``,
``/apis/GROUP/VERSION`` (legacy discovery documents; aggregated discovery is not offered,
so clients fall back to these as they do with older servers); collections and objects of
every known kind, cluster-wide lists of namespaced kinds (``/api/v1/pods``), the
``status`` and ``scale`` subresources, ``pods/eviction``, ``pods/resize`` (from 1.33, with
``Emulator.version``: module ``resize``) and ``nodes/NODE/proxy/...``
(only the kubelet's ``checkpoint`` endpoint behind it). Query parameters honoured:
``labelSelector``, ``fieldSelector``, ``limit`` / ``continue``, ``watch``,
``resourceVersion`` (watch start), ``timeoutSeconds``, ``dryRun=All``,
``gracePeriodSeconds``. ``pods/exec`` over WebSocket (``v4.channel.k8s.io``: stdout,
stderr, then the exit Status on channel 3), run by the fake kubelet (``Emulator.exec_handler``);
RBAC verb ``create`` on ``pods/exec``, as servers since 1.31 check it. Every request passes the recorder, then injected faults, then
authentication (bearer token, when one is set), then RBAC, in that order.

Differs from a real server (kept out on purpose): no protobuf/CBOR or YAML bodies, no
server-side apply, no bookmarks, no ``resourceVersionMatch`` (lists always read the
latest state), OpenAPI schema checks only when ``Emulator.schema_version`` is set
(module ``schema``; 422 for every violation), no garbage collection of dependents, no admission
webhooks. An immediate delete answers the deleted object for pods and custom resources and a
Success ``Status`` for the other built-in kinds, as the published API declares.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from tests.k8s.emulator import admission, patching, rbac, resize, status, workloads
from tests.k8s.emulator import kinds as kinds_mod
from tests.k8s.emulator import schema as schema_mod
from tests.k8s.emulator.selectors import parse_fields, parse_labels
from tests.k8s.emulator.store import Obj, Watcher

if TYPE_CHECKING:
    from tests.k8s.emulator.server import Emulator

VERSION = {
    "major": "1",
    "minor": "34",
    "gitVersion": "v1.34.2",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-11-01T00:00:00Z",
    "goVersion": "go1.24.9",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def _json(body: Any, code: int = 200, headers: dict[str, str] | None = None) -> Response:
    return JSONResponse(body, status_code=code, headers=headers)


def _warning(text: str) -> str:
    """An RFC 7234 warning value, as kube-apiserver writes them (code 299, agent "-")."""
    return '299 - "' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _error(err: status.ApiError) -> Response:
    return _json(err.body, err.code, err.headers)


class _Target:
    """A parsed resource path."""

    def __init__(
        self,
        kind: kinds_mod.Kind,
        namespace: str | None,
        name: str | None,
        sub: str,
        rest: list[str],
    ) -> None:
        self.kind, self.namespace, self.name, self.sub, self.rest = kind, namespace, name, sub, rest


def _verb(method: str, target: _Target, watch: bool) -> str:
    if method == "GET":
        if target.name is None:
            return "watch" if watch else "list"
        return "get"
    if method == "POST":
        return "create"
    if method == "PUT":
        return "update"
    if method == "PATCH":
        return "patch"
    if method == "DELETE":
        return "delete" if target.name is not None else "deletecollection"
    raise status.method_not_allowed()


class App:
    def __init__(self, emu: Emulator) -> None:
        self.emu = emu
        self.store = emu.store
        self.streams: set[asyncio.Queue[tuple[str, Obj] | None]] = set()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.starlette = Starlette(
            routes=[
                WebSocketRoute("/api/v1/namespaces/{namespace}/pods/{name}/exec", self.exec_ws),
                Route(
                    "/{path:path}", self.handle, methods=["GET", "POST", "PUT", "PATCH", "DELETE"]
                ),
            ]
        )

    # ----- entry ------------------------------------------------------------------------
    async def handle(self, request: Request) -> Response:
        self.loop = asyncio.get_running_loop()
        raw = await request.body()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        path = request.url.path
        query = request.query_params
        self.emu.record(
            request.method,
            path,
            dict(query.multi_items()),
            request.headers.get("content-type"),
            body,
        )
        try:
            if self.emu.refusing:
                raise status.internal(f"no request was expected here: {request.method} {path}")
            fault = self.emu.take_fault(request.method, path)
            if fault is not None:
                raise fault
            if self.emu.token is not None:
                if request.headers.get("authorization") != f"Bearer {self.emu.token}":
                    raise status.unauthorized()
            if isinstance(body, str):
                raise status.bad_request("the body of the request was not valid JSON")
            return await self.route(request, path, body)
        except status.ApiError as err:
            return _error(err)
        except Exception as exc:  # an emulator bug: answer as the server would, and keep it
            self.emu.crashes.append(f"{request.method} {path}: {exc!r}")
            return _error(status.internal(repr(exc)))

    async def route(self, request: Request, path: str, body: Any) -> Response:
        parts = [p for p in path.split("/") if p]
        if parts in (["version"],):
            return _json(self.emu.version)
        if parts == ["api"]:
            host = request.headers.get("host", "127.0.0.1")
            return _json(
                {
                    "kind": "APIVersions",
                    "versions": ["v1"],
                    "serverAddressByClientCIDRs": [
                        {"clientCIDR": "0.0.0.0/0", "serverAddress": host}
                    ],
                }
            )
        if parts == ["apis"]:
            return _json({"kind": "APIGroupList", "apiVersion": "v1", "groups": self._groups()})
        if parts == ["api", "v1"]:
            return _json(
                {
                    "kind": "APIResourceList",
                    "groupVersion": "v1",
                    "resources": self._resources("", "v1"),
                }
            )
        if len(parts) == 2 and parts[0] == "apis":
            group = next((g for g in self._groups() if g["name"] == parts[1]), None)
            if group is None:
                raise status.page_not_found()
            return _json({"kind": "APIGroup", "apiVersion": "v1", **group})
        if len(parts) == 3 and parts[0] == "apis":
            resources = self._resources(parts[1], parts[2])
            if not resources:
                raise status.page_not_found()
            return _json(
                {
                    "kind": "APIResourceList",
                    "apiVersion": "v1",
                    "groupVersion": f"{parts[1]}/{parts[2]}",
                    "resources": resources,
                }
            )
        target = self._parse(parts)
        return await self.resource(request, target, body)

    # ----- discovery --------------------------------------------------------------------
    def _groups(self) -> list[dict[str, Any]]:
        with self.store.lock:
            seen: dict[str, str] = {}
            for k in self.store.kinds.values():
                if k.group:
                    seen.setdefault(k.group, k.version)
        order = [g for g in kinds_mod.BUILTIN_GROUPS if g in seen] + sorted(
            g for g in seen if g not in kinds_mod.BUILTIN_GROUPS
        )
        out = []
        for g in order:
            gv = {"groupVersion": f"{g}/{seen[g]}", "version": seen[g]}
            out.append({"name": g, "versions": [gv], "preferredVersion": gv})
        return out

    def _resources(self, group: str, version: str) -> list[dict[str, Any]]:
        with self.store.lock:
            found = [
                k for k in self.store.kinds.values() if k.group == group and k.version == version
            ]
        return [
            e
            for k in sorted(found, key=lambda k: k.plural)
            for e in kinds_mod.discovery_entry(k)
            if e["name"] != "pods/resize" or resize.served(self.emu)
        ]

    # ----- paths ------------------------------------------------------------------------
    def _parse(self, parts: list[str]) -> _Target:
        if len(parts) >= 3 and parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif len(parts) >= 4 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise status.page_not_found()
        if len(rest) >= 3 and rest[0] == "namespaces":
            kind = self.store.kind(group, version, rest[2])
            if kind is not None and kind.namespaced:
                name = rest[3] if len(rest) > 3 else None
                sub = rest[4] if len(rest) > 4 else ""
                return self._checked(_Target(kind, rest[1], name, sub, rest[5:]))
        kind = self.store.kind(group, version, rest[0])
        if kind is None:
            raise status.page_not_found()
        name = rest[1] if len(rest) > 1 else None
        if kind.namespaced and name is not None:
            raise status.page_not_found()
        return self._checked(_Target(kind, None, name, rest[2] if len(rest) > 2 else "", rest[3:]))

    @staticmethod
    def _checked(t: _Target) -> _Target:
        if t.sub and t.sub not in t.kind.subresources:
            raise status.page_not_found()
        if t.rest and t.sub != "proxy":
            raise status.page_not_found()
        return t

    # ----- resources --------------------------------------------------------------------
    async def resource(self, request: Request, t: _Target, body: Any) -> Response:
        q = request.query_params
        watch = q.get("watch") in ("true", "1")
        verb = _verb(request.method, t, watch)
        attrs = rbac.Attributes(verb, t.kind.group, t.kind.plural, t.sub, t.namespace, t.name)
        if t.kind.plural == "namespaces" and t.name:
            attrs = rbac.Attributes(verb, "", "namespaces", t.sub, t.name, t.name)
        if not rbac.allowed(self.emu.rules, attrs):
            raise status.forbidden(
                user=self.emu.user,
                verb=verb,
                resource=t.kind.plural,
                group=t.kind.group,
                namespace=t.namespace,
                name=t.name,
                subresource=t.sub,
            )
        dry = q.get("dryRun")
        if dry not in (None, "", "All"):
            raise status.bad_request(f"Invalid dry run value: {dry}")
        dry_run = dry == "All"
        ns = t.namespace or ""
        kind, store = t.kind, self.store
        if t.sub == "proxy":
            return self.proxy(request.method, t)
        if t.sub == "eviction":
            if request.method != "POST":
                raise status.method_not_allowed()
            return _json(workloads.evict(store, ns, str(t.name), body, dry_run), 201)
        if t.sub == "scale":
            if verb == "get":
                return _json(workloads.scale_of(kind, store.get(kind, ns, str(t.name))))
            ctype = request.headers.get("content-type", "") if verb == "patch" else None
            return _json(
                workloads.write_scale(
                    store, kind, ns, str(t.name), body, content_type=ctype, dry_run=dry_run
                )
            )
        if t.sub == "resize":
            return _json(self._resize(request, t, verb, body, dry_run))
        if t.name is None:
            if verb in ("list", "watch"):
                match = self._matcher(q.get("labelSelector"), q.get("fieldSelector"), kind)
                if verb == "watch":
                    return await self.watch(
                        t, match, q.get("resourceVersion"), q.get("timeoutSeconds")
                    )
                return self.list(t, match, q.get("limit"), q.get("continue"))
            if verb == "create":
                self._schema_check(request, kind, body)
                created = self._present(kind, store.create(kind, ns, body, dry_run=dry_run))
                # Pod Security: a workload whose pod template would be refused is admitted
                # with a warning (pod-security-admission/admission/admission.go).
                warns = admission.template_warnings(
                    store.objects[("", "namespaces")].get(("", ns)), created
                )
                headers = {"Warning": ", ".join(_warning(w) for w in warns)} if warns else None
                return _json(created, 201, headers)
            if verb == "deletecollection":
                match = self._matcher(q.get("labelSelector"), q.get("fieldSelector"), kind)
                items, rv = store.list(kind, t.namespace, match)
                done = [
                    store.delete(kind, ns, i["metadata"]["name"], dry_run=dry_run)[0] for i in items
                ]
                return _json(self._list_body(kind, done, rv))
            raise status.method_not_allowed()
        name = t.name
        if verb == "get":
            return _json(self._present(kind, store.get(kind, ns, name)))
        if verb == "update":
            self._schema_check(request, kind, body, name)
            if kind.key == ("", "pods") and resize.served(self.emu) and isinstance(body, dict):
                resize.check_pod_update(store.get(kind, ns, name), body)
            return _json(
                self._present(
                    kind, store.update(kind, ns, name, body, subresource=t.sub, dry_run=dry_run)
                )
            )
        if verb == "patch":
            with store.lock:
                current = store.get(kind, ns, name)
                patched = patching.apply(
                    kind.builtin, request.headers.get("content-type", ""), current, body
                )
                self._schema_check(request, kind, patched, name)
                if kind.key == ("", "pods") and not t.sub and resize.served(self.emu):
                    resize.check_pod_update(current, patched)
                new = store.update(
                    kind, ns, name, patched, subresource=t.sub, dry_run=dry_run, require_rv=False
                )
            return _json(self._present(kind, new))
        if verb == "delete":
            opts = body if isinstance(body, dict) else {}
            grace = q.get("gracePeriodSeconds")
            grace_s = int(grace) if grace is not None else opts.get("gracePeriodSeconds")
            dry_run = dry_run or "All" in (opts.get("dryRun") or [])
            obj, gone = store.delete(
                kind,
                ns,
                name,
                dry_run=dry_run,
                grace_seconds=grace_s,
                preconditions=opts.get("preconditions"),
            )
            if not gone:
                return _json(obj, 202)
            if kind.builtin and kind.key != ("", "pods"):
                details = {
                    "name": name,
                    **({"group": kind.group} if kind.group else {}),
                    "kind": kind.plural,
                }
                details["uid"] = obj["metadata"]["uid"]
                return _json(
                    {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "metadata": {},
                        "status": "Success",
                        "details": details,
                    }
                )
            return _json(obj)
        raise status.method_not_allowed()

    def _resize(self, request: Request, t: _Target, verb: str, body: Any, dry_run: bool) -> Obj:
        """``pods/resize`` (``resize``): GET, PATCH or PUT of the pod; only its containers'
        resources and resizePolicy change. 404 on a server older than 1.33."""
        if not resize.served(self.emu) or t.name is None:
            raise status.page_not_found()
        kind, ns, name, store = t.kind, t.namespace or "", t.name, self.store
        if verb == "get":
            return self._present(kind, store.get(kind, ns, name))
        if verb not in ("patch", "update"):
            raise status.method_not_allowed()
        with store.lock:
            current = store.get(kind, ns, name)
            sent = (
                patching.apply(kind.builtin, request.headers.get("content-type", ""), current, body)
                if verb == "patch"
                else body
            )
            new = resize.validate(current, sent if isinstance(sent, dict) else {})
            self._schema_check(request, kind, new, name)
            return store.update(kind, ns, name, new, dry_run=dry_run, require_rv=False)

    def _schema_check(
        self, request: Request, kind: kinds_mod.Kind, body: Any, name: str | None = None
    ) -> None:
        """With ``Emulator.schema_version`` set: the object as it would be stored (the body
        of a create or replace, the result of a patch) must conform to that version's schema
        (``schema``); else 422, recorded in ``Emulator.schema_violations``."""
        version = self.emu.schema_version
        if version is None or not kind.builtin or not isinstance(body, dict):
            return
        # The server takes kind and apiVersion from the URL when the body leaves them out.
        obj = {**body, "apiVersion": kind.api_version, "kind": kind.kind}
        found = schema_mod.violations(version, obj)
        if not found:
            return
        name = name or str((body.get("metadata") or {}).get("name") or "")
        for field, message in found:
            self.emu.schema_violations.append(
                f"{request.method} {request.url.path}: {field}: {message}"
            )
        raise status.invalid(
            kind.kind,
            name,
            kind.group,
            [(f, "Invalid value", f"schema of Kubernetes {version}: {m}") for f, m in found],
        )

    def _present(self, kind: kinds_mod.Kind, obj: Obj) -> Obj:
        if kind.key == ("policy", "poddisruptionbudgets") and obj.get("metadata", {}).get("uid"):
            obj["status"] = workloads.pdb_status(self.store, obj)
        return obj

    @staticmethod
    def _matcher(labels: str | None, fields: str | None, kind: kinds_mod.Kind) -> Any:
        lm, fm = parse_labels(labels), parse_fields(fields, kind.fields)
        return lambda o: lm(o) and fm(o)

    def _list_body(self, kind: kinds_mod.Kind, items: list[Obj], rv: str) -> Obj:
        out = []
        for item in items:
            item = self._present(kind, item)
            if kind.builtin:
                # The server leaves kind/apiVersion off the items of built-in lists.
                item = {k: v for k, v in item.items() if k not in ("kind", "apiVersion")}
            out.append(item)
        return {
            "kind": f"{kind.kind}List",
            "apiVersion": kind.api_version,
            "metadata": {"resourceVersion": rv},
            "items": out,
        }

    def list(self, t: _Target, match: Any, limit: str | None, cont: str | None) -> Response:
        items, rv = self.store.list(t.kind, t.namespace, match)
        start = 0
        if cont:
            try:
                token = json.loads(base64.urlsafe_b64decode(cont.encode()))
                start, rv = int(token["start"]), str(token["rv"])
            except (ValueError, KeyError):
                raise status.bad_request("continue key is not valid: illegal base64 data") from None
        body = self._list_body(t.kind, items[start:], rv)
        if limit and int(limit) > 0 and len(items) - start > int(limit):
            n = int(limit)
            body["items"] = body["items"][:n]
            nxt = base64.urlsafe_b64encode(
                json.dumps({"start": start + n, "rv": rv}).encode()
            ).decode()
            body["metadata"]["continue"] = nxt
            body["metadata"]["remainingItemCount"] = len(items) - start - n
        return _json(body)

    async def watch(
        self, t: _Target, match: Any, since: str | None, timeout: str | None
    ) -> Response:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Obj] | None] = asyncio.Queue()

        def push(type_: str, obj: Obj) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, (type_, copy.deepcopy(obj)))

        watcher = Watcher(t.kind.key, t.namespace, match, push)
        error: status.ApiError | None = None
        try:
            self.store.watch(watcher, since)
        except status.ApiError as err:
            if err.code != 410:
                raise
            error = err
        self.streams.add(queue)
        limit = float(timeout) if timeout else 1800.0

        async def events() -> Any:
            try:
                if error is not None:
                    yield json.dumps({"type": "ERROR", "object": error.body}) + "\n"
                    return
                deadline = loop.time() + limit
                while True:
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        return
                    try:
                        item = await asyncio.wait_for(queue.get(), remaining)
                    except TimeoutError:
                        return
                    if item is None:
                        return
                    yield (
                        json.dumps({"type": item[0], "object": self._present(t.kind, item[1])})
                        + "\n"
                    )
            finally:
                self.store.unwatch(watcher)
                self.streams.discard(queue)

        return StreamingResponse(events(), media_type="application/json")

    def close_streams(self) -> None:
        """End every open watch (the server is stopping)."""
        if self.loop is None:
            return
        for q in list(self.streams):
            self.loop.call_soon_threadsafe(q.put_nowait, None)

    # ----- pods/exec over WebSocket -> the kubelet ---------------------------------------
    async def exec_ws(self, ws: WebSocket) -> None:
        ns, name = ws.path_params["namespace"], ws.path_params["name"]
        query = dict(ws.query_params.multi_items())
        argv = ws.query_params.getlist("command")
        container = ws.query_params.get("container", "")
        self.emu.record("GET", ws.url.path, query, None, None)
        offered = [
            p.strip() for p in ws.headers.get("sec-websocket-protocol", "").split(",") if p.strip()
        ]
        err: status.ApiError | None = None
        if self.emu.refusing:
            err = status.internal(f"no request was expected here: exec in {ns}/{name}")
        elif self.emu.token is not None and (
            ws.headers.get("authorization") != f"Bearer {self.emu.token}"
        ):
            err = status.unauthorized()
        elif not rbac.allowed(
            self.emu.rules, rbac.Attributes("create", "", "pods", "exec", ns, name)
        ):
            err = status.forbidden(
                user=self.emu.user,
                verb="create",
                resource="pods",
                group="",
                namespace=ns,
                name=name,
                subresource="exec",
            )
        elif "v4.channel.k8s.io" not in offered:
            err = status.bad_request("only the v4.channel.k8s.io exec protocol is served")
        if err is not None:
            await ws.close(code=1008, reason=json.dumps(err.body)[:120])
            return
        await ws.accept(subprotocol="v4.channel.k8s.io")
        handler = self.emu.exec_handler
        if handler is None:
            code, out, errb = 1, b"", b"no kubelet runs this pod\n"
        else:
            code, out, errb = await asyncio.to_thread(handler, ns, name, container, argv)
        if out:
            await ws.send_bytes(b"\x01" + out)
        if errb:
            await ws.send_bytes(b"\x02" + errb)
        result: Obj = {"metadata": {}, "status": "Success"}
        if code != 0:
            result = {
                "metadata": {},
                "status": "Failure",
                "message": f"command terminated with non-zero exit code: {code}",
                "reason": "NonZeroExitCode",
                "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
            }
        await ws.send_bytes(b"\x03" + json.dumps(result).encode())
        await ws.close()

    # ----- nodes/NODE/proxy -> the kubelet -----------------------------------------------
    def proxy(self, method: str, t: _Target) -> Response:
        node = str(t.name)
        node_obj = self.store.get(t.kind, "", node)  # 404 for an unknown node, as the server
        if not t.rest or t.rest[0] != "checkpoint":
            return PlainTextResponse("404 page not found\n", status_code=404)
        if method != "POST":
            return PlainTextResponse("405: Method Not Allowed", status_code=405)
        answer = self.emu.checkpoint_answer(node)
        self.emu.checkpoint_calls.append((node, "/".join(t.rest[1:])))
        if answer == 404 or len(t.rest) != 4:
            return PlainTextResponse("404 page not found\n", status_code=404)
        ns, pod_name, container = t.rest[1:4]
        if answer == 500:
            return PlainTextResponse(
                f"checkpointing of {ns}/{pod_name}/{container} failed (rpc error: code = Unknown "
                "desc = checkpoint/restore support not available)",
                status_code=500,
            )
        pods = self.store.kinds[("", "pods")]
        try:
            pod = self.store.get(pods, ns, pod_name)
        except status.ApiError:
            return PlainTextResponse("pod does not exist", status_code=404)
        if (pod.get("spec") or {}).get("nodeName") != node_obj["metadata"]["name"]:
            return PlainTextResponse("pod does not exist", status_code=404)
        names = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
        if container not in names:
            return PlainTextResponse(f"container {container} does not exist", status_code=404)
        stamp = self.store.clock().strftime("%Y-%m-%dT%H:%M:%SZ")
        archive = f"/var/lib/kubelet/checkpoints/checkpoint-{pod_name}_{ns}-{container}-{stamp}.tar"
        return _json({"items": [archive]})
