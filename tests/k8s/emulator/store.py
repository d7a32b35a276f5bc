"""The emulator's state: objects, the resourceVersion clock, the event log and watchers.

One lock guards everything, so the HTTP side (the server's event loop thread) and the test
side (seeding, playing the kubelet) can both change state. Each change takes the next
resourceVersion (one counter for all kinds, as etcd's revision), is appended to the event
log and is pushed to matching watchers. ``compact()`` drops the log, after which a watch
from an older resourceVersion gets the server's 410 Expired.

Semantics followed (from the API conventions and the apiserver's generic registry):
uid, creationTimestamp and generation are set on create and kept on update; generation
moves when anything outside metadata and status changes; an update that changes nothing
keeps the resourceVersion and sends no event; a stale ``metadata.resourceVersion`` is a 409
Conflict; custom resources must send one on PUT (422), built-ins may omit it; kinds with a
status subresource ignore ``status`` on create and on main-resource writes, and their
``/status`` writes change only ``status``. Objects with finalizers get a deletionTimestamp
instead of being removed, and go when the last finalizer does. Pods bound to a node are
removed at once unless ``graceful_pod_deletion`` is on (then a kubelet must finish them).
Deleting a namespace removes its objects at once (no Terminating phase).
"""

from __future__ import annotations

import copy
import random
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.k8s.emulator import admission, jobrules, status, validation
from tests.k8s.emulator import kinds as kinds_mod
from tests.k8s.emulator.kinds import Kind
from tests.k8s.emulator.selectors import Matcher

Obj = dict[str, Any]
_GEN_CHARS = "bcdfghjklmnpqrstvwxz2456789"
_NO_GENERATION = {("", "namespaces"), ("", "nodes")}


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Event:
    rv: int
    type: str  # ADDED | MODIFIED | DELETED
    kind: tuple[str, str]
    obj: Obj
    old: Obj | None


@dataclass
class Watcher:
    kind: tuple[str, str]
    namespace: str | None
    match: Matcher
    push: Callable[[str, Obj], None]


def _check_pod_security_labels(namespace: Obj) -> None:
    causes = admission.label_causes(namespace["metadata"].get("labels") or {})
    if causes:
        raise status.invalid("Namespace", namespace["metadata"]["name"], "", causes)


def _spec_part(obj: Obj) -> Obj:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "kind", "apiVersion")}


