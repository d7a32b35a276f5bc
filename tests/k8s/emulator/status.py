"""Kubernetes ``Status`` failures, worded as the API server words them.

Each builder returns an ``ApiError`` whose ``body`` is the ``Status`` object a real
kube-apiserver (k8s.io/apimachinery/pkg/api/errors) sends for that failure: same ``reason``
strings, codes, ``details`` and message shapes, so code under test can branch on them.
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """A failure answered as ``Status`` with HTTP ``code`` (raised inside the emulator)."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}

    @property
    def body(self) -> dict[str, Any]:
        status: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
        }
        if self.reason:
            status["reason"] = self.reason
        if self.details:
            status["details"] = self.details
        status["code"] = self.code
        return status


def _qualified(resource: str, group: str) -> str:
    return f"{resource}.{group}" if group else resource


def _details(name: str | None, resource: str, group: str) -> dict[str, Any]:
    details: dict[str, Any] = {}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    details["kind"] = resource
    return details


def not_found(resource: str, name: str, group: str = "") -> ApiError:
    return ApiError(
        404,
        "NotFound",
        f'{_qualified(resource, group)} "{name}" not found',
        _details(name, resource, group),
    )


def page_not_found() -> ApiError:
    """An unknown path: the server's plain 404 (no resource named)."""
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def already_exists(resource: str, name: str, group: str = "") -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{_qualified(resource, group)} "{name}" already exists',
        _details(name, resource, group),
    )


def conflict(resource: str, name: str, group: str = "") -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {_qualified(resource, group)} "{name}": '
        "the object has been modified; please apply your changes to the latest version "
        "and try again",
        _details(name, resource, group),
    )


def forbidden(
    *,
    user: str,
    verb: str,
    resource: str,
    group: str,
    namespace: str | None,
    name: str | None = None,
    subresource: str = "",
) -> ApiError:
    """RBAC denial, e.g. ``pods "p" is forbidden: User "u" cannot get resource "pods" ...``."""
    full = f"{resource}/{subresource}" if subresource else resource
    subject = _qualified(resource, group) + (f' "{name}"' if name else "")
    scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    message = (
        f'{subject} is forbidden: User "{user}" cannot {verb} resource "{full}" '
        f'in API group "{group}" {scope}'
    )
    return ApiError(403, "Forbidden", message, _details(name, resource, group))


def invalid(kind: str, name: str, group: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """422 Invalid; ``causes`` are (field, reason type, detail) as field.Error prints them."""
    texts = []
    status_causes = []
    for field, kind_of_error, detail in causes:
        texts.append(
            f"{field}: {kind_of_error}: {detail}" if detail else f"{field}: {kind_of_error}"
        )
        reason = {
            "Invalid value": "FieldValueInvalid",
            "Required value": "FieldValueRequired",
            "Forbidden": "FieldValueForbidden",
            "Unsupported value": "FieldValueNotSupported",
        }.get(kind_of_error, "FieldValueInvalid")
        status_causes.append(
            {"reason": reason, "message": texts[-1].split(": ", 1)[1], "field": field}
        )
    joined = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    details: dict[str, Any] = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = kind
    details["causes"] = status_causes
    return ApiError(
        422,
        "Invalid",
        f'{kind}.{group} "{name}" is invalid: {joined}'
        if group
        else f'{kind} "{name}" is invalid: {joined}',
        details,
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


def method_not_allowed() -> ApiError:
    return ApiError(
        405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
    )


def unsupported_media_type(content_type: str, accepted: list[str]) -> ApiError:
    return ApiError(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: "
        + ", ".join(accepted),
    )


def too_many_requests(
    message: str, causes: list[dict[str, str]] | None = None, retry_after: int = 0
) -> ApiError:
    details: dict[str, Any] = {}
    if causes:
        details["causes"] = causes
    if retry_after:
        details["retryAfterSeconds"] = retry_after
    headers = {"Retry-After": str(retry_after)} if retry_after else {}
    return ApiError(429, "TooManyRequests", message, details, headers)


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def internal(message: str) -> ApiError:
    return ApiError(
        500,
        "InternalError",
        f"Internal error occurred: {message}",
        {"causes": [{"message": message}]},
    )


def service_unavailable(
    message: str = "the server is currently unable to handle the request",
) -> ApiError:
    return ApiError(503, "ServiceUnavailable", message)
