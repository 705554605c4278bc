"""Nodes as the Kubernetes backend offers them, from recorded Node objects (tests/kubernetes/nodes/)."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from k8s_support import HERE, validate

from mlyard.backends.kubernetes.inventory import describe_node, parse_quantity

NODES = HERE / "nodes"


def node(name: str) -> dict:
    return json.loads((NODES / f"{name}.json").read_text())


def test_recorded_nodes_have_the_shape_of_the_node_api():
    for path in sorted(NODES.glob("*.json")):
        validate(json.loads(path.read_text()), f"{path.name}: ")


@pytest.mark.parametrize(("text", "value"), [
    ("31850m", Decimal("31.85")), ("8", Decimal(8)), ("1055410828Ki", Decimal(1055410828 * 1024)),
    ("64Gi", Decimal(64 * 2**30)), ("2G", Decimal(2 * 10**9)), ("1e3", Decimal(1000)), ("0.5", Decimal("0.5")),
])
def test_quantities_are_read_as_kubernetes_writes_them(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "12 cores", "5Qi", "--1"])
def test_a_malformed_quantity_is_refused_with_the_value(text):
    with pytest.raises(ValueError, match="is not a Kubernetes quantity"):
        parse_quantity(text)


def test_a_gpu_node_offers_its_allocatable_resources_and_gpu_models():
    described = describe_node(node("gpu-node"))
    assert described.name == "gpu-node-1" and described.address == "10.0.2.15"
    assert described.cpu_ids == tuple(range(31))  # 31850m: whole cores only
    assert described.memory_bytes == 1055410828 * 1024
    assert len(described.gpus) == 8
    assert {gpu.model for gpu in described.gpus} == {"NVIDIA-A100-SXM4-80GB"}
    assert described.gpus[0].memory_bytes == 81920 * 2**20
    assert described.labels["nvidia.com/gpu.present"] == "true"
    assert described.notes == ()


def test_a_node_that_is_not_ready_offers_nothing_and_says_why():
    described = describe_node(node("cpu-node-not-ready"))
    assert described.cpu_ids == () and described.memory_bytes == 0 and described.gpus == ()
    assert described.notes == ("not Ready (Kubelet stopped posting node status.): offers nothing until it is",)


def test_a_cordoned_node_offers_nothing():
    cordoned = node("gpu-node")
    cordoned["spec"]["unschedulable"] = True
    described = describe_node(cordoned)
    assert described.cpu_ids == () and any("cordoned" in note for note in described.notes)


def test_a_taint_offers_nothing_unless_jobs_tolerate_it():
    tainted = node("gpu-node")
    tainted["spec"]["taints"] = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    refused = describe_node(tainted)
    assert refused.gpus == () and "tainted nvidia.com/gpu=present:NoSchedule" in refused.notes[0]
    tolerated = describe_node(tainted, [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])
    assert len(tolerated.gpus) == 8 and tolerated.notes == ()
    wrong_value = describe_node(tainted, [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "absent"}])
    assert wrong_value.gpus == ()
