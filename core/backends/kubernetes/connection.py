"""How the Kubernetes backend reaches a cluster, and how the cluster's failures reach us.

Configuration: a kubeconfig (``kubeconfig`` path, else ``$KUBECONFIG``, else
``~/.kube/config``; ``context`` or the file's current context) or the in-cluster service
account (``in_cluster``). ``namespaces`` bounds what the backend reads and touches; empty
means every namespace the credentials can list.

Every request goes through ``Connection.call``: transient faults (connection refused or
reset, timeouts, 429 from API priority and fairness, 500/502/503/504) are retried
(``core.backends.retrying``) for at most ``retry_total_s``, honouring ``Retry-After``;
urllib3's own retries are switched off so there is one retry policy, bounded in time. Failures leave as
``core.errors`` at this boundary, never as ``ApiException`` or urllib3 errors:

========================  ==================================================================
API answer                error (code)
========================  ==================================================================
unreachable after retries ``BackendUnavailable`` (``kubernetes-unreachable``): check server/
                          context/network
TLS failure               ``BackendUnavailable`` (``kubernetes-connection``): check the CA
401 Unauthorized          ``BackendUnavailable`` (``kubernetes-unauthorized``): credentials
                          expired or wrong; refresh them
403 Forbidden             ``OperationFailed`` (``kubernetes-forbidden``), naming the verb,
                          resource and namespace refused and the RBAC rule that would allow it
404 NotFound              ``NotFound``
409 Conflict/AlreadyExists ``Conflict``
429 from a PDB            ``Conflict`` (``kubernetes-disruption-budget``), not retried: the
                          caller decides to wait or report, never to force
400/422                   ``InvalidInput`` with the server's message
other                     ``OperationFailed``
========================  ==================================================================

403 is not ``PolicyDenied``: that error means clawpoint's own policy; this is the
cluster's RBAC, fixed by a cluster admin. Limits: one cluster per ``Connection``; no
impersonation.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from core import errors, logs
from core.backends.kubernetes.config import KubernetesConfig
from core.backends.retrying import Transient, with_retries

log = logs.get_logger(__name__)
T = TypeVar("T")

_TRANSIENT_CODES = frozenset({429, 500, 502, 503, 504})
PAGE_SIZE = 500


@dataclass(frozen=True)
class Op:
    """What a request asks the API for, in RBAC terms (so a denial can name it)."""

    verb: str  # get, list, watch, create, update, patch, delete
    resource: str  # plural, with subresource: "pods", "pods/eviction", "nodes/proxy"
    group: str = ""
    namespace: str | None = None
    name: str | None = None

    def describe(self) -> str:
        res = f"{self.resource}.{self.group}" if self.group else self.resource
        target = f" {self.name!r}" if self.name else ""
        scope = f" in namespace {self.namespace!r}" if self.namespace else " (cluster scope)"
        return f"{self.verb} {res}{target}{scope}"


def _status_body(exc: Any) -> dict[str, Any]:
    try:
        body = json.loads(exc.body or "")
    except (TypeError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


def _retry_after(exc: Any) -> float | None:
    headers = getattr(exc, "headers", None) or {}
    try:
        value = headers.get("Retry-After")
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def translate(exc: Exception, op: Op, *, where: str) -> errors.ClawpointError | Transient:
    """Map an ``ApiException`` or urllib3 error to a clawpoint error (or a transient fault)."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError as Urllib3Error

    if isinstance(exc, Urllib3Error | ConnectionError | TimeoutError):
        return Transient(f"{type(exc).__name__}: {exc}")
    if not isinstance(exc, ApiException):
        return errors.OperationFailed(
            f"the Kubernetes request ({op.describe()}) failed: {exc}",
            hint="check the cluster and the request, then retry",
        )
    code = int(exc.status or 0)
    body = _status_body(exc)
    message = str(body.get("message") or exc.reason or "")
    reason = str(body.get("reason") or "")
    details = {
        "verb": op.verb,
        "resource": op.resource,
        "group": op.group,
        "namespace": op.namespace,
        "name": op.name,
    }
    causes = (body.get("details") or {}).get("causes") or []
    if code == 0:  # the client's wrapping of TLS failures (and requests it cannot build)
        return errors.BackendUnavailable(
            f"could not talk to the Kubernetes API at {where} ({op.describe()}): {exc.reason}",
            hint="check the server address and its CA certificate in the kubeconfig "
            "(certificate-authority / certificate-authority-data), then retry",
            code="kubernetes-connection",
            details=details,
        )
    if code == 429 and any(c.get("reason") == "DisruptionBudget" for c in causes):
        budget = "; ".join(str(c.get("message", "")) for c in causes)
        return errors.Conflict(
            f"a PodDisruptionBudget forbids this eviction now ({op.describe()}): {budget}",
            hint="wait until the budget allows a disruption (more replicas ready), or report it; "
            "never force the eviction",
            code="kubernetes-disruption-budget",
            details={**details, "budget": budget},
        )
    if code in _TRANSIENT_CODES:
        return Transient(f"HTTP {code} {reason}: {message}".strip(), _retry_after(exc))
    if code == 401:
        return errors.BackendUnavailable(
            f"the Kubernetes API at {where} refused our credentials (401 Unauthorized)",
            hint="the credentials expired or are wrong: refresh them (for a cloud cluster, run its "
            "login/update-kubeconfig command; check with `kubectl auth whoami`), then retry",
            code="kubernetes-unauthorized",
            details=details,
        )
    if code == 403:
        group = f' apiGroups: ["{op.group}"],'
        ns = f" in namespace {op.namespace!r}" if op.namespace else " at cluster scope"
        return errors.OperationFailed(
            f"Kubernetes RBAC refused to {op.verb} {op.resource}"
            + (f".{op.group}" if op.group else "")
            + (f" {op.name!r}" if op.name else "")
            + f"{ns}: {message}",
            hint=f"grant the clawpoint identity a Role/ClusterRole rule with{group} resources: "
            f'["{op.resource}"], verbs: ["{op.verb}"]'
            + (
                f" bound in namespace {op.namespace!r}"
                if op.namespace
                else " (a ClusterRoleBinding)"
            )
            + ", or narrow k8s.namespaces to where it has access",
            code="kubernetes-forbidden",
            details=details,
        )
    if code == 404:
        return errors.NotFound(
            f"not found in Kubernetes ({op.describe()}): {message}",
            hint="list what exists and pass an id from the list",
            details=details,
        )
    if code == 409:
        return errors.Conflict(
            f"Kubernetes reported a conflict ({op.describe()}): {message}",
            hint="the object changed or already exists: read it again, then retry",
            code=f"kubernetes-{reason.lower() or 'conflict'}",
            details=details,
        )
    if code in (400, 422):
        return errors.InvalidInput(
            f"Kubernetes rejected the request ({op.describe()}): {message}",
            hint="fix the value the message names",
            details=details,
        )
    return errors.OperationFailed(
        f"Kubernetes answered {code} {reason} ({op.describe()}): {message}",
        hint="check the API server and retry",
        details=details,
    )


