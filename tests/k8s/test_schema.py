"""The emulator's schema validation (emulator/schema.py): what a client creates, replaces or
patches must conform to the Kubernetes schema of the version the docs name; a violation is
answered 422 and recorded, so the ``emu`` fixture fails the test at teardown."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from tests.k8s.conftest import pod
from tests.k8s.emulator import crds
from tests.k8s.emulator.app import VERSION
from tests.k8s.emulator.schema import KUBERNETES_VERSION, violations


def test_the_fixture_checks_against_the_version_the_emulator_reports(emu: Any) -> None:
    assert emu.schema_version == KUBERNETES_VERSION
    assert f"{VERSION['major']}.{VERSION['minor']}" == KUBERNETES_VERSION


def post(emu: Any, path: str, body: dict[str, Any]) -> tuple[int, str]:
    """A raw POST: the official client's own models refuse unknown fields before sending."""
    req = urllib.request.Request(
        emu.url + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_an_unknown_field_on_create_is_refused_and_recorded(emu: Any) -> None:
    body = pod("typo")
    body["spec"]["nodeSelectr"] = {"a": "b"}  # the typo a real server would drop
    code, text = post(emu, "/api/v1/namespaces/default/pods", body)
    assert code == 422 and "nodeSelectr" in text
    assert emu.schema_violations and "spec" in emu.schema_violations[0]
    emu.schema_violations.clear()  # seen: the teardown check would fail this test otherwise
    del body["spec"]["nodeSelectr"]
    code, text = post(emu, "/api/v1/namespaces/default/pods", body)
    assert code == 201, text


def job(emu: Any) -> dict[str, Any]:
    kind = emu.kind_of({"apiVersion": "batch/v1", "kind": "Job"})
    stored: dict[str, Any] = emu.store.get(kind, "default", "j")
    return stored


def test_a_patch_is_checked_by_its_result(emu: Any, api: Any) -> None:
    from kubernetes import client

    emu.seed(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "j", "namespace": "default"},
            "spec": {
                "template": {
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "b"}]}
                }
            },
        }
    )
    batch = client.BatchV1Api(api)
    with pytest.raises(ApiException) as err:
        batch.patch_namespaced_job("j", "default", {"spec": {"parallelism": "two"}})
    assert err.value.status == 422 and "parallelism" in str(err.value.body)
    assert job(emu)["spec"].get("parallelism") != "two"
    emu.schema_violations.clear()
    batch.patch_namespaced_job("j", "default", {"spec": {"suspend": True}})
    assert job(emu)["spec"]["suspend"] is True


def test_custom_resources_have_no_schema_here_and_pass(emu: Any, api: Any) -> None:
    from kubernetes import client

    emu.seed(*crds.kueue())
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        "kueue.x-k8s.io",
        "v1beta1",
        "default",
        "localqueues",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "LocalQueue",
            "metadata": {"name": "q"},
            "spec": {"clusterQueue": "cq", "anything": 1},
        },
    )
    assert violations(KUBERNETES_VERSION, {"apiVersion": "x.io/v1", "kind": "Thing"}) == []