class Store:
    def __init__(self, clock: Callable[[], datetime] | None = None) -> None:
        self.lock = threading.RLock()
        self.clock = clock or (lambda: datetime.now(UTC))
        self.kinds: dict[tuple[str, str], Kind] = {k.key: k for k in kinds_mod.BUILTIN}
        self.objects: dict[tuple[str, str], dict[tuple[str, str], Obj]] = {
            k: {} for k in self.kinds
        }
        self.rv = 1000
        self.events: list[Event] = []
        self.oldest_rv = 0  # events after this rv are still in the log
        self.watchers: list[Watcher] = []
        self.graceful_pod_deletion = False

    # ----- kinds ------------------------------------------------------------------------
    def kind(self, group: str, version: str, plural: str) -> Kind | None:
        k = self.kinds.get((group, plural))
        return k if k is not None and k.version == version else None

    def kind_named(self, group: str, kind_name: str) -> Kind | None:
        return next(
            (k for k in self.kinds.values() if k.group == group and k.kind == kind_name), None
        )

    def _register(self, kind: Kind) -> None:
        self.kinds[kind.key] = kind
        self.objects.setdefault(kind.key, {})

    # ----- events -----------------------------------------------------------------------
    def _next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    def _emit(self, type_: str, kind: Kind, obj: Obj, old: Obj | None) -> None:
        event = Event(
            int(obj["metadata"]["resourceVersion"]), type_, kind.key, copy.deepcopy(obj), old
        )
        self.events.append(event)
        for w in list(self.watchers):
            self._deliver(w, event)

    def _deliver(self, w: Watcher, ev: Event) -> None:
        if w.kind != ev.kind:
            return
        ns = ev.obj["metadata"].get("namespace")
        if w.namespace is not None and ns != w.namespace:
            return
        now = w.match(ev.obj)
        before = ev.old is not None and w.match(ev.old)
        # As the watch cache does: an object entering the selection is ADDED for this
        # watcher, one leaving it is DELETED.
        if ev.type == "MODIFIED":
            if now and before:
                w.push("MODIFIED", ev.obj)
            elif now:
                w.push("ADDED", ev.obj)
            elif before:
                w.push("DELETED", ev.obj)
        elif now:
            w.push(ev.type, ev.obj)

    def watch(self, watcher: Watcher, since: str | None) -> None:
        """Register ``watcher``; replay state (``since`` unset/0) or events after ``since``."""
        with self.lock:
            if since in (None, "", "0"):
                for obj in self._sorted(watcher.kind, watcher.namespace):
                    if watcher.match(obj):
                        watcher.push("ADDED", copy.deepcopy(obj))
            else:
                try:
                    rv = int(since)
                except ValueError:
                    raise status.bad_request(f'invalid resource version "{since}"') from None
                if rv < self.oldest_rv:
                    raise status.gone(f"too old resource version: {rv} ({self.oldest_rv})")
                for ev in self.events:
                    if ev.rv > rv:
                        self._deliver(watcher, ev)
            self.watchers.append(watcher)

    def unwatch(self, watcher: Watcher) -> None:
        with self.lock:
            if watcher in self.watchers:
                self.watchers.remove(watcher)

    def compact(self) -> None:
        """Forget the event log (as etcd compaction does): older watches get 410."""
        with self.lock:
            self.events.clear()
            self.oldest_rv = self.rv

    # ----- reads ------------------------------------------------------------------------
    def _sorted(self, key: tuple[str, str], namespace: str | None) -> list[Obj]:
        items = self.objects.get(key, {})
        return [items[k] for k in sorted(items) if namespace is None or k[0] == namespace]

    def get(self, kind: Kind, namespace: str, name: str) -> Obj:
        with self.lock:
            obj = self.objects[kind.key].get((namespace, name))
            if obj is None:
                raise status.not_found(kind.plural, name, kind.group)
            return copy.deepcopy(obj)

    def list(self, kind: Kind, namespace: str | None, match: Matcher) -> tuple[list[Obj], str]:
        with self.lock:
            items = [copy.deepcopy(o) for o in self._sorted(kind.key, namespace) if match(o)]
            return items, str(self.rv)

    # ----- writes -----------------------------------------------------------------------
    def _check_namespace(self, kind: Kind, namespace: str) -> None:
        if kind.namespaced and ("", namespace) not in self.objects[("", "namespaces")]:
            raise status.not_found("namespaces", namespace)

    def _check_body(self, kind: Kind, namespace: str, body: Any) -> Obj:
        if not isinstance(body, dict):
            raise status.bad_request("the body of the request is not a JSON object")
        api_version, kind_name = body.get("apiVersion"), body.get("kind")
        if api_version and api_version != kind.api_version:
            raise status.bad_request(
                f"the API version in the data ({api_version}) does not match the expected API version ({kind.api_version})"
            )
        if kind_name and kind_name != kind.kind:
            raise status.bad_request(
                f"the kind in the data ({kind_name}) does not match the expected kind ({kind.kind})"
            )
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if kind.namespaced:
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise status.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        obj["apiVersion"], obj["kind"] = kind.api_version, kind.kind
        return obj

    def create(
        self, kind: Kind, namespace: str, body: Any, *, dry_run: bool = False, api: bool = True
    ) -> Obj:
        """POST. ``api=False`` is the test seeding state directly (status kept as given)."""
        with self.lock:
            obj = self._check_body(kind, namespace, body)
            self._check_namespace(kind, namespace)
            meta = obj["metadata"]
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + "".join(random.choices(_GEN_CHARS, k=5))
            for drop in (
                "uid",
                "resourceVersion",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
            ):
                meta.pop(drop, None)
            if api or not meta.get("creationTimestamp"):
                meta["creationTimestamp"] = rfc3339(self.clock())
            # The uid exists before validation (the registry fills the system fields first):
            # a Job's generated selector names it.
            meta["uid"] = str(uuid.uuid4())
            if meta.get("name"):
                validation.defaults(kind, obj)
                if api:
                    validation.create_defaults(kind, obj)
            if kind.kind == "CustomResourceDefinition":
                self._check_crd(obj)
            validation.check(kind, obj)
            if api and kind.key == ("", "namespaces"):
                _check_pod_security_labels(obj)
            if api and kind.key == ("", "pods"):
                # Pod Security admission runs on every pod an API client creates, a
                # controller included (dry runs too); seeded state bypasses it.
                admission.check_pod(self.objects[("", "namespaces")].get(("", namespace)), obj)
            if api:
                initial = validation.initial_status(kind, obj)
                if initial is not None:
                    obj["status"] = initial
            elif "status" not in obj:
                initial = validation.initial_status(kind, obj)
                if initial:
                    obj["status"] = initial
            key = (meta.get("namespace", ""), meta["name"])
            if key in self.objects[kind.key]:
                raise status.already_exists(kind.plural, meta["name"], kind.group)
            if kind.key not in _NO_GENERATION:
                meta["generation"] = 1
            if dry_run:
                return obj  # as the server: uid and timestamp, but no resourceVersion
            meta["resourceVersion"] = self._next_rv()
            self.objects[kind.key][key] = obj
            if kind.kind == "CustomResourceDefinition":
                self._register(kinds_mod.from_crd(obj))
            self._emit("ADDED", kind, obj, None)
            return copy.deepcopy(obj)

    def _check_crd(self, obj: Obj) -> None:
        spec = obj.get("spec") or {}
        names = spec.get("names") or {}
        expected = f"{names.get('plural')}.{spec.get('group')}"
        name = obj["metadata"].get("name")
        if name != expected:
            raise status.invalid(
                "CustomResourceDefinition",
                str(name),
                "apiextensions.k8s.io",
                [
                    (
                        "metadata.name",
                        "Invalid value",
                        f'"{name}": must be spec.names.plural+"."+spec.group',
                    )
                ],
            )

    def update(
        self,
        kind: Kind,
        namespace: str,
        name: str,
        body: Any,
        *,
        subresource: str = "",
        dry_run: bool = False,
        api: bool = True,
        require_rv: bool | None = None,
    ) -> Obj:
        """PUT (also the last step of PATCH)."""
        with self.lock:
            current = self.get(kind, namespace, name)
            obj = self._check_body(kind, namespace, body)
            meta = obj["metadata"]
            if meta.get("name") and meta["name"] != name:
                raise status.bad_request(
                    f"the name of the object ({meta['name']}) does not match the name on the URL ({name})"
                )
            meta["name"] = name
            sent_rv = meta.get("resourceVersion")
            must = (not kind.builtin) if require_rv is None else require_rv
            if not sent_rv and must and api:
                raise status.invalid(
                    kind.kind,
                    name,
                    kind.group,
                    [
                        (
                            "metadata.resourceVersion",
                            "Invalid value",
                            "0x0: must be specified for an update",
                        )
                    ],
                )
            if sent_rv and sent_rv != current["metadata"]["resourceVersion"]:
                raise status.conflict(kind.plural, name, kind.group)
            if subresource == "status":
                new = copy.deepcopy(current)
                if "status" in obj:
                    new["status"] = obj["status"]
                else:
                    new.pop("status", None)
            else:
                new = obj
                if kind.has_status and api:
                    if "status" in current:
                        new["status"] = copy.deepcopy(current["status"])
                    else:
                        new.pop("status", None)
            for keep in (
                "uid",
                "creationTimestamp",
                "generation",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
            ):
                if keep in current["metadata"]:
                    new["metadata"][keep] = current["metadata"][keep]
                else:
                    new["metadata"].pop(keep, None)
            new["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            validation.defaults(kind, new)
            validation.check(kind, new)
            if api and kind.key == ("", "namespaces"):
                _check_pod_security_labels(new)
            if kind.builtin and kind.kind == "Job" and api:
                # Before the dry-run return: a dry run is validated as a real write.
                if subresource == "status":
                    jobrules.check_status_update(name, current, new)
                else:
                    jobrules.check_update(name, current, new)
            if "generation" in new["metadata"] and _spec_part(new) != _spec_part(current):
                new["metadata"]["generation"] = current["metadata"]["generation"] + 1
            if new == current:
                return new  # a no-op write: no new resourceVersion, no event
            if dry_run:
                return new
            gone = new["metadata"].get("deletionTimestamp") and not new["metadata"].get(
                "finalizers"
            )
            new["metadata"]["resourceVersion"] = self._next_rv()
            if gone:
                self._remove(kind, new)
                return copy.deepcopy(new)
            self.objects[kind.key][(namespace, name)] = new
            self._emit("MODIFIED", kind, new, current)
            return copy.deepcopy(new)

    def _remove(self, kind: Kind, obj: Obj) -> None:
        meta = obj["metadata"]
        self.objects[kind.key].pop((meta.get("namespace", ""), meta["name"]), None)
        self._emit("DELETED", kind, obj, None)
        if kind.kind == "CustomResourceDefinition":
            gone = kinds_mod.from_crd(obj)
            self.kinds.pop(gone.key, None)
            for o in list(self.objects.pop(gone.key, {}).values()):
                o["metadata"]["resourceVersion"] = self._next_rv()
                self._emit("DELETED", gone, o, None)

    def delete(
        self,
        kind: Kind,
        namespace: str,
        name: str,
        *,
        dry_run: bool = False,
        grace_seconds: int | None = None,
        preconditions: dict[str, Any] | None = None,
    ) -> tuple[Obj, bool]:
        """DELETE. Returns the object and whether it is gone (False: deletion pending)."""
        with self.lock:
            current = self.get(kind, namespace, name)
            pre = preconditions or {}
            if pre.get("uid") and pre["uid"] != current["metadata"]["uid"]:
                raise status.conflict(kind.plural, name, kind.group)
            if (
                pre.get("resourceVersion")
                and pre["resourceVersion"] != current["metadata"]["resourceVersion"]
            ):
                raise status.conflict(kind.plural, name, kind.group)
            if dry_run:
                return current, True
            meta = current["metadata"]
            pod_on_node = (
                kind.key == ("", "pods")
                and self.graceful_pod_deletion
                and (current.get("spec") or {}).get("nodeName")
            )
            grace = grace_seconds
            if grace is None and pod_on_node:
                grace = int((current.get("spec") or {}).get("terminationGracePeriodSeconds", 30))
            if meta.get("finalizers") or (pod_on_node and grace):
                if not meta.get("deletionTimestamp"):
                    old = copy.deepcopy(current)
                    meta["deletionTimestamp"] = rfc3339(
                        self.clock() + timedelta(seconds=grace or 0)
                    )
                    meta["deletionGracePeriodSeconds"] = grace or 0
                    meta["resourceVersion"] = self._next_rv()
                    self.objects[kind.key][(namespace, name)] = current
                    self._emit("MODIFIED", kind, current, old)
                return copy.deepcopy(current), False
            if kind.key == ("", "namespaces"):
                for key, objs in self.objects.items():
                    k = self.kinds.get(key)
                    if k is None or not k.namespaced:
                        continue
                    for (ns, _n), o in sorted(objs.items()):
                        if ns == name:
                            o["metadata"]["resourceVersion"] = self._next_rv()
                            self._remove(k, o)
            meta["resourceVersion"] = self._next_rv()
            self._remove(kind, current)
            return copy.deepcopy(current), True

    # ----- seeding (the test as a controller or kubelet) --------------------------------
    def seed(self, kind: Kind, obj: Obj) -> Obj:
        """Create ``obj`` as a controller would (status and creationTimestamp kept)."""
        ns = (obj.get("metadata") or {}).get("namespace", "") if kind.namespaced else ""
        return self.create(kind, ns, obj, api=False)

    def set_status(self, kind: Kind, namespace: str, name: str, new_status: Obj) -> Obj:
        with self.lock:
            current = self.get(kind, namespace, name)
            current["status"] = new_status
            return self.update(kind, namespace, name, current, subresource="status", api=False)
