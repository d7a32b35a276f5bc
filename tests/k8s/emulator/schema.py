"""Schema validation of what a client sends, as ``kubectl --validate=strict`` would check it.

The emulator's ``validation`` module holds the hand-written rules of kube-apiserver; this one
checks each object a client creates, replaces or patches (the result after the patch is
applied) against the published OpenAPI schema of one Kubernetes version, with the schemas
that ship in the ``kubernetes-validate`` package (strict: unknown fields are violations).
It is what makes "every object clawpoint creates or patches passes kubernetes-validate"
testable: ``Emulator(schema_version=KUBERNETES_VERSION)`` answers a violating request 422 and
records it in ``Emulator.schema_violations``, which the test fixture asserts empty at teardown
(so a test that expects some failure cannot swallow one).

Differs from a real server on purpose: kube-apiserver answers a wrong type or (with
``fieldValidation=Strict``, kubectl's default since 1.27) an unknown field 400 BadRequest
while decoding, and silently drops unknown fields under the client library's default
(``Warn``): a field it drops is an intent clawpoint loses, so here every violation fails.
Only built-in kinds are checked (custom resources have no schema in the package). Format
keywords (``date-time``...) are not asserted, as jsonschema does not by default.

Cost: one validator per (apiVersion, kind), built once per process from the package's schema
files (``functools.cache``); a check then costs well under a millisecond for a pod.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import jsonschema
import referencing
import referencing.jsonschema
from kubernetes_validate import utils as kv

# The Kubernetes version the deploy manifests and the emulator's schema checks target; the
# emulator's /version answers the same minor (tests/k8s/test_deploy.py pins that), and
# docs/kubernetes.md names it.
KUBERNETES_VERSION = "1.34"


def _schema_dir(version: str) -> str:
    # The newest packaged schema set not newer than ``version``, as kubernetes-validate picks.
    wanted = tuple(int(x) for x in version.split(".")[:2])
    found = [v for v in kv.all_versions() if tuple(int(x) for x in v.split(".")[:2]) <= wanted]
    if not found:
        raise ValueError(f"kubernetes-validate has no schemas for Kubernetes {version}")
    return f"kubernetes-json-schema/v{found[-1]}-local-strict"


@functools.cache
def _definitions(version: str) -> referencing.Resource[Any]:
    return referencing.Resource.from_contents(
        kv.schema_contents(f"{_schema_dir(version)}/_definitions.json", version),
        default_specification=referencing.jsonschema.DRAFT202012,
    )


@functools.cache
def validator(version: str, api_version: str, kind: str) -> jsonschema.Validator | None:
    """The strict validator of one kind, or None when the package has no schema for it."""
    api = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)  # apps/v1 -> apps-v1
    try:
        schema = kv.schema_contents(f"{_schema_dir(version)}/{kind.lower()}-{api}.json", version)
    except FileNotFoundError:
        return None
    registry: referencing.Registry[Any] = (
        referencing.Resource.from_contents(
            schema, default_specification=referencing.jsonschema.DRAFT202012
        )
        @ referencing.Registry()
    )
    registry = _definitions(version) @ registry
    return jsonschema.Draft202012Validator(schema, registry=registry)


def violations(version: str, obj: dict[str, Any]) -> list[tuple[str, str]]:
    """(field path, message) for each schema violation of ``obj``; [] when it conforms or
    when no schema exists for its kind."""
    check = validator(version, str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
    if check is None:
        return []
    out = []
    for err in check.iter_errors(obj):
        path = ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in err.absolute_path)
        out.append((path.replace(".[", "[") or "<root>", err.message))
    return sorted(out)
