"""Kubernetes ids: parsed and validated before anything reaches a URL."""

from __future__ import annotations

import pytest

from core import errors
from core.backends.kubernetes import ids

HOSTILE_WORKLOADS = [
    "",
    "k8s:",
    "Job/default",
    "Job/default/a/b",
    "Job//a",
    "k8s:Job/default/../x",
    "k8s:Job/default/..",
    "k8s:Job/../etc",
    "k8s:Job/default/a;rm -rf /",
    "k8s:Job/default/$(reboot)",
    "k8s:Job/default/`id`",
    "k8s:Job/default/a b",
    "k8s:Job/default/a\nb",
    "k8s:Job/default/a\n",
    "k8s:Job/default/UPPER",
    "k8s:Job/Default/a",
    "k8s:Job/default/-a",
    "k8s:Job/default/a?watch=true",
    "k8s:Job/default/a#x",
    "k8s:Job/default/a%2Fb",
    "k8s:Job/" + "n" * 64 + "/a",
    "k8s:Job/default/" + "a" * 254,
    "k8s:Gadget/default/a",
    "slurm:Job/default/a",
    "k8s:Job/default/a:b",
]


@pytest.mark.parametrize("bad", HOSTILE_WORKLOADS)
def test_hostile_workload_ids_are_invalid_input(bad: str) -> None:
    with pytest.raises(errors.InvalidInput) as info:
        ids.parse_workload_id(bad)
    assert info.value.hint


def test_unknown_kind_names_the_known_ones() -> None:
    with pytest.raises(errors.InvalidInput) as info:
        ids.parse_workload_id("k8s:Gadget/default/a")
    assert "Gadget" in info.value.message and "RayJob" in info.value.hint


def test_shell_characters_are_named() -> None:
    with pytest.raises(errors.InvalidInput) as info:
        ids.parse_workload_id("k8s:Job/default/a;b")
    assert "';'" in info.value.message


@pytest.mark.parametrize(
    ("value", "canonical"),
    [
        ("k8s:Job/default/train", "k8s:Job/default/train"),
        ("job/default/train", "k8s:Job/default/train"),
        ("k8s:pytorchjob/ml/bert.v2", "k8s:PyTorchJob/ml/bert.v2"),
        ("k8s:isvc/serve/llama-3", "k8s:InferenceService/serve/llama-3"),
        ("k8s:sts/db/pg-0", "k8s:StatefulSet/db/pg-0"),
        ("k8s:Workload/team-a/job-train-5b2c1", "k8s:Workload/team-a/job-train-5b2c1"),
    ],
)
def test_valid_workload_ids_round_trip(value: str, canonical: str) -> None:
    ref = ids.parse_workload_id(value)
    assert str(ref) == canonical
    assert ids.parse_workload_id(str(ref)) == ref
    assert ids.format_workload_id(ref.kind.kind, ref.namespace, ref.name) == canonical


@pytest.mark.parametrize(
    "bad", ["", "k8s:", "../x", "n1;reboot", "$(id)", "a b", "k8s:a/b", "N1", "slurm:n1"]
)
def test_hostile_node_ids_are_invalid_input(bad: str) -> None:
    with pytest.raises(errors.InvalidInput):
        ids.parse_node_id(bad)


def test_node_ids() -> None:
    assert ids.parse_node_id("k8s:ip-10-0-1-5.ec2.internal") == "ip-10-0-1-5.ec2.internal"
    assert ids.parse_node_id("gpu-node-1") == "gpu-node-1"
    assert ids.format_node_id("gpu-node-1") == "k8s:gpu-node-1"