def _load_config(cfg: KubernetesConfig) -> Any:
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    conf = client.Configuration()
    try:
        if cfg.in_cluster:
            in_cluster_loader: Any = config.load_incluster_config  # untyped upstream
            in_cluster_loader(client_configuration=conf)
        else:
            kube_loader: Any = config.load_kube_config  # untyped upstream
            kube_loader(config_file=cfg.kubeconfig, context=cfg.context, client_configuration=conf)
    except (ConfigException, OSError, ValueError, TypeError) as exc:
        where = (
            "in-cluster service account"
            if cfg.in_cluster
            else f"kubeconfig {cfg.kubeconfig or '(default)'}"
        )
        raise errors.InvalidInput(
            f"cannot load the Kubernetes configuration from the {where}"
            + (f", context {cfg.context!r}" if cfg.context else "")
            + f": {exc}",
            hint="set k8s.kubeconfig and k8s.context (list contexts with "
            "`kubectl config get-contexts`), or k8s.in_cluster = true inside a pod",
            code="kubernetes-config",
        ) from exc
    conf.retries = False  # one retry policy: ours, bounded in time
    return conf


class Connection:
    """One cluster: a configured official client plus bounded retries and error translation."""

    def __init__(self, config: KubernetesConfig, *, api_client: Any = None) -> None:
        self.config = config
        self._api_client = api_client

    @property
    def api_client(self) -> Any:
        if self._api_client is None:
            from kubernetes import client

            self._api_client = client.ApiClient(_load_config(self.config))
        return self._api_client

    @property
    def host(self) -> str:
        return str(getattr(self.api_client.configuration, "host", "") or "the API server")

    def close(self) -> None:
        if self._api_client is not None:
            self._api_client.close()
            self._api_client = None

    def api(self, name: str) -> Any:
        """An API class of the official client (``CoreV1Api``, ``CustomObjectsApi``, ...)."""
        from kubernetes import client

        return getattr(client, name)(self.api_client)

    @property
    def scoped_namespaces(self) -> list[str] | None:
        """The namespaces in scope, or None for all of them."""
        return list(self.config.namespaces) or None

    def call(self, op: Op, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run one API call with retries; failures leave as ``core.errors``."""
        kwargs.setdefault("_request_timeout", self.config.request_timeout_s)

        def once() -> T:
            try:
                return fn(*args, **kwargs)
            except Exception as exc:
                mapped = translate(exc, op, where=self.host)
                raise mapped from exc

        def unreachable(last: BaseException | None) -> errors.ClawpointError:
            return errors.BackendUnavailable(
                f"the Kubernetes API at {self.host} did not answer {op.describe()}: {last}",
                hint="check that the cluster is up and reachable (kubectl cluster-info) with this "
                "kubeconfig context, then retry",
                code="kubernetes-unreachable",
                retry_after=10.0,
                details={"verb": op.verb, "resource": op.resource, "namespace": op.namespace},
            )

        # Backoff at most 2 s (the server's Retry-After, at most 5 s, when it sends one).
        return with_retries(
            once, total_s=self.config.retry_total_s, max_wait_s=2.0, unavailable=unreachable
        )

    def call_json(
        self, op: Op, fn: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> dict[str, Any]:
        """``call`` with the raw JSON body (no client models: unknown fields never break us)."""
        resp = self.call(op, fn, *args, _preload_content=False, **kwargs)
        try:
            data = json.loads(resp.data)
        except (TypeError, ValueError) as exc:
            raise errors.OperationFailed(
                f"the Kubernetes API answered {op.describe()} with something that is not JSON",
                hint="check that the server is a Kubernetes API server",
            ) from exc
        if not isinstance(data, dict):
            raise errors.OperationFailed(
                f"the Kubernetes API answered {op.describe()} with a {type(data).__name__}"
            )
        return data

    def list_all(
        self, op: Op, fn: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> Iterator[dict[str, Any]]:
        """Every item of a list call, page by page (``limit`` / ``continue``)."""
        token: str | None = None
        while True:
            page = self.call_json(op, fn, *args, limit=PAGE_SIZE, _continue=token, **kwargs)
            yield from page.get("items") or []
            token = (page.get("metadata") or {}).get("continue") or None
            if not token:
                return
