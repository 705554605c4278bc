"""Nodes from Node objects (JSON shape): pure, so recorded nodes are fed to it in tests.

A node offers its allocatable cpu (whole cores), memory and `nvidia.com/gpu`. GPU models and
memory come from the labels NVIDIA's GPU feature discovery sets (`nvidia.com/gpu.product`,
`nvidia.com/gpu.memory` in MiB), when it runs. A node that is not Ready, is cordoned, or has a
NoSchedule/NoExecute taint job pods do not tolerate offers nothing, and its note says why.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

from mlyard.backends.base import GpuDescription, NodeDescription
from mlyard.backends.kubernetes.objects import GPU_RESOURCE

_SUFFIXES = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": 1,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")


def parse_quantity(value: str | float) -> Decimal:
    """A Kubernetes quantity (`3500m`, `64Gi`, `1e3`) as a number."""
    match = _QUANTITY.match(str(value).strip())
    if not match or match.group(2) not in _SUFFIXES:
        raise ValueError(f"{value!r} is not a Kubernetes quantity")
    try:
        return Decimal(match.group(1)) * Decimal(_SUFFIXES[match.group(2)])
    except InvalidOperation:
        raise ValueError(f"{value!r} is not a Kubernetes quantity") from None


def describe_node(node: Mapping[str, Any], tolerations: Sequence[Mapping[str, Any]] = ()) -> NodeDescription:
    metadata, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
    labels = dict(metadata.get("labels") or {})
    allocatable = status.get("allocatable") or {}
    cpus = math.floor(parse_quantity(allocatable.get("cpu", "0")))
    memory = int(parse_quantity(allocatable.get("memory", "0")))
    gpu_count = int(parse_quantity(allocatable.get(GPU_RESOURCE, "0")))
    model = labels.get("nvidia.com/gpu.product", "NVIDIA GPU")
    try:
        gpu_memory = int(labels.get("nvidia.com/gpu.memory", "0")) * 2**20
    except ValueError:
        gpu_memory = 0
    notes = _unusable(spec, status, tolerations)
    if notes:
        cpus, memory, gpu_count = 0, 0, 0
    address = next((a["address"] for a in status.get("addresses") or () if a.get("type") == "InternalIP"),
                   metadata.get("name", ""))
    return NodeDescription(
        name=metadata["name"],
        address=address,
        cpu_ids=tuple(range(cpus)),
        memory_bytes=memory,
        gpus=tuple(GpuDescription(index=index, model=model, memory_bytes=gpu_memory) for index in range(gpu_count)),
        labels=labels,
        notes=tuple(notes),
    )


def matches(node: Mapping[str, Any], selector: Mapping[str, str]) -> bool:
    labels = (node.get("metadata") or {}).get("labels") or {}
    return all(labels.get(key) == value for key, value in selector.items())


def _unusable(spec: Mapping[str, Any], status: Mapping[str, Any], tolerations: Sequence[Mapping[str, Any]]) -> list[str]:
    notes = []
    ready = next((c for c in status.get("conditions") or () if c.get("type") == "Ready"), None)
    if ready is None or ready.get("status") != "True":
        message = (ready or {}).get("message") or (ready or {}).get("reason") or "no Ready condition"
        notes.append(f"not Ready ({message}): offers nothing until it is")
    if spec.get("unschedulable"):
        notes.append("cordoned: offers nothing until it is uncordoned")
    for taint in spec.get("taints") or ():
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not _tolerated(taint, tolerations) \
                and not taint.get("key", "").startswith("node.kubernetes.io/"):
            text = taint.get("key", "") + (f"={taint['value']}" if taint.get("value") else "")
            notes.append(f"tainted {text}:{taint['effect']}, which jobs do not tolerate "
                         "(MLYARD_K8S_TOLERATIONS): offers nothing")
    return notes


def _tolerated(taint: Mapping[str, Any], tolerations: Sequence[Mapping[str, Any]]) -> bool:
    for toleration in tolerations:
        if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
            continue
        if toleration.get("operator") == "Exists":
            if not toleration.get("key") or toleration["key"] == taint.get("key"):
                return True
        elif toleration.get("key") == taint.get("key") and toleration.get("value", "") == taint.get("value", ""):
            return True
    return False
